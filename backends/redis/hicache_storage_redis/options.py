"""Options of the redis backend (``extra_config`` keys), validated at construction."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from urllib.parse import urlsplit

from hicache_storage.plugin import ConfigError, secret_option, secret_option_names
from hicache_storage.plugin.page_format import IntegrityOptions

__all__ = ["HASH_AHEAD_MIN_CPUS", "RedisOptions", "parse_node", "redact_url"]

#: ``hash_ahead: null`` uses the helper thread only with this many usable CPUs: with fewer, the
#: helper takes the core a local server or the sender needs, and hashing each page just before
#: sending it (which also leaves the page in cache for the socket copy) measured faster.
HASH_AHEAD_MIN_CPUS = 4
_PREFIX = re.compile(r"[!-~]+")  # printable ASCII, no spaces
#: Longest ``ttl_s`` (ten years): Redis takes the expiry in milliseconds as a 64-bit int.
MAX_TTL_S = 10 * 365 * 86400.0
#: Longest ``socket_timeout_s``.
MAX_SOCKET_TIMEOUT_S = 3600.0


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def redact_url(url: str) -> str:
    """``url`` with any user-info (user name, password) replaced by ``***``."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return parts._replace(netloc=f"***@{host}").geturl()


def parse_node(text: str, option: str) -> tuple[str, int]:
    """``"host:port"`` → (host, port); :class:`ConfigError` naming ``option`` when malformed."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(option, f"expected 'host:port', got {text!r}")
    return host.strip("[]"), int(port)


@dataclass(frozen=True, repr=False)
class RedisOptions(IntegrityOptions):
    """Where the server is, how to authenticate, and how pages are stored (see docs/backends/redis.md).

    Location: ``url`` (``redis://`` or ``rediss://``, may carry user, password and db) or
    ``host``/``port``/``db``; ``cluster`` uses redis-py's cluster client with startup nodes from
    ``url``/``host`` and ``nodes`` (``["host:port", ...]``). Security: ``username``, ``password``,
    ``ssl`` and the ``ssl_*`` files. Storage: ``key_prefix`` (prepended to every key; ``clear``
    removes only keys under it), ``ttl_s`` (expiry of written pages; ``None`` = none),
    ``pipeline_pages`` (pages per pipeline window), ``max_connections`` (connection pool size),
    ``socket_timeout_s`` (I/O and connect timeout; ``None`` = the resilience deadline),
    ``hash_ahead`` (checksums of later pages on a helper thread while earlier ones are sent;
    ``None`` = only when the process may run on at least :data:`HASH_AHEAD_MIN_CPUS` CPUs).
    Integrity: ``integrity_secret_env`` / ``integrity_secret_file`` authenticate the page records
    (:class:`~hicache_storage.plugin.page_format.IntegrityOptions`).
    """

    url: str | None = secret_option()
    host: str | None = None
    port: int | None = None
    db: int = 0
    username: str | None = None
    password: str | None = secret_option()
    ssl: bool = False
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_ca_certs: str | None = None
    cluster: bool = False
    nodes: list[str] | None = None
    key_prefix: str = "hicache:"
    ttl_s: float | None = None
    pipeline_pages: int = 64
    max_connections: int = 32
    socket_timeout_s: float | None = None
    hash_ahead: bool | None = None

    def __post_init__(self) -> None:
        if self.url is not None:
            self._check_url(self.url)
            if self.host is not None or self.port is not None:
                raise ConfigError("extra_config.host", "give either url or host/port, not both")
        if self.host is not None and not self.host.strip():
            raise ConfigError("extra_config.host", "must be a non-empty host name")
        if self.port is not None and not 0 < self.port < 65536:
            raise ConfigError("extra_config.port", f"must be in 1..65535, got {self.port}")
        if self.db < 0:
            raise ConfigError("extra_config.db", f"must be >= 0, got {self.db}")
        if self.cluster and self.db != 0:
            raise ConfigError("extra_config.db", "Redis Cluster has only db 0")
        if self.nodes is not None:
            if not self.cluster:
                raise ConfigError("extra_config.nodes", "only valid with cluster: true")
            for node in self.nodes:
                if not isinstance(node, str):
                    raise ConfigError("extra_config.nodes", f"expected 'host:port' strings, got {node!r}")
                parse_node(node, "extra_config.nodes")
        for name in ("ssl_certfile", "ssl_keyfile", "ssl_ca_certs"):
            path = getattr(self, name)
            if path is not None and not os.path.isfile(path):
                raise ConfigError(f"extra_config.{name}", f"no such file: {path!r}")
        if not self.key_prefix or not _PREFIX.fullmatch(self.key_prefix):
            raise ConfigError("extra_config.key_prefix", "must be non-empty printable ASCII without spaces")
        if "{" in self.key_prefix or "}" in self.key_prefix:
            raise ConfigError("extra_config.key_prefix", "must not contain '{' or '}' (Redis Cluster hash tags)")
        if self.ttl_s is not None and not 0 < self.ttl_s <= MAX_TTL_S:
            raise ConfigError(
                "extra_config.ttl_s",
                f"must be > 0 and <= {MAX_TTL_S:.0f} seconds (or null for no expiry), got {self.ttl_s}",
            )
        if not 1 <= self.pipeline_pages <= 1024:
            raise ConfigError("extra_config.pipeline_pages", f"must be in 1..1024, got {self.pipeline_pages}")
        if not 1 <= self.max_connections <= 65536:
            raise ConfigError("extra_config.max_connections", f"must be in 1..65536, got {self.max_connections}")
        if self.socket_timeout_s is not None and not 0 < self.socket_timeout_s <= MAX_SOCKET_TIMEOUT_S:
            raise ConfigError(
                "extra_config.socket_timeout_s",
                f"must be > 0 and <= {MAX_SOCKET_TIMEOUT_S:.0f} seconds, got {self.socket_timeout_s}",
            )

    @staticmethod
    def _check_url(url: str) -> None:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as error:
            raise ConfigError("extra_config.url", f"malformed URL ({error})") from None
        if parts.scheme not in ("redis", "rediss"):
            raise ConfigError("extra_config.url", f"scheme must be redis:// or rediss://, got {parts.scheme!r}://")
        if not parts.hostname:
            raise ConfigError("extra_config.url", f"no host in {redact_url(url)!r}")
        if port is not None and not 0 < port < 65536:
            raise ConfigError("extra_config.url", "port out of range")

    @property
    def hashes_ahead(self) -> bool:
        """Whether writes hash later pages on a helper thread (``hash_ahead``, or the CPU count)."""
        if self.hash_ahead is not None:
            return self.hash_ahead
        return usable_cpus() >= HASH_AHEAD_MIN_CPUS

    @property
    def ttl_ms(self) -> int | None:
        """``ttl_s`` as Redis ``PX`` milliseconds (at least 1), ``None`` for no expiry."""
        return None if self.ttl_s is None else max(1, round(self.ttl_s * 1000))

    @property
    def uses_tls(self) -> bool:
        """Whether connections use TLS (``rediss://`` or ``ssl: true``)."""
        return self.ssl or (self.url is not None and self.url.startswith("rediss://"))

    def __repr__(self) -> str:
        """The options with the secret ones (``url``, ``password``) redacted: a URL keeps all but its user-info."""
        secret = secret_option_names(type(self))
        shown = []
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name in secret and value is not None:
                value = redact_url(value) if field.name == "url" else "***"
            shown.append(f"{field.name}={value!r}")
        return f"RedisOptions({', '.join(shown)})"
