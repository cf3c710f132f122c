"""``seglogfs dump`` of KRaft metadata records (the cluster-metadata decoder) and KRaft control records.

The real ``__cluster_metadata`` segment is checked against facts found elsewhere in its data dir
(partition dirs, ``partition.metadata``, ``meta.properties``, ``quorum-state``) and against
kafka-python's record count; hand-built records come from a small encoder written here, independent
of the decoder in seglogfs/tools/metadata_records.py.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import struct
from collections import Counter
from pathlib import Path

import pytest
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder
from support.producer_batches import control_batch
from support.testdata import KAFKA_LOG_DIR

from seglogfs.tools.dump import DumpOptions, dump_files
from seglogfs.tools.metadata_records import MetadataDecodeError, decode_metadata_record, to_json

SEG = "00000000000000000000"
RECORD_LINE = re.compile(r"^\| offset: (\d+) ")


@pytest.fixture(scope="module")
def kraft(tmp_path_factory) -> Path:
    """A copy of the data dir's KRaft files and of the files that serve as independent facts."""
    dst = tmp_path_factory.mktemp("kraft")
    shutil.copytree(KAFKA_LOG_DIR / "__cluster_metadata-0", dst / "__cluster_metadata-0")
    for name in ("bootstrap.checkpoint", "meta.properties"):
        shutil.copy(KAFKA_LOG_DIR / name, dst / name)
    for part in KAFKA_LOG_DIR.iterdir():
        if part.is_dir() and not part.name.startswith("__cluster_metadata"):
            (dst / part.name).mkdir()
            shutil.copy(part / "partition.metadata", dst / part.name / "partition.metadata")
    for path in dst.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dst


def run_dump(files: list[Path], **opts) -> tuple[list[str], list[str], int]:
    out, err = io.StringIO(), io.StringIO()
    status = dump_files([str(f) for f in files], DumpOptions(**opts), out, err)
    return out.getvalue().split("\n")[:-1], err.getvalue().split("\n")[:-1], status


def payloads(lines: list[str]) -> dict[int, str]:
    """offset -> payload text of every record line that has one."""
    found = {}
    for line in lines:
        match = RECORD_LINE.match(line)
        if match and " payload: " in line:
            found[int(match.group(1))] = line.split(" payload: ", 1)[1]
    return found


def metadata_records(kraft: Path) -> dict[int, dict]:
    out, err, status = run_dump(
        [kraft / "__cluster_metadata-0" / f"{SEG}.log"], cluster_metadata_decoder=True
    )
    assert status == 0 and err == []
    return {offset: json.loads(text) for offset, text in payloads(out).items()}


# --------------------------------------------------------------------------- the real segment


def test_every_real_metadata_record_prints_as_json(kraft):
    log = kraft / "__cluster_metadata-0" / f"{SEG}.log"
    records = MemoryRecords(log.read_bytes())
    expected = []  # kafka-python: the offsets of the records outside control batches
    while records.has_next():
        batch = records.next_batch()
        if not batch.is_control_batch:
            expected += [rec.offset for rec in batch]
    parsed = metadata_records(kraft)
    assert sorted(parsed) == expected and len(expected) > 2000
    for record in parsed.values():
        assert set(record) == {"type", "version", "data"}
        assert isinstance(record["data"], dict)
    types = Counter(r["type"] for r in parsed.values())
    for name in ("FEATURE_LEVEL_RECORD", "REGISTER_BROKER_RECORD", "REGISTER_CONTROLLER_RECORD",
                 "TOPIC_RECORD", "PARTITION_RECORD", "PARTITION_CHANGE_RECORD", "CONFIG_RECORD",
                 "BROKER_REGISTRATION_CHANGE_RECORD", "NO_OP_RECORD", "BEGIN_TRANSACTION_RECORD",
                 "END_TRANSACTION_RECORD"):  # fmt: skip
        assert types[name] > 0, name


