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
from typing import Any

import pytest
import torch

from hicache_storage import Capabilities, HiCacheStorageConfig, HostKVPool, make_config

from .pages import PoolSpec, host_indices, make_pool, page_content, read_slot, tensor_bytes, tensor_of, write_slot
from .target import Target

__all__ = ["Handle", "Harness", "expect_bools", "substitute_tmp"]

#: Byte pattern written into slots before a read, to see which slots a backend touched.
SENTINEL = 0xA5


def expect_bools(result: object, count: int, call: str) -> list[bool]:
    """Assert ``result`` is a list of ``count`` bools (never ``None``) and return it."""
    assert result is not None, f"{call} returned None; it must return a list of {count} bools"
    assert isinstance(result, list), f"{call} returned {type(result).__name__}; expected a list of {count} bools"
    assert len(result) == count, f"{call} returned {len(result)} results for {count} keys"
    bad = [item for item in result if not isinstance(item, bool)]
    assert not bad, f"{call} returned non-bool items {bad[:3]!r}; expected one bool per key"
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

    def __init__(self, harness: Harness, backend: Any, pool: HostKVPool, spec: PoolSpec, config: HiCacheStorageConfig):
        self.harness = harness
        self.backend = backend
        self.pool = pool
        self.spec = spec
        self.config = config
        self.closed = False
        #: Sidecar pools registered next to the KV pool (names), cleaned up like the KV pool.
        self.sidecars: tuple[str, ...] = ()

    # ----------------------------------------------------------- identity
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
        assert isinstance(result, bool), f"batch_set returned {result!r}; expected a bool"
        return result

    def get_v0(self, keys: Sequence[str]) -> list[bytes | None]:
        """``batch_get`` into fresh flat tensors; page bytes per hit, ``None`` per miss."""
        keys = list(keys)
        targets = [tensor_of(self.pool, bytes([SENTINEL]) * self.page_bytes) for _ in keys]
        result = self.backend.batch_get(keys, targets)
        assert isinstance(result, list), f"batch_get returned {type(result).__name__}; expected a list"
        assert len(result) == len(keys), f"batch_get returned {len(result)} results for {len(keys)} keys"
        out: list[bytes | None] = []
        for index, item in enumerate(result):
            if item is None:
                out.append(None)
                continue
            assert isinstance(item, torch.Tensor), f"batch_get result {index} is {type(item).__name__}, not a tensor"
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
            assert isinstance(hit, bool), f"exists returned {hit!r}; expected a bool"
            out.append(hit)
        return out

    def exists_prefix(self, keys: Sequence[str]) -> int:
        """``batch_exists``: the number of leading keys that exist."""
        count = self.backend.batch_exists(list(keys))
        assert isinstance(count, int) and not isinstance(count, bool), (
            f"batch_exists returned {count!r}; expected an int (count of leading existing keys)"
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
    temporary directory); ``hooks`` is the test class instance that supplies side-channel hooks.
    """

    def __init__(self, target: Target, options: dict[str, Any], tmp_path: Path, hooks: Any = None) -> None:
        self.target = target
        self.hooks = hooks
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

    def require(self, capability: str) -> None:
        """Skip unless ``capability`` is declared (or overridden) true."""
        if not getattr(self.caps, capability):
            pytest.skip(f"capability {capability} not declared")

    def require_sdk(self, what: str) -> None:
        """Skip for classes tested through SGLang's surface."""
        if not self.sdk:
            pytest.skip(f"{what} is not part of SGLang's storage surface")

    def require_v1(self) -> None:
        """Skip when the class has no ``batch_get_v1``/``batch_set_v1``."""
        if not self.target.has_v1:
            pytest.skip("the class defines no batch_get_v1/batch_set_v1")

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
        backend = self.target.construct(config)
        pool = make_pool(spec)
        try:
            backend.register_mem_pool_host(pool)
        except BaseException:
            _close_quietly(backend)
            raise
        return self.adopt(backend, pool, spec, config)

    def adopt(self, backend: Any, pool: Any, spec: PoolSpec, config: HiCacheStorageConfig) -> Handle:
        """Track an instance built and registered elsewhere (cleaned up and closed with the others)."""
        handle = Handle(self, backend, pool, spec, config)
        self.handles.append(handle)
        if self._caps is None:
            declared = getattr(backend, "capabilities", None)
            if not isinstance(declared, Capabilities):
                declared = self.target.declared
            self._caps = declared.with_overrides(self.target.overrides)
        return handle

    def stop_server(self, handle: Handle) -> None:
        """Take the server of ``handle`` away through the test class's hook."""
        self.hooks.stop_server(handle.backend)
        self.stopped.append(handle)

    def start_server(self, handle: Handle) -> None:
        """Bring the server of ``handle`` back."""
        self.hooks.start_server(handle.backend)
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
                    for pool in ("kv", *handle.sidecars):
                        for begin in range(0, len(self.issued_keys), 512):
                            handle.backend.delete(self.issued_keys[begin : begin + 512], pool=pool)
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
