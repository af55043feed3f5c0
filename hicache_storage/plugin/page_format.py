"""The stored page record shared by byte-oriented backends: a 56-byte header, then the payload.

Header, version 2 (little-endian):

=======  ====  =========================================================================
offset   size  field
=======  ====  =========================================================================
0        4     magic ``b"HCKV"``
4        1     format version (2)
5        1     flags: bit 0 ``FLAG_AUTHENTICATED`` (the tag is a keyed hash)
6        2     reserved (0)
8        8     payload length (u64)
16       8     XXH3-64 of the payload (u64)
24       16    key digest: BLAKE2b-128 of the storage key the record was written under
40       16    tag: HMAC-SHA256 (first 16 bytes) over bytes 0..39, the storage key and the
               payload (zeros when the writer had no secret)
=======  ====  =========================================================================

A record is bound to its key: read under any other key it is a miss (the key digest differs),
so a record copied, renamed or linked to another key's place is never served as that key's page.
With a secret (:class:`RecordCodec` built from ``integrity_secret_env`` / ``integrity_secret_file``),
records are also authenticated: a reader holding the secret accepts only records whose tag it can
recompute, so a party without the secret cannot plant a page that reads as a hit. A reader with
no secret still checks magic, version, length, key digest and checksum of authenticated records.

Records of format version 1 (24-byte header, no key digest) are declined: they read as misses,
counted as ``integrity_failures``, and heal when the page is written again. A key space already
separates incompatible deployments, so nothing else is needed to move between versions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import xxhash

from ..errors import ConfigError

__all__ = [
    "FLAG_AUTHENTICATED",
    "HEADER_SIZE",
    "MAGIC",
    "MIN_SECRET_BYTES",
    "RECORD_VERSION",
    "IntegrityOptions",
    "PageRecordError",
    "RecordCodec",
    "RecordHeader",
    "checksum",
    "decode_into",
    "encode_header",
    "encode_record",
    "key_digest",
    "load_secret",
    "parse_header",
    "record_codec",
]

MAGIC = b"HCKV"
RECORD_VERSION = 2
FLAG_AUTHENTICATED = 0x01
#: Shortest secret accepted (bytes, after stripping a trailing newline).
MIN_SECRET_BYTES = 16
_HEADER = struct.Struct("<4sBBHQQ16s16s")
HEADER_SIZE = _HEADER.size  # 56
_SIGNED = 40  # bytes of the header covered by the tag (everything before it)
_DIGEST_BYTES = 16
_KEY_PERSON = b"hckv2-key"
_TAG_PERSON = b"hckv2-tag"
_NO_TAG = bytes(_DIGEST_BYTES)

Buffer = bytes | bytearray | memoryview


class PageRecordError(ValueError):
    """A stored record is malformed (bad magic, version, length, key or checksum)."""


class RecordHeader(NamedTuple):
    """The fields of a parsed header; ``signed`` is the part the tag covers."""

    length: int
    checksum: int
    flags: int
    key_digest: bytes
    tag: bytes
    signed: bytes


def checksum(segments: Sequence[Buffer]) -> int:
    """XXH3-64 of the concatenation of ``segments``."""
    hasher = xxhash.xxh3_64()
    for segment in segments:
        hasher.update(segment)
    return hasher.intdigest()


def _key_bytes(key: str | bytes) -> bytes:
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


def key_digest(key: str | bytes) -> bytes:
    """BLAKE2b-128 of a storage key (the record field that binds a record to its key)."""
    return hashlib.blake2b(_key_bytes(key), digest_size=_DIGEST_BYTES, person=_KEY_PERSON).digest()


class RecordCodec:
    """Builds and checks the records of one backend instance: bound to keys, optionally authenticated.

    ``RecordCodec()`` binds records to keys only; ``RecordCodec(secret)`` also tags every record
    with an HMAC-SHA256 (SHA-256 runs on the CPU's SHA instructions where it has them: about twice
    the speed of keyed BLAKE2b here) and accepts only records carrying a valid tag. The secret never
    appears in ``repr`` or in any error message.
    """

    __slots__ = ("_mac_key",)

    def __init__(self, secret: bytes | None = None) -> None:
        if secret is not None and len(secret) < MIN_SECRET_BYTES:
            raise ValueError(f"an integrity secret needs at least {MIN_SECRET_BYTES} bytes")
        self._mac_key = bytes(secret) if secret is not None else None

    @property
    def authenticated(self) -> bool:
        """Whether records are tagged with (and must carry) a keyed hash."""
        return self._mac_key is not None

    def __repr__(self) -> str:
        return f"RecordCodec(authenticated={self.authenticated})"

    # ------------------------------------------------------------ writing
    def _tag(self, signed: Buffer, key: bytes, segments: Sequence[Buffer]) -> bytes:
        assert self._mac_key is not None
        mac = hmac.new(self._mac_key, _TAG_PERSON, "sha256")
        mac.update(signed)
        mac.update(struct.pack("<I", len(key)))
        mac.update(key)
        for segment in segments:
            mac.update(segment)
        return mac.digest()[:_DIGEST_BYTES]

    def header(self, key: str | bytes, segments: Sequence[Buffer]) -> bytes:
        """Header of the record of ``segments`` stored under ``key`` (checksummed without joining them)."""
        raw_key = _key_bytes(key)
        length = sum(memoryview(s).nbytes for s in segments)
        flags = FLAG_AUTHENTICATED if self._mac_key is not None else 0
        head = _HEADER.pack(MAGIC, RECORD_VERSION, flags, 0, length, checksum(segments), key_digest(raw_key), _NO_TAG)
        if self._mac_key is None:
            return head
        return head[:_SIGNED] + self._tag(head[:_SIGNED], raw_key, segments)

    def record(self, key: str | bytes, segments: Sequence[Buffer]) -> bytes:
        """Header and payload as one ``bytes`` (one join; for clients that need a single blob)."""
        return b"".join([self.header(key, segments), *segments])

    # ------------------------------------------------------------ reading
    def check_header(self, header: Buffer, key: str | bytes, expected_length: int | None = None) -> RecordHeader:
        """The parsed header of a record read under ``key``; :class:`PageRecordError` if it cannot be this
        key's page (bad magic, version or length, another key, or no tag where this codec needs one)."""
        parsed = parse_record_header(header, expected_length)
        if not hmac.compare_digest(parsed.key_digest, key_digest(key)):
            raise PageRecordError("record was written under another key")
        if self._mac_key is not None and not parsed.flags & FLAG_AUTHENTICATED:
            raise PageRecordError("record carries no authentication tag")
        return parsed

    def verify(self, parsed: RecordHeader, key: str | bytes, segments: Sequence[Buffer]) -> bool:
        """Whether the payload in ``segments`` matches the header's checksum (and its tag, with a secret)."""
        if checksum(segments) != parsed.checksum:
            return False
        return self.tag_ok(parsed, key, segments)

    def tag_ok(self, parsed: RecordHeader, key: str | bytes, segments: Sequence[Buffer]) -> bool:
        """Whether the tag is valid for this payload and key (always ``True`` without a secret)."""
        if self._mac_key is None:
            return True
        return hmac.compare_digest(parsed.tag, self._tag(parsed.signed, _key_bytes(key), segments))

    def decode_into(self, record: Buffer, key: str | bytes, segments: Sequence[memoryview]) -> bool:
        """Check ``record`` read under ``key`` and scatter its payload into ``segments``; ``False`` if invalid.

        On ``False`` the segments may hold partial data, which callers treat as a miss.
        """
        view = memoryview(record).cast("B")
        expected = sum(s.nbytes for s in segments)
        if view.nbytes != HEADER_SIZE + expected:
            return False
        try:
            parsed = self.check_header(view, key, expected)
        except PageRecordError:
            return False
        offset = HEADER_SIZE
        for segment in segments:
            size = segment.nbytes
            segment.cast("B")[:] = view[offset : offset + size]
            offset += size
        return self.verify(parsed, key, segments)


