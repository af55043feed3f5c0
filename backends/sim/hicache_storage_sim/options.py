"""Options of the sim backend (``extra_config`` keys)."""

from __future__ import annotations

from dataclasses import dataclass

from hicache_storage import ConfigError
from hicache_storage.plugin.page_format import IntegrityOptions

__all__ = ["SimOptions"]


@dataclass(frozen=True)
class SimOptions(IntegrityOptions):
    """Cost model (SGLang's knobs), storage mode, capacity, seeded faults and store sharing.

    - ``sim_write_gbps`` / ``sim_read_gbps``: modelled bandwidth in GB/s (1 GB = 10**9 bytes);
      ``sim_read_gbps=None`` means the write bandwidth.
    - ``sim_op_latency_us``: fixed cost of every primitive call, in microseconds.
    - ``sleep``: really sleep for the modelled time (default: only account it).
    - ``keys_only``: keep keys but no bytes; reads serve zeros (no integrity guarantee).
    - ``capacity_bytes``: payload bytes the store may hold; least recently used pages are evicted.
    - ``fail_get_rate`` / ``fail_set_rate`` / ``fail_exists_rate``: probability (0..1) that a call
      raises :class:`~hicache_storage.BackendFault`, drawn from a generator seeded by ``fault_seed``.
    - ``store``: name of an in-process store shared by every instance using the same name
      (``""`` = a private store that lives as long as the instance).
    - ``integrity_secret_env`` / ``integrity_secret_file``: authenticate records with a secret
      (see :class:`~hicache_storage.plugin.page_format.IntegrityOptions`).
    """

    sim_write_gbps: float = 5.0
    sim_read_gbps: float | None = None
    sim_op_latency_us: float = 100.0
    sleep: bool = False
    keys_only: bool = False
    capacity_bytes: int | None = None
    fail_get_rate: float = 0.0
    fail_set_rate: float = 0.0
    fail_exists_rate: float = 0.0
    fault_seed: int = 0
    store: str = ""

    def __post_init__(self) -> None:
        if not self.sim_write_gbps > 0:
            raise ConfigError("extra_config.sim_write_gbps", f"must be > 0 GB/s, got {self.sim_write_gbps}")
        if self.sim_read_gbps is not None and not self.sim_read_gbps > 0:
            raise ConfigError("extra_config.sim_read_gbps", f"must be > 0 GB/s or null, got {self.sim_read_gbps}")
        if not self.sim_op_latency_us >= 0:
            raise ConfigError("extra_config.sim_op_latency_us", f"must be >= 0, got {self.sim_op_latency_us}")
        if self.capacity_bytes is not None and self.capacity_bytes <= 0:
            raise ConfigError(
                "extra_config.capacity_bytes", f"must be a positive number of bytes, got {self.capacity_bytes}"
            )
        for name in ("fail_get_rate", "fail_set_rate", "fail_exists_rate"):
            rate = getattr(self, name)
            if not 0.0 <= rate <= 1.0:
                raise ConfigError(f"extra_config.{name}", f"must be a probability in [0, 1], got {rate}")
