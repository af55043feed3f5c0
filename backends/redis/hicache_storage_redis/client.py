"""Build the redis-py client (standalone or cluster) from :class:`RedisOptions`.

Clients are built with no client-side retries (the SDK's resilience policy retries) and with the
socket and connect timeouts set, so a call made while the server is down returns in bounded time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry

from .options import RedisOptions, parse_node

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "build_client", "client_kwargs", "server_addresses"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6379
#: ``ClusterNode(host, port)``: redis-py leaves its ``__init__`` unannotated, this is the signature used here.
_cluster_node: Callable[[str, int], ClusterNode] = ClusterNode


def client_kwargs(options: RedisOptions, timeout_s: float) -> dict[str, Any]:
    """Keyword arguments shared by the standalone and cluster clients."""
    kwargs: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(NoBackoff(), 0),
        "max_connections": options.max_connections,
    }
    if options.username is not None:
        kwargs["username"] = options.username
    if options.password is not None:
        kwargs["password"] = options.password
    if options.uses_tls:
        kwargs["ssl"] = True
        for name in ("ssl_certfile", "ssl_keyfile", "ssl_ca_certs"):
            value = getattr(options, name)
            if value is not None:
                kwargs[name] = value
    return kwargs


def build_client(options: RedisOptions, timeout_s: float) -> Any:
    """A ``redis.Redis`` or ``redis.cluster.RedisCluster`` (the latter contacts the cluster now)."""
    kwargs = client_kwargs(options, timeout_s)
    if not options.cluster:
        if options.url is not None:
            # A rediss:// URL already selects the TLS connection class, which takes no ``ssl`` argument.
            kwargs.pop("ssl", None)
            return redis.Redis.from_url(options.url, **kwargs)
        return redis.Redis(
            host=options.host or DEFAULT_HOST, port=options.port or DEFAULT_PORT, db=options.db, **kwargs
        )
    if options.url is not None:
        parts = urlsplit(options.url)
        if options.username is None and parts.username:
            kwargs["username"] = unquote(parts.username)
        if options.password is None and parts.password:
            kwargs["password"] = unquote(parts.password)
    nodes = [_cluster_node(host, port) for host, port in server_addresses(options)]
    return RedisCluster(startup_nodes=nodes, require_full_coverage=True, **kwargs)


def server_addresses(options: RedisOptions) -> list[tuple[str, int]]:
    """(host, port) of the server, or of the cluster's startup nodes, that the client connects to."""
    nodes = [parse_node(node, "extra_config.nodes") for node in options.nodes or []] if options.cluster else []
    if options.url is not None:
        parts = urlsplit(options.url)
        nodes.insert(0, (parts.hostname or DEFAULT_HOST, parts.port or DEFAULT_PORT))
    elif options.host is not None or not nodes:
        nodes.insert(0, (options.host or DEFAULT_HOST, options.port or DEFAULT_PORT))
    return nodes