_PLAIN = RecordCodec()


def parse_record_header(header: Buffer, expected_length: int | None = None) -> RecordHeader:
    """Every field of a header, without the key check; :class:`PageRecordError` if malformed."""
    view = memoryview(header)
    if view.nbytes < HEADER_SIZE:
        raise PageRecordError(f"record is {view.nbytes} bytes, shorter than its {HEADER_SIZE}-byte header")
    head = bytes(view[:HEADER_SIZE])
    magic, version, flags, _reserved, length, digest, stored_key, tag = _HEADER.unpack(head)
    if magic != MAGIC:
        raise PageRecordError(f"bad magic {bytes(magic)!r}")
    if version != RECORD_VERSION:
        raise PageRecordError(f"record version {version}, expected {RECORD_VERSION}")
    if flags & ~FLAG_AUTHENTICATED or _reserved:
        raise PageRecordError(f"unknown flags {flags:#x} or reserved bits {_reserved:#x}")
    if not flags & FLAG_AUTHENTICATED and tag != _NO_TAG:
        raise PageRecordError("a tag in a record not flagged as authenticated")
    if expected_length is not None and length != expected_length:
        raise PageRecordError(f"payload length {length}, expected {expected_length}")
    return RecordHeader(int(length), int(digest), int(flags), stored_key, tag, head[:_SIGNED])


