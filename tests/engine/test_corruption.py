"""Corruption at rest costs only itself (issue 7, defects 4 and 5, and the standing campaign).

A damaged batch makes exactly its own records unreadable (CorruptRecordError in the engine, EIO through
the mount); reads resync past it; no read ever returns the bytes of an offset other than the one asked
(every value here starts with its own offset, so a wrong answer is visible). Indexes are validated when
first used and rebuilt when they lie; retention never deletes a segment on an index's word alone.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import os
import random
import shutil
import struct
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.engine_helpers import ManualClock, config
from support.mount_fixture import make_seglogd

from seglogfs.errors import CorruptRecordError, OffsetOutOfRangeError
from seglogfs.log import Log
from seglogfs.log_files import CLEAN_SHUTDOWN_FILE
from seglogfs.log_manager import LogManager
from seglogfs.records import iter_batch_headers
from seglogfs.tools import cli
from seglogfs.verifier import verify_paths

LOG = "c-0"
# Small segments with several batches between two index entries: a damaged batch in the middle of an
# index interval is the case the issue found (every record up to the next entry was lost).
CFG = config(segment_bytes=6000, index_interval_bytes=1000)


def value_of(offset: int, width: int = 60) -> bytes:
    """A value that names its own offset."""
    return (b"%010d|" % offset).ljust(width, b"v")


def build(data_dir: Path, batches: int = 60, per_batch: int = 3, clock: ManualClock | None = None) -> int:
    """A cleanly closed log of ``batches`` batches; returns its end offset."""
    kwargs = {"clock": clock} if clock is not None else {}
    with LogManager(data_dir, CFG, **kwargs) as manager:
        log = manager.create_log(LOG)
        for _ in range(batches):
            start = log.end_offset
            log.append_values([value_of(start + i) for i in range(per_batch)])
        return log.end_offset


def batches_of(path: Path) -> list:
    return list(iter_batch_headers(path.read_bytes(), path=path))


def sealed_batch(data_dir: Path, pick: int = 6):
    """(path, header) of a batch in the middle of an index interval of a sealed segment."""
    logs = sorted((data_dir / LOG).glob("*.log"))
    path = logs[1]
    return path, batches_of(path)[pick]


def patch(path: Path, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def check_reads(log: Log, end: int, bad: range, context: str) -> None:
    """Every offset outside ``bad`` reads its own value; every offset in it is CorruptRecordError."""
    for offset in range(end):
        if offset in bad:
            with pytest.raises(CorruptRecordError):
                record = log.read(offset)
                pytest.fail(f"{context}: offset {offset} of the damaged batch read as {record.value!r}")
            continue
        try:
            record = log.read(offset)
        except (CorruptRecordError, OffsetOutOfRangeError) as exc:
            pytest.fail(f"{context}: intact offset {offset} is unreadable: {exc!r}")
        assert record.offset == offset and record.value == value_of(offset), (
            f"{context}: offset {offset} read {record.offset} {record.value!r}"
        )


@pytest.mark.parametrize(
    "field", ["length-huge", "length-small", "length-negative", "magic-3", "magic-1", "crc"]
)
def test_a_damaged_header_costs_only_its_batch(tmp_path: Path, field: str) -> None:
    end = build(tmp_path / "d")
    path, header = sealed_batch(tmp_path / "d")
    pos = header.position
    entries = path.with_suffix(".index").read_bytes()
    assert pos not in [struct.unpack_from(">ii", entries, i)[1] for i in range(0, len(entries), 8)]
    damage = {
        "length-huge": (pos + 8, struct.pack(">i", 2**30)),
        "length-small": (pos + 8, struct.pack(">i", header.size - 12 - 40)),
        "length-negative": (pos + 8, struct.pack(">i", -5)),
        "magic-3": (pos + 16, b"\x03"),
        "magic-1": (pos + 16, b"\x01"),
        "crc": (pos + 17, b"\xde\xad"),
    }[field]
    patch(path, *damage)
    with LogManager(tmp_path / "d", CFG) as manager:
        log = manager.get(LOG)
        check_reads(log, end, range(header.base_offset, header.last_offset + 1), field)
        with pytest.raises(CorruptRecordError) as raised:
            log.read(header.base_offset)
        assert raised.value.path == str(path) and raised.value.position == pos


@pytest.mark.parametrize("pick", [0, 1, 4, 6])
@pytest.mark.parametrize("delta", [-1, 1, -2, 2, 2**40])
def test_a_changed_base_offset_never_serves_another_offset(tmp_path: Path, pick: int, delta: int) -> None:
    """The baseOffset is outside the CRC: a batch that claims other offsets is damage, not data."""
    end = build(tmp_path / "d")
    path, header = sealed_batch(tmp_path / "d", pick)
    patch(path, header.position, struct.pack(">q", header.base_offset + delta))
    with LogManager(tmp_path / "d", CFG) as manager:
        check_reads(manager.get(LOG), end, range(header.base_offset, header.last_offset + 1), f"{delta:+d}")


def test_by_offset_198_is_never_record_199(tmp_path: Path) -> None:
    """The issue's reproduction: one-record batches, record 198's baseOffset moved up by one."""
    with LogManager(tmp_path / "d", CFG) as manager:
        log = manager.create_log(LOG)
        for offset in range(260):
            log.append_values([value_of(offset)])
    path = max(p for p in (tmp_path / "d" / LOG).glob("*.log") if int(p.stem) <= 198)
    header = next(h for h in batches_of(path) if h.base_offset == 198)
    patch(path, header.position, struct.pack(">q", 199))
    with LogManager(tmp_path / "d", CFG) as manager:
        check_reads(manager.get(LOG), 260, range(198, 199), "198 -> 199")


# ---------------------------------------------------------------------------- defect 5: indexes


def test_entries_appended_to_a_sealed_index_are_caught_and_rebuilt(tmp_path: Path, caplog) -> None:
    end = build(tmp_path / "d")
    index = sorted((tmp_path / "d" / LOG).glob("*.index"))[1]
    original = index.read_bytes()
    assert len(original) >= 16
    # A non-increasing entry: Kafka's sanity check (last offset >= base) passes it.
    index.write_bytes(original + original[:8])
    with caplog.at_level(logging.WARNING), LogManager(tmp_path / "d", CFG) as manager:
        check_reads(manager.get(LOG), end, range(0), "index with a repeated entry")
    assert any(str(index) in r.getMessage() and "increas" in r.getMessage() for r in caplog.records)
    assert index.read_bytes() == original  # rebuilt as it was


def test_index_positions_past_the_log_are_caught(tmp_path: Path, caplog) -> None:
    end = build(tmp_path / "d")
    index = sorted((tmp_path / "d" / LOG).glob("*.index"))[1]
    original = index.read_bytes()
    rel, _ = struct.unpack_from(">ii", original, len(original) - 8)
    index.write_bytes(original[:-8] + struct.pack(">ii", rel, 10**6))
    with caplog.at_level(logging.WARNING), LogManager(tmp_path / "d", CFG) as manager:
        check_reads(manager.get(LOG), end, range(0), "index position past the .log")
    assert any(str(index) in r.getMessage() for r in caplog.records)
    assert index.read_bytes() == original


def test_time_index_with_small_ordered_timestamps_does_not_delete_a_segment(tmp_path: Path, caplog) -> None:
    clock = ManualClock()
    end = build(tmp_path / "d", clock=clock)
    time_index = sorted((tmp_path / "d" / LOG).glob("*.timeindex"))[0]
    original = time_index.read_bytes()
    forged = bytearray(original)
    for i in range(len(original) // 12):  # 1, 2, 3...: ordered, so Kafka's sanity check passes
        struct.pack_into(">q", forged, i * 12, i + 1)
    time_index.write_bytes(bytes(forged))
    cfg = config(segment_bytes=6000, index_interval_bytes=1000, retention_ms=3_600_000)
    with caplog.at_level(logging.WARNING), LogManager(tmp_path / "d", cfg, clock=clock) as manager:
        log = manager.get(LOG)
        clock.advance(1000)
        assert log.delete_old_segments() == 0
        assert log.start_offset == 0
        check_reads(log, end, range(0), "forged time index")
        assert log.offset_for_timestamp(0) == 0
    assert any(str(time_index) in r.getMessage() for r in caplog.records)
    assert time_index.read_bytes() == original


def test_retention_still_deletes_segments_that_are_old(tmp_path: Path) -> None:
    """The checks above cost nothing to a sound log: an old segment still goes."""
    clock = ManualClock()
    build(tmp_path / "d", clock=clock)
    cfg = config(segment_bytes=6000, index_interval_bytes=1000, retention_ms=3_600_000)
    with LogManager(tmp_path / "d", cfg, clock=clock) as manager:
        log = manager.get(LOG)
        first = log.segments[0]
        assert first.largest_timestamp() == clock.ms
        clock.advance(3_600_001)
        assert log.delete_old_segments() >= 1  # old enough: deleted as before


def test_damage_is_named_in_the_read_error(tmp_path: Path) -> None:
    build(tmp_path / "d")
    path, header = sealed_batch(tmp_path / "d")
    patch(path, header.position + 8, struct.pack(">i", 2**30))
    with LogManager(tmp_path / "d", CFG) as manager, pytest.raises(CorruptRecordError) as raised:
        manager.get(LOG).read(header.last_offset)
    assert str(path) in str(raised.value) and f"position {header.position}" in str(raised.value)


@pytest.mark.parametrize("shift", [1, 2, -1])
def test_a_moved_base_offset_never_reaches_iter_records_under_wrong_offsets(
    tmp_path: Path, shift: int
) -> None:
    """A baseOffset (outside the CRC) changed in a sealed segment: Log.iter_batches / iter_records
    served the batch's records under the wrong offsets (each value names its own). Every batch whose
    offsets nothing vouches for is damage now: the walk stops there with CorruptRecordError, and
    ``verify`` reports it."""
    build(tmp_path / "d")
    path = sorted((tmp_path / "d" / LOG).glob("*.log"))[1]
    original = path.read_bytes()
    for header in batches_of(path):
        patch(path, header.position, struct.pack(">q", header.base_offset + shift))
        with LogManager(tmp_path / "d", CFG) as manager:
            lg = manager.get(LOG)
            served = []
            with pytest.raises(CorruptRecordError) as raised:
                for record in lg.iter_records():
                    served.append(record.offset)
                    assert record.value.startswith(b"%010d|" % record.offset), (header.base_offset, record)
            assert str(path) in str(raised.value)
            assert served == list(range(len(served))) and served[-1] >= header.base_offset - 1
        assert not verify_paths([tmp_path / "d" / LOG]).ok
        path.write_bytes(original)


# ---------------------------------------------------------------------------- the standing campaign
#
# Each round builds one data dir of many logs, damages each log once (its .log, .index, .timeindex or
# a leftover file) and the data dir once (a checkpoint or the clean-shutdown marker), then checks
# every log in-process, `seglogfs dump` and `seglogfs verify` on the damaged files, and (some rounds)
# the same data dir through a real seglogd mount. Seeded: SEGLOG_CAMPAIGN_SEED reruns a failure.

SEED = int(os.environ.get("SEGLOG_CAMPAIGN_SEED", "20261123"))
ROUNDS = 8
LOGS_PER_ROUND = 50
MOUNTED_ROUNDS = (0, 5)
CAMPAIGN_DEFAULTS = {"segment.bytes": 6000, "index.interval.bytes": 1000}
CAMPAIGN_CFG = config(segment_bytes=6000, index_interval_bytes=1000)

LOG_KINDS = ("log-bitflip", "log-header", "log-zero-run", "log-active", "log-truncated", "log-garbage-tail")
INDEX_KINDS = ("index-bytes", "index-append", "index-torn", "index-zeros", "index-missing")
TIME_KINDS = (
    "timeindex-bytes",
    "timeindex-forged",
    "timeindex-append",
    "timeindex-zeros",
    "timeindex-missing",
)
LEFTOVER_KINDS = ("deleted", "cleaned", "swap", "index-swap", "partition-metadata", "leader-epoch")
DIR_KINDS = (
    "none",
    "marker-garbage",
    "marker-missing",
    "recovery-garbage",
    "start-garbage",
    "replication-garbage",
    "start-count-wrong",
)


def named_value(name: str, offset: int, width: int) -> bytes:
    """A value naming its log and its offset: a read that returns another's bytes cannot pass."""
    return (b"%s|%010d|" % (name.encode(), offset)).ljust(width, b"~")


