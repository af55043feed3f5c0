"""Integrations of hicache-storage backends with serving engines (``hicache_storage.integrations.sglang``)."""
