"""Options of the fsspec backend (``extra_config`` keys), validated at construction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from hicache_storage.plugin import ConfigError, secret_option, secret_option_names
from hicache_storage.plugin.page_format import IntegrityOptions

__all__ = ["SECRET_STORAGE_OPTIONS", "FsspecOptions", "redact_url", "redacted_storage_options"]

#: ``storage_options`` entries that are never shown (any key containing one of these words).
SECRET_STORAGE_OPTIONS = ("secret", "password", "token", "key", "credential")


def redact_url(url: str) -> str:
    """``url`` with any user-info replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    return f"{scheme}://***@{rest.split('@', 1)[1]}"


def redacted_storage_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the values of credential-like entries replaced by ``***``."""
    shown: dict[str, Any] = {}
    for name, value in options.items():
        if any(word in name.lower() for word in SECRET_STORAGE_OPTIONS):
            shown[name] = "***"
        elif isinstance(value, dict):
            shown[name] = redacted_storage_options(value)
        else:
            shown[name] = value
    return shown


@dataclass(frozen=True, repr=False)
class FsspecOptions(IntegrityOptions):
    """Where pages go and how (see docs/backends/fsspec.md).

    ``url``: any fsspec URL (``memory://cache``, ``file:///data/cache``, ``s3://bucket/prefix``...);
    ``storage_options``: keyword arguments for the filesystem (credentials, ``endpoint_url``...);
    ``fanout_chars``: hex digits of a key hash used as a sub-directory (0 = flat);
    ``concurrency``: requests in flight per batch on async filesystems (s3fs, gcsfs, http);
    ``write_mode``: ``auto`` (temp file + rename on local disks, one put elsewhere), ``rename``
    (always temp + move) or ``direct`` (always one put); ``timeout_s``: client timeout injected into
    s3fs when ``storage_options`` sets none (``None`` = the resilience deadline);
    ``check_bucket``: for ``s3://``, check at construction that the credentials may access the bucket;
    ``integrity_secret_env`` / ``integrity_secret_file``: authenticate the page records
    (:class:`~hicache_storage.plugin.page_format.IntegrityOptions`).
    """

    # Secret options (their values are never echoed in an error): the URL may carry user-info and
    # storage_options credentials.
    url: str = secret_option(required=True)
    storage_options: dict[str, Any] = secret_option(default_factory=dict)
    fanout_chars: int = 2
    concurrency: int = 32
    write_mode: str = "auto"
    timeout_s: float | None = None
    check_bucket: bool = True

    def __post_init__(self) -> None:
        if not self.url.strip():
            raise ConfigError("extra_config.url", "must be a non-empty fsspec URL such as memory://cache")
        if any(not isinstance(name, str) for name in self.storage_options):
            raise ConfigError("extra_config.storage_options", "keys must be strings")
        if not 0 <= self.fanout_chars <= 8:
            raise ConfigError("extra_config.fanout_chars", f"must be in 0..8, got {self.fanout_chars}")
        if not 1 <= self.concurrency <= 1024:
            raise ConfigError("extra_config.concurrency", f"must be in 1..1024, got {self.concurrency}")
        if self.write_mode not in ("auto", "rename", "direct"):
            raise ConfigError("extra_config.write_mode", f"must be auto, rename or direct, got {self.write_mode!r}")
        if self.timeout_s is not None and not 0 < self.timeout_s <= 3600:
            raise ConfigError("extra_config.timeout_s", f"must be > 0 and <= 3600 seconds, got {self.timeout_s}")

    @property
    def protocol(self) -> str:
        """The URL's scheme (``file`` for a bare path)."""
        return self.url.split("://", 1)[0] if "://" in self.url else "file"

    def store_directory(self) -> Path | None:
        """The local directory of a ``file://`` URL (or bare path), ``None`` for any other file system."""
        if self.protocol not in ("file", "local"):
            return None
        return Path(self.url.split("://", 1)[1] if "://" in self.url else self.url).expanduser()

    def __repr__(self) -> str:
        """The options with the secret ones redacted: user-info of the URL, credential-like storage options."""
        secret = secret_option_names(type(self))
        shown = []
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name in secret:
                value = _REDACTORS.get(item.name, _hidden)(value)
            shown.append(f"{item.name}={value!r}")
        return f"FsspecOptions({', '.join(shown)})"


def _hidden(value: Any) -> Any:
    return None if value is None else "***"


#: How each secret option is shown in a repr (others: ``***``).
_REDACTORS: dict[str, Callable[[Any], Any]] = {"url": redact_url, "storage_options": redacted_storage_options}
