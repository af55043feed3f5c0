"""Key identity: SGLang's page-hash chain, namespaces, key validation and storage key spaces.

``page_hashes`` reproduces SGLang's SHA-256 chain bit for bit. A :class:`KeySpace` turns a bare
page hash into the storage key a backend sees: a digest of everything that makes a page's bytes
meaningful, the bare key, and the rank coordinates that shard KV. Two deployments that could
misread each other's bytes never share a storage key.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, is_dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import torch

from .errors import InvalidKeyError

if TYPE_CHECKING:
    from .pools.host import PoolFacts

__all__ = [
    "KEY_FORMAT_VERSION",
    "MAX_KEY_LENGTH",
    "KeySpace",
    "KNOWN_CONFIG_FIELDS",
    "chain_digests",
    "describe_value",
    "pool_keyspace",
    "namespace_root",
    "page_hashes",
    "storage_namespace_seed",
    "validate_key",
    "validate_keys",
]

#: Version of the storage key / page identity format; part of every key space digest.
KEY_FORMAT_VERSION = 1
#: Longest bare key accepted.
MAX_KEY_LENGTH = 256

_UINT32_MAX = 0xFFFFFFFF
_SAFE_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SAFE_BATCH = re.compile(rf"(?:[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_KEY_LENGTH - 1}}}\n)*")
_NAMESPACE_TAG = b"hicache-storage/namespace/v1\x00"
_SGLANG_NAMESPACE_TAG = b"sglang-cache-namespace-v1"


def storage_namespace_seed(extra_key: str | None, cache_salt: str | None) -> str | None:
    """SGLang's chain seed for a request's ``extra_key`` and ``cache_salt`` (hex), or ``None`` for neither.

    SHA-256 of ``b"sglang-cache-namespace-v1"`` followed, for each part, by ``b"\\x00"`` when it is
    ``None`` or ``b"\\x01"`` + its UTF-8 length as 8 bytes little-endian + its UTF-8 bytes; so an
    absent part, an empty part and two parts run together all seed differently.
    """
    if extra_key is None and cache_salt is None:
        return None
    hasher = hashlib.sha256(_SGLANG_NAMESPACE_TAG)
    for name, part in (("extra_key", extra_key), ("cache_salt", cache_salt)):
        if part is None:
            hasher.update(b"\x00")
            continue
        if not isinstance(part, str):
            raise ValueError(f"{name} must be a str or None, got {type(part).__name__}")
        raw = part.encode("utf-8")
        hasher.update(b"\x01" + struct.pack("<Q", len(raw)) + raw)
    return hasher.hexdigest()


def namespace_root(namespace: str) -> str:
    """Hex digest that seeds the page-hash chain of ``namespace``.

    The encoding is framed (tag, 8-byte length, UTF-8 bytes), so no two namespaces, and no
    namespace and token sequence, produce the same seed input.
    """
    if not isinstance(namespace, str) or not namespace:
        raise ValueError(f"namespace must be a non-empty str, got {namespace!r}")
    raw = namespace.encode("utf-8")
    return hashlib.sha256(_NAMESPACE_TAG + struct.pack("<Q", len(raw)) + raw).hexdigest()


def page_hashes(
    token_ids: Sequence[int],
    page_size: int,
    prior_hash: str | None = None,
    *,
    namespace: str | None = None,
    extra_key: str | None = None,
    cache_salt: str | None = None,
) -> list[str]:
    """SGLang's page keys for ``token_ids``: one lowercase hex SHA-256 digest per page.

    ``digest_i = SHA256(digest_{i-1} raw bytes || uint32-LE tokens of page i)``; the first page has
    no prefix unless ``prior_hash`` (the parent's last page hash) or a seed is given. Seeds:
    ``extra_key``/``cache_salt`` give SGLang's request namespace (``get_storage_hash_str`` with
    :func:`storage_namespace_seed`, bit for bit); ``namespace`` gives this SDK's own framed seed
    (:func:`namespace_root`). A ``prior_hash`` already carries its chain's seed, so it cannot be
    combined with one. The last page may be shorter than ``page_size``. Token ids outside
    ``[0, 2**32)`` raise :class:`ValueError`.
    """
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise ValueError(f"page_size must be a positive int, got {page_size!r}")
    salted = extra_key is not None or cache_salt is not None
    if prior_hash is not None and (namespace is not None or salted):
        raise ValueError(
            "pass either prior_hash (continuing a chain, which already carries its seed) "
            "or a seed (namespace, or extra_key/cache_salt) to start a chain, not both"
        )
    if namespace is not None and salted:
        raise ValueError(
            "namespace (this SDK's seed) and extra_key/cache_salt (SGLang's request namespace) are two "
            "different seeds; pass one of them"
        )
    prior: bytes | None = None
    if prior_hash is not None:
        prior = _hex_digest_bytes(prior_hash, "prior_hash")
    elif namespace is not None:
        prior = bytes.fromhex(namespace_root(namespace))
    elif salted:
        seed = storage_namespace_seed(extra_key, cache_salt)
        prior = bytes.fromhex(seed) if seed is not None else None
    tokens = list(token_ids)
    for position, token in enumerate(tokens):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token <= _UINT32_MAX:
            raise ValueError(
                f"token_ids[{position}] = {token!r} is not a uint32 token id (expected an int in [0, {_UINT32_MAX}])"
            )
    packed = struct.pack(f"<{len(tokens)}I", *tokens)
    return [digest.hex() for digest in chain_digests(packed, page_size, prior)]


def chain_digests(packed: bytes, page_size: int, prior: bytes | None = None) -> list[bytes]:
    """The SHA-256 page chain of :func:`page_hashes` over already packed tokens, as raw digests.

    ``packed`` holds uint32-LE token ids (``4 * page_size`` bytes per page; the last page may be
    shorter); ``digest_i = SHA256(digest_{i-1} || page i)``, starting from the raw digest ``prior``
    when given. No validation: callers that pack their own tokens continue a chain with it.
    """
    stride = 4 * page_size
    digests: list[bytes] = []
    for start in range(0, len(packed), stride):
        hasher = hashlib.sha256()
        if prior is not None:
            hasher.update(prior)
        hasher.update(packed[start : start + stride])
        prior = hasher.digest()
        digests.append(prior)
    return digests


def _hex_digest_bytes(value: str, name: str) -> bytes:
    if not isinstance(value, str) or len(value) != 64:
        raise ValueError(f"{name} must be a 64-character hex SHA-256 digest, got {value!r}")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise ValueError(f"{name} must be a 64-character hex SHA-256 digest, got {value!r}") from None


def validate_key(key: object) -> str:
    """Return ``key`` if it is a safe bare key, else raise :class:`InvalidKeyError`.

    Safe keys are 1..256 characters from ``[A-Za-z0-9._-]`` starting with a letter or digit, so
    no key can carry a path separator, traversal, whitespace or a glob into a file path, an S3
    key or a Redis key.
    """
    if not isinstance(key, str):
        raise InvalidKeyError(f"key must be a str, got {type(key).__name__} {key!r}")
    if not key:
        raise InvalidKeyError("key must be a non-empty str")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidKeyError(f"key is {len(key)} characters long; at most {MAX_KEY_LENGTH} are allowed")
    if _SAFE_KEY.fullmatch(key) is None:
        raise InvalidKeyError(
            f"key {key!r} has characters outside [A-Za-z0-9._-] or does not start with a letter "
            "or digit (page hashes are lowercase hex)"
        )
    return key


def validate_keys(keys: object) -> list[str]:
    """Validate a batch of keys (a list or tuple of str); raises before anything is done."""
    if isinstance(keys, (str, bytes)) or not isinstance(keys, (list, tuple)):
        raise InvalidKeyError(f"keys must be a list of str, got {type(keys).__name__}")
    try:  # fast path: one regex over the whole batch, one line per key
        joined = "\n".join(keys) + "\n" if keys else ""
        if joined.count("\n") == len(keys) and _SAFE_BATCH.fullmatch(joined) is not None:
            return list(keys)
    except TypeError:
        pass
    for index, key in enumerate(keys):
        try:
            validate_key(key)
        except InvalidKeyError as exc:
            raise InvalidKeyError(f"keys[{index}]: {exc}") from None
    return list(keys)


@dataclass(frozen=True)
class KeySpace:
    """Maps bare page keys to storage keys for one deployment and rank.

    Storage key: ``<space digest>.<bare key>.<rank suffix>``; the digest covers model name and
    revision, namespace, KV dtype, host layout, page size, bytes per page, MLA/MHA and the format
    version. The rank suffix carries tp rank/size (omitted when every rank holds the same KV),
    pp rank/size and cp rank/size. Every character is in ``[A-Za-z0-9._-]``.

    A head-sharded space (``shards`` = L > 0) names records by the KV heads they hold: its layout is
    ``"head_shards"``, its ``page_bytes`` one shard's, its geometry the global head geometry, and a
    shard's key is ``<digest>.<bare key>.h<j>of<L>.<pp/cp suffix>`` (no tp rank or size).
    """

    model_name: str
    dtype: str
    layout: str
    page_size: int
    page_bytes: int
    is_mla: bool
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    cp_rank: int = 0
    cp_size: int = 1
    namespace: str = ""
    model_revision: str = ""
    format_version: int = KEY_FORMAT_VERSION
    #: The pool the pages belong to; ``"kv"`` is the main KV pool.
    pool: str = "kv"
    #: Sidecar pool geometry (name, value) pairs beyond dtype and page bytes (shapes, state dtypes).
    geometry: tuple[tuple[str, str], ...] = ()
    #: Deployment identity the SDK does not interpret (config fields it does not know), as pairs.
    identity: tuple[tuple[str, str], ...] = ()
    #: Whether tp rank/size enter the key; ``None``: unless the pool is MLA (replicated KV).
    tp_sharded: bool | None = None
    #: Head shards per page (``tp_lcm_size``); 0: pages are whole, one record per rank.
    shards: int = 0

    @cached_property
    def digest(self) -> str:
        """20 hex characters identifying everything but the rank.

        The pool, geometry and identity enter only when set, so KV key spaces keep their digest.
        """
        fields: Iterable[object] = (
            self.format_version,
            self.model_name,
            self.model_revision,
            self.namespace,
            self.dtype,
            self.layout,
            self.page_size,
            self.page_bytes,
            "mla" if self.is_mla else "mha",
        )
        if self.pool != "kv" or self.geometry:
            fields = (*fields, "pool", self.pool, *(item for pair in self.geometry for item in pair))
        if self.identity:
            fields = (*fields, "identity", *(item for pair in self.identity for item in pair))
        if self.shards:
            fields = (*fields, "shards", self.shards)
        hasher = hashlib.sha256(b"hicache-storage/keyspace\x00")
        for value in fields:
            raw = str(value).encode("utf-8")
            hasher.update(struct.pack("<Q", len(raw)) + raw)
        return hasher.hexdigest()[:20]

    @property
    def shards_tp(self) -> bool:
        """Whether the pages differ per tp rank (so tp rank/size are part of the key)."""
        if self.shards:
            return False
        return not self.is_mla if self.tp_sharded is None else self.tp_sharded

    @cached_property
    def rank_suffix(self) -> str:
        """Rank coordinates that shard the pages, e.g. ``tp1of2.pp0of1.cp0of1`` (replicated: no tp part)."""
        parts = [f"tp{self.tp_rank}of{self.tp_size}"] if self.shards_tp else []
        parts += [f"pp{self.pp_rank}of{self.pp_size}", f"cp{self.cp_rank}of{self.cp_size}"]
        return ".".join(parts)

    @cached_property
    def prefix(self) -> str:
        """Leading part shared by every storage key of this space (useful for listing/clearing)."""
        return f"hc{self.format_version}-{self.digest}."

    def storage_key(self, key: str) -> str:
        """Storage key for the bare ``key`` (validated)."""
        return f"{self.prefix}{validate_key(key)}.{self.rank_suffix}"

    def storage_keys(self, keys: Sequence[str]) -> list[str]:
        """Storage keys for a batch of bare keys (validated)."""
        return self.storage_keys_unchecked(validate_keys(keys))

    def storage_keys_unchecked(self, keys: Sequence[str]) -> list[str]:
        """Storage keys for bare keys that already passed :func:`validate_keys`."""
        prefix, suffix = self.prefix, self.rank_suffix
        return [f"{prefix}{key}.{suffix}" for key in keys]

    def shard_keys_unchecked(self, keys: Sequence[str], indices: Iterable[int]) -> list[str]:
        """Storage keys of shards ``indices`` of each already validated bare key (key by key, shard by shard)."""
        prefix, suffix = self.prefix, self.rank_suffix
        tails = [f"h{index}of{self.shards}.{suffix}" for index in indices]
        return [f"{prefix}{key}.{tail}" for key in keys for tail in tails]


def describe_value(value: Any) -> str:
    """A stable text of a dtype, shape or scalar (for key digests and manifests)."""
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, (torch.Size, tuple, list)):
        return "(" + ",".join(describe_value(item) for item in value) + ")"
    return str(value)


#: Config fields the SDK interprets; any other field of an engine's config enters the key digest.
KNOWN_CONFIG_FIELDS: frozenset[str] = frozenset(
    {
        "tp_rank",
        "tp_size",
        "pp_rank",
        "pp_size",
        "attn_cp_rank",
        "attn_cp_size",
        "is_mla_model",
        "enable_storage_metrics",
        "is_page_first_layout",
        "model_name",
        "tp_lcm_size",
        "should_split_heads",
        "dp_rank",
        "extra_config",
        "dcp_size",
        "dcp_rank",
        "logical_page_size",
        "identity_fields",
    }
)

#: Pools whose state is sharded per tp rank even when the model's KV is replicated (MLA).
_TP_SHARDED_POOLS = frozenset({"mamba"})


def _identity_pairs(config: Any) -> tuple[tuple[str, str], ...]:
    """Config fields the SDK does not interpret (e.g. a newer engine's ``model_identity_hash``)."""
    extras: dict[str, Any] = dict(getattr(config, "identity_fields", None) or {})
    if is_dataclass(config):
        for item in fields(config):
            if item.name not in KNOWN_CONFIG_FIELDS:
                extras[item.name] = getattr(config, item.name)
    return tuple(sorted((name, describe_value(value)) for name, value in extras.items() if value is not None))


def pool_keyspace(
    config: Any, facts: PoolFacts, *, pool_name: str = "kv", namespace: str = "", model_revision: str = ""
) -> KeySpace:
    """The :class:`KeySpace` of a pool with ``facts`` registered as ``pool_name`` under ``config``.

    ``config`` is a :class:`~hicache_storage.config.HiCacheStorageConfig` (or SGLang's, same fields).
    """
    is_kv = pool_name == "kv"
    tp_sharded = pool_name in _TP_SHARDED_POOLS or not config.is_mla_model
    return KeySpace(
        model_name=config.model_name or "",
        model_revision=model_revision,
        namespace=namespace,
        dtype=facts.dtype,
        layout=facts.layout,
        page_size=facts.page_size,
        page_bytes=facts.page_bytes,
        is_mla=facts.is_mla,
        tp_rank=config.tp_rank if tp_sharded else 0,
        tp_size=config.tp_size if tp_sharded else 1,
        pp_rank=config.pp_rank,
        pp_size=config.pp_size,
        cp_rank=config.attn_cp_rank,
        cp_size=config.attn_cp_size,
        pool=pool_name,
        geometry=() if is_kv else facts.geometry,
        identity=_identity_pairs(config),
        tp_sharded=None if is_kv else tp_sharded,
    )