def test_real_topics_and_partitions_match_the_data_dir(kraft):
    parsed = metadata_records(kraft).values()
    dirs: dict[str, set[int]] = {}
    topic_ids = {}
    for part in kraft.iterdir():
        if part.is_dir() and not part.name.startswith("__cluster_metadata"):
            topic, _, number = part.name.rpartition("-")
            dirs.setdefault(topic, set()).add(int(number))
            text = (part / "partition.metadata").read_text()
            topic_ids[topic] = re.search(r"topic_id: (\S+)", text).group(1)
    topics = {r["data"]["name"]: r["data"]["topicId"] for r in parsed if r["type"] == "TOPIC_RECORD"}
    assert topics == topic_ids
    assert len(dirs["__consumer_offsets"]) == 50
    by_topic: dict[str, set[int]] = {}
    props = dict(
        line.split("=", 1) for line in (kraft / "meta.properties").read_text().splitlines() if "=" in line
    )
    for r in parsed:
        if r["type"] == "PARTITION_RECORD":
            name = next(t for t, tid in topics.items() if tid == r["data"]["topicId"])
            by_topic.setdefault(name, set()).add(r["data"]["partitionId"])
            assert r["data"]["directories"] == [props["directory.id"]]
            assert r["data"]["replicas"] == [int(props["node.id"])]
    assert by_topic == dirs
    brokers = [r["data"] for r in parsed if r["type"] == "REGISTER_BROKER_RECORD"]
    assert [(b["brokerId"], b["logDirs"]) for b in brokers] == [
        (int(props["node.id"]), [props["directory.id"]])
    ]


def test_real_control_records_print_as_json_with_or_without_the_decoder(kraft):
    quorum = json.loads((kraft / "__cluster_metadata-0" / "quorum-state").read_text())
    for opts in ({"deep_iteration": True}, {"cluster_metadata_decoder": True}):
        out, err, _ = run_dump(
            [kraft / "__cluster_metadata-0" / f"{SEG}.log", kraft / "bootstrap.checkpoint"], **opts
        )
        assert err == []
        control = [line for line in out if line.startswith("| ") and "keySize: 4 " in line]
        assert len(control) == 3 and not any("controlType" in line for line in control)
        leader = json.loads(control[0].split(" LeaderChange: ", 1)[1])
        assert leader["leaderId"] == quorum["leaderId"]
        assert leader["voters"] == leader["grantingVoters"] == quorum["currentVoters"]
        assert control[1].endswith(' SnapshotHeader {"version":0,"lastContainedLogTimestamp":0}')
        assert control[2].endswith(' SnapshotFooter {"version":0}')
        assert all(" payload: " not in line for line in control)
    bootstrap = payloads(run_dump([kraft / "bootstrap.checkpoint"], cluster_metadata_decoder=True)[0])
    levels = {json.loads(p)["data"]["name"] for p in bootstrap.values()}
    assert "metadata.version" in levels and len(bootstrap) == 6


# --------------------------------------------------------------------------- hand-built records


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def carray(items: list[bytes] | None) -> bytes:
    return b"\x00" if items is None else uvarint(len(items) + 1) + b"".join(items)


def tags(fields: dict[int, bytes] | None = None) -> bytes:
    fields = fields or {}
    return uvarint(len(fields)) + b"".join(
        uvarint(t) + uvarint(len(v)) + v for t, v in sorted(fields.items())
    )


def framed(api_key: int, version: int, body: bytes) -> bytes:
    return uvarint(1) + uvarint(api_key) + uvarint(version) + body


def i32s(values: list[int]) -> list[bytes]:
    return [struct.pack(">i", v) for v in values]


UUID = bytes(range(16))
UUID_TEXT = base64.urlsafe_b64encode(UUID).rstrip(b"=").decode()


def write_log(path: Path, values: list[bytes | None], control: list[tuple[int, bytes]] = ()) -> Path:
    """A .log of one data batch holding ``values`` (offsets 0..), then one control batch per
    (type, value) pair."""
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i, value in enumerate(values):
        builder.append(i, 1_700_000_000_000, None, value, [])
    data = bytes(builder.build())
    for n, (control_type, value) in enumerate(control):
        data += control_batch(len(values) + n, -1, -1, control_type, value=value)
    path.write_bytes(data)
    return path


