"""The conformance suite against the mooncake backend and a real mooncake_master.

The test pools have small segments, so the default ``transfer: auto`` stages every page; a second
class runs the data-path categories with ``transfer: zero_copy``. The fault categories kill the
master (``ctl.sh kill mooncake-master``) and start it again (hooks on the test class: only the
checkout's services can do that); the integrity category reaches stored objects through the
``mooncake`` conformance hooks (the backend's own client).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from hicache_storage_conformance import BackendConformance
from hicache_storage_conformance.base import category_of
from mooncake_support import client_options, ctl, ensure_running

pytestmark = pytest.mark.timeout(120)


class TestMooncakeConformance(BackendConformance):
    backend = "mooncake"
    # Each example opens and closes a client (close takes about 1 s in Mooncake): 12 keep it near 15 s.
    max_examples: ClassVar[int] = 12

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        ensure_running()
        return client_options()

    def stop_server(self, backend: Any) -> None:
        ctl("kill", "mooncake-master")

    def start_server(self, backend: Any) -> None:
        ctl("start", "mooncake")


#: The categories whose outcome depends on how pages travel; the others run once, above.
ZERO_COPY_CATEGORIES = ("roundtrip", "batch", "overwrite", "integrity", "concurrency", "model")


class TestMooncakeZeroCopyConformance(BackendConformance):
    """The data-path categories with pages moved by pointer (``transfer: zero_copy``)."""

    backend = "mooncake"
    max_examples: ClassVar[int] = 12

    @pytest.fixture(autouse=True)
    def data_path_only(self, request: pytest.FixtureRequest) -> None:
        if category_of(type(self), request.function.__name__) not in ZERO_COPY_CATEGORIES:
            pytest.skip(f"zero_copy runs {', '.join(ZERO_COPY_CATEGORIES)}; the class above runs every category")

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        ensure_running()
        return client_options(transfer="zero_copy")