@dataclass
class Case:
    """One damaged log: what was done, and which offsets may be unreadable because of it."""

    log: str
    kind: str
    detail: str = ""
    file: Path | None = None
    may_fail: set[int] = field(default_factory=set)  # offsets allowed to be EIO (never other bytes)
    torn_tail_from: int | None = None  # the active segment's last batch damaged: cut from here
    unreadable: int = 0  # offsets the engine found unreadable
    verify: tuple[int, str] = (0, "")  # `seglogfs verify` of the damaged log dir: exit code, output

    def __str__(self) -> str:
        return f"seed={SEED} log={self.log} kind={self.kind} {self.detail}"


def build_round(data_dir: Path, rng: random.Random) -> dict[str, int]:
    """LOGS_PER_ROUND cleanly closed logs of varied batch and value sizes; their end offsets."""
    ends = {}
    clock = ManualClock()  # timestamps from the seed too: some equal, most increasing
    with LogManager(data_dir, CAMPAIGN_CFG, clock=clock) as manager:
        for i in range(LOGS_PER_ROUND):
            name = f"k{i}-0"
            log = manager.create_log(name)
            width = rng.choice((24, 60, 150))
            for _ in range(rng.randrange(45, 70)):
                clock.advance(rng.choice((0, 1, 7)))
                start = log.end_offset
                log.append_values([named_value(name, start + j, width) for j in range(rng.randrange(1, 6))])
            ends[name] = log.end_offset
    return ends


