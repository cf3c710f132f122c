"""TransactionIndex: the ``.txnindex`` of a segment, on real files.

The byte layout is checked against a hand-built struct and against ``seglogfs dump``'s own reader of
the file (seglogfs.tools.dump_state_files, written independently).
"""

from __future__ import annotations

import errno
import io
import os
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_disk_full import Filler, small_tmpfs

from seglogfs.errors import CorruptIndexError, InvalidRecordError, ReadOnlyLogError
from seglogfs.log_transactions import LogTransactions
from seglogfs.tools.dump_state_files import dump_txn_index
from seglogfs.transaction_index import (
    ABORTED_TXN_SIZE,
    AbortedTxn,
    TransactionIndex,
)

BASE = 100


def txn_path(directory: Path, base: int = BASE) -> Path:
    return directory / f"{base:020d}.txnindex"


def index_with(directory: Path, *txns: AbortedTxn, base: int = BASE) -> TransactionIndex:
    index = TransactionIndex(txn_path(directory, base), base)
    for txn in txns:
        index.append(txn)
    return index


def raw_entry(version: int, pid: int, first: int, last: int, lso: int) -> bytes:
    return struct.pack(">hqqqq", version, pid, first, last, lso)


# ---------------------------------------------------------------------------------------- layout


def test_an_entry_is_34_big_endian_bytes_version_then_four_int64() -> None:
    txn = AbortedTxn(producer_id=7, first_offset=-3 + 2**40, last_offset=2**40 + 9, last_stable_offset=2**62)
    expected = struct.pack(">hqqqq", 0, 7, 2**40 - 3, 2**40 + 9, 2**62)
    assert txn.to_bytes() == expected
    assert len(expected) == ABORTED_TXN_SIZE == 34
    assert AbortedTxn.from_bytes(b"xx" + expected, 2) == txn


def test_a_value_that_does_not_fit_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match="producer_id=7"):
        AbortedTxn(7, 0, 2**63, 1).to_bytes()


def test_a_written_file_reads_back_through_the_dump_reader(tmp_path: Path) -> None:
    txns = [AbortedTxn(1000 + i, BASE + 3 * i, BASE + 3 * i + 2, BASE + 3 * i + 1) for i in range(2000)]
    index = index_with(tmp_path, *txns)
    index.flush()
    out = io.StringIO()
    dump_txn_index(index.path, out)
    lines = out.getvalue().splitlines()
    assert len(lines) == len(txns)
    for line, txn in zip(lines, txns, strict=True):
        assert line == (
            f"version: 0 producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
            f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}"
        )
    assert index.path.read_bytes() == b"".join(t.to_bytes() for t in txns)
    assert index.entries() == txns
    assert TransactionIndex(index.path, BASE, writable=False).entries() == txns


# ------------------------------------------------------------------------------ creation, symlinks


def test_the_file_exists_only_after_the_first_append(tmp_path: Path) -> None:
    index = TransactionIndex(txn_path(tmp_path), BASE)
    assert index.entries() == []
    assert index.collect_aborted(0, 10**9) == ([], False)
    index.sanity_check()
    index.truncate_to(BASE)
    index.reset()
    index.flush()
    index.close()
    assert not index.path.exists()
    index.append(AbortedTxn(1, BASE, BASE + 1, BASE + 2))
    assert index.path.stat().st_size == ABORTED_TXN_SIZE


def test_an_empty_file_means_no_aborted_transaction(tmp_path: Path) -> None:
    txn_path(tmp_path).write_bytes(b"")
    index = TransactionIndex(txn_path(tmp_path), BASE)
    assert index.entries() == [] and index.collect_aborted(0, 10) == ([], False)
    index.sanity_check()
    index.append(AbortedTxn(1, BASE, BASE, BASE + 1))
    assert len(index.entries()) == 1


@pytest.mark.parametrize("target_exists", [True, False])
def test_a_symlink_planted_at_the_path_is_never_followed(tmp_path: Path, target_exists: bool) -> None:
    victim = tmp_path / "victim"
    if target_exists:
        victim.write_bytes(b"precious\n")
    txn_path(tmp_path).symlink_to(victim)
    index = TransactionIndex(txn_path(tmp_path), BASE)
    with pytest.raises(OSError) as raised:
        index.append(AbortedTxn(1, BASE, BASE + 1, BASE + 2))
    assert raised.value.errno == errno.ELOOP
    with pytest.raises(OSError) as read:
        index.entries()
    assert read.value.errno == errno.ELOOP
    if target_exists:
        assert victim.read_bytes() == b"precious\n"
    else:
        assert not victim.exists()


