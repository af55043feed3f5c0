"""A class written only against SGLang's surface runs through the subset of the suite it supports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conformance_sglang_example import SGLangStyleStore
from hicache_storage_conformance import BackendConformance
from hicache_storage_conformance.harness import Harness
from hicache_storage_conformance.reference import MemoryBackend
from hicache_storage_conformance.target import resolve_target


class TestSGLangExample(BackendConformance):
    """Side-channel hooks written by the test author: the example keeps pages in a class-level dict."""

    backend = SGLangStyleStore

    def read_stored(self, backend: Any, storage_key: str) -> bytes | None:
        return SGLangStyleStore._pages.get(backend._key(storage_key))

    def write_stored(self, backend: Any, storage_key: str, data: bytes) -> None:
        SGLangStyleStore._pages[backend._key(storage_key)] = data

    def delete_stored(self, backend: Any, storage_key: str) -> None:
        SGLangStyleStore._pages.pop(backend._key(storage_key), None)

    def stop_server(self, backend: Any) -> None:
        backend.set_available(False)

    def start_server(self, backend: Any) -> None:
        backend.set_available(True)


def test_sglang_class_is_detected() -> None:
    target = resolve_target(SGLangStyleStore)
    assert target.tier == "sglang"
    assert target.has_v1


def test_sdk_class_can_be_forced_onto_sglang_surface(tmp_path: Path) -> None:
    target = resolve_target(MemoryBackend, sglang=True)
    assert target.tier == "sglang" and not target.sdk
    harness = Harness(target, {}, tmp_path)
    handle = harness.open()
    key = harness.key()
    assert handle.put([key]) == [True]
    assert handle.fetch([key]) == [handle.content(key)]
    with pytest.raises(pytest.skip.Exception, match="not part of SGLang's storage surface"):
        harness.require_sdk("request validation")
    harness.cleanup()


def test_class_without_sglang_surface_is_rejected() -> None:
    class NotABackend:
        def get(self, key: str) -> None:
            return None

    with pytest.raises(ImportError, match="lacks batch_get, set, batch_set, exists"):
        resolve_target(NotABackend)
