"""The verifier service (``seglogfs.verifier``) in-process: segments built by Kafka's rules, damaged
copies, notes against damage, record counts and decoding."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.verify_fixtures import SEG, TESTDATA, batches_of, build_indexes, build_two_segments

from seglogfs.verifier import verify_paths


@pytest.fixture
def two_segments(tmp_path) -> Path:
    """The consumer-offsets log split into an inactive and an active segment, indexes by Kafka's rule."""
    return build_two_segments(tmp_path)


def test_index_builder_reproduces_the_broker_files():
    """``build_indexes`` (support.verify_fixtures) is trusted only because it rebuilds Kafka's own
    files byte for byte."""
    for part in ("__consumer_offsets-15", "__cluster_metadata-0"):
        d = TESTDATA / part
        index, timeindex = build_indexes(batches_of((d / f"{SEG}.log").read_bytes()), 0)
        assert index == (d / f"{SEG}.index").read_bytes()
        assert timeindex == (d / f"{SEG}.timeindex").read_bytes()


def test_rule_built_segments_are_sound(two_segments):
    report = verify_paths([two_segments])
    assert report.problems == []
    assert report.segments == 2 and report.logs == 1


def test_untrimmed_index_only_allowed_on_the_active_segment(two_segments):
    logs = sorted(two_segments.glob("*.log"))
    active_index = logs[1].with_suffix(".index")
    with active_index.open("ab") as f:
        f.write(bytes(8 * 100))  # a running writer keeps the active indexes preallocated
    with active_index.with_suffix(".timeindex").open("ab") as f:
        f.write(bytes(12 * 100))  # zeros here would fail Kafka's time-index sanity check on their own
    report = verify_paths([two_segments])
    assert report.problems == [] and report.notes == []
    inactive_index = logs[0].with_suffix(".index")
    n = inactive_index.stat().st_size // 8
    with inactive_index.open("ab") as f:
        f.write(bytes(8 * 100))
    report = verify_paths([two_segments])
    # what a crash between a roll and the trim leaves: recovery trims it, nothing is lost
    assert report.problems == []
    assert [(p.path, p.position) for p in report.notes] == [(inactive_index, n * 8)]
    assert "not trimmed" in report.notes[0].message


def test_a_sealed_segments_index_of_zeros_only_is_untrimmed_not_damaged(two_segments):
    """A segment sealed with no index entry, whose preallocated size a power loss kept and whose trim
    it lost: the file is zeros only. Its first entry is no entry (the base offset at position 0 would
    be wrong for a first batch of several records): a note, as any untrimmed tail."""
    logs = sorted(two_segments.glob("*.log"))
    index, time_index = logs[0].with_suffix(".index"), logs[0].with_suffix(".timeindex")
    index.write_bytes(bytes(8 * 100))
    time_index.write_bytes(bytes(12 * 100))
    report = verify_paths([two_segments])
    assert report.problems == []
    notes = [(p.path, p.position) for p in report.notes if "zero-filled" in p.message]
    assert notes == [(index, 0), (time_index, 0)]


def test_inactive_segment_without_final_time_entry(two_segments):
    logs = sorted(two_segments.glob("*.log"))
    tindex = logs[0].with_suffix(".timeindex")
    tindex.write_bytes(tindex.read_bytes()[:-12])  # drop the entry written on roll
    report = verify_paths([two_segments])
    assert report.problems == []  # recovery writes the final entry again; older brokers never did
    assert len(report.notes) == 1 and report.notes[0].path == tindex
    assert "max timestamp" in report.notes[0].message


def test_overlapping_segments_and_orphan_index(two_segments):
    logs = sorted(two_segments.glob("*.log"))
    (two_segments / "00000000000000009999.index").write_bytes(b"")
    second_base = int(logs[1].name.split(".")[0])
    # rename the second segment to a base below the end of the first one
    lower = f"{second_base - 1:020d}"
    for suffix in (".log", ".index", ".timeindex"):
        logs[1].with_suffix(suffix).rename(two_segments / f"{lower}{suffix}")
    problems = verify_paths([two_segments]).problems
    messages = [str(p) for p in problems]
    assert any("overlaps" in m and lower in m for m in messages)
    assert any("00000000000000009999.index" in m and "without a .log" in m for m in messages)


