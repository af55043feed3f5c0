"""Per-test factory of backend instances, uniform calls over the SDK and SGLang surfaces, and clean-up.

Every harness draws a fresh random namespace and model name, so no two tests (or two runs against
a shared server) ever see each other's pages. Instances it opened are cleaned up at the end of the
test: ``delete`` of every key the harness handed out where supported, else ``clear()``, then ``close()``.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest
import torch

from hicache_storage import Capabilities, HiCacheStorageConfig, HostKVPool, make_config
from hicache_storage.plugin import Backend
from hicache_storage.testing import manifest_key
from hicache_storage.testing.layers import FaultPoints, Wrapper

from . import skips
from .categories import category_of
from .checks import SENTINEL, Mismatch, check_equal, check_pages
from .hooks import SideChannelUnavailable
from .pages import PoolSpec, host_indices, make_pool, page_content, read_slot, tensor_bytes, tensor_of, write_slot
from .target import BackendUnderTest

__all__ = ["SENTINEL", "Handle", "Harness", "expect_bools", "substitute_tmp"]


def expect_bools(result: object, count: int, call: str) -> list[bool]:
    """Assert ``result`` is a list of ``count`` bools (never ``None``) and return it."""
    rule = "a batch call returns one bool per key, never None"
    if result is None:
        raise Mismatch(call, f"a list of {count} bools", "None", rule=rule)
    if not isinstance(result, list):
        raise Mismatch(call, f"a list of {count} bools", type(result).__name__, rule=rule)
    if len(result) != count:
        raise Mismatch(call, f"{count} results (one per key)", f"{len(result)} results", rule=rule)
    bad = [item for item in result if not isinstance(item, bool)]
    if bad:
        raise Mismatch(call, "one bool per key", f"non-bool items {bad[:3]!r}", rule=rule)
    return result


def substitute_tmp(value: Any, tmp: str) -> Any:
    """``value`` with ``{tmp}`` in every string replaced by ``tmp``."""
    if isinstance(value, str):
        return value.replace("{tmp}", tmp)
    if isinstance(value, dict):
        return {k: substitute_tmp(v, tmp) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_tmp(v, tmp) for v in value]
    return value


class Handle:
    """One backend instance with its host pool, and the calls tests make on it."""

    def __init__(
        self,
        harness: Harness,
        backend: Any,
        pool: HostKVPool,
        spec: PoolSpec,
        config: HiCacheStorageConfig,
        *,
        faults: FaultPoints | None = None,
    ):
        self.harness = harness
        self.backend = backend
        self.pool = pool
        self.spec = spec
        self.config = config
        #: The fault points right over the backend (SDK surface only), for :meth:`interpose`.
        self.faults = faults
        self.closed = False
        #: Sidecar pools registered next to the KV pool (names), cleaned up like the KV pool.
        self.sidecars: tuple[str, ...] = ()

    # ----------------------------------------------------------- identity
    @property
    def implementation(self) -> Any:
        """What the hooks receive: the author's :class:`~hicache_storage.plugin.Backend` (SDK surface),
        the instance itself (SGLang surface)."""
        inner = getattr(self.backend, "backend", None)
        return inner if self.harness.sdk and isinstance(inner, Backend) else self.backend

    def interpose(self, primitive: str, wrapper: Wrapper) -> contextlib.AbstractContextManager[None]:
        """Route ``primitive`` of this instance's backend through ``wrapper`` for the block (SDK surface)."""
        if self.faults is None:
            raise RuntimeError("fault points exist only on the SDK surface")
        return self.faults.interpose(primitive, wrapper)

    @property
    def page_bytes(self) -> int:
        """Bytes of one page of this pool."""
        return int(self.pool.bytes_per_page)

    def content(self, key: str, version: int = 0) -> bytes:
        """The page the suite writes for (``key``, ``version``) in this pool."""
        return page_content(key, version, self.page_bytes)

    def same(self, got: Sequence[bytes | None], expected: Sequence[bytes | None]) -> bool:
        """Whether ``got`` equals ``expected`` page by page; a miss is accepted for a hit when ``may_evict``."""
        if len(got) != len(expected):
            return False
        evict = self.harness.caps.may_evict
        return all(g == e or (g is None and evict) for g, e in zip(got, expected))

    def check_pages(
        self,
        got: Sequence[bytes | None],
        keys: Sequence[str],
        versions: int | Sequence[int | None],
        what: str,
        rule: str = "",
    ) -> None:
        """Each page of ``got`` is its key's page at its version (``None``: a miss is due); a miss for a
        hit is accepted when the backend ``may_evict``. Raises :class:`Mismatch` naming the first wrong page."""
        check_pages(got, keys, versions, what, may_evict=self.harness.caps.may_evict, rule=rule)

    def store(self, keys: Sequence[str], versions: int | Sequence[int], what: str, rule: str = "") -> None:
        """:meth:`put` the pages; raises :class:`Mismatch` (``what``) unless every write answers ``True``."""
        check_equal(self.put(keys, versions), [True] * len(keys), what, rule=rule)

    def store_fresh(self, count: int, versions: int | Sequence[int], what: str, rule: str = "") -> list[str]:
        """:meth:`store` the pages of ``count`` fresh keys (:meth:`Harness.keys`); returns the keys."""
        keys = self.harness.keys(count)
        self.store(keys, versions, what, rule)
        return keys

    def expect(self, keys: Sequence[str], versions: int | Sequence[int | None], what: str, rule: str = "") -> None:
        """:meth:`fetch` the pages and :meth:`check_pages` them (``None``: a miss is due)."""
        self.check_pages(self.fetch(keys), keys, versions, what, rule=rule)

    def storage_key(self, key: str) -> str:
        """The key the backend stores ``key`` under (the bare key for SGLang-surface classes)."""
        space = getattr(self.backend, "keyspace", None)
        return str(space.storage_key(key)) if self.harness.sdk and space is not None else key

    # ----------------------------------------------------------- v1
    def set_v1(
        self, keys: Sequence[str], versions: int | Sequence[int] = 0, slots: Sequence[int] | None = None
    ) -> list[bool]:
        """Stage each key's page in a host slot and ``batch_set_v1`` them."""
        keys = list(keys)
        slots = list(range(len(keys))) if slots is None else list(slots)
        vers = [versions] * len(keys) if isinstance(versions, int) else list(versions)
        for key, version, slot in zip(keys, vers, slots):
            write_slot(self.pool, slot, self.content(key, version))
        result = self.backend.batch_set_v1(keys, host_indices(self.pool, slots))
        return expect_bools(result, len(keys), "batch_set_v1")

    def get_v1(self, keys: Sequence[str], slots: Sequence[int] | None = None) -> list[bytes | None]:
        """``batch_get_v1`` into host slots (pre-filled with a sentinel); page bytes per hit, ``None`` per miss."""
        keys = list(keys)
        slots = list(range(len(keys))) if slots is None else list(slots)
        fill = bytes([SENTINEL]) * self.page_bytes
        for slot in slots:
            write_slot(self.pool, slot, fill)
        result = expect_bools(
            self.backend.batch_get_v1(keys, host_indices(self.pool, slots)), len(keys), "batch_get_v1"
        )
        return [read_slot(self.pool, slot) if hit else None for hit, slot in zip(result, slots)]

    # ----------------------------------------------------------- v0
    def set_v0(self, keys: Sequence[str], versions: int | Sequence[int] = 0) -> bool:
        """``batch_set`` with one flat tensor per key; the bool it returns."""
        keys = list(keys)
        vers = [versions] * len(keys) if isinstance(versions, int) else list(versions)
        values = [tensor_of(self.pool, self.content(k, v)) for k, v in zip(keys, vers)]
        result = self.backend.batch_set(keys, values)
        if not isinstance(result, bool):
            raise Mismatch(
                "batch_set", "a bool", repr(result), rule="batch_set returns True only if every page was stored"
            )
        return result

    def get_v0(self, keys: Sequence[str]) -> list[bytes | None]:
        """``batch_get`` into fresh flat tensors; page bytes per hit, ``None`` per miss."""
        keys = list(keys)
        targets = [tensor_of(self.pool, bytes([SENTINEL]) * self.page_bytes) for _ in keys]
        result = self.backend.batch_get(keys, targets)
        rule = "batch_get returns one tensor or None per key"
        if not isinstance(result, list) or len(result) != len(keys):
            shape = f"{len(result)} results" if isinstance(result, list) else type(result).__name__
            raise Mismatch("batch_get", f"a list of {len(keys)} results", shape, rule=rule)
        out: list[bytes | None] = []
        for index, item in enumerate(result):
            if item is None:
                out.append(None)
                continue
            if not isinstance(item, torch.Tensor):
                raise Mismatch(f"batch_get result {index}", "a tensor or None", type(item).__name__, rule=rule)
            out.append(tensor_bytes(item))
        return out

    # ----------------------------------------------------------- generic
    def put(self, keys: Sequence[str], versions: int | Sequence[int] = 0) -> list[bool]:
        """Write pages through v1 when available, else v0 (one bool per key)."""
        if self.harness.target.has_v1:
            return self.set_v1(keys, versions)
        ok = self.set_v0(keys, versions)
        return [ok] * len(keys)

    def fetch(self, keys: Sequence[str]) -> list[bytes | None]:
        """Read pages through v1 when available, else v0."""
        return self.get_v1(keys) if self.harness.target.has_v1 else self.get_v0(keys)

    def exists_each(self, keys: Sequence[str]) -> list[bool]:
        """Per-key existence (``batch_exists_each`` or one ``exists`` per key)."""
        keys = list(keys)
        if self.harness.sdk:
            return expect_bools(self.backend.batch_exists_each(keys), len(keys), "batch_exists_each")
        out = []
        for key in keys:
            hit = self.backend.exists(key)
            if not isinstance(hit, bool):
                raise Mismatch("exists", "a bool", repr(hit), rule="exists returns a bool")
            out.append(hit)
        return out

    def exists_prefix(self, keys: Sequence[str]) -> int:
        """``batch_exists``: the number of leading keys that exist."""
        count = self.backend.batch_exists(list(keys))
        if not isinstance(count, int) or isinstance(count, bool):
            raise Mismatch(
                "batch_exists",
                "an int (the count of leading existing keys)",
                repr(count),
                rule="batch_exists returns an int",
            )
        return count

    def delete(self, keys: Sequence[str]) -> list[bool]:
        """``delete(keys)`` (SDK surface)."""
        return expect_bools(self.backend.delete(list(keys)), len(keys), "delete")

    def close(self) -> None:
        """Close the instance (SDK surface; SGLang-surface classes have no close)."""
        if self.closed:
            return
        self.closed = True
        close = getattr(self.backend, "close", None)
        if callable(close):
            close()


