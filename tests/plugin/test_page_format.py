import dataclasses
import struct

import pytest

from hicache_storage import ConfigError
from hicache_storage.plugin.page_format import (
    FLAG_AUTHENTICATED,
    HEADER_SIZE,
    MAGIC,
    RECORD_VERSION,
    IntegrityOptions,
    PageRecordError,
    RecordCodec,
    checksum,
    decode_into,
    encode_header,
    encode_record,
    key_digest,
    parse_header,
    record_codec,
)


def test_round_trip_scatters_into_segments():
    segments = [b"abc", b"defgh"]
    record = encode_record(segments)
    assert len(record) == HEADER_SIZE + 8
    out = [memoryview(bytearray(3)), memoryview(bytearray(5))]
    assert decode_into(record, out)
    assert bytes(out[0]) + bytes(out[1]) == b"abcdefgh"


def test_header_equals_record_prefix():
    assert encode_record([b"xy"]).startswith(encode_header([b"x", b"y"]))


@pytest.mark.parametrize("damage", ["flip", "truncate", "extend", "magic"])
def test_damaged_records_are_rejected(damage):
    record = bytearray(encode_record([b"payload-bytes"]))
    if damage == "flip":
        record[-1] ^= 1
    elif damage == "truncate":
        del record[-2:]
    elif damage == "extend":
        record += b"x"
    else:
        record[0:4] = b"XXXX"
    assert not decode_into(bytes(record), [memoryview(bytearray(13))])


def test_wrong_expected_length_is_rejected():
    record = encode_record([b"abcd"])
    assert not decode_into(record, [memoryview(bytearray(5))])
    with pytest.raises(PageRecordError, match="expected 5"):
        parse_header(record, 5)
    with pytest.raises(PageRecordError, match="shorter"):
        parse_header(b"abc")


# ------------------------------------------------------------------ key binding (format version 2)
def test_header_layout():
    header = encode_header([b"abcd"], "k1")
    assert len(header) == HEADER_SIZE == 56
    assert header[:4] == MAGIC and header[4] == RECORD_VERSION == 2
    assert header[24:40] == key_digest("k1") and header[40:] == bytes(16)  # no tag without a secret


def test_a_record_reads_only_under_its_own_key():
    record = encode_record([b"page-bytes"], "hc1-aaaa.key-a.tp0of1")
    out = [memoryview(bytearray(10))]
    assert decode_into(record, out, "hc1-aaaa.key-a.tp0of1")
    assert not decode_into(record, out, "hc1-aaaa.key-b.tp0of1")
    assert not decode_into(record, out)  # no key is a key too
    with pytest.raises(PageRecordError, match="another key"):
        RecordCodec().check_header(record, "hc1-aaaa.key-b.tp0of1", 10)


def test_version_1_records_are_declined():
    payload = b"old-page"
    old = struct.pack("<4sBBHQQ", MAGIC, 1, 0, 0, len(payload), checksum([payload])) + payload
    assert not decode_into(old, [memoryview(bytearray(len(payload)))])
    padded = old[:24] + bytes(32) + payload  # even at the new size, version 1 is refused
    with pytest.raises(PageRecordError, match="version 1"):
        parse_header(padded)


SECRET = b"s3cr3t-" + b"k" * 20


def test_authenticated_records_round_trip_and_resist_forgery():
    codec = RecordCodec(SECRET)
    key = "hc1-bbbb.page.tp0of1"
    record = codec.record(key, [b"abc", b"def"])
    assert record[5] & FLAG_AUTHENTICATED and record[40:56] != bytes(16)
    out = [memoryview(bytearray(6))]
    assert codec.decode_into(record, key, out) and bytes(out[0]) == b"abcdef"
    # without the secret a party can build a perfectly valid unauthenticated record: refused
    assert not codec.decode_into(encode_record([b"evil!!"], key), key, out)
    # ... or tamper with an authenticated one and fix the checksum: refused (the tag covers the payload)
    forged = bytearray(record)
    forged[HEADER_SIZE:] = b"evil!!"
    forged[16:24] = struct.pack("<Q", checksum([b"evil!!"]))
    assert not codec.decode_into(bytes(forged), key, out)
    # a tag made with another secret is refused
    assert not codec.decode_into(RecordCodec(b"x" * 32).record(key, [b"abcdef"]), key, out)
    # the tag binds the key too: a copy under another key is refused
    assert not codec.decode_into(record, "hc1-bbbb.other.tp0of1", out)
    # a reader without the secret still checks everything it can
    assert RecordCodec().decode_into(record, key, out)
    assert not RecordCodec().decode_into(bytes(forged[:16]) + record[16:24] + bytes(forged[24:]), key, out)


def test_codec_never_shows_its_secret():
    codec = RecordCodec(SECRET)
    assert SECRET.decode() not in repr(codec) and repr(codec) == "RecordCodec(authenticated=True)"
    with pytest.raises(ValueError, match="at least 16 bytes"):
        RecordCodec(b"short")


@dataclasses.dataclass(frozen=True)
class Opts(IntegrityOptions):
    path: str = "/x"


def test_secret_from_environment_or_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HC_TEST_SECRET", SECRET.decode())
    assert record_codec(Opts(integrity_secret_env="HC_TEST_SECRET")).authenticated
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(SECRET + b"\n")
    from_file = record_codec(Opts(integrity_secret_file=str(secret_file)))
    from_env = record_codec(Opts(integrity_secret_env="HC_TEST_SECRET"))
    record = from_file.record("k", [b"x"])
    assert from_env.decode_into(record, "k", [memoryview(bytearray(1))])  # the newline is not part of it
    assert not record_codec(Opts()).authenticated
    assert not record_codec(object()).authenticated


@pytest.mark.parametrize(
    ("options", "option", "message"),
    [
        ({"integrity_secret_env": "HC_TEST_UNSET"}, "integrity_secret_env", "not set"),
        ({"integrity_secret_env": "HC_TEST_SHORT"}, "integrity_secret_env", "at least 16 bytes"),
        ({"integrity_secret_env": "A=B"}, "integrity_secret_env", "not an environment variable"),
        ({"integrity_secret_file": "/nonexistent/secret"}, "integrity_secret_file", "cannot read"),
        ({"integrity_secret_env": "HC_TEST_SECRET", "integrity_secret_file": "/x"}, "integrity_secret_env", "not both"),
    ],
)
def test_bad_secret_options_are_config_errors(monkeypatch, options, option, message):
    monkeypatch.delenv("HC_TEST_UNSET", raising=False)
    monkeypatch.setenv("HC_TEST_SHORT", "tiny")
    monkeypatch.setenv("HC_TEST_SECRET", SECRET.decode())
    with pytest.raises(ConfigError, match=message) as info:
        record_codec(Opts(**options))
    assert info.value.option == f"extra_config.{option}"
    assert SECRET.decode() not in str(info.value) and "tiny" not in str(info.value)


@pytest.mark.parametrize(("offset", "what"), [(5, "flags"), (6, "reserved"), (50, "tag")])
def test_stray_header_bits_are_declined(offset, what):
    record = bytearray(encode_record([b"abcd"], "k"))
    record[offset] ^= 0x02
    assert not decode_into(bytes(record), [memoryview(bytearray(4))], "k"), what
