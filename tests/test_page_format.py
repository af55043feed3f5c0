import pytest

from hicache_storage.page_format import (
    HEADER_SIZE,
    PageRecordError,
    decode_into,
    encode_header,
    encode_record,
    parse_header,
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