# --------------------------------------------------------------------------------------- appending


@pytest.mark.parametrize(
    ("txn", "words"),
    [
        (AbortedTxn(1, BASE + 5, BASE + 4, BASE + 6), "first offset <= last offset"),
        (AbortedTxn(1, BASE - 9, BASE - 1, BASE), "base offset 100"),
        (AbortedTxn(1, BASE, BASE + 5, BASE + 6, version=1), "version must be 0"),
        (
            AbortedTxn(2, BASE + 1, BASE + 7, BASE + 8),
            "last offset 107 is not above the previous entry's 107",
        ),
        (
            AbortedTxn(2, BASE + 1, BASE + 6, BASE + 8),
            "last offset 106 is not above the previous entry's 107",
        ),
    ],
)
def test_append_refuses_what_the_index_cannot_hold(tmp_path: Path, txn: AbortedTxn, words: str) -> None:
    index = index_with(tmp_path, AbortedTxn(1, BASE, BASE + 7, BASE + 8))
    before = index.path.read_bytes()
    with pytest.raises(InvalidRecordError, match=words) as raised:
        index.append(txn)
    assert str(index.path) in str(raised.value)
    assert index.path.read_bytes() == before


def test_the_previous_last_offset_is_read_from_an_existing_file(tmp_path: Path) -> None:
    index_with(tmp_path, AbortedTxn(1, BASE, BASE + 7, BASE + 8)).close()
    reopened = TransactionIndex(txn_path(tmp_path), BASE)
    with pytest.raises(InvalidRecordError, match="previous entry's 107"):
        reopened.append(AbortedTxn(2, BASE, BASE + 7, BASE + 8))
    reopened.append(AbortedTxn(2, BASE, BASE + 8, BASE + 9))
    assert [t.last_offset for t in reopened.entries()] == [BASE + 7, BASE + 8]


def test_append_after_a_partial_entry_is_refused_naming_the_position(tmp_path: Path) -> None:
    txn_path(tmp_path).write_bytes(AbortedTxn(1, BASE, BASE + 1, BASE + 2).to_bytes() + b"\0" * 5)
    index = TransactionIndex(txn_path(tmp_path), BASE)
    with pytest.raises(CorruptIndexError, match=f"{txn_path(tmp_path)}.*partial entry at position 34"):
        index.append(AbortedTxn(2, BASE, BASE + 5, BASE + 6))
    assert txn_path(tmp_path).stat().st_size == 39


def test_a_read_only_index_changes_nothing(tmp_path: Path) -> None:
    index_with(tmp_path, AbortedTxn(1, BASE, BASE + 7, BASE + 8)).close()
    before = txn_path(tmp_path).read_bytes()
    reader = TransactionIndex(txn_path(tmp_path), BASE, writable=False)
    for change in (
        lambda: reader.append(AbortedTxn(2, BASE, BASE + 9, BASE + 10)),
        lambda: reader.truncate_to(BASE),
        reader.reset,
    ):
        with pytest.raises(ReadOnlyLogError, match="read-only"):
            change()
    assert txn_path(tmp_path).read_bytes() == before


