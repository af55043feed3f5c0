"""The sim backend's cost model: a call costs ``op_latency + bytes / bandwidth``."""

from __future__ import annotations

from dataclasses import dataclass

from .options import SimOptions

__all__ = ["GB", "CostModel"]

GB = 1e9


@dataclass(frozen=True)
class CostModel:
    """Modelled seconds per primitive call; reads use the read bandwidth, everything else the write one."""

    write_bytes_per_s: float
    read_bytes_per_s: float
    op_latency_s: float

    @classmethod
    def from_options(cls, options: SimOptions) -> CostModel:
        read = options.sim_read_gbps if options.sim_read_gbps is not None else options.sim_write_gbps
        return cls(options.sim_write_gbps * GB, read * GB, options.sim_op_latency_us * 1e-6)

    def seconds(self, op: str, nbytes: int) -> float:
        """Cost of one call of ``op`` (``get``, ``set``, ``exists``, ...) that moved ``nbytes``."""
        bandwidth = self.read_bytes_per_s if op == "get" else self.write_bytes_per_s
        return self.op_latency_s + nbytes / bandwidth