def parse_header(header: Buffer, expected_length: int | None = None) -> tuple[int, int]:
    """(payload length, checksum) from a header, without the key check; raises :class:`PageRecordError`."""
    parsed = parse_record_header(header, expected_length)
    return parsed.length, parsed.checksum


def encode_header(segments: Sequence[Buffer], key: str | bytes = b"") -> bytes:
    """Unauthenticated header of ``segments`` bound to ``key`` (see :meth:`RecordCodec.header`)."""
    return _PLAIN.header(key, segments)


def encode_record(segments: Sequence[Buffer], key: str | bytes = b"") -> bytes:
    """Unauthenticated record of ``segments`` bound to ``key`` (see :meth:`RecordCodec.record`)."""
    return _PLAIN.record(key, segments)


def decode_into(record: Buffer, segments: Sequence[memoryview], key: str | bytes = b"") -> bool:
    """Check a record read under ``key`` and scatter its payload (see :meth:`RecordCodec.decode_into`).

    A record written under a key must be read under the same key; the default (no key) pairs
    with :func:`encode_record` called without one.
    """
    return _PLAIN.decode_into(record, key, segments)


# ------------------------------------------------------------------ options
@dataclass(frozen=True, kw_only=True)
class IntegrityOptions:
    """Options of every byte backend that authenticate its records (a base of their ``Options``).

    - ``integrity_secret_env``: name of an environment variable holding the secret;
    - ``integrity_secret_file``: path of a file holding it (a trailing newline is ignored).

    At most one may be given; the secret needs at least :data:`MIN_SECRET_BYTES` bytes. The
    options name where the secret is, never the secret itself, so they are safe to show.
    """

    integrity_secret_env: str | None = None
    integrity_secret_file: str | None = None


def load_secret(env: str | None, path: str | None) -> bytes | None:
    """The secret named by ``integrity_secret_env`` or ``integrity_secret_file`` (``None`` when neither).

    Raises :class:`ConfigError` naming the option (never showing the secret) when both are given,
    the variable is unset or empty, the file cannot be read, or the secret is too short.
    """
    if env is not None and path is not None:
        raise ConfigError("extra_config.integrity_secret_env", "give integrity_secret_env or _file, not both")
    if env is not None:
        option = "extra_config.integrity_secret_env"
        if not env or "=" in env or "\0" in env:
            raise ConfigError(option, f"{env!r} is not an environment variable name")
        value = os.environ.get(env)
        if not value:
            raise ConfigError(option, f"environment variable {env} is not set or empty")
        secret = value.encode("utf-8")
    elif path is not None:
        option = "extra_config.integrity_secret_file"
        try:
            with open(path, "rb") as handle:
                secret = handle.read(1 << 16)
        except OSError as error:
            raise ConfigError(option, f"cannot read {path!r}: {error.strerror or type(error).__name__}") from None
        secret = secret.rstrip(b"\r\n")
    else:
        return None
    if len(secret) < MIN_SECRET_BYTES:
        raise ConfigError(option, f"the secret must be at least {MIN_SECRET_BYTES} bytes, got {len(secret)}")
    return secret


def record_codec(options: Any) -> RecordCodec:
    """The :class:`RecordCodec` of a backend whose ``Options`` derive from :class:`IntegrityOptions`."""
    if not dataclasses.is_dataclass(options) or not isinstance(options, IntegrityOptions):
        return RecordCodec()
    return RecordCodec(load_secret(options.integrity_secret_env, options.integrity_secret_file))