def test_a_short_write_on_a_full_disk_is_cut_back_and_raised(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk") as disk:
        index = TransactionIndex(txn_path(disk), BASE)
        fitting = 4096 // ABORTED_TXN_SIZE  # 120 entries: the next one straddles the page boundary
        for i in range(fitting):
            index.append(AbortedTxn(1, BASE + i, BASE + i, BASE + i + 1))
        filler = Filler(disk / "filler")
        filler.fill()
        with pytest.raises(OSError) as raised:
            index.append(AbortedTxn(1, BASE + fitting, BASE + fitting, BASE + fitting + 1))
        assert raised.value.errno == errno.ENOSPC
        assert index.path.stat().st_size == fitting * ABORTED_TXN_SIZE
        index.sanity_check()
        filler.free()
        index.append(AbortedTxn(1, BASE + fitting, BASE + fitting, BASE + fitting + 1))
        assert len(index.entries()) == fitting + 1
        index.close()
        filler.close()


# --------------------------------------------------------------------------------------- reading


def test_a_partial_last_entry_is_left_out_of_reads(tmp_path: Path) -> None:
    whole = AbortedTxn(1, BASE, BASE + 1, BASE + 2)
    txn_path(tmp_path).write_bytes(whole.to_bytes() + raw_entry(0, 2, BASE, BASE + 4, BASE + 5)[:20])
    assert TransactionIndex(txn_path(tmp_path), BASE).entries() == [whole]


def test_reading_an_unknown_version_is_an_error_naming_file_and_position(tmp_path: Path) -> None:
    txn_path(tmp_path).write_bytes(
        raw_entry(0, 1, BASE, BASE + 1, BASE + 2) + raw_entry(3, 2, BASE, BASE + 4, BASE + 5)
    )
    index = TransactionIndex(txn_path(tmp_path), BASE)
    for read in (index.entries, lambda: index.collect_aborted(0, 10**6)):
        with pytest.raises(CorruptIndexError, match=f"{txn_path(tmp_path)}: entry at position 34: version 3"):
            read()


def test_collect_takes_the_overlapping_entries_in_file_order_with_inclusive_boundaries(
    tmp_path: Path,
) -> None:
    fetch, upper = 200, 300
    on_fetch = AbortedTxn(1, 150, fetch, 180)  # last_offset == fetch: overlaps
    before_fetch = AbortedTxn(2, 160, fetch - 1, 170)  # ends just before: out
    late_first = AbortedTxn(3, 250, 260, 240)  # in file order after, though it starts later than next
    at_upper = AbortedTxn(4, upper, 310, 299)  # first_offset == upper: out
    below_upper = AbortedTxn(5, upper - 1, 320, 299)  # first just below: in
    index = TransactionIndex(txn_path(tmp_path), 100)
    for txn in (before_fetch, on_fetch, late_first, at_upper, below_upper):
        index.append(txn)
    assert index.collect_aborted(fetch, upper) == ([on_fetch, late_first, below_upper], False)


@pytest.mark.parametrize(("lso", "complete"), [(299, False), (300, True), (301, True)])
def test_collect_is_complete_once_an_entry_is_stable_past_the_bound(
    tmp_path: Path, lso: int, complete: bool
) -> None:
    index = index_with(tmp_path, AbortedTxn(1, 120, 150, 130), AbortedTxn(2, 400, 410, lso))
    assert index.collect_aborted(100, 300) == ([AbortedTxn(1, 120, 150, 130)], complete)


def test_collect_across_segments_stops_at_the_first_complete_index_and_sorts(tmp_path: Path) -> None:
    first = index_with(tmp_path, AbortedTxn(1, 95, 110, 90), base=100)
    empty = TransactionIndex(txn_path(tmp_path, 200), 200)  # no file: no aborted transaction there
    # The marker of producer 2 completes at 310 while producer 3 has been open since 90 (a
    # transaction starting in an earlier segment): its LSO stays 90, the search is not complete.
    second = index_with(tmp_path, AbortedTxn(2, 290, 310, 90), AbortedTxn(3, 90, 330, 500), base=300)
    third = index_with(tmp_path, AbortedTxn(4, 380, 600, 601), base=400)  # overlaps, but never reached

    def collect(*indexes: TransactionIndex) -> list[AbortedTxn]:  # as a log walks its segments
        segments = [SimpleNamespace(base_offset=x.base_offset, uid=x.base_offset, txn_index=x)
                    for x in indexes]
        return LogTransactions(tmp_path, read_only=True).aborted(segments, 100, 450)  # type: ignore[arg-type]

    result = collect(first, empty, second, third)
    assert result == [AbortedTxn(3, 90, 330, 500), AbortedTxn(1, 95, 110, 90), AbortedTxn(2, 290, 310, 90)]
    # Without the complete one, the walk goes on to the third index.
    assert AbortedTxn(4, 380, 600, 601) in collect(first, empty, third)


# ---------------------------------------------------------------------------------- sanity check

SOUND = raw_entry(0, 1, 100, 101, 102)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (SOUND + b"\1" * 7, "41 bytes is not a multiple of 34: a partial entry at position 34"),
        (SOUND + raw_entry(1, 2, 100, 105, 106), "position 34: version 1"),
        (SOUND + raw_entry(0, 2, 107, 105, 106), "position 34: first offset 107 is past"),
        (SOUND + raw_entry(0, 2, 90, 99, 106), "position 34: last offset 99 is below the base"),
        (
            SOUND + raw_entry(0, 2, 100, 110, 111) + raw_entry(0, 3, 100, 105, 106),
            "position 68: last offset 105 is below the previous entry's",
        ),
        (
            # two kinds of damage: the first entry in the file is named, whatever its kind
            SOUND
            + raw_entry(0, 2, 100, 110, 111)
            + raw_entry(0, 3, 100, 105, 106)
            + raw_entry(0, 4, 1, 2, 3),
            "position 68: last offset 105",
        ),
    ],
    ids=["partial-tail", "bad-version", "first-past-last", "below-base", "decreasing", "first-damage"],
)
def test_sanity_check_names_the_file_and_the_damaged_entry(tmp_path: Path, data: bytes, words: str) -> None:
    txn_path(tmp_path).write_bytes(data)
    with pytest.raises(CorruptIndexError, match=f"transaction index {txn_path(tmp_path)}.*{words}"):
        TransactionIndex(txn_path(tmp_path), BASE).sanity_check()


