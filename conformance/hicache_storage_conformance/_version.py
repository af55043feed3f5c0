"""Version of the conformance suite (reported in every run's header)."""

SUITE_VERSION = "0.1.0"
