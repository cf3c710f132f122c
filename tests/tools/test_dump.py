"""``seglogfs dump`` against lines built independently from kafka-python and raw struct parsing,
formatted per docs/kafka-format.md section 7."""

from __future__ import annotations

import io
import itertools
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from crc32c import crc32c
from kafka.record import MemoryRecords, MemoryRecordsBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from support.testdata import KAFKA_LOG_DIR

from seglogfs.tools.dump import DumpOptions, dump_files

TESTDATA = KAFKA_LOG_DIR
SEG = "00000000000000000000"
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CONTROL_NAMES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE"}


def tf(b: bool) -> str:
    return "true" if b else "false"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("kafka") / "logdir"
    shutil.copytree(TESTDATA, dst)
    for root, dirs, files in os.walk(dst):
        for name in dirs + files:
            os.chmod(Path(root) / name, 0o755 if name in dirs else 0o644)
    return dst


def split_lines(text: str) -> list[str]:
    """Lines split on "\n" only: payloads may hold other line-break characters."""
    return text[:-1].split("\n") if text else []


def run_dump(files: list[Path | str], **opts) -> tuple[list[str], list[str], int]:
    out, err = io.StringIO(), io.StringIO()
    status = dump_files([str(f) for f in files], DumpOptions(**opts), out, err)
    return split_lines(out.getvalue()), split_lines(err.getvalue()), status


# --------------------------------------------------------------------------- the oracle


def expected_log_lines(path: Path, deep: bool, print_data: bool) -> list[str]:
    """kafka-dump-log.sh lines for a .log, from kafka-python's parser (v2) and struct (legacy)."""
    data = path.read_bytes()
    lines = [f"Dumping {path}", f"Log starting offset: {int(path.name.split('.')[0])}"]
    records = MemoryRecords(data)
    position = 0
    while records.has_next():
        batch = records.next_batch()
        size = batch.size_in_bytes
        if batch.magic >= 2:
            ts_type = "LogAppendTime" if batch.timestamp_type == 1 else "CreateTime"
            lines.append(
                f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} "
                f"count: {batch.records_count} "
                f"baseSequence: {batch.base_sequence} lastSequence: {batch.last_sequence} "
                f"producerId: {batch.producer_id} producerEpoch: {batch.producer_epoch} "
                f"partitionLeaderEpoch: {batch.leader_epoch} isTransactional: {tf(batch.is_transactional)} "
                f"isControl: {tf(batch.is_control_batch)} deleteHorizonMs: OptionalLong.empty "
                f"position: {position} {ts_type}: {batch.max_timestamp} size: {size} magic: 2 "
                f"compresscodec: {CODECS[batch.compression_type]} crc: {batch.crc} "
                f"isvalid: {tf(batch.validate_crc())}"
            )
        else:
            offset, _, crc, magic, attributes = struct.unpack_from(">qiIbb", data, position)
            ts = struct.unpack_from(">q", data, position + 18)[0] if magic == 1 else -1
            ts_type = (
                "NoTimestampType" if magic == 0 else ("LogAppendTime" if attributes & 8 else "CreateTime")
            )
            lines.append(
                f"offset: {offset} position: {position} {ts_type}: {ts} size: {size} magic: {magic} "
                f"compresscodec: {CODECS[attributes & 7]} crc: {crc} isvalid: {tf(batch.validate_crc())}"
            )
        if deep:
            for rec in batch:
                key_size = -1 if rec.key is None else len(rec.key)
                value_size = -1 if rec.value is None else len(rec.value)
                ts = -1 if rec.timestamp is None else rec.timestamp  # v0: Kafka's NO_TIMESTAMP
                line = f"| offset: {rec.offset} {ts_type}: {ts} keySize: {key_size} valueSize: {value_size}"
                if batch.magic >= 2:
                    seq = -1
                    if batch.base_sequence >= 0:
                        seq = (batch.base_sequence + rec.offset - batch.base_offset) % 2**31
                    line += f" sequence: {seq} headerKeys: [{','.join(k for k, _ in rec.headers)}]"
                else:
                    line += f" isValid: {tf(rec.validate_crc())} crc: {rec.checksum}}}"
                if batch.magic >= 2 and batch.is_control_batch:
                    ctype = struct.unpack_from(">h", rec.key, 2)[0]
                    if ctype in (0, 1):
                        epoch = struct.unpack_from(">i", rec.value, 2)[0]
                        line += f" endTxnMarker: {CONTROL_NAMES[ctype]} coordinatorEpoch: {epoch}"
                    elif ctype == 2:  # Kafka prints a KRaft LeaderChange as its JSON message
                        line += f" LeaderChange: {leader_change_json(bytes(rec.value))}"
                    else:
                        line += f" controlType: {CONTROL_NAMES.get(ctype, '?')}({ctype})"
                elif print_data:
                    if rec.key is not None:
                        line += f" key: {bytes(rec.key).decode('utf-8', 'replace')}"
                    if rec.value is not None:
                        line += f" payload: {bytes(rec.value).decode('utf-8', 'replace')}"
                lines.append(line)
        position += size
    if position < len(data):
        lines.append(f"Found {len(data) - position} invalid bytes at the end of {path.name}")
    return lines