def _segments(log_dir: Path, suffix: str = ".log") -> list[Path]:
    return sorted(log_dir.glob("*" + suffix))


def _batch_offsets(path: Path, position: int) -> set[int]:
    """The offsets of the batch holding byte ``position`` of ``path`` (read before the damage)."""
    for header in batches_of(path):
        if header.position <= position < header.end_position:
            return set(range(header.base_offset, header.last_offset + 1))
    return set()


def damage_log(log_dir: Path, name: str, rng: random.Random) -> Case:
    """Damage one file of one log; the case says what may be lost because of it."""
    kind = rng.choice(LOG_KINDS * 3 + INDEX_KINDS + TIME_KINDS + LEFTOVER_KINDS)
    logs = _segments(log_dir)
    sealed = logs[:-1]
    case = Case(name, kind)
    if kind.startswith("log-"):
        path = logs[-1] if kind == "log-active" else rng.choice(sealed)
        data = bytearray(path.read_bytes())
        headers = batches_of(path)
        header = rng.choice(headers)
        if kind == "log-truncated":  # a sealed segment cut inside a batch: the rest of it is lost
            position = header.position + rng.randrange(1, header.size)
            case.may_fail = set(range(header.base_offset, int(logs[logs.index(path) + 1].stem)))
            case.file, case.detail = path, f"file={path.name} cut at {position}"
            path.write_bytes(bytes(data[:position]))
            return case
        if kind == "log-garbage-tail":
            position = len(data)
            data += rng.randbytes(rng.randrange(1, 200))
        elif kind in ("log-bitflip", "log-active"):
            position = rng.randrange(len(data))
            data[position] ^= 1 << rng.randrange(8)
        elif kind == "log-header":
            position = header.position + rng.choice((0, 3, 7, 8, 9, 10, 11, 16, 17, 20))
            data[position] = rng.randrange(256) if data[position] else rng.randrange(1, 256)
        else:
            position = header.position + rng.randrange(header.size)
            length = rng.randrange(1, 64)
            data[position : position + length] = bytes(len(data[position : position + length]))
        case.file, case.detail = path, f"file={path.name} position={position}"
        case.may_fail |= _batch_offsets(path, position)
        if kind == "log-zero-run":  # a run may reach into the next batch
            case.may_fail |= _batch_offsets(path, min(position + length, len(data)) - 1)
        if kind == "log-active" and position >= headers[-1].position:
            # Only damage with no intact batch after it is a torn tail (cut, or not read): anywhere
            # else in the active segment it costs its own batch, like in a sealed one.
            case.torn_tail_from = headers[-1].base_offset
        path.write_bytes(bytes(data))
        return case
    if kind.startswith(("index-", "timeindex-")):
        suffix = ".index" if kind.startswith("index-") else ".timeindex"
        path = rng.choice(_segments(log_dir, suffix))
        data = bytearray(path.read_bytes())
        entry = 8 if suffix == ".index" else 12
        action = kind.split("-", 1)[1]
        if action == "bytes" and data:
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif action == "append" and data:
            data += data[rng.randrange(len(data) // entry) * entry :][:entry]
        elif action == "torn":
            data += b"\x01\x02\x03"
        elif action == "zeros":
            data = bytearray(len(data) + entry * rng.randrange(1, 4))
        elif action == "forged":
            for i in range(len(data) // 12):
                struct.pack_into(">q", data, i * 12, i + 1)
        case.file, case.detail = path, f"file={path.name}"
        if action == "missing":
            path.unlink()
        else:
            path.write_bytes(bytes(data))
        return case
    base = rng.choice(logs).name.split(".")[0]
    garbage = rng.randbytes(rng.randrange(0, 300))
    target = {
        "deleted": f"{base}.log.deleted",
        "cleaned": f"{base}.index.cleaned",
        "swap": f"{base}.log.swap",
        "index-swap": f"{base}.index.swap",
        "partition-metadata": "partition.metadata",
        "leader-epoch": "leader-epoch-checkpoint",
    }[kind]
    (log_dir / target).write_bytes(garbage)
    case.file, case.detail = log_dir / target, f"file={target} bytes={len(garbage)}"
    return case


def damage_data_dir(data_dir: Path, rng: random.Random) -> str:
    kind = rng.choice(DIR_KINDS)
    files = {
        "marker-garbage": CLEAN_SHUTDOWN_FILE,
        "recovery-garbage": "recovery-point-offset-checkpoint",
        "start-garbage": "log-start-offset-checkpoint",
        "replication-garbage": "replication-offset-checkpoint",
    }
    if kind in files:
        (data_dir / files[kind]).write_bytes(rng.randbytes(rng.randrange(0, 200)))
    elif kind == "marker-missing":
        (data_dir / CLEAN_SHUTDOWN_FILE).unlink()
    elif kind == "start-count-wrong":
        path = data_dir / "log-start-offset-checkpoint"
        lines = path.read_text().splitlines()
        path.write_text("\n".join([lines[0], str(int(lines[1]) + 3), *lines[2:]]) + "\n")
    return kind


class Lost(tuple):
    """Offsets that may be gone (or unreadable) for a reason other than one damaged batch: ranges."""

    def __contains__(self, offset: object) -> bool:
        return any(offset in r for r in tuple.__iter__(self))


def lost_offsets(log: Log, case: Case, end: int, dir_kind: str) -> Lost:
    """Below a log start offset a damaged checkpoint moved up; a torn tail cut from the active segment."""
    ranges = [range(case.torn_tail_from, end)] if case.torn_tail_from is not None else []
    if dir_kind.startswith("start-"):
        ranges.append(range(log.start_offset))
    return Lost(ranges)


def expect_read(log: Log, offset: int, case: Case, lost: Lost) -> str:
    """Read one offset in-process: "ok", "eio" or "gone" (a failure names the seed and the case)."""
    try:
        record = log.read(offset)
    except CorruptRecordError:
        assert offset in case.may_fail or offset in lost, f"{case}: intact offset {offset} is EIO"
        return "eio"
    except OffsetOutOfRangeError:  # even a damaged batch's offsets are EIO, not "no such record"
        assert offset in lost, f"{case}: offset {offset} is gone"
        return "gone"
    assert record.offset == offset and record.value.startswith(b"%s|%010d|" % (case.log.encode(), offset)), (
        f"{case}: offset {offset} read another record: {record.offset} {record.value[:40]!r}"
    )
    return "ok"


def check_by_time(log: Log, case: Case, readable: list[int], context: str) -> None:
    """offset_for_timestamp answers at or before any record that qualifies, with a record that
    qualifies, or (as Kafka's search reads no CRC) with one of the damaged batch's offsets."""
    for offset in random.Random(SEED).sample(readable, min(3, len(readable))):
        target = log.read(offset).timestamp
        answer = log.offset_for_timestamp(target)
        assert answer <= offset, f"{context}: by-time {target} -> {answer}, but {offset} qualifies"
        try:
            found = log.read(answer)
        except CorruptRecordError as exc:
            assert answer in case.may_fail, f"{context}: by-time {target} -> {answer}, unreadable: {exc}"
            continue
        assert found.timestamp >= target, f"{context}: by-time {target} -> {answer} at {found.timestamp}"


def check_in_process(
    data_dir: Path, ends: dict[str, int], cases: dict[str, Case], dir_kind: str
) -> Counter[str]:
    """Open the damaged data dir as seglogd would, read every offset of every log, append, reopen.
    Returns how the reads went ("ok", "eio", "gone", "offline")."""
    outcomes: Counter[str] = Counter()
    with LogManager(data_dir, CAMPAIGN_CFG) as manager:
        offline = manager.offline
        for name, case in cases.items():
            context = f"{case} dir={dir_kind}"
            if name in offline:
                # Acceptable only for damage that may hold the only copy of data (a .swap with no
                # segment of its own never happens here): a damaged active segment is no reason.
                assert case.kind == "swap", f"{context}: offline: {offline[name]}"
                outcomes["offline"] += 1
                continue
            log = manager.get(name)
            lost = lost_offsets(log, case, ends[name], dir_kind)
            expected_end = ends[name] if case.torn_tail_from is None else case.torn_tail_from
            assert log.end_offset == expected_end, f"{context}: end {log.end_offset} != {expected_end}"
            readable = [o for o in range(ends[name]) if expect_read(log, o, case, lost) == "ok"]
            outcomes["ok"] += len(readable)
            outcomes["unreadable"] += ends[name] - len(readable)
            case.unreadable = ends[name] - len(readable)
            check_by_time(log, case, readable, context)
            info = log.append_values([named_value(name, log.end_offset, 30)])
            assert log.read(info.last_offset).value.startswith(b"%s|" % name.encode()), context
            ends[name] = log.end_offset
    # A second, clean open: what the first one rebuilt or cut must be sound now.
    with LogManager(data_dir, CAMPAIGN_CFG) as manager:
        for name, case in cases.items():
            if name in manager.offline:
                continue
            log = manager.get(name)
            assert log.end_offset == ends[name], f"{case}: end offset changed across a clean restart"
            sample = random.Random(SEED).sample(range(ends[name]), min(20, ends[name]))
            for offset in sample:
                expect_read(log, offset, case, lost_offsets(log, case, ends[name], "start-"))
    return outcomes


def run_tool(*argv: str) -> tuple[int, str]:
    """``seglogfs`` in-process (its main function), stdout and stderr together."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue() + err.getvalue()


def check_tools(log_dir: Path, case: Case) -> None:
    """dump and verify on the damaged files: no traceback (verify's answer is kept in the case)."""
    targets = [case.file] if case.file is not None and case.file.exists() else []
    if case.file is not None and case.file.suffix in (".index", ".timeindex"):
        targets.append(case.file.with_suffix(".log"))
    for path in targets:
        code, text = run_tool("dump", "--files", str(path), "--deep-iteration")
        assert "Traceback" not in text and code in (0, 1), (
            f"{case}: dump {path.name} rc={code}:\n{text[-2000:]}"
        )
    code, text = run_tool("verify", str(log_dir))
    assert "Traceback" not in text and code in (0, 1), f"{case}: verify rc={code}:\n{text[-2000:]}"
    case.verify = (code, text)


def check_verify_named_damage(case: Case) -> None:
    """When a sealed .log's damage made records unreadable, verify failed and named file and position."""
    code, text = case.verify
    if case.unreadable and case.kind in ("log-bitflip", "log-header", "log-zero-run", "log-truncated"):
        assert case.file is not None
        assert code == 1 and case.file.name in text and "position" in text, f"{case}: verify said:\n{text}"


def check_mounted(tmp_path: Path, data_dir: Path, ends: dict[str, int], cases: dict[str, Case], rng) -> None:
    """The same damaged data dir through a real seglogd: by-offset reads, info, no traceback."""
    daemon = make_seglogd(tmp_path, name="mounted", data_dir=data_dir, logs={}, defaults=CAMPAIGN_DEFAULTS)
    try:
        daemon.start()
        for name, case in cases.items():
            log_dir = daemon / name
            info = json.loads((log_dir / "info").read_text())
            if info.get("offline"):
                assert case.kind == "swap", f"{case}: offline through the mount: {info}"
                continue
            offsets = set(rng.sample(range(ends[name]), min(12, ends[name]))) | case.may_fail
            for offset in sorted(offsets):
                path = log_dir / "by-offset" / str(offset)
                try:
                    value = path.read_bytes()
                except OSError as exc:
                    allowed = {errno.EIO} if offset in case.may_fail else set()
                    if offset >= info["end_offset"] or offset < info["start_offset"]:
                        allowed.add(errno.ENOENT)
                    if case.torn_tail_from is not None and offset >= case.torn_tail_from:
                        allowed.add(errno.ENOENT)
                    assert exc.errno in allowed, f"{case}: by-offset/{offset}: {exc}"
                    continue
                assert value.startswith(b"%s|%010d|" % (name.encode(), offset)), (
                    f"{case}: by-offset/{offset} served {value[:40]!r}"
                )
        assert daemon.proc is not None and daemon.proc.poll() is None, "seglogd died"
    finally:
        daemon.cleanup()
    assert "Traceback" not in daemon.stderr(), (
        f"seed={SEED}: traceback in seglogd's stderr:\n{daemon.stderr()}"
    )


@pytest.mark.slow
@pytest.mark.fuse
@pytest.mark.usefixtures("fuse_available")
@pytest.mark.parametrize("round_no", range(ROUNDS))
def test_corruption_campaign(tmp_path: Path, round_no: int, caplog) -> None:
    rng = random.Random(SEED * 1000 + round_no)
    data_dir = tmp_path / "data"
    ends = build_round(data_dir, rng)
    cases = {name: damage_log(data_dir / name, name, rng) for name in ends}
    dir_kind = damage_data_dir(data_dir, rng)
    mounted_copy = None
    if round_no in MOUNTED_ROUNDS:
        mounted_copy = tmp_path / "mounted-data"
        shutil.copytree(data_dir, mounted_copy)
    for name, case in cases.items():
        check_tools(data_dir / name, case)
    with caplog.at_level(logging.INFO):
        outcomes = check_in_process(data_dir, dict(ends), cases, dir_kind)
    print(
        f"round {round_no} seed={SEED} dir={dir_kind} kinds={Counter(c.kind for c in cases.values())} "
        f"torn-tails={sum(c.torn_tail_from is not None for c in cases.values())} "
        f"reads={dict(outcomes)}"
    )
    for case in cases.values():
        check_verify_named_damage(case)
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert not tracebacks, f"seed={SEED} round={round_no}: logged tracebacks: {tracebacks}"
    if mounted_copy is not None:
        check_mounted(tmp_path, mounted_copy, ends, cases, rng)


@pytest.mark.fuse
@pytest.mark.usefixtures("fuse_available")
def test_through_the_mount_damage_costs_only_its_batch(tmp_path: Path) -> None:
    """`cat by-offset/<n>`: EIO for the damaged batch's records only, every other record exact, and
    by-offset/198 never record 199's bytes; the daemon logs the file and position and lives on."""
    data_dir = tmp_path / "data"
    with LogManager(data_dir, CFG) as manager:
        for name, per_batch in (("len-0", 3), ("base-0", 1)):
            log = manager.create_log(name)
            while log.end_offset < 260:
                start = log.end_offset
                log.append_values([value_of(start + i) for i in range(per_batch)])
    len_path = sorted((data_dir / "len-0").glob("*.log"))[1]
    damaged = batches_of(len_path)[6]
    patch(len_path, damaged.position + 8, struct.pack(">i", 2**30))
    base_path = max(p for p in (data_dir / "base-0").glob("*.log") if int(p.stem) <= 198)
    header_198 = next(h for h in batches_of(base_path) if h.base_offset == 198)
    patch(base_path, header_198.position, struct.pack(">q", 199))
    daemon = make_seglogd(tmp_path, data_dir=data_dir, logs={}, defaults={"segment.bytes": 6000})
    try:
        daemon.start()
        for name, bad in (
            ("len-0", range(damaged.base_offset, damaged.last_offset + 1)),
            ("base-0", range(198, 199)),
        ):
            for offset in range(260):
                result = subprocess.run(
                    ["cat", str(daemon / name / "by-offset" / str(offset))], capture_output=True
                )
                if offset in bad:
                    assert result.returncode != 0 and b"Input/output error" in result.stderr, (name, offset)
                else:
                    assert result.returncode == 0 and result.stdout == value_of(offset), (
                        name,
                        offset,
                        result,
                    )
        assert daemon.proc is not None and daemon.proc.poll() is None
    finally:
        daemon.cleanup()
    assert f"{len_path}" in daemon.stderr() and f"position {damaged.position}" in daemon.stderr()
    assert "Traceback" not in daemon.stderr()


def _read_by_offset(log_dir: Path, offset: int) -> bytes | int:
    """``by-offset/<offset>`` through the mount: its bytes, or the errno of the failure."""
    try:
        return (log_dir / "by-offset" / str(offset)).read_bytes()
    except OSError as exc:
        return exc.errno


@pytest.mark.fuse
@pytest.mark.usefixtures("fuse_available")
@pytest.mark.parametrize("marker", ["present", "absent"])
def test_through_the_mount_active_segment_damage_costs_only_its_batch_across_restarts(
    tmp_path: Path, marker: str
) -> None:
    """In the active segment, a damaged batch with intact batches after it costs only itself (EIO; the
    batches after it stay and appends go after them), and a damaged last batch is a torn tail: cut,
    the end offset that of the last intact batch (a damaged lastOffsetDelta once moved it far past
    the data). The same after a clean stop and a restart, with the clean-shutdown marker or without."""
    data_dir = tmp_path / "data"
    with LogManager(data_dir, CFG) as manager:
        for name in ("mid-0", "tail-0"):
            log = manager.create_log(name)
            for _ in range(80):
                start = log.end_offset
                log.append_values([value_of(start + i) for i in range(3)])
            end = log.end_offset
    actives = {name: sorted((data_dir / name).glob("*.log"))[-1] for name in ("mid-0", "tail-0")}
    middle = batches_of(actives["mid-0"])[-3]
    patch(actives["mid-0"], middle.end_position - 2, b"\xff")  # a record byte: its CRC fails
    last = batches_of(actives["tail-0"])[-1]
    patch(actives["tail-0"], last.position + 23, struct.pack(">i", 258))  # lastOffsetDelta: 2 -> 258
    expected = {
        "mid-0": {o: value_of(o) for o in range(end)},
        "tail-0": {o: value_of(o) for o in range(last.base_offset)},
    }
    expected["mid-0"].update(dict.fromkeys(range(middle.base_offset, middle.last_offset + 1), errno.EIO))
    daemon = make_seglogd(tmp_path, data_dir=data_dir, logs={}, defaults=CAMPAIGN_DEFAULTS)
    try:
        for run in range(2):
            if marker == "absent":
                (data_dir / CLEAN_SHUTDOWN_FILE).unlink()
            daemon.start()
            for name, values in expected.items():
                info = json.loads((daemon / name / "info").read_text())
                assert info["end_offset"] == len(values), (marker, run, name, info)
                for offset in range(len(values) + 2):
                    got = _read_by_offset(daemon / name, offset)
                    assert got == values.get(offset, errno.ENOENT), (marker, run, name, offset, got)
                subprocess.run(
                    ["sh", "-c", f"printf 'next-{run}\\n' >> {daemon / name / 'append'}"], check=True
                )
                values[len(values)] = b"next-%d" % run
                assert _read_by_offset(daemon / name, len(values) - 1) == values[len(values) - 1]
            assert daemon.stop() == 0, daemon.stderr()
            assert (data_dir / CLEAN_SHUTDOWN_FILE).exists()
    finally:
        daemon.cleanup()
    assert "Traceback" not in daemon.stderr()
    assert f"{actives['mid-0']}" in daemon.stderr()  # the kept damage is named