def test_sanity_check_passes_a_sound_file(tmp_path: Path) -> None:
    index_with(tmp_path, AbortedTxn(1, 90, 100, 101), AbortedTxn(2, 95, 140, 95)).sanity_check()


# -------------------------------------------------------------------------------- truncate, reset


def test_truncate_to_drops_the_markers_at_and_after_the_offset(tmp_path: Path) -> None:
    txns = [AbortedTxn(1, 100, 110, 111), AbortedTxn(2, 105, 120, 121), AbortedTxn(3, 115, 130, 131)]
    index = index_with(tmp_path, *txns)
    index.truncate_to(131)
    assert index.entries() == txns
    index.truncate_to(130)  # the marker at 130 goes
    assert index.entries() == txns[:2]
    index.truncate_to(120)
    assert index.entries() == txns[:1]
    # The previous last offset follows the cut: a marker re-appended after truncation is accepted.
    index.append(AbortedTxn(4, 112, 115, 116))
    assert index.entries() == [txns[0], AbortedTxn(4, 112, 115, 116)]
    index.truncate_to(0)
    assert index.entries() == [] and index.path.stat().st_size == 0
    index.append(AbortedTxn(5, 100, 100, 101))
    assert len(index.entries()) == 1


def test_truncate_to_also_drops_a_partial_last_entry(tmp_path: Path) -> None:
    kept = AbortedTxn(1, 100, 110, 111)
    txn_path(tmp_path).write_bytes(kept.to_bytes() + b"\0" * 12)
    index = TransactionIndex(txn_path(tmp_path), BASE)
    index.truncate_to(500)
    assert index.path.read_bytes() == kept.to_bytes()
    index.append(AbortedTxn(2, 100, 120, 121))
    index.sanity_check()


def test_reset_empties_the_file_and_forgets_the_last_offset(tmp_path: Path) -> None:
    index = index_with(tmp_path, AbortedTxn(1, 100, 150, 151))
    index.reset()
    assert index.path.exists() and index.entries() == []
    index.append(AbortedTxn(2, 100, 120, 121))  # below the forgotten 150
    assert index.entries() == [AbortedTxn(2, 100, 120, 121)]


# ------------------------------------------------------------------------------- rename, delete


def test_rename_to_moves_the_file_and_later_reads_and_appends_follow_it(tmp_path: Path) -> None:
    index = index_with(tmp_path, AbortedTxn(1, 100, 110, 111))
    old = index.path
    index.rename_to(old.with_name(old.name + ".deleted"))
    assert not old.exists() and index.path.name.endswith(".txnindex.deleted")
    index.append(AbortedTxn(2, 100, 120, 121))  # the open descriptor follows the file
    assert [t.producer_id for t in index.entries()] == [1, 2]
    assert not old.exists()


def test_rename_and_delete_of_a_missing_file(tmp_path: Path) -> None:
    index = TransactionIndex(txn_path(tmp_path), BASE)
    index.rename_to(tmp_path / "elsewhere.txnindex")
    assert index.path == tmp_path / "elsewhere.txnindex" and not index.path.exists()
    assert index.delete_if_exists() is False
    index.append(AbortedTxn(1, 100, 110, 111))
    assert index.delete_if_exists() is True
    assert not index.path.exists() and os.listdir(tmp_path) == []