def test_hand_built_records_and_tagged_fields(tmp_path):
    partition = (
        struct.pack(">i", 7) + UUID + carray(i32s([1, 2])) + carray(i32s([1])) + carray([]) + carray([])
    )
    partition += struct.pack(">i", 2) + struct.pack(">ii", 5, 6) + carray([UUID, UUID])
    values = [
        framed(3, 2, partition + tags({0: b"\x01", 1: carray(i32s([2])), 9: b"junk"})),  # 9: unknown tag
        # defaults written out (recovery state 0, a null ELR) are not printed; an empty list is
        framed(3, 2, partition + tags({0: b"\x00", 1: b"\x00", 2: carray([])})),
        framed(
            14,
            0,
            carray([cstr("user") + cstr(None) + tags()])
            + cstr("producer_byte_rate")
            + struct.pack(">d", 10485760.0)
            + b"\x00"
            + tags(),
        ),
        framed(4, 0, b"\x02" + cstr("t\u00e9\x1b") + cstr("cleanup.policy") + cstr(None) + tags()),
    ]
    out, err, status = run_dump([write_log(tmp_path / f"{SEG}.log", values)], cluster_metadata_decoder=True)
    assert status == 0 and err == []
    got = payloads(out)
    head = (
        f'"partitionId":7,"topicId":"{UUID_TEXT}","replicas":[1,2],"isr":[1],'
        '"removingReplicas":[],"addingReplicas":[],"leader":2'
    )
    tail = f'"leaderEpoch":5,"partitionEpoch":6,"directories":["{UUID_TEXT}","{UUID_TEXT}"]'
    partition_json = '{{"type":"PARTITION_RECORD","version":2,"data":{{{}}}}}'.format
    assert got[0] == partition_json(f'{head},"leaderRecoveryState":1,{tail},"eligibleLeaderReplicas":[2]')
    assert got[1] == partition_json(f'{head},{tail},"lastKnownElr":[]')
    assert got[2] == (
        '{"type":"CLIENT_QUOTA_RECORD","version":0,"data":{"entity":[{"entityType":"user","entityName":null}],'
        '"key":"producer_byte_rate","value":1.048576E7,"remove":false}}'
    )
    # Jackson escapes control characters as \u00XX (upper-case hex) and leaves other characters be
    assert got[3] == (
        '{"type":"CONFIG_RECORD","version":0,"data":{"resourceType":2,"resourceName":"t\u00e9\\u001B",'
        '"name":"cleanup.policy","value":null}}'
    )
    assert [json.loads(p)["data"].get("resourceName") for p in got.values()][3] == "t\u00e9\x1b"


def voters_value(endpoints: list[tuple[str, str, int]]) -> bytes:
    eps = [cstr(n) + cstr(h) + struct.pack(">H", p) + tags() for n, h, p in endpoints]
    voter = struct.pack(">i", 3) + UUID + carray(eps) + struct.pack(">hh", 0, 1) + tags() + tags()
    return struct.pack(">h", 0) + carray([voter]) + tags()


def test_kraft_version_and_voters_control_records(tmp_path):
    control = [(5, struct.pack(">hh", 0, 1) + tags()), (6, voters_value([("CONTROLLER", "h1", 9093)]))]
    out, err, status = run_dump([write_log(tmp_path / f"{SEG}.log", [], control)], deep_iteration=True)
    assert status == 0 and err == []
    records = [line for line in out if line.startswith("| ")]
    assert records[0].endswith(' KRaftVersion {"version":0,"kRaftVersion":1}')
    voters = json.loads(records[1].split(" KRaftVoters ", 1)[1])
    assert voters == {"version": 0, "voters": [{
        "voterId": 3, "voterDirectoryId": UUID_TEXT,
        "endpoints": [{"name": "CONTROLLER", "host": "h1", "port": 9093}],
        "kRaftVersionFeature": {"minSupportedVersion": 0, "maxSupportedVersion": 1},
    }]}  # fmt: skip


