"""``__consumer_offsets`` records (seglogfs/consumer_offsets.py) on the real log a Kafka 4 broker
wrote (shared/testdata), read with kafka-python, and the ``--offsets-decoder`` lines Kafka's own
kafka-dump-log.sh printed for it. tests/oracle/ compares with Kafka's tool run on the same files."""

from __future__ import annotations

import io
import shutil
import struct
from pathlib import Path

import pytest
from kafka.record import MemoryRecords
from support.testdata import KAFKA_LOG_DIR

from seglogfs.config import LogConfig
from seglogfs.consumer_offsets import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsDecodeError,
    UnknownRecordTypeError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    replay,
)
from seglogfs.log import Log
from seglogfs.records import ProducerRecord
from seglogfs.tools.dump import DumpOptions, dump_files
from seglogfs.tools.offsets_json import offsets_json

SEGMENT = KAFKA_LOG_DIR / "__consumer_offsets-15" / "00000000000000000000.log"
#: lines kafka-dump-log.sh --offsets-decoder (Kafka 4.1.1) printed for SEGMENT's records 1 and 2
KAFKA_LINES = {
    1: '| offset: 1 CreateTime: 1779275925650 keySize: 14 valueSize: 281 sequence: 0 headerKeys: [] key: '
    '{"type":"2","data":{"group":"demo-group"}} payload: {"version":"3","data":{"protocolType":"consumer",'
    '"generation":1,"protocol":"range","leader":"consumer-demo-group-1-e7eb8c0a-db96-4153-8483-c02511a843ad",'
    '"currentStateTimestamp":1779275925640,"members":[{"memberId":'
    '"consumer-demo-group-1-e7eb8c0a-db96-4153-8483-c02511a843ad","groupInstanceId":null,"clientId":'
    '"consumer-demo-group-1","clientHost":"/192.168.65.1","rebalanceTimeout":300000,"sessionTimeout":45000,'
    '"subscription":{"topics":["demo-topic"],"userData":null,"ownedPartitions":[],"generationId":-1,'
    '"rackId":null},"assignment":{"assignedPartitions":[{"topic":"demo-topic","partitions":[0,1,2]}],'
    '"userData":null}}]}}',
    2: '| offset: 2 CreateTime: 1779275930671 keySize: 30 valueSize: 24 sequence: 0 headerKeys: [] key: '
    '{"type":"1","data":{"group":"demo-group","topic":"demo-topic","partition":2}} payload: {"version":"4",'
    '"data":{"offset":0,"leaderEpoch":-1,"metadata":"","commitTimestamp":1779275930663}}',
}


def broker_records() -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record in the broker's segment, read by kafka-python."""
    out = []
    records = MemoryRecords(SEGMENT.read_bytes())
    while records.has_next():
        out += [(r.offset, r.key, r.value) for r in records.next_batch()]
    return out


def test_every_broker_record_decodes_and_encodes_back_to_the_same_bytes() -> None:
    latest: dict[object, object] = {}
    for _, key_bytes, value_bytes in broker_records():
        key = decode_key(key_bytes)
        value = decode_value(key, value_bytes)
        assert encode_key(key) == key_bytes
        assert value is not None
        assert encode_value(value) == value_bytes  # Kafka 4's own choice of versions
        latest[key] = value
    group = latest.pop(GroupMetadataKey("demo-group"))
    assert isinstance(group, GroupMetadataValue)
    assert (group.protocol_type, group.generation, group.protocol) == ("consumer", 3, "range")
    assert len(group.members) == 1
    assert sorted(k.partition for k in latest) == [0, 1, 2]  # type: ignore[attr-defined]
    assert {(k.group, k.topic) for k in latest} == {("demo-group", "demo-topic")}  # type: ignore[attr-defined]
    assert {v.offset for v in latest.values()} == {0}  # type: ignore[attr-defined]


def test_offsets_decoder_prints_kafka_dump_logs_lines() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert dump_files([str(SEGMENT)], DumpOptions(offsets_decoder=True), out, err) == 0
    lines = out.getvalue().splitlines()
    for offset, expected in KAFKA_LINES.items():
        assert [line for line in lines if line.startswith(f"| offset: {offset} ")] == [expected]
    assert len([line for line in lines if line.startswith("| ")]) == 256


