import dataclasses
import math
from dataclasses import dataclass

import pytest

from hicache_storage import ConfigError, load_backend, make_config
from hicache_storage.options import ALLOW_NONFINITE, option_help, parse_options
from hicache_storage.resilience import ResilienceOptions


@dataclass(frozen=True)
class Opts:
    path: str
    fanout: int = 2
    rate: float = 0.5
    ttl: int | None = None
    tls: bool = False


def test_parses_and_coerces_ints_to_floats():
    opts = parse_options(Opts, {"path": "/x", "rate": 1, "ttl": None})
    assert opts == Opts(path="/x", rate=1.0)
    assert isinstance(opts.rate, float)


@pytest.mark.parametrize(
    ("values", "pattern"),
    [
        ({}, r"extra_config\.path: required option is missing"),
        (
            {"path": "/x", "fanuot": 1},
            r"extra_config\.fanuot: unknown option \(did you mean fanout\?\); "
            r"valid options: fanout, path, rate, tls, ttl",
        ),
        ({"path": "/x", "zzzzzz": 1}, r"extra_config\.zzzzzz: unknown option; valid options: fanout, path"),
        ({"path": "/x", "fanout": "2"}, r"extra_config\.fanout: expected int, got str '2'"),
        ({"path": "/x", "fanout": True}, r"extra_config\.fanout: expected int"),
        ({"path": "/x", "tls": 1}, r"extra_config\.tls: expected bool"),
    ],
)
def test_errors_name_the_option(values, pattern):
    with pytest.raises(ConfigError, match=pattern):
        parse_options(Opts, values)


def test_option_help_lists_defaults():
    assert ("path", "str", "required") in option_help(Opts)
    assert ("fanout", "int", "2") in option_help(Opts)


@dataclass(frozen=True)
class Numbers:
    rate: float = 0.5
    limit: float | None = None
    count: int = 1
    wild: float = dataclasses.field(default=0.0, metadata={ALLOW_NONFINITE: True})


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("name", ["rate", "limit"])
def test_non_finite_floats_are_refused(name, bad):
    with pytest.raises(ConfigError, match=rf"extra_config\.{name}: must be a finite number") as info:
        parse_options(Numbers, {name: bad})
    assert info.value.option == f"extra_config.{name}"


def test_a_field_may_opt_in_to_non_finite_values():
    assert math.isinf(parse_options(Numbers, {"wild": math.inf}).wild)


@pytest.mark.parametrize(("name", "value"), [("count", 2**63), ("count", -(2**70)), ("limit", 10**400)])
def test_ints_beyond_64_bits_are_refused(name, value):
    with pytest.raises(ConfigError, match=rf"extra_config\.{name}: must fit in 64 bits"):
        parse_options(Numbers, {name: value})


def test_ints_become_floats_for_optional_float_fields():
    parsed = parse_options(Numbers, {"limit": 3})
    assert parsed.limit == 3.0 and isinstance(parsed.limit, float)


@pytest.mark.parametrize(
    ("values", "option"),
    [
        ({"deadline_s": math.nan}, "deadline_s"),
        ({"deadline_s": math.inf}, "deadline_s"),
        ({"deadline_s": 10_000}, "deadline_s"),
        ({"backoff_s": math.inf}, "backoff_s"),
        ({"breaker_reset_s": -1}, "breaker_reset_s"),
        ({"retries": 10**6}, "retries"),
    ],
)
def test_resilience_numbers_are_checked(values, option):
    with pytest.raises(ConfigError) as info:
        ResilienceOptions.from_config(values)
    assert info.value.option == f"extra_config.resilience.{option}"


@pytest.mark.parametrize("extra", ["deadline_s=1", ["a"], 5, ("x", 1)])
def test_extra_config_must_be_a_dict(extra):
    from hicache_storage_sim import SimBackend

    config = make_config("m")
    config.extra_config = extra
    with pytest.raises(ConfigError, match=r"extra_config: expected a dict") as info:
        load_backend(SimBackend, config)
    assert info.value.option == "extra_config"
    assert type(extra).__name__ in str(info.value)


def test_sdk_options_inside_extra_config_are_checked_too():
    from hicache_storage_sim import SimBackend

    with pytest.raises(ConfigError, match="finite"):
        load_backend(SimBackend, make_config("m", extra_config={"resilience": {"deadline_s": math.nan}}))
    with pytest.raises(ConfigError, match="finite"):
        load_backend(SimBackend, make_config("m", extra_config={"sim_write_gbps": math.inf}))


def test_secret_options_required_and_factory_defaults_are_never_echoed() -> None:
    import dataclasses

    from hicache_storage.options import secret_option, secret_option_names

    @dataclasses.dataclass(frozen=True)
    class WithSecrets:
        url: str = secret_option(required=True)
        extra: dict[str, str] = secret_option(default_factory=dict)
        password: str | None = secret_option()

    assert secret_option_names(WithSecrets) == ("url", "extra", "password")
    with pytest.raises(ConfigError, match="required option is missing"):
        parse_options(WithSecrets, {})
    parsed = parse_options(WithSecrets, {"url": "s3://bucket"})
    assert (parsed.extra, parsed.password) == ({}, None)
    with pytest.raises(ConfigError) as caught:
        parse_options(WithSecrets, {"url": "s3://b", "password": 123456789})
    assert "123456789" not in str(caught.value)
    assert "value not shown" in str(caught.value)


def test_did_you_mean_names_the_closest_choice_only_when_close():
    from hicache_storage.options import did_you_mean

    assert did_you_mean("max_byte", ["max_bytes", "path"]) == " (did you mean max_bytes?)"
    assert did_you_mean("qqq", ["max_bytes", "path"]) == ""
