from dataclasses import dataclass

import pytest

from hicache_storage import ConfigError
from hicache_storage.options import option_help, parse_options


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
            r"extra_config\.fanuot: unknown option; valid options: fanout, path, rate, tls, ttl",
        ),
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
