"""``BackendConformance``: the whole suite as one pytest base class a plugin's own tests subclass."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from hicache_storage import BackendLoadError, ConfigError

from .categories import CATEGORIES, category_of
from .harness import Harness
from .hooks import ConformanceHooks, find_hooks
from .skips import SkipPolicy, parse_policy
from .suite.bad_input import BadInputTests
from .suite.batch import BatchTests
from .suite.capability_tests import ClearTests, DeleteTests, EvictionTests, PersistenceTests
from .suite.concurrency import ConcurrencyTests
from .suite.cross_tp import CrossTpTests
from .suite.faults import FaultTests
from .suite.integrity import IntegrityTests
from .suite.isolation import IsolationTests
from .suite.lifecycle import LifecycleTests
from .suite.model import ModelTests
from .suite.multi_pool import MultiPoolTests
from .suite.overwrite import OverwriteTests
from .suite.roundtrip import RoundTripTests
from .suite.zero_copy import ZeroCopyTests
from .target import BackendUnderTest, cached_target

__all__ = ["CATEGORIES", "MIXINS", "BackendConformance", "ConformanceBase", "category_of"]

#: One mixin per category, in report order.
MIXINS: tuple[type, ...] = (
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
    ZeroCopyTests,
    BadInputTests,
    FaultTests,
    ModelTests,
    MultiPoolTests,
    CrossTpTests,
)
if tuple(vars(mixin)["category"] for mixin in MIXINS) != CATEGORIES:  # pragma: no cover - a packaging mistake
    raise ImportError("categories.CATEGORIES does not list the suite's mixins in order")


_resolve = cached_target


class ConformanceBase:
    """Selection, options, hooks and the per-test harness; the tests come from the category mixins.

    Class attributes:

    - ``backend``: an entry-point name, ``"module:Class"``, or the class itself.
    - ``config``: the backend's ``extra_config`` (options) for every instance; ``"{tmp}"`` inside a
      string value becomes the test's temporary directory. Override :meth:`backend_options` to
      compute it (it receives pytest's ``tmp_path``). A fresh random ``namespace`` (and model name)
      is added per test, and every instance is cleaned up (``delete`` or ``clear``) and closed.
    - ``sglang``: ``None`` (auto: SGLang's surface for classes that do not implement ``Backend``)
      or ``True`` to test only SGLang's surface.
    - ``capability_overrides``: e.g. ``{"persistent": True}`` to test what the class does not declare.
    - ``max_examples``: examples of the model-based state machine (default 25).
    - ``hooks``: the backend's test-only hooks, a
      :class:`~hicache_storage_conformance.hooks.ConformanceHooks` (class or instance), any object
      with the hook methods, or ``"module:Name"``; ``None`` looks them up in the entry-point group
      ``hicache_storage.conformance_hooks`` by the backend's name.
    - ``profile`` (``"default"`` or ``"strict"``), ``require`` (categories) and ``fail_on_skip``:
      which skips fail instead (see :mod:`~hicache_storage_conformance.skips`).

    Hook methods (override them here, or write them on a ``ConformanceHooks``): ``read_stored``,
    ``write_stored``, ``delete_stored``, ``corrupt_stored``, ``truncate_stored``, ``stop_server``,
    ``start_server``. A hook that cannot work raises
    :class:`~hicache_storage_conformance.hooks.SideChannelUnavailable`, which skips its tests.
    """

    backend: ClassVar[str | type | None] = None
    config: ClassVar[dict[str, Any]] = {}
    sglang: ClassVar[bool | None] = None
    capability_overrides: ClassVar[dict[str, Any]] = {}
    max_examples: ClassVar[int] = 25
    hooks: ClassVar[Any] = None
    profile: ClassVar[str] = "default"
    require: ClassVar[tuple[str, ...]] = ()
    fail_on_skip: ClassVar[bool] = False

    # ---------------------------------------------------------------- selection
    def resolve_target(self) -> BackendUnderTest:
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

    def skip_policy(self) -> SkipPolicy | None:
        """Which skips fail (from ``profile``, ``require`` and ``fail_on_skip``); ``None`` when all may skip."""
        policy = parse_policy(self.profile, list(self.require), self.fail_on_skip)
        return policy if policy.active else None

    def target_hooks(self) -> ConformanceHooks:
        """The backend's test-only hooks (see ``hooks``), found once per test class."""
        cls = type(self)
        cached = vars(cls).get("_found_hooks")
        if isinstance(cached, ConformanceHooks):
            return cached
        found, _source = find_hooks(self.backend, self.hooks)
        cls._found_hooks = found  # type: ignore[attr-defined]
        return found

    @pytest.fixture
    def harness(self, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Harness]:
        """Per-test instance factory; cleans up everything it opened."""
        harness = Harness(
            self.resolve_target(),
            self.backend_options(tmp_path),
            tmp_path,
            hooks=self,
            node=request.node,
            policy=self.skip_policy(),
        )
        try:
            yield harness
        finally:
            harness.cleanup()

    # ---------------------------------------------------------------- side channel
    def read_stored(self, backend: Any, storage_key: str) -> bytes | None:
        """Stored bytes of ``storage_key`` behind the backend's back (``None`` if absent)."""
        return self.target_hooks().read_stored(backend, storage_key)

    def write_stored(self, backend: Any, storage_key: str, data: bytes) -> None:
        """Replace the stored bytes of ``storage_key``."""
        self.target_hooks().write_stored(backend, storage_key, data)

    def delete_stored(self, backend: Any, storage_key: str) -> None:
        """Remove the stored page of ``storage_key``."""
        self.target_hooks().delete_stored(backend, storage_key)

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
        """Take the backend's server away (the hooks' ``stop_server``)."""
        self.target_hooks().stop_server(backend)

    def start_server(self, backend: Any) -> None:
        """Bring the server back (the hooks' ``start_server``)."""
        self.target_hooks().start_server(backend)


class BackendConformance(ConformanceBase, *MIXINS):  # type: ignore[misc]
    """Subclass in a ``test_*.py`` file, name the class ``Test...``, and set ``backend``.

    Every category runs; see :class:`ConformanceBase` for the attributes and hooks.
    """
