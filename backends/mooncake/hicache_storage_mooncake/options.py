"""Options of the mooncake backend (``extra_config`` keys), with SGLang's environment fallbacks.

Each option left out of ``extra_config`` is taken from its environment variable (the names SGLang's
Mooncake store reads), then from the default. Sizes accept an int (bytes) or a string such as
``"4GB"``, ``"512MiB"`` or ``"16mb"`` (binary units either way).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields

from hicache_storage.plugin import ConfigError

__all__ = ["ENV_FALLBACKS", "GET_CALLS", "TRANSFER_MODES", "MooncakeOptions", "parse_size"]

#: Values of the ``transfer`` option.
TRANSFER_MODES = ("auto", "zero_copy", "staged")
#: Values of the ``get_calls`` option.
GET_CALLS = ("auto", "session", "plain")

#: Option name → environment variable read when the option is not given.
ENV_FALLBACKS: dict[str, str] = {
    "master_server_address": "MOONCAKE_MASTER",
    "metadata_server": "MOONCAKE_TE_META_DATA_SERVER",
    "local_hostname": "MOONCAKE_LOCAL_HOSTNAME",
    "global_segment_size": "MOONCAKE_GLOBAL_SEGMENT_SIZE",
    "local_buffer_size": "MOONCAKE_LOCAL_BUFFER_SIZE",
    "protocol": "MOONCAKE_PROTOCOL",
    "device_name": "MOONCAKE_DEVICE",
}

_DEFAULTS: dict[str, str | int] = {
    "metadata_server": "P2PHANDSHAKE",
    "local_hostname": "127.0.0.1",
    "global_segment_size": 4 << 30,
    "local_buffer_size": 16 << 20,
    "protocol": "tcp",
    "device_name": "",
}

#: Largest size option (1 PiB).
MAX_SIZE = 1 << 50
_SIZE = re.compile(r"\s*(\d+)\s*([kmgt]?)(i?b)?\s*", re.IGNORECASE)
_PREFIX = re.compile(r"[A-Za-z0-9._:/-]*")


def parse_size(value: int | str, option: str) -> int:
    """Bytes from an int or a string like ``"4GB"``/``"256MiB"``; :class:`ConfigError` naming ``option``."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        match = _SIZE.fullmatch(str(value))
        if match is None:
            raise ConfigError(option, f"expected bytes (int) or a size like '4GB', got {value!r}")
        shift = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[match.group(2).lower()]
        number = int(match.group(1)) << shift
    if not 0 <= number <= MAX_SIZE:
        raise ConfigError(option, f"must be in 0..{MAX_SIZE} bytes (1 PiB), got {value!r}")
    return number


