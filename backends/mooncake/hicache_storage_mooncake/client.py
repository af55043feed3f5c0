"""The Mooncake Store client: lazy import, fail-fast set-up, return codes, and a close-safe call gate."""

from __future__ import annotations

import os
import threading
from types import TracebackType
from typing import Any

from hicache_storage.plugin import BackendFault

from .options import MooncakeOptions

__all__ = [
    "CODE_NAMES",
    "INSTALL_HINT",
    "INVALID_PARAMS",
    "OBJECT_ALREADY_EXISTS",
    "OBJECT_NOT_FOUND",
    "OUTAGE_CODES",
    "RPC_FAIL",
    "RPC_TIMEOUT",
    "TRANSFER_FAIL",
    "CallGate",
    "code_name",
    "import_store",
    "open_store",
]

#: Codes of ``mooncake-store/include/types.h`` that this backend meets.
CODE_NAMES: dict[int, str] = {
    -1: "internal_error",
    -200: "no_available_handle",
    -600: "invalid_params",
    -703: "replica_not_ready",
    -704: "object_not_found",
    -705: "object_already_exists",
    -706: "object_has_lease",
    -707: "lease_expired",
    -800: "transfer_fail",
    -900: "rpc_fail",
    -901: "rpc_timeout",
}
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
#: A put session's start for a key that has an object (or a reservation) already.
OBJECT_ALREADY_EXISTS = -705
TRANSFER_FAIL = -800
RPC_FAIL = -900
#: Returned for every key when the master does not answer within ``MC_RPC_TIMEOUT_MS`` (seen with a
#: stopped master).
RPC_TIMEOUT = -901
#: Codes that, returned for every key of a call, mean the master is unreachable (an outage).
OUTAGE_CODES = frozenset({RPC_FAIL, RPC_TIMEOUT})
#: The client's RPC timeouts, read once at set-up.
RPC_TIMEOUT_ENV = ("MC_RPC_TIMEOUT_MS", "MC_RPC_CONNECT_TIMEOUT_MS")
_rpc_env_set_here: set[str] = set()

INSTALL_HINT = (
    "the mooncake backend needs the Mooncake Store client (Python module 'mooncake'): "
    "pip install mooncake-transfer-engine-non-cuda   # CPU-only machines\n"
    "pip install mooncake-transfer-engine            # machines with CUDA"
)


def code_name(code: int) -> str:
    """Stats counter name of a negative Mooncake return code (``mooncake_no_available_handle``)."""
    return "mooncake_" + CODE_NAMES.get(code, f"error_{-code}")


def import_store() -> tuple[type[Any], type[Any]]:
    """(``MooncakeDistributedStore``, ``ReplicateConfig``); :class:`ImportError` with the install hint."""
    try:
        from mooncake.store import MooncakeDistributedStore, ReplicateConfig
    except ImportError as error:
        raise ImportError(INSTALL_HINT) from error
    return MooncakeDistributedStore, ReplicateConfig


def open_store(options: MooncakeOptions, rpc_timeout_ms: int | None = None) -> Any:
    """A set-up ``MooncakeDistributedStore``; :class:`BackendFault` naming the master when set-up fails.

    ``MC_STORE_CLIENT_SETUP_RETRIES`` is set from ``setup_retries`` and ``MC_TCP_BIND_ADDRESS``
    (the address advertised for TCP transfers) defaults to ``local_hostname``. With
    ``rpc_timeout_ms``, ``MC_RPC_TIMEOUT_MS`` and ``MC_RPC_CONNECT_TIMEOUT_MS`` are set to it for this
    client, unless the environment set them before this process did.
    """
    store_cls, _ = import_store()
    os.environ["MC_STORE_CLIENT_SETUP_RETRIES"] = str(options.setup_retries)
    if rpc_timeout_ms is not None:
        for name in RPC_TIMEOUT_ENV:
            if name not in os.environ or name in _rpc_env_set_here:
                os.environ[name] = str(int(rpc_timeout_ms))
                _rpc_env_set_here.add(name)
    if options.protocol == "tcp":
        os.environ.setdefault("MC_TCP_BIND_ADDRESS", options.bind_host)
    store = store_cls()
    # Positional: the binding's keyword names differ from SGLang's option names.
    code = store.setup(
        str(options.local_hostname),
        str(options.metadata_server),
        options.size_of("global_segment_size"),
        options.size_of("local_buffer_size"),
        str(options.protocol),
        str(options.device_name),
        str(options.master_server_address),
    )
    if code != 0:
        cause = f"no master answered at {options.master_server_address}"
        if options.metadata_server != "P2PHANDSHAKE":  # P2PHANDSHAKE has no metadata server to blame
            cause += f", or the metadata server {options.metadata_server!r} is unreachable"
        raise BackendFault(
            f"Mooncake set-up failed with code {code} ({CODE_NAMES.get(code, 'unknown')}): {cause} "
            f"(tried {options.setup_retries} time(s))"
        )
    return store


class CallGate:
    """Counts calls in flight so the client is closed only when none runs (a call after close crashes)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._closed = False

    def __enter__(self) -> CallGate:
        with self._cond:
            if self._closed:
                raise BackendFault("the Mooncake client is closed")
            self._active += 1
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        with self._cond:
            self._active -= 1
            self._cond.notify_all()

    def shut(self, timeout_s: float) -> bool:
        """Refuse new calls; ``True`` once no call is in flight (``False`` after ``timeout_s``)."""
        with self._cond:
            self._closed = True
            return self._cond.wait_for(lambda: self._active == 0, timeout_s)
