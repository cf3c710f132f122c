"""Log.append_split with KeyedValues (the keyed fast path of the mount's ``append``): the records
kafka-python reads are the pairs given, split into batches under max.message.bytes, accepted by a
compacted log; nothing appended when a record alone is too large."""

from __future__ import annotations

import pytest
from support.cleaner_helpers import kafka_python_records
from support.engine_helpers import ManualClock, config, open_log

from seglogfs.errors import InvalidRecordError, RecordTooLargeError
from seglogfs.records import iter_batch_headers
from seglogfs.records.encode import KeyedValues


def test_keyed_values_split_under_max_message_bytes_on_a_compacted_log(tmp_path):
    lg = open_log(
        tmp_path / "t-0",
        config(cleanup_policy="compact", max_message_bytes=2000, compression_type="gzip"),
        clock=ManualClock(),
    )
    text = b"\n".join(b"user%03d:%s" % (i % 37, bytes([65 + i % 26]) * (i % 300)) for i in range(500))
    infos = lg.append_split(KeyedValues.split_lines(text, b":"))
    assert len(infos) > 1 and infos[0].first_offset == 0 and infos[-1].last_offset == 499
    expected = [(i, *line.split(b":", 1)) for i, line in enumerate(text.split(b"\n"))]
    assert [(r.offset, r.key, r.value) for r in lg.iter_records()] == expected
    lg.flush()
    assert kafka_python_records(lg.dir) == expected
    data = b"".join(p.read_bytes() for p in sorted(lg.dir.glob("*.log")))
    sizes = [h.size for h in iter_batch_headers(data, 0, len(data))]
    assert len(sizes) == len(infos) and max(sizes) <= 2000
    with pytest.raises(InvalidRecordError, match="has no key"):  # a keyless record still refused
        lg.append_split([b"no key"])
    lg.close()


def test_a_keyed_value_too_large_alone_appends_nothing(tmp_path):
    lg = open_log(tmp_path / "t-0", config(max_message_bytes=300), clock=ManualClock())
    pairs = KeyedValues.from_pairs([b"a", b"b", b"c"], [b"1", b"x" * 400, b"3"])
    with pytest.raises(RecordTooLargeError) as caught:
        lg.append_split(pairs)
    assert caught.value.index == 1 and lg.end_offset == 0
    lg.close()