#: malformed values and what kafka-dump-log.sh (Kafka 4.1.1) prints for each, except where marked
MALFORMED = [
    (b"\x01\x80", "Error while reading type"),
    (framed(2, 0, cstr("a-topic-name")[:5]), "Failed to deserialize record with type 2"),
    (framed(2, 0, uvarint(1000) + b"x" * 20), "Failed to deserialize record with type 2"),
    (framed(99, 4, b""), "UnsupportedVersionException: Unknown metadata id 99"),
    (  # (differs) Kafka decodes a newer version with the fields it knows
        framed(12, 7, cstr("x") + b"\x00\x01" + tags()),
        "unknown version 7 of FEATURE_LEVEL_RECORD (api key 12",
    ),
    (
        framed(12, 0, cstr("x") + b"\x00\x01" + tags() + b"zz"),
        "Found 2 byte(s) of garbage after 12",
    ),
    (framed(2, 0, cstr(None) + UUID + tags()), "Failed to deserialize record with type 2"),
    (framed(3, 2, struct.pack(">i", 0) + UUID + uvarint(10**6)), "Failed to deserialize record with type 3"),
    # (differs) Kafka reads one byte of the two-byte tag, then says "Found 1 byte(s) of garbage after 17"
    (framed(17, 0, b"\x00" * 12 + tags({0: b"\x01\x02"})), "Failed to deserialize record with type 17"),
    (b"\x00\x02\x00", "with frame version 0. Note that upgrades from the preview release of KRaft"),
    (None, "Error while reading frame version"),
]


def test_malformed_metadata_records_print_an_error_line_naming_the_offset(tmp_path):
    good = framed(20, 0, tags())
    values = [v for bad, _ in MALFORMED for v in (bad, good)]
    out, err, status = run_dump([write_log(tmp_path / f"{SEG}.log", values)], cluster_metadata_decoder=True)
    assert status == 0 and err == []
    got = payloads(out)
    assert len(got) == len(values)
    for i, (_, message) in enumerate(MALFORMED):
        assert got[2 * i].startswith(f"Error at {2 * i}, skipping. "), got[2 * i]
        assert message in got[2 * i], (message, got[2 * i])
        assert got[2 * i + 1] == '{"type":"NO_OP_RECORD","version":0,"data":{}}'


def test_the_decoding_error_keeps_the_field_and_byte_that_failed():
    with pytest.raises(MetadataDecodeError) as failed:
        decode_metadata_record(framed(2, 0, cstr("a-topic-name")[:5]))
    assert failed.value.kafka_message == "Failed to deserialize record with type 2"
    assert "TOPIC_RECORD v0: Name needs 12 bytes, only 4 left" in str(failed.value)


def test_malformed_control_records_name_the_offset(tmp_path):
    control = [(2, struct.pack(">hi", 0, 1) + b"\x05"), (3, struct.pack(">h", 4) + b"\x00" * 9), (6, None)]
    out, err, status = run_dump([write_log(tmp_path / f"{SEG}.log", [], control)], deep_iteration=True)
    assert status == 0 and err == []
    records = [line for line in out if line.startswith("| ")]
    assert " controlType: LEADER_CHANGE(2) cannot be decoded at offset 0: " in records[0]
    assert "Voters: array of 4 elements, more than the bytes left" in records[0]
    assert records[1].endswith(
        "controlType: SNAPSHOT_HEADER(3) cannot be decoded at offset 1: "
        "SnapshotHeaderRecord: unknown version 4"
    )
    assert records[2].endswith(
        "KRAFT_VOTERS(6) cannot be decoded at offset 2: VotersRecord: the record has no value"
    )


def test_without_the_decoder_payloads_stay_text(tmp_path):
    log = write_log(tmp_path / f"{SEG}.log", [framed(20, 0, tags()), b"plain"])
    out, _, _ = run_dump([log], print_data_log=True)
    assert payloads(out) == {0: "\x01\x14\x00\x00", 1: "plain"}


def test_to_json_numbers_like_java():
    assert to_json({"a": [1.0, 0.001, 1e7, -2.5e-5, 123.25], "b": True}) == (
        '{"a":[1.0,0.001,1.0E7,-2.5E-5,123.25],"b":true}'
    )
