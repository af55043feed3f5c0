"""Options of the s3 backend (``extra_config`` keys), validated at construction."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

from hicache_storage.plugin import ConfigError, secret_option, secret_option_names
from hicache_storage.plugin.page_format import IntegrityOptions

__all__ = ["S3Options"]

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_IPV4 = re.compile(r"\d+\.\d+\.\d+\.\d+")
_PREFIX = re.compile(r"[A-Za-z0-9!_.*'()/-]*")


@dataclass(frozen=True, repr=False)
class S3Options(IntegrityOptions):
    """Bucket, location and client settings (see docs/backends/s3.md).

    ``bucket`` (required) and ``prefix`` (folder of this cache inside the bucket) locate pages at
    ``<prefix>/<fan-out>/<storage key>``, the fan-out being ``fanout_chars`` hex digits of a hash of
    the key (spreads load over S3 partitions). ``endpoint_url``/``region``/``addressing_style``
    choose the service; credentials come from boto3's chain (env vars, ``profile``, instance role)
    unless ``aws_access_key_id``/``aws_secret_access_key``/``aws_session_token`` are given.
    ``max_workers``: concurrent requests per batch; ``timeout_s``: connect/read timeout (``None`` =
    the resilience deadline); ``check_bucket``: verify at construction that the bucket exists;
    ``integrity_secret_env`` / ``integrity_secret_file``: authenticate the page records
    (:class:`~hicache_storage.plugin.page_format.IntegrityOptions`).
    """

    bucket: str
    prefix: str = "hicache"
    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    aws_access_key_id: str | None = secret_option()
    aws_secret_access_key: str | None = secret_option()
    aws_session_token: str | None = secret_option()
    addressing_style: str | None = None
    max_workers: int = 16
    fanout_chars: int = 2
    timeout_s: float | None = None
    check_bucket: bool = True

    def __post_init__(self) -> None:
        if not _BUCKET.fullmatch(self.bucket) or ".." in self.bucket or _IPV4.fullmatch(self.bucket):
            raise ConfigError(
                "extra_config.bucket",
                f"{self.bucket!r} is not a valid S3 bucket name (3-63 lowercase letters, digits, '.' or '-', "
                "starting and ending with a letter or digit)",
            )
        if not _PREFIX.fullmatch(self.prefix) or "//" in self.prefix:
            raise ConfigError("extra_config.prefix", f"{self.prefix!r}: use letters, digits and !_.*'()/- only")
        if self.endpoint_url is not None and not self.endpoint_url.startswith(("http://", "https://")):
            raise ConfigError(
                "extra_config.endpoint_url", f"must start with http:// or https://, got {self.endpoint_url!r}"
            )
        if (self.aws_access_key_id is None) != (self.aws_secret_access_key is None):
            raise ConfigError(
                "extra_config.aws_secret_access_key", "give aws_access_key_id and aws_secret_access_key together"
            )
        if self.addressing_style not in (None, "auto", "path", "virtual"):
            raise ConfigError(
                "extra_config.addressing_style", f"must be auto, path or virtual, got {self.addressing_style!r}"
            )
        if not 1 <= self.max_workers <= 512:
            raise ConfigError("extra_config.max_workers", f"must be in 1..512, got {self.max_workers}")
        if not 0 <= self.fanout_chars <= 8:
            raise ConfigError("extra_config.fanout_chars", f"must be in 0..8, got {self.fanout_chars}")
        if self.timeout_s is not None and not 0 < self.timeout_s <= 3600:
            raise ConfigError("extra_config.timeout_s", f"must be > 0 and <= 3600 seconds, got {self.timeout_s}")

    @property
    def root(self) -> str:
        """The prefix without leading/trailing slashes ("" for the bucket's top level)."""
        return self.prefix.strip("/")

    def __repr__(self) -> str:
        """The options with the credentials (the :func:`~hicache_storage.plugin.secret_option` fields) as ``***``."""
        secret = secret_option_names(type(self))
        shown = []
        for field in fields(self):
            value = getattr(self, field.name)
            shown.append(f"{field.name}={'***' if field.name in secret and value is not None else repr(value)}")
        return f"S3Options({', '.join(shown)})"
