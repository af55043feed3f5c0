"""The conformance suite against the mooncake backend and a real mooncake_master.

The fault category kills the master (``ctl.sh kill mooncake-master``) and starts it again; the
integrity category reaches stored objects through ``raw_store()`` (the backend's own client).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from hicache_storage_conformance import BackendConformance
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
