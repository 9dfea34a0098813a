"""One rule for JSON, whatever brings it: a line of a JSON-lines file (live JsonLinesSpout and
spark-run's jsonl input) and a Kafka record's value (JsonTranslator, which the live
KafkaSpout and a Kafka backfill both run) are data or malformed alike, with the same values."""
from __future__ import annotations

import pytest

from squall.contrib import JsonLineRules, MalformedLine
from squall.contrib.kafka import JsonTranslator, Record

BIG = 123456789012345678901234567890
CASES = [  # (the bytes, the value of field "v", or None: malformed)
    (b'{"v": NaN}', None),
    (b'{"v": Infinity}', None),
    (b'{"v": -Infinity}', None),
    (b'{"v": 1e999}', None),                                   # overflows a float
    (b'{"v": "\\udc00"}', None),                               # a lone surrogate
    ('{"v": 1}'.encode("utf-16"), None),                       # UTF-16 with its byte-order mark
    ('{"v": 1}'.encode("utf-16-be"), None),                    # and without one
    ('{"v": 1}'.encode("utf-32"), None),
    (b'\xef\xbb\xbf{"v": 1}', None),                           # a UTF-8 byte-order mark
    (b'{"v": ' + str(BIG).encode() + b'}', BIG),               # integers of any size are data
    (b'{"v": -' + str(BIG).encode() + b'}', -BIG),
    (b'{"v": 9223372036854775807}', 2 ** 63 - 1),
    (b'{"v": 1.5e300}', 1.5e300),
    (b'{"v": "\\ud83d\\ude00"}', "\U0001F600"),
    (b'{"v": ' + b"[" * 64 + b"]" * 64 + b'}', None),          # nested deeper than 64 levels
]


def from_file(raw: bytes):
    return JsonLineRules(["v"]).parse(raw)[0]


def from_kafka(raw: bytes):
    value = JsonTranslator().translate(Record("t", 0, 0, None, raw))[4]
    return value["v"]


@pytest.mark.parametrize("raw, want", CASES)
def test_a_file_line_and_a_kafka_record_are_data_or_malformed_alike(raw, want):
    got = []
    for read in (from_file, from_kafka):
        try:
            got.append(("data", read(raw)))
        except MalformedLine as exc:
            got.append(("malformed", str(exc).split(" (")[0]))
    assert got[0] == got[1], got
    assert got[0] == (("malformed", got[0][1]) if want is None else ("data", want)), got