def test_counts_and_decode_records(tmp_path):
    from crc32c import crc32c

    from seglogfs.log import Log
    from seglogfs.records import ProducerRecord

    part = tmp_path / "events-0"
    with Log.open(part, create=True) as log:
        for i in range(4):
            log.append([ProducerRecord(b"v%d" % i, key=b"k"), ProducerRecord(b"w%d" % i)])
    report = verify_paths([part])
    assert report.problems == [] and (report.batches, report.records) == (4, 8)
    assert report.index_entries >= 0 and report.time_index_entries >= 1
    assert verify_paths([part], decode_records=True).records == 8
    # A batch whose CRC matches but whose first record is malformed (a producer's bug): only the
    # decoding pass sees it.
    seg = part / f"{SEG}.log"
    data = bytearray(seg.read_bytes())
    data[61] = 0x7E  # the first record's length varint: 63 bytes, past the batch
    data[17:21] = crc32c(bytes(data[21 : batches_of(bytes(data))[0][1]])).to_bytes(4, "big")
    seg.write_bytes(bytes(data))
    assert verify_paths([part]).problems == []
    problems = verify_paths([part], decode_records=True).problems
    assert [(p.path, p.position) for p in problems] == [(seg, 0)]
    assert "corrupt records" in problems[0].message


# ------------------------------------------------------------------ compacted logs (issue 10)


def test_compacted_log_gaps_empty_batches_and_delete_horizon_are_sound(tmp_path):
    """What the cleaner leaves is legal: gaps inside and between batches, a batch with no record kept
    for its offsets, a tombstone batch whose baseTimestamp is the delete horizon (after every record's
    time and after maxTimestamp), its time-index entries included."""
    from support.compacted_segments import SURVIVORS, compacted_log_bytes, write_compacted_log
    from support.record_batches import kp_parse

    part = tmp_path / "users-0"
    write_compacted_log(part)
    assert [(r[0], r[3], r[4]) for r in kp_parse(compacted_log_bytes())[1]] == SURVIVORS
    for decode in (False, True):
        report = verify_paths([part], decode_records=decode)
        assert report.problems == [] and report.notes == [], decode
        assert (report.batches, report.records) == (4, len(SURVIVORS))
        assert report.index_entries == 3 and report.time_index_entries == 3  # one per batch after the first


def _one_batch(deltas: list[int], count: int, last_delta: int) -> bytes:
    from support.record_batches import raw_record, raw_v2_batch

    area = b"".join(raw_record(d, 0, b"k%d" % i, b"v") for i, d in enumerate(deltas))
    return raw_v2_batch(area, count, last_delta=last_delta)


@pytest.mark.parametrize(
    ("deltas", "count", "last_delta", "header_finding", "decoded_finding"),
    [
        ([0, 5, 2], 3, 7, None, "record offsets 0..2 are not strictly increasing"),
        ([0, 0], 2, 1, None, "record offsets 0..0 are not strictly increasing"),
        ([0, 9], 2, 7, None, "record offsets 0..9 are not strictly increasing"),
        ([-1], 1, 0, None, "record offsets -1..-1 are not strictly increasing"),
        ([0, 1, 2], 3, 1, "3 records cannot fit offsets 0..1", "3 records cannot fit offsets 0..1"),
    ],
)
def test_record_offsets_must_still_strictly_increase(tmp_path, deltas, count, last_delta, header_finding,
                                                     decoded_finding):
    """Gaps are legal, going back or beyond the batch's lastOffset is not: the header check (count
    against the span) runs always, the per-record one when records are decoded."""
    from support.compacted_segments import write_compacted_log

    part = tmp_path / "bad-0"
    log_path = write_compacted_log(part, _one_batch(deltas, count, last_delta))
    plain = [p.message for p in verify_paths([part]).problems]
    decoded = verify_paths([part], decode_records=True).problems
    assert plain == ([header_finding] if header_finding else [])
    assert any(decoded_finding in p.message for p in decoded), decoded
    assert all((p.path, p.position) == (log_path, 0) for p in decoded)