@dataclass(frozen=True)
class MooncakeOptions:
    """Where the Mooncake master is and how this client joins the store (see docs/backends/mooncake.md).

    - ``master_server_address``: ``host:port`` of ``mooncake_master`` (env ``MOONCAKE_MASTER``; required).
    - ``metadata_server``: transfer-engine metadata, an HTTP URL or ``"P2PHANDSHAKE"``
      (env ``MOONCAKE_TE_META_DATA_SERVER``); every client of one master must use the same mode.
    - ``local_hostname``: address this client advertises (env ``MOONCAKE_LOCAL_HOSTNAME``).
    - ``global_segment_size``: memory this client lends to the store (0 = none; objects in it vanish
      when the client closes) (env ``MOONCAKE_GLOBAL_SEGMENT_SIZE``).
    - ``local_buffer_size``: the client's own staging buffer for byte-level calls
      (env ``MOONCAKE_LOCAL_BUFFER_SIZE``).
    - ``protocol``: ``tcp`` or ``rdma`` (env ``MOONCAKE_PROTOCOL``); ``device_name``: RDMA devices
      (env ``MOONCAKE_DEVICE``).
    - ``setup_retries``: registration attempts at set-up (``MC_STORE_CLIENT_SETUP_RETRIES``); each
      takes about 4.4 s when no master answers.
    - ``key_prefix``: prepended to every object key; ``clear()`` removes only this deployment's keys
      under it.
    - ``staging_buffer_size``: registered memory that staged pages are copied through, split in
      4 slabs so 4 staged calls can run at once (each slab holds at least one page).
    - ``transfer``: how pool pages travel. ``"zero_copy"``: by pointer, one transfer buffer per
      page segment plus one for the header. ``"staged"``: copied with their header into a staging
      slab and moved as one buffer per page.
      ``"auto"`` (default): staged over TCP when the page's segments average under 256 KiB
      (TCP pays a fixed cost per buffer), zero-copy otherwise. Pages outside the registered pool
      (v0 flat tensors) are always staged.
    - ``get_calls``: the client calls a zero-copy read makes. ``"session"``: a get session, ranged gets
      of chunks on 4 lanes, each chunk's pages checked as it lands. ``"plain"``: one
      ``batch_get_into_multi_buffers``, then the checks. ``"auto"`` (default): measures both on this
      backend's own reads (cost per byte read) and takes the cheaper, trying the other every 16th
      read. A client without session calls makes plain calls.
    - ``replica_num``: replicas of each object.
    - ``verify_checksum``: write and check the XXH3-64 of each page (default ``True``). ``False``
      still checks the header (object key digest and length) but neither hashes nor verifies the
      payload: ``verifies_integrity`` is then not declared, and a client with ``True`` reads pages
      written with ``False`` as misses.
    - ``rpc_timeout_ms``: timeout of one master RPC (``MC_RPC_TIMEOUT_MS``); ``None`` = 40 % of the
      resilience deadline (at least 50 ms). An environment that sets ``MC_RPC_TIMEOUT_MS`` itself wins.
    """

    master_server_address: str | None = None
    metadata_server: str | None = None
    local_hostname: str | None = None
    global_segment_size: int | str | None = None
    local_buffer_size: int | str | None = None
    protocol: str | None = None
    device_name: str | None = None
    setup_retries: int = 1
    key_prefix: str = ""
    staging_buffer_size: int | str = 32 << 20
    replica_num: int = 1
    verify_checksum: bool = True
    transfer: str = "auto"
    get_calls: str = "auto"
    rpc_timeout_ms: int | None = None

    def __post_init__(self) -> None:
        for field in fields(self):
            env = ENV_FALLBACKS.get(field.name)
            if env is None or getattr(self, field.name) is not None:
                continue
            value = os.environ.get(env)
            object.__setattr__(self, field.name, value if value is not None else _DEFAULTS.get(field.name))
        self._check_address()
        for name in ("global_segment_size", "local_buffer_size", "staging_buffer_size"):
            object.__setattr__(self, name, parse_size(getattr(self, name), f"extra_config.{name}"))
        if self.protocol not in ("tcp", "rdma"):
            raise ConfigError("extra_config.protocol", f"expected 'tcp' or 'rdma', got {self.protocol!r}")
        meta = str(self.metadata_server)
        if meta != "P2PHANDSHAKE" and not meta.startswith(("http://", "https://", "etcd://", "redis://")):
            raise ConfigError(
                "extra_config.metadata_server", f"expected an http:// URL or 'P2PHANDSHAKE', got {meta!r}"
            )
        if not str(self.local_hostname).strip():
            raise ConfigError("extra_config.local_hostname", "must be a non-empty host name")
        if not 1 <= self.setup_retries <= 100:
            raise ConfigError(
                "extra_config.setup_retries",
                f"must be in 1..100 (0 makes set-up always fail), got {self.setup_retries}",
            )
        if not _PREFIX.fullmatch(self.key_prefix):
            raise ConfigError(
                "extra_config.key_prefix", f"allowed characters are [A-Za-z0-9._:/-], got {self.key_prefix!r}"
            )
        if self.size_of("local_buffer_size") <= 0:
            raise ConfigError("extra_config.local_buffer_size", "must be > 0")
        if self.size_of("staging_buffer_size") <= 0:
            raise ConfigError("extra_config.staging_buffer_size", "must be > 0")
        if not isinstance(self.verify_checksum, bool):
            raise ConfigError("extra_config.verify_checksum", f"expected true or false, got {self.verify_checksum!r}")
        if self.transfer not in TRANSFER_MODES:
            raise ConfigError(
                "extra_config.transfer",
                f"expected one of {', '.join(map(repr, TRANSFER_MODES))}, got {self.transfer!r}",
            )
        if self.get_calls not in GET_CALLS:
            raise ConfigError(
                "extra_config.get_calls",
                f"expected one of {', '.join(map(repr, GET_CALLS))}, got {self.get_calls!r}",
            )
        if not 1 <= self.replica_num <= 64:
            raise ConfigError("extra_config.replica_num", f"must be in 1..64, got {self.replica_num}")
        if self.rpc_timeout_ms is not None and not 1 <= self.rpc_timeout_ms <= 3_600_000:
            raise ConfigError(
                "extra_config.rpc_timeout_ms", f"must be in 1..3600000 or null, got {self.rpc_timeout_ms}"
            )

    def _check_address(self) -> None:
        address = self.master_server_address
        if not address:
            raise ConfigError(
                "extra_config.master_server_address",
                "required: give 'host:port' of mooncake_master (or set MOONCAKE_MASTER)",
            )
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError("extra_config.master_server_address", f"expected 'host:port', got {address!r}")

    def size_of(self, name: str) -> int:
        """The size option ``name`` in bytes (``__post_init__`` has turned every size option into an int)."""
        value = getattr(self, name)
        if not isinstance(value, int):
            raise TypeError(f"{name} is not a size option")
        return value

    @property
    def bind_host(self) -> str:
        """``local_hostname`` without a port."""
        host = str(self.local_hostname)
        return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