def leader_change_json(value: bytes) -> str:
    """LeaderChangeMessage v0: int16 version, int32 leaderId, then Voters and GrantingVoters, each a
    compact array (length + 1) of {int32 voterId, no tagged fields}."""
    version, leader = struct.unpack_from(">hi", value)
    pos, lists = 6, []
    for _ in range(2):
        count, pos = value[pos] - 1, pos + 1
        ids = [struct.unpack_from(">i", value, pos + 5 * i)[0] for i in range(count)]
        pos += 5 * count
        lists.append(",".join(f'{{"voterId":{i}}}' for i in ids))
    return f'{{"version":{version},"leaderId":{leader},"voters":[{lists[0]}],"grantingVoters":[{lists[1]}]}}'


def expected_index_lines(path: Path) -> list[str]:
    data = path.read_bytes()
    base = int(path.name.split(".")[0])
    lines = [f"Dumping {path}"]
    for i in range(len(data) // 8):
        rel, pos = struct.unpack_from(">ii", data, i * 8)
        lines.append(f"offset: {base + rel} position: {pos}")
    return lines


def expected_timeindex_lines(path: Path) -> list[str]:
    data = path.read_bytes()
    base = int(path.name.split(".")[0])
    lines = [f"Dumping {path}"]
    for i in range(len(data) // 12):
        ts, rel = struct.unpack_from(">qi", data, i * 12)
        lines.append(f"timestamp: {ts} offset: {base + rel}")
    return lines


# --------------------------------------------------------------------------- real Kafka files


@pytest.mark.parametrize("partition", ["__consumer_offsets-15", "__cluster_metadata-0"])
@pytest.mark.parametrize(("deep", "print_data"), [(False, False), (True, False), (True, True)])
def test_real_log_matches_oracle(logdir, partition, deep, print_data):
    path = logdir / partition / f"{SEG}.log"
    out, err, status = run_dump([path], deep_iteration=deep and not print_data, print_data_log=print_data)
    # payloads may hold "\n": compare the text line by line, split the same way
    expected = split_lines("\n".join(expected_log_lines(path, deep, print_data)) + "\n")
    assert status == 0 and err == []
    assert len(out) == len(expected)
    for got, want in zip(out, expected, strict=True):
        assert got == want


def test_real_cluster_metadata_control_records(logdir):
    out, _, _ = run_dump([logdir / "__cluster_metadata-0" / f"{SEG}.log"], deep_iteration=True)
    control = [line for line in out if "isControl: true" in line]
    assert control, "the KRaft log holds control batches"
    assert any(' LeaderChange: {"version":0,"leaderId":1,' in line for line in out)


@pytest.mark.parametrize("partition", ["__consumer_offsets-15", "__cluster_metadata-0"])
def test_real_indexes_match_oracle(logdir, partition):
    ipath = logdir / partition / f"{SEG}.index"
    tpath = logdir / partition / f"{SEG}.timeindex"
    out, err, status = run_dump([ipath, tpath])
    assert status == 0
    assert err == []  # every entry agrees with the .log: no mismatch reports
    assert out == expected_index_lines(ipath) + expected_timeindex_lines(tpath)
    n_index = len(expected_index_lines(ipath)) - 1
    assert n_index == {"__consumer_offsets-15": 5, "__cluster_metadata-0": 34}[partition]


def test_index_sanity_check_and_verify_only(logdir):
    ipath = logdir / "__cluster_metadata-0" / f"{SEG}.index"
    tpath = logdir / "__cluster_metadata-0" / f"{SEG}.timeindex"
    out, err, _ = run_dump([ipath, tpath], index_sanity_check=True)
    assert out == [
        f"Dumping {ipath}",
        f"{ipath} passed sanity check.",
        f"Dumping {tpath}",
        f"{tpath} passed sanity check.",
    ]
    assert err == []
    out, err, _ = run_dump([ipath, tpath], verify_index_only=True)
    assert out == [f"Dumping {ipath}", f"Dumping {tpath}"]
    assert err == []


def test_empty_index_and_snapshot_and_unknown(logdir):
    empty = logdir / "demo-topic-0" / f"{SEG}.index"
    snap = logdir / "__consumer_offsets-15" / "00000000000000000256.snapshot"
    unknown = logdir / "meta.properties"
    out, err, _ = run_dump([empty, snap, unknown])
    assert out == [f"Dumping {empty}", f"{empty} is empty.", f"Dumping {snap}", f"Dumping {unknown}"]
    assert err == [f"Ignoring unknown file {unknown}"]


# --------------------------------------------------------------------------- damaged files


@pytest.fixture
def segment_copy(tmp_path) -> Path:
    src = TESTDATA / "__consumer_offsets-15"
    dst = tmp_path / "__consumer_offsets-15"
    dst.mkdir()
    for name in (f"{SEG}.log", f"{SEG}.index", f"{SEG}.timeindex"):
        shutil.copyfile(src / name, dst / name)
    return dst


def test_truncated_log_reports_invalid_bytes(segment_copy):
    path = segment_copy / f"{SEG}.log"
    data = path.read_bytes()
    path.write_bytes(data[:-10])  # cut inside the last batch
    out, _, _ = run_dump([path])
    expected = expected_log_lines(path, False, False)
    assert out == expected
    last_batch = 21446 - int(out[-2].split(" size: ")[1].split()[0])
    assert out[-1] == f"Found {len(data) - 10 - last_batch} invalid bytes at the end of {SEG}.log"


def test_corrupt_index_entry_is_a_mismatch(segment_copy):
    ipath = segment_copy / f"{SEG}.index"
    raw = bytearray(ipath.read_bytes())
    rel, pos = struct.unpack_from(">ii", raw, 8)
    struct.pack_into(">ii", raw, 8, rel + 1, pos)  # entry 1 now names the wrong offset
    ipath.write_bytes(bytes(raw))
    out, err, _ = run_dump([ipath], verify_index_only=True)
    assert out == [f"Dumping {ipath}"]
    assert err == [f"Mismatches in :{ipath.absolute()}", f"  Index offset: {rel + 1}, log offset: {rel}"]


def test_failed_sanity_check(segment_copy):
    ipath = segment_copy / f"{SEG}.index"
    with ipath.open("ab") as f:
        f.write(b"\x00\x00\x00")  # length no longer a multiple of 8
    out, err, status = run_dump([ipath], index_sanity_check=True)
    assert status == 1
    assert out == [f"Dumping {ipath}"]
    assert any("43 bytes" in line and str(ipath) in line for line in err)


def test_time_index_mismatch_and_order(segment_copy):
    tpath = segment_copy / f"{SEG}.timeindex"
    raw = bytearray(tpath.read_bytes())
    ts1, _ = struct.unpack_from(">qi", raw, 12)
    ts0, _ = struct.unpack_from(">qi", raw, 0)
    struct.pack_into(">q", raw, 12, ts0 - 1)  # entry 1: wrong and out of order
    tpath.write_bytes(bytes(raw))
    _, err, _ = run_dump([tpath], verify_index_only=True)
    assert err == [
        f"Found timestamp mismatch in :{tpath.absolute()}",
        f"  Index timestamp: {ts0 - 1}, log timestamp: {ts1}",
        f"Found out of order timestamp in :{tpath.absolute()}",
        f"  Index timestamp: {ts0 - 1}, Previously indexed timestamp: {ts0}",
    ]


def test_zero_filled_index_tail_stops_the_listing(segment_copy):
    ipath = segment_copy / f"{SEG}.index"
    with ipath.open("ab") as f:
        f.write(bytes(8 * 50))  # preallocated tail left by a crash
    out, err, _ = run_dump([ipath])
    assert out == expected_index_lines(ipath)[:6]
    assert err == []


# --------------------------------------------------------------------------- legacy and built batches


def build_mixed_segment(path: Path) -> None:
    """v0 (offsets 0-2), v1 (3-4), a v1 gzip wrapper (5-7) and a v2 batch with headers (8-9)."""
    parts = []
    b0 = LegacyRecordBatchBuilder(0, 0, 1 << 20)
    for i in range(3):
        b0.append(i, None, b"k%d" % i if i != 1 else None, b"value %d" % i)
    parts.append(bytes(b0.build()))
    b1 = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    for i in (3, 4):
        b1.append(i, 1_700_000_000_000 + i, None, b"v1 %d" % i)
    parts.append(bytes(b1.build()))
    bz = LegacyRecordBatchBuilder(1, 1, 1 << 20)  # gzip
    for i in range(3):
        bz.append(i, 1_700_000_000_100 + i, None, b"zipped %d" % i)
    wrapper = bytearray(bz.build())
    struct.pack_into(">q", wrapper, 0, 7)  # a log wrapper carries its last inner offset (outside the CRC)
    parts.append(bytes(wrapper))
    b2 = MemoryRecordsBuilder(2, 0, 1 << 20, producer_id=42, producer_epoch=3, base_sequence=10)
    b2.append(1_700_000_000_200, b"key", b"hello", [("h1", b"x"), ("h2", None)])
    b2.append(1_700_000_000_201, None, None, [])
    b2.close()
    v2 = bytearray(b2.buffer())
    struct.pack_into(">q", v2, 0, 8)  # base offset, outside the CRC
    parts.append(bytes(v2))
    path.write_bytes(b"".join(parts))


def test_legacy_and_v2_built_batches(tmp_path):
    path = tmp_path / f"{SEG}.log"
    build_mixed_segment(path)
    out, err, _ = run_dump([path], print_data_log=True)
    assert err == []
    assert out == expected_log_lines(path, True, True)
    assert out[2].startswith("offset: 0 position: 0 NoTimestampType: -1 ")
    wrapper = [line for line in out if " compresscodec: gzip " in line]
    assert len(wrapper) == 1 and wrapper[0].startswith("offset: 7 ")
    assert [line.split()[2] for line in out if line.startswith("| offset:")] == [str(i) for i in range(10)]
    assert out[-2].endswith("sequence: 10 headerKeys: [h1,h2] key: key payload: hello")
    assert out[-1].endswith("keySize: -1 valueSize: -1 sequence: 11 headerKeys: []")


def _snapshot_file(tmp_path, entry: bytes):
    """A version-1 producer snapshot at offset 1235 holding the one packed ``entry``."""
    body = struct.pack(">i", 1) + entry
    path = tmp_path / "00000000000000001235.snapshot"
    path.write_bytes(struct.pack(">hI", 1, crc32c(body)) + body)
    return path


def test_producer_snapshot_entry(tmp_path):
    path = _snapshot_file(tmp_path, struct.pack(">qhiqiqiq", 4000, 2, 17, 1234, 3, 1_700_000_000_000, 5, -1))
    out, err, _ = run_dump([path])
    assert err == []
    assert out == [
        f"Dumping {path}",
        "producerId: 4000 producerEpoch: 2 coordinatorEpoch: 5 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 1700000000000 firstSequence: 14 lastSequence: 17 lastOffset: 1234 offsetDelta: 3 "
        "timestamp: 1700000000000",
    ]
    path.write_bytes(path.read_bytes()[:-1] + b"\x01")
    _, err, _ = run_dump([path])
    assert err and err[0].startswith("Snapshot is corrupt (CRC is no longer valid).")


def test_producer_snapshot_entry_without_a_data_batch(tmp_path):
    """Review: Kafka's readSnapshot keeps batch metadata only for lastOffset >= 0, and
    DumpLogSegments prints the sequence fields only from it: a producer known by its markers alone
    (or whose epoch a fencing ABORT bumped) ends at "lastTimestamp: T " (its trailing space kept).
    We printed "firstSequence: 2147483647 lastSequence: -1 lastOffset: -1 ..." for it."""
    path = _snapshot_file(tmp_path, struct.pack(">qhiqiqiq", 4000, 3, -1, -1, 0, 1_700_000_000_009, 5, -1))
    out, err, _ = run_dump([path])
    assert err == []
    assert out == [
        f"Dumping {path}",
        "producerId: 4000 producerEpoch: 3 coordinatorEpoch: 5 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 1700000000009 ",
    ]


def test_cli_subprocess(logdir):
    ipath = logdir / "__consumer_offsets-15" / f"{SEG}.index"
    lpath = logdir / "__consumer_offsets-15" / f"{SEG}.log"
    proc = subprocess.run(
        [sys.executable, "-m", "seglogfs.tools.cli", "dump", "--files", f"{ipath},{lpath}",
         "--deep-iteration"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert split_lines(proc.stdout) == expected_index_lines(ipath) + expected_log_lines(lpath, True, False)


def test_cli_piped_into_head_stops_quietly(logdir):
    lpath = logdir / "__cluster_metadata-0" / f"{SEG}.log"
    cmd = f"{sys.executable} -m seglogfs.tools.cli dump --files {lpath} --print-data-log | head -n 1"
    proc = subprocess.run(["bash", "-c", cmd + '; exit "${PIPESTATUS[0]}"'], capture_output=True, text=True,
                          check=False, timeout=60)
    assert proc.stdout.startswith("Dumping ") and proc.stderr == ""
    assert proc.returncode == 141  # as a program killed by SIGPIPE


def test_cli_cluster_metadata_decoder_prints_every_record_as_json(logdir):
    lpath = logdir / "__cluster_metadata-0" / f"{SEG}.log"
    proc = run_dump_cli("--cluster-metadata-decoder", "--files", str(lpath))
    assert proc.returncode == 0, proc.stderr
    payloads = [line.split(" payload: ", 1)[1] for line in proc.stdout.splitlines() if " payload: " in line]
    decoded = [json.loads(p) for p in payloads]
    assert decoded and all({"type", "version", "data"} <= set(d) for d in decoded)
    assert {"TOPIC_RECORD", "PARTITION_RECORD", "FEATURE_LEVEL_RECORD"} <= {d["type"] for d in decoded}


# --- hostile files: a FIFO, an index entry pointing outside the .log ---------------------------------


def run_dump_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``seglogfs dump`` as the user runs it, failing the test (not hanging it) after 60 s."""
    return subprocess.run(
        [sys.executable, "-m", "seglogfs.tools.cli", "dump", *args],
        capture_output=True, text=True, check=False, timeout=60,
    )


_DUMP_MODES = [
    [],
    ["--deep-iteration"],
    ["--print-data-log"],
    ["--verify-index-only"],
    ["--index-sanity-check"],
]


@pytest.mark.parametrize("fifo_suffix", [".index", ".log", ".timeindex"])
def test_a_fifo_is_reported_by_every_dump_mode_never_opened(segment_copy, fifo_suffix):
    fifo = segment_copy / f"{SEG}{fifo_suffix}"
    fifo.unlink()
    os.mkfifo(fifo)
    files = ",".join(str(segment_copy / f"{SEG}{s}") for s in (".log", ".index", ".timeindex"))
    for mode in _DUMP_MODES:
        proc = run_dump_cli("--files", files, *mode)
        assert "Traceback" not in proc.stderr, (mode, proc.stderr)
        assert f"{fifo} is a FIFO, not a regular file" in proc.stderr, (mode, proc.stderr)
        assert proc.returncode == 1, (mode, proc.stdout, proc.stderr)


def test_an_index_entry_pointing_before_the_log_is_reported_not_a_traceback(segment_copy):
    ipath = segment_copy / f"{SEG}.index"
    tpath = segment_copy / f"{SEG}.timeindex"
    raw = bytearray(ipath.read_bytes())
    raw[0:8] = b"\xff" * 8  # relative offset -1, position -1
    ipath.write_bytes(bytes(raw))
    proc = run_dump_cli("--deep-iteration", "--files", f"{ipath},{tpath}")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "struct.error" not in proc.stderr
    assert f"{ipath}: " in proc.stderr and "position -1" in proc.stderr, proc.stderr
    assert f"Dumping {tpath}" in proc.stdout


# --- checkpoints (issue 10): kafka-dump-log.sh ignores them, seglogfs dump lists them ------------------


def expected_checkpoint_lines(path: Path) -> list[str]:
    """The listing built from the raw text: version, count, then ``topic partition offset`` lines."""
    lines = path.read_text().splitlines()
    entries = [line.split() for line in lines[2:]]
    return [f"Dumping {path}", f"Offset checkpoint {path.name}: {len(entries)} entries"] + [
        f"topic: {t} partition: {p} offset: {o}" for t, p, o in entries
    ]


def test_real_data_dir_checkpoints(logdir):
    names = ["recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "cleaner-offset-checkpoint"]
    paths = [logdir / name for name in names]
    epochs = logdir / "demo-topic-0" / "leader-epoch-checkpoint"
    out, err, status = run_dump([*paths, epochs])
    assert status == 0 and err == []
    expected = [line for p in paths for line in expected_checkpoint_lines(p)]
    epoch_lines = [line.split() for line in epochs.read_text().splitlines()[2:]]
    expected += [f"Dumping {epochs}", f"Leader epoch checkpoint: {len(epoch_lines)} entries"]
    expected += [f"epoch: {e} startOffset: {o}" for e, o in epoch_lines]
    assert out == expected
    assert len(out) > 50  # the recovery points of every partition are listed


def test_cleaner_offset_checkpoint_written_by_the_engine(tmp_path):
    from seglogfs.checkpoint import write_offset_checkpoint

    path = tmp_path / "cleaner-offset-checkpoint"
    write_offset_checkpoint(path, {("users", 0): 1200, ("__consumer_offsets", 13): 7})
    out, err, status = run_dump([path])
    assert (status, err) == (0, [])
    assert out == [
        f"Dumping {path}",
        "Offset checkpoint cleaner-offset-checkpoint: 2 entries",
        "topic: __consumer_offsets partition: 13 offset: 7",
        "topic: users partition: 0 offset: 1200",
    ]


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("0\n2\nusers 0 12\nusers zero 3\n", 4, "bad partition 'zero'"),
        ("0\n1\nusers 0\n", 3, "malformed line 'users 0'"),
        ("1\n0\n", 1, "unsupported version"),
        ("0\n3\nusers 0 12\n", 3, "expected 3 entries but found 1"),
    ],
)
def test_malformed_checkpoint_names_file_and_line(tmp_path, text, line, reason):
    """A malformed checkpoint is an error naming the file and the line; the other files are dumped."""
    bad = tmp_path / "cleaner-offset-checkpoint"
    bad.write_text(text)
    good = tmp_path / "recovery-point-offset-checkpoint"
    good.write_text("0\n1\nusers 0 40\n")
    out, err, status = run_dump([bad, good])
    assert status == 1
    assert out == [f"Dumping {bad}", f"Dumping {good}", f"Offset checkpoint {good.name}: 1 entries",
                   "topic: users partition: 0 offset: 40"]
    assert len(err) == 1 and reason in err[0] and f"{bad} at line {line}" in err[0], err


def test_compacted_segment_deep_iteration(tmp_path):
    """A segment as the cleaner leaves it: the delete horizon shows in deleteHorizonMs, a batch
    emptied to no record keeps its line (count 0), and the gaps are reported as Kafka reports them."""
    from support.compacted_segments import DELETE_HORIZON, SURVIVORS, write_compacted_log

    log_path = write_compacted_log(tmp_path / "users-0")
    out, err, status = run_dump([log_path], deep_iteration=True)
    assert status == 0
    batches = [line for line in out if line.startswith("baseOffset:")]
    spans = [["0", "9", "3"], ["12", "13", "1"], ["20", "23", "0"], ["24", "24", "1"]]
    assert [line.split()[1:6:2] for line in batches] == spans  # baseOffset, lastOffset, count
    assert "deleteHorizonMs: OptionalLong.empty" in batches[0]
    assert f"deleteHorizonMs: OptionalLong[{DELETE_HORIZON}]" in batches[3]
    offsets = [o for o, _, _ in SURVIVORS]
    assert [int(line.split()[2]) for line in out if line.startswith("| offset:")] == offsets
    gaps = [f"  {a} is followed by {b}" for a, b in itertools.pairwise(offsets)]
    assert err == [f"Non-consecutive offsets in {log_path.absolute()}", *reversed(gaps)]