@pytest.mark.parametrize("version", range(5))
def test_values_round_trip_at_every_version(version: int) -> None:
    instance = "i" if version >= 3 else None
    member = MemberMetadata("m", "c", "/h", 10, 20 if version else 10, b"\x00\x01", b"\x02", instance)
    group = GroupMetadataValue("consumer", 4, "range", "m", 7 if version >= 2 else -1, (member,))
    key = GroupMetadataKey("g")
    assert decode_value(key, encode_value(group, version)) == group
    commit = OffsetCommitValue(42, "m\u00e9ta", 9, 3 if version >= 3 else -1, 11 if version == 1 else -1)
    key2 = OffsetCommitKey("g", "t", 5)
    assert decode_value(key2, encode_value(commit, version)) == commit
    assert decode_value(key2, None) is None  # a tombstone


def test_encoding_follows_kafka_4s_versions() -> None:
    assert encode_key(OffsetCommitKey("g", "t", 1))[:2] == b"\x00\x01"
    assert encode_key(GroupMetadataKey("g"))[:2] == b"\x00\x02"
    assert encode_value(OffsetCommitValue(1, "", 2))[:2] == b"\x00\x04"
    assert encode_value(OffsetCommitValue(1, "", 2, expire_timestamp=3))[:2] == b"\x00\x01"
    assert encode_value(GroupMetadataValue("", 0, None, None))[:2] == b"\x00\x03"
    # version 4 is flexible: a compact string (length + 1) and an empty tagged-field section
    flexible = encode_value(OffsetCommitValue(1, "ab", 2, 5))
    assert flexible == struct.pack(">hqi", 4, 1, 5) + b"\x03ab" + struct.pack(">q", 2) + b"\x00"


def test_malformed_records_raise_in_kafkas_words() -> None:
    key = OffsetCommitKey("g", "t", 1)
    with pytest.raises(UnknownRecordTypeError) as unknown:
        decode_key(b"\x00\x63zz")
    assert unknown.value.record_type == 99
    with pytest.raises(OffsetsDecodeError, match=r"^Could not read record with version 3 from value's"):
        decode_value(key, b"\x00\x03\x00\x00")
    with pytest.raises(OffsetsDecodeError, match=r"^Found an unknown record version 7 for 1 type$"):
        decode_value(key, b"\x00\x07" + bytes(30))
    assert offsets_json(5, b"\x00\x63", b"") == ("Unknown record type 99 at offset 5, skipping.", None)
    assert offsets_json(6, encode_key(key), None)[1] == "<DELETE>"
    text, payload = offsets_json(7, None, b"\x00\x01")
    assert text.startswith("Error at offset 7, skipping.") and payload is None


def test_offsets_decoder_option_of_the_cli(tmp_path: Path) -> None:
    from seglogfs.tools.cli import main

    assert main(["dump", "--files", str(SEGMENT), "--offsets-decoder", "--skip-record-metadata"]) == 0


def test_replaying_the_broker_log_through_the_engine_gives_the_committed_offsets(tmp_path: Path) -> None:
    """The coordinator's load at start-up: the broker's log read by seglogfs' engine, then commits and
    tombstones appended through it as a coordinator would."""
    log_dir = tmp_path / "__consumer_offsets-15"
    shutil.copytree(KAFKA_LOG_DIR / "__consumer_offsets-15", log_dir)
    with Log.open(log_dir, LogConfig.from_mapping({"cleanup.policy": "compact"})) as lg:
        state = replay((r.key, r.value) for r in lg.iter_records())
        assert state.skipped == 0
        assert {(k.topic, k.partition): v.offset for k, v in state.offsets.items()} == {
            ("demo-topic", 0): 0, ("demo-topic", 1): 0, ("demo-topic", 2): 0,
        }  # fmt: skip
        assert state.groups["demo-group"].generation == 3
        key = OffsetCommitKey("demo-group", "demo-topic", 1)
        lg.append([ProducerRecord(key=encode_key(key), value=encode_value(OffsetCommitValue(42, "m", 5)))])
        gone = OffsetCommitKey("demo-group", "demo-topic", 2)
        lg.append([ProducerRecord(key=encode_key(gone), value=None)])
        lg.append([ProducerRecord(key=encode_key(GroupMetadataKey("demo-group")), value=None)])
        lg.append([ProducerRecord(key=b"\x00\x03\x00\x01g", value=b"\x00\x00")])  # a KIP-848 record
        state = replay((r.key, r.value) for r in lg.iter_records())
    assert {k.partition: v.offset for k, v in state.offsets.items()} == {0: 0, 1: 42}
    assert state.offsets[key] == OffsetCommitValue(42, "m", 5)
    assert state.groups == {} and state.skipped == 1
    with pytest.raises(OffsetsDecodeError):
        replay([(None, b"\x00\x01")])