class Harness:
    """Opens backend instances for one test and cleans them up afterwards.

    ``options`` is the backend's ``extra_config`` (``{tmp}`` in a string value becomes the test's
    temporary directory); ``hooks`` is the test class instance that supplies side-channel hooks;
    ``node`` the pytest item (skips record their kind on it); ``policy`` turns skips it does not
    accept into failures.
    """

    def __init__(
        self,
        target: BackendUnderTest,
        options: dict[str, Any],
        tmp_path: Path,
        hooks: Any = None,
        *,
        node: Any = None,
        policy: skips.SkipPolicy | None = None,
    ) -> None:
        self.target = target
        self.hooks = hooks
        self.node = node
        self.policy = policy
        cls, function = getattr(node, "cls", None), getattr(node, "function", None)
        self.category = (category_of(cls, function.__name__) if cls is not None and function else None) or "other"
        self.tmp_path = tmp_path
        self.options = substitute_tmp(dict(options), str(tmp_path))
        self.namespace = ""
        self.model = ""
        self.renew_identity()
        self.handles: list[Handle] = []
        self.issued_keys: list[str] = []
        self.stopped: list[Handle] = []
        self._caps: Capabilities | None = None

    def renew_identity(self) -> None:
        """Draw a fresh random namespace and model name (instances opened later see none of the earlier pages)."""
        token = secrets.token_hex(6)
        self.namespace = f"conformance-{token}"
        self.model = f"conformance-model-{token}"

    @property
    def sdk(self) -> bool:
        """Whether the backend is tested through the SDK surface."""
        return self.target.sdk

    @property
    def caps(self) -> Capabilities:
        """Capabilities of an instance on the default config (options may change them), with overrides."""
        if self._caps is None:
            self.open()
        assert self._caps is not None
        return self._caps

    def skip(self, kind: str, reason: str, enable: str) -> NoReturn:
        """Skip this test, recording why (``kind``, see :mod:`~hicache_storage_conformance.skips`) and
        what would enable it; a failure instead when the run's policy does not accept this skip."""
        if self.node is not None:
            self.node.user_properties.extend([(skips.PROPERTY_KIND, kind), (skips.PROPERTY_ENABLE, enable)])
        violation = self.policy.violation(self.category, kind) if self.policy is not None else None
        if violation:
            pytest.fail(f"skipped, which this run does not accept ({violation}): {reason}. To enable: {enable}")
        try:  # reported at the test's location rather than this line's
            skipped = pytest.skip.Exception(reason, _use_item_location=True)
        except TypeError:  # pragma: no cover - a pytest without the keyword
            pytest.skip(reason)
        raise skipped

    def require(self, capability: str) -> None:
        """Skip unless ``capability`` is declared (or overridden) true."""
        if not getattr(self.caps, capability):
            self.skip(skips.CAPABILITY, f"capability {capability} not declared", skips.enable_capability(capability))

    def require_sdk(self, what: str) -> None:
        """Skip for classes tested through SGLang's surface."""
        if not self.sdk:
            self.skip(skips.SURFACE, f"{what} is not part of SGLang's storage surface", skips.ENABLE_SDK)

    def require_v1(self) -> None:
        """Skip when the class has no ``batch_get_v1``/``batch_set_v1``."""
        if not self.target.has_v1:
            self.skip(
                skips.SURFACE, "the class defines no batch_get_v1/batch_set_v1", "define batch_get_v1/batch_set_v1"
            )

    def skip_no_side_channel(self, error: Exception) -> NoReturn:
        """Skip a test that needs the stored bytes behind the backend's back."""
        self.skip(skips.HOOK, f"no side channel to reach stored pages: {error}", skips.ENABLE_SIDE_CHANNEL)

    def skip_no_fault_hook(self, error: Exception) -> NoReturn:
        """Skip a test that needs the real store to fail."""
        self.skip(skips.HOOK, f"no way to stop the server: {error}", skips.ENABLE_FAULT_HOOK)

    def skip_unshared(self) -> NoReturn:
        """Skip an isolation test: a second instance on the same config does not see the first one's pages."""
        reason = "a second instance on the same config does not see the first one's pages; isolation is unobservable"
        if self.caps.shared:
            self.skip(
                skips.UNOBSERVED,
                reason + " although shared is declared",
                "make instances on one config share one store (or stop declaring shared)",
            )
        self.skip(
            skips.CAPABILITY,
            reason + " (shared not declared)",
            "declare shared=True if instances on one config see each other's pages, with a config that shares "
            'a store (sim: {"store": NAME})',
        )

    def stop_server_or_skip(self, handle: Handle) -> None:
        """:meth:`stop_server`, skipping the test (kind ``hook``) when there is no fault hook."""
        try:
            self.stop_server(handle)
        except SideChannelUnavailable as exc:
            self.skip_no_fault_hook(exc)

    def key(self) -> str:
        """A fresh random bare key shaped like a page hash."""
        key = secrets.token_hex(32)
        self.issued_keys.append(key)
        return key

    def keys(self, count: int) -> list[str]:
        """``count`` fresh keys."""
        return [self.key() for _ in range(count)]

    def config(self, *, extra: dict[str, Any] | None = None, **fields: Any) -> HiCacheStorageConfig:
        """The test's config; ``fields`` override :func:`make_config` arguments, ``extra`` merges into extra_config."""
        extra_config = {**self.options, "namespace": self.namespace, **(extra or {})}
        if not self.sdk and "namespace" not in (extra or {}):
            extra_config.pop("namespace")
        arguments: dict[str, Any] = {"model_name": self.model, **fields}
        return make_config(extra_config=extra_config, **arguments)

    def open(self, spec: PoolSpec | None = None, config: HiCacheStorageConfig | None = None, **fields: Any) -> Handle:
        """Construct an instance on ``config`` (or ``self.config(**fields)``) and register a fresh pool."""
        spec = spec or PoolSpec()
        config = config or self.config(**fields)
        backend, faults = self.construct(config)
        pool = make_pool(spec)
        try:
            backend.register_mem_pool_host(pool)
        except BaseException:
            _close_quietly(backend)
            raise
        return self.adopt(backend, pool, spec, config, faults=faults)

    def construct(self, config: HiCacheStorageConfig) -> tuple[Any, FaultPoints | None]:
        """An instance on ``config`` and, on the SDK surface, the fault points right over its backend."""
        points: list[FaultPoints] = []

        def fault_points(inner: Backend[Any], capabilities: Capabilities) -> Backend[Any]:
            points.append(FaultPoints(inner, capabilities))
            return points[-1]

        backend = self.target.construct(config, [fault_points] if self.sdk else [])
        return backend, (points[0] if points else None)

    def adopt(
        self,
        backend: Any,
        pool: Any,
        spec: PoolSpec,
        config: HiCacheStorageConfig,
        *,
        faults: FaultPoints | None = None,
    ) -> Handle:
        """Track an instance built and registered elsewhere (cleaned up and closed with the others)."""
        handle = Handle(self, backend, pool, spec, config, faults=faults)
        self.handles.append(handle)
        if self._caps is None:
            declared = getattr(backend, "capabilities", None)
            if not isinstance(declared, Capabilities):
                declared = self.target.declared
            self._caps = declared.with_overrides(self.target.overrides)
        return handle

    def stop_server(self, handle: Handle) -> None:
        """Take the server of ``handle`` away through the test class's hook."""
        self.hooks.stop_server(handle.implementation)
        self.stopped.append(handle)

    def start_server(self, handle: Handle) -> None:
        """Bring the server of ``handle`` back."""
        self.hooks.start_server(handle.implementation)
        if handle in self.stopped:
            self.stopped.remove(handle)

    def cleanup(self) -> None:
        """Remove what the test stored and close every instance (errors surface as test errors)."""
        caps = self._caps or self.target.capabilities
        errors: list[str] = []
        for handle in self.handles:
            if handle.closed:
                continue
            try:
                if handle in self.stopped:
                    self.start_server(handle)
                if self.sdk and caps.supports_delete and self.issued_keys:
                    pools = ("kv", *handle.sidecars)
                    for pool in pools:
                        for begin in range(0, len(self.issued_keys), 512):
                            handle.backend.delete(self.issued_keys[begin : begin + 512], pool=pool)
                    if caps.supports_list:  # the key spaces' manifests, written beside their pages
                        handle.backend.delete_stored([manifest_key(handle.backend.pool_keyspace(p)) for p in pools])
                elif caps.supports_clear:
                    handle.backend.clear()
            except Exception as exc:
                errors.append(f"clean-up of {type(handle.backend).__name__} failed: {type(exc).__name__}: {exc}")
            finally:
                try:
                    handle.close()
                except Exception as exc:
                    errors.append(f"close() raised {type(exc).__name__}: {exc}")
        self.handles.clear()
        assert not errors, "; ".join(errors)


def _close_quietly(backend: Any) -> None:
    close = getattr(backend, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):
            close()
