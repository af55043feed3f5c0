"""``BackendConformance``: the whole suite as one pytest base class a plugin's own tests subclass."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import pytest

from hicache_storage import BackendLoadError, ConfigError

from .harness import Harness
from .side_channel import auto_delete, auto_read, auto_set_available, auto_write
from .suite.bad_input import BadInputTests
from .suite.batch import BatchTests
from .suite.capability_tests import ClearTests, DeleteTests, EvictionTests, PersistenceTests
from .suite.concurrency import ConcurrencyTests
from .suite.faults import FaultTests
from .suite.integrity import IntegrityTests
from .suite.isolation import IsolationTests
from .suite.lifecycle import LifecycleTests
from .suite.model import ModelTests
from .suite.multi_pool import MultiPoolTests
from .suite.overwrite import OverwriteTests
from .suite.roundtrip import RoundTripTests
from .target import Target, resolve_target

__all__ = ["CATEGORIES", "BackendConformance", "category_of"]

_MIXINS: tuple[type, ...] = (
    LifecycleTests,
    RoundTripTests,
    BatchTests,
    IsolationTests,
    OverwriteTests,
    IntegrityTests,
    ConcurrencyTests,
    PersistenceTests,
    DeleteTests,
    ClearTests,
    EvictionTests,
    BadInputTests,
    FaultTests,
    ModelTests,
    MultiPoolTests,
)

#: Category names in report order.
CATEGORIES: tuple[str, ...] = tuple(vars(mixin)["category"] for mixin in _MIXINS)


def category_of(cls: type, test_name: str) -> str | None:
    """Category of test method ``test_name`` on ``cls`` (the mixin that defines it)."""
    for klass in cls.__mro__:
        if "category" in vars(klass) and test_name in vars(klass):
            return str(vars(klass)["category"])
    for klass in cls.__mro__:
        if test_name in vars(klass):
            for category in CATEGORIES:
                if test_name.startswith(f"test_{category}_"):
                    return category
    return None


@lru_cache(maxsize=64)
def _resolve(backend: Any, sglang: bool | None, overrides: tuple[tuple[str, Any], ...]) -> Target:
    return resolve_target(backend, sglang=sglang, overrides=dict(overrides))


class BackendConformance(*_MIXINS):  # type: ignore[misc]
    """Subclass in a ``test_*.py`` file, name the class ``Test...``, and set ``backend``.

    Class attributes:

    - ``backend``: an entry-point name, ``"module:Class"``, or the class itself.
    - ``config``: the backend's ``extra_config`` (options) for every instance; ``"{tmp}"`` inside a
      string value becomes the test's temporary directory. Override :meth:`backend_options` to
      compute it (it receives pytest's ``tmp_path``). A fresh random ``namespace`` (and model name)
      is added per test, and every instance is cleaned up (``delete`` or ``clear``) and closed.
    - ``sglang``: ``None`` (auto: SGLang's surface for classes that do not subclass ``HiCacheStorage``)
      or ``True`` to test only SGLang's surface.
    - ``capability_overrides``: e.g. ``{"persistent": True}`` to test what the class does not declare.
    - ``max_examples``: examples of the model-based state machine (default 25).

    Side-channel hooks (optional; by default found on the backend instance: ``raw_store()`` mapping,
    ``path_for(storage_key)`` file, ``set_available(flag)``). ``storage_key`` is the key the backend
    stores a page under (the bare key for SGLang-surface classes). A hook that cannot work raises
    :class:`~hicache_storage_conformance.side_channel.SideChannelUnavailable`, which skips its tests.

    - ``read_stored(backend, storage_key) -> bytes | None``: the stored bytes, ``None`` if absent;
    - ``write_stored(backend, storage_key, data)``: replace them (used to corrupt and truncate);
    - ``delete_stored(backend, storage_key)``: remove them;
    - ``corrupt_stored`` / ``truncate_stored(backend, storage_key)``: default to read + write;
    - ``stop_server(backend)`` / ``start_server(backend)``: take the server away and bring it back.
    """

    backend: ClassVar[str | type | None] = None
    config: ClassVar[dict[str, Any]] = {}
    sglang: ClassVar[bool | None] = None
    capability_overrides: ClassVar[dict[str, Any]] = {}
    max_examples: ClassVar[int] = 25

    # ---------------------------------------------------------------- selection
    def resolve_target(self) -> Target:
        """The backend under test (skips when none is set; fails with the registry's error)."""
        if self.backend is None:
            pytest.skip(f"{type(self).__name__} sets no backend")
        try:
            return _resolve(self.backend, self.sglang, tuple(sorted(self.capability_overrides.items())))
        except (BackendLoadError, ConfigError) as exc:
            pytest.fail(f"cannot load backend {self.backend!r}: {exc}", pytrace=False)

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        """``extra_config`` for every instance of this test (``tmp_path`` is the test's own directory)."""
        return dict(self.config)

    @pytest.fixture
    def harness(self, tmp_path: Path) -> Iterator[Harness]:
        """Per-test instance factory; cleans up everything it opened."""
        harness = Harness(self.resolve_target(), self.backend_options(tmp_path), tmp_path, hooks=self)
        try:
            yield harness
        finally:
            harness.cleanup()

    # ---------------------------------------------------------------- side channel
    def read_stored(self, backend: Any, storage_key: str) -> bytes | None:
        """Stored bytes of ``storage_key`` behind the backend's back (``None`` if absent)."""
        return auto_read(backend, storage_key)

    def write_stored(self, backend: Any, storage_key: str, data: bytes) -> None:
        """Replace the stored bytes of ``storage_key``."""
        auto_write(backend, storage_key, data)

    def delete_stored(self, backend: Any, storage_key: str) -> None:
        """Remove the stored page of ``storage_key``."""
        auto_delete(backend, storage_key)

    def corrupt_stored(self, backend: Any, storage_key: str) -> None:
        """Flip one byte in the last quarter of the stored bytes (payload, past any header)."""
        data = bytearray(self.read_stored(backend, storage_key) or b"")
        assert data, f"nothing stored under {storage_key!r} to corrupt"
        data[len(data) * 3 // 4] ^= 0x5A
        self.write_stored(backend, storage_key, bytes(data))

    def truncate_stored(self, backend: Any, storage_key: str) -> None:
        """Cut the stored bytes to half their length."""
        data = self.read_stored(backend, storage_key) or b""
        assert data, f"nothing stored under {storage_key!r} to truncate"
        self.write_stored(backend, storage_key, data[: len(data) // 2])

    def stop_server(self, backend: Any) -> None:
        """Take the backend's server away (default: ``backend.set_available(False)``)."""
        auto_set_available(backend, False)

    def start_server(self, backend: Any) -> None:
        """Bring the server back (default: ``backend.set_available(True)``)."""
        auto_set_available(backend, True)
