"""Helpers behind the fixtures of a plugin's tests: the checkout's test servers, backend factories, damage.

Plain Python (no pytest import), so a ``conftest.py`` wraps them in fixtures of its own::

    from hicache_storage.testing.fixtures import BackendFactory, checkout_services

    SERVICES = checkout_services(__file__)          # scripts/services of the enclosing checkout

    @pytest.fixture
    def open_backend() -> Iterator[BackendFactory]:
        factory = BackendFactory(MyBackend, lambda: {"url": SERVICES.settings()["HICACHE_TEST_MY_URL"]})
        yield factory                               # open_backend(options, pool=None, model="m")
        factory.close()                             # every backend opened: cleared and closed
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from ..contract import HiCacheStorage
from ..host_pool import HostKVPool
from ..plugin.backend import Backend
from ..plugin.page_format import HEADER_SIZE
from . import close_backends, make_backend, page_indices, random_keys
from .services import TestServices

__all__ = [
    "DAMAGES",
    "BackendFactory",
    "checkout_services",
    "check_damaged_page_is_a_counted_miss",
    "damage_record",
    "fresh_s3_bucket",
]

#: The kinds of damage :func:`damage_record` does (parametrize a test over them).
DAMAGES = ("flip", "truncate", "garbage")


def checkout_services(start: str | Path) -> TestServices:
    """:class:`TestServices` of the source checkout holding ``start`` (a file or directory in it).

    The checkout is the nearest directory at or above ``start`` with ``scripts/services/ctl.sh``;
    :class:`FileNotFoundError` when there is none (an installed package's tests outside a checkout).
    """
    here = Path(start).resolve()
    for directory in [here, *here.parents]:
        if (directory / "scripts" / "services" / "ctl.sh").is_file():
            return TestServices(directory)
    raise FileNotFoundError(f"no source checkout (scripts/services/ctl.sh) at or above {here}")


def fresh_s3_bucket(services: TestServices, settings: Mapping[str, str], prefix: str) -> str:
    """Start the test S3 server and create a bucket ``<prefix>-<random hex>`` on it; returns its name."""
    services.start("s3")
    name = f"{prefix}-{secrets.token_hex(4)}"
    services.s3_bucket(name, settings)
    return name


class BackendFactory:
    """Opens storage over ``cls``, each with :func:`~hicache_storage.testing.make_backend`; :meth:`close` ends them.

    ``base`` gives the options every backend starts from (a mapping, or a callable called for each
    backend, e.g. to draw a fresh key prefix); the options of a call are laid over them.
    """

    def __init__(
        self,
        cls: type[Backend[Any]] | str,
        base: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self.cls = cls
        self._base = base
        self.opened: list[HiCacheStorage] = []

    def __call__(
        self, options: Mapping[str, Any] | None = None, pool: HostKVPool | None = None, model: str = "m"
    ) -> HiCacheStorage:
        base = self._base() if callable(self._base) else (self._base or {})
        backend = make_backend(self.cls, {**base, **(options or {})}, pool, model=model)
        self.opened.append(backend)
        return backend

    def close(self) -> None:
        """Clear and close every backend opened and not closed yet."""
        close_backends(self.opened)
        self.opened.clear()


def damage_record(record: bytes, damage: str) -> bytes:
    """``record`` (a stored page record: header then payload) damaged as ``damage`` says.

    ``"flip"``: one payload bit flipped; ``"truncate"``: the last byte cut off; ``"garbage"``: the
    header overwritten. A backend must read each as a miss counted in ``integrity_failures``.
    """
    data = bytearray(record)
    if damage == "flip":
        data[-3] ^= 0x01
    elif damage == "truncate":
        del data[-1:]
    elif damage == "garbage":
        data[:HEADER_SIZE] = b"\xff" * HEADER_SIZE
    else:
        raise ValueError(f"unknown damage {damage!r}; one of {', '.join(DAMAGES)}")
    return bytes(data)


def check_damaged_page_is_a_counted_miss(
    backend: HiCacheStorage, store: MutableMapping[str, bytes], damage: str
) -> None:
    """Store 2 pages, damage the first one's record through ``store`` (storage key → record bytes), check the reads.

    The damaged page must read as a miss counted once in ``integrity_failures`` and the other as a
    hit; a truncated record must not be reported by ``exists`` either. Needs a registered pool of at
    least 6 pages.
    """
    keys = random_keys(2)
    assert backend.batch_set_v1(keys, page_indices(0, 2)) == [True, True]
    assert backend.keyspace is not None
    storage_key = backend.keyspace.storage_key(keys[0])
    store[storage_key] = damage_record(store[storage_key], damage)
    assert backend.batch_get_v1(keys, page_indices(4, 2)) == [False, True]
    assert backend.stats.get("integrity_failures") == 1
    assert backend.batch_exists_each(keys) == [damage != "truncate", True]
