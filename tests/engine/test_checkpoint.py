"""Kafka checkpoint files, partition.metadata, the clean-shutdown marker and log dir names."""

from __future__ import annotations

import base64
import contextlib
import shutil
from pathlib import Path

import crc32c
import pytest
from support.testdata import KAFKA_LOG_DIR

from seglogfs.checkpoint import (
    EMPTY_PRODUCER_SNAPSHOT,
    CorruptCheckpointError,
    new_topic_id,
    read_clean_shutdown_marker,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
    remove_clean_shutdown_marker,
    write_clean_shutdown_marker,
    write_empty_producer_snapshot,
    write_leader_epoch_checkpoint,
    write_offset_checkpoint,
    write_partition_metadata,
)
from seglogfs.errors import InvalidLogNameError
from seglogfs.log_files import (
    CLEAN_SHUTDOWN_FILE,
    is_kafka_special_dir,
    parse_log_dir_name,
    validate_log_name,
)

KAFKA_DIR = KAFKA_LOG_DIR


@pytest.fixture(scope="module")
def kafka_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the real Kafka log dir (shared/ is never written)."""
    dest = tmp_path_factory.mktemp("kafka") / "logdir"
    shutil.copytree(KAFKA_DIR, dest)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


# --- the real Kafka files ------------------------------------------------------------------------------


def test_real_recovery_point_checkpoint(kafka_dir: Path) -> None:
    offsets = read_offset_checkpoint(kafka_dir / "recovery-point-offset-checkpoint")
    assert len(offsets) == 53
    assert offsets[("demo-topic", 2)] == 0
    assert offsets[("__consumer_offsets", 13)] == 0
    assert {topic for topic, _ in offsets} == {"demo-topic", "__consumer_offsets"}
    assert sorted(p for t, p in offsets if t == "__consumer_offsets") == list(range(50))
    assert read_offset_checkpoint(kafka_dir / "replication-offset-checkpoint").keys() == offsets.keys()


def test_real_empty_checkpoints(kafka_dir: Path) -> None:
    assert (kafka_dir / "log-start-offset-checkpoint").read_bytes() == b"0\n0\n"
    assert read_offset_checkpoint(kafka_dir / "log-start-offset-checkpoint") == {}
    assert (kafka_dir / "cleaner-offset-checkpoint").stat().st_size == 0
    assert read_offset_checkpoint(kafka_dir / "cleaner-offset-checkpoint") == {}


def test_real_leader_epoch_checkpoints(kafka_dir: Path) -> None:
    assert read_leader_epoch_checkpoint(kafka_dir / "__consumer_offsets-15" / "leader-epoch-checkpoint") == [
        (0, 0),
        (2, 159),
    ]
    assert read_leader_epoch_checkpoint(kafka_dir / "__cluster_metadata-0" / "leader-epoch-checkpoint") == [
        (1, 0)
    ]


def test_real_partition_metadata(kafka_dir: Path) -> None:
    assert read_partition_metadata(kafka_dir / "__consumer_offsets-15") == "FPCMpfzhTqatNggLgXnlSg"
    # KRaft's fixed metadata topic id (Uuid.METADATA_TOPIC_ID).
    assert read_partition_metadata(kafka_dir / "__cluster_metadata-0") == "AAAAAAAAAAAAAAAAAAAAAQ"


def test_real_clean_shutdown_marker(kafka_dir: Path) -> None:
    assert read_clean_shutdown_marker(kafka_dir) == 12


def test_real_producer_snapshot_matches_ours(kafka_dir: Path, tmp_path: Path) -> None:
    theirs = (kafka_dir / "__consumer_offsets-15" / "00000000000000000256.snapshot").read_bytes()
    ours = tmp_path / "00000000000000000256.snapshot"
    write_empty_producer_snapshot(ours)
    assert ours.read_bytes() == theirs == EMPTY_PRODUCER_SNAPSHOT
    assert int.from_bytes(EMPTY_PRODUCER_SNAPSHOT[2:6], "big") == crc32c.crc32c(EMPTY_PRODUCER_SNAPSHOT[6:])


def test_real_dir_names_parse(kafka_dir: Path) -> None:
    names = {p.name: parse_log_dir_name(p.name) for p in kafka_dir.iterdir() if p.is_dir()}
    assert names["__consumer_offsets-15"] == ("__consumer_offsets", 15)
    assert names["__cluster_metadata-0"] == ("__cluster_metadata", 0)
    assert names["demo-topic-2"] == ("demo-topic", 2)
    assert len(names) == 54


def test_rewrite_real_checkpoint_round_trips(kafka_dir: Path, tmp_path: Path) -> None:
    offsets = read_offset_checkpoint(kafka_dir / "recovery-point-offset-checkpoint")
    copy = tmp_path / "recovery-point-offset-checkpoint"
    write_offset_checkpoint(copy, offsets)
    assert read_offset_checkpoint(copy) == offsets
    # Same lines as Kafka's file, ours sorted.
    theirs = (kafka_dir / "recovery-point-offset-checkpoint").read_text().splitlines()
    mine = copy.read_text().splitlines()
    assert mine[:2] == theirs[:2] == ["0", "53"]
    assert sorted(mine[2:]) == sorted(theirs[2:])


# --- round trips -------------------------------------------------------------------------------------


def test_offset_checkpoint_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    offsets = {("events", 0): 123, ("events", 1): 0, ("a.b_c-d", 7): 2**63 - 1}
    write_offset_checkpoint(path, offsets)
    assert read_offset_checkpoint(path) == offsets
    assert path.read_text().splitlines() == [
        "0",
        "3",
        "a.b_c-d 7 9223372036854775807",
        "events 0 123",
        "events 1 0",
    ]
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()
    write_offset_checkpoint(path, {})
    assert path.read_bytes() == b"0\n0\n"
    assert read_offset_checkpoint(path) == {}


def test_offset_checkpoint_write_refuses_bad_entries(tmp_path: Path) -> None:
    with pytest.raises(InvalidLogNameError):
        write_offset_checkpoint(tmp_path / "c", {("has space", 0): 1})
    with pytest.raises(ValueError):
        write_offset_checkpoint(tmp_path / "c", {("ok", -1): 1})
    assert not (tmp_path / "c").exists()


def test_write_replaces_atomically_and_ignores_stale_tmp(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    (tmp_path / "log-start-offset-checkpoint.tmp").write_text("garbage from a crash")
    write_offset_checkpoint(path, {("x", 0): 1})
    write_offset_checkpoint(path, {("x", 0): 2})
    assert read_offset_checkpoint(path) == {("x", 0): 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log-start-offset-checkpoint"]


def test_missing_checkpoint_reads_empty(tmp_path: Path) -> None:
    assert read_offset_checkpoint(tmp_path / "nope") == {}
    assert read_leader_epoch_checkpoint(tmp_path / "nope") == []


def test_leader_epoch_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_leader_epoch_checkpoint(path, [(0, 0), (3, 1500), (4, 99)])
    assert path.read_text() == "0\n3\n0 0\n3 1500\n4 99\n"
    assert read_leader_epoch_checkpoint(path) == [(0, 0), (3, 1500), (4, 99)]


def test_partition_metadata_round_trip(tmp_path: Path) -> None:
    topic_id = write_partition_metadata(tmp_path)
    assert read_partition_metadata(tmp_path) == topic_id
    text = (tmp_path / "partition.metadata").read_text()
    assert text == f"version: 0\ntopic_id: {topic_id}"  # Kafka writes no trailing newline
    write_partition_metadata(tmp_path, "FPCMpfzhTqatNggLgXnlSg")
    assert read_partition_metadata(tmp_path) == "FPCMpfzhTqatNggLgXnlSg"
    assert read_partition_metadata(tmp_path / "missing") is None
    with pytest.raises(ValueError):
        write_partition_metadata(tmp_path, "not-an-id")


def test_new_topic_ids_are_kafka_uuids() -> None:
    ids = {new_topic_id() for _ in range(500)}
    assert len(ids) == 500
    for topic_id in ids:
        assert len(topic_id) == 22 and not topic_id.startswith("-")
        raw = base64.urlsafe_b64decode(topic_id + "==")
        assert len(raw) == 16
        assert raw[6] >> 4 == 4  # random (version 4) UUID, as java.util.UUID.randomUUID


def test_clean_shutdown_marker_lifecycle(tmp_path: Path) -> None:
    assert read_clean_shutdown_marker(tmp_path) is None
    write_clean_shutdown_marker(tmp_path, 7)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == b'{"version":0,"brokerEpoch":7}'
    assert read_clean_shutdown_marker(tmp_path) == 7
    assert remove_clean_shutdown_marker(tmp_path) is True
    assert remove_clean_shutdown_marker(tmp_path) is False
    assert read_clean_shutdown_marker(tmp_path) is None


def test_legacy_empty_clean_shutdown_marker_counts(tmp_path: Path) -> None:
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_bytes(b"")
    assert read_clean_shutdown_marker(tmp_path) == -1  # an empty (legacy) marker still counts


# --- corrupt files -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        (b"1\n0\n", 1, "unsupported version"),
        (b"x\n0\n", 1, "bad version"),
        (b"0\nmany\n", 2, "bad entry count"),
        (b"0\n2\nevents 0 5\n", 3, "expected 2 entries but found 1"),  # truncated
        (b"0\n1\nevents 0 5\nevents 1 6\n", 4, "expected 1 entries but found 2"),
        (b"0\n1\nevents 0\n", 3, "malformed line"),
        (b"0\n1\nevents 0 5 9\n", 3, "malformed line"),
        (b"0\n1\n events 0 5\n", 3, "malformed line"),
        (b"0\n1\nevents zero 5\n", 3, "bad partition"),
        (b"0\n1\nevents 0 +5\n", 3, "bad offset"),
        (b"0\n1\nevents 0 99999999999999999999\n", 3, "bad offset"),
        (b"0\n1\nevents 0 5\xff\n", None, "not UTF-8"),
    ],
)
def test_corrupt_offset_checkpoint_names_file_and_line(
    tmp_path: Path, content: bytes, line: int | None, message: str
) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError) as info:
        read_offset_checkpoint(path)
    err = info.value
    assert err.path == str(path)
    assert err.line == line
    assert message in str(err)
    assert str(path) in str(err)
    if line is not None:
        assert f"at line {line}" in str(err)


def test_corrupt_leader_epoch_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\n1\n0 0 0\n")
    with pytest.raises(CorruptCheckpointError, match="malformed line") as info:
        read_leader_epoch_checkpoint(path)
    assert info.value.line == 3


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b"version: 1\ntopic_id: FPCMpfzhTqatNggLgXnlSg", 1),
        (b"", 1),
        (b"version: 0\n", 2),
        (b"version: 0\ntopic: FPCMpfzhTqatNggLgXnlSg", 2),
        (b"version: 0\ntopic_id: short", 2),
    ],
)
def test_corrupt_partition_metadata(tmp_path: Path, content: bytes, line: int) -> None:
    (tmp_path / "partition.metadata").write_bytes(content)
    with pytest.raises(CorruptCheckpointError) as info:
        read_partition_metadata(tmp_path)
    assert info.value.line == line
    assert str(tmp_path / "partition.metadata") in str(info.value)


# --- names -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("events-0", ("events", 0)),
        ("my-topic-12", ("my-topic", 12)),
        ("events", ("events", 0)),
        ("a-b", ("a-b", 0)),
        ("events-", ("events-", 0)),
        ("-5", ("-5", 0)),
        ("t-2147483647", ("t", 2147483647)),
        ("t-2147483648", ("t-2147483648", 0)),  # not an int32 partition
        ("x.y_z-3", ("x.y_z", 3)),
    ],
)
def test_parse_log_dir_name(name: str, expected: tuple[str, int]) -> None:
    assert parse_log_dir_name(name) == expected


@pytest.mark.parametrize("name", ["", ".", "..", "a b", "a/b", "é", "x" * 250, "tab\t"])
def test_invalid_log_names(name: str) -> None:
    with pytest.raises(InvalidLogNameError):
        validate_log_name(name)
    with pytest.raises(InvalidLogNameError):
        parse_log_dir_name(name)


def test_valid_log_names() -> None:
    for name in ["a", "x" * 249, "...", "_-.", "Events-0"]:
        assert validate_log_name(name) == name
    with pytest.raises(InvalidLogNameError):
        validate_log_name(5)


def test_kafka_special_dirs() -> None:
    assert is_kafka_special_dir("events-0.3b2c1a0f9e8d7c6b5a4f3e2d1c0b9a8f-delete")
    assert is_kafka_special_dir("events-0.3b2c1a0f9e8d7c6b5a4f3e2d1c0b9a8f-future")
    assert is_kafka_special_dir("events-0.3b2c1a0f9e8d7c6b5a4f3e2d1c0b9a8f-stray")
    assert not is_kafka_special_dir("events-0")
    assert not is_kafka_special_dir("delete")


# --- planted symlinks: no writer of the data dir or a log dir follows one ------------------------------

_WRITERS = {
    "offset checkpoint": (
        "recovery-point-offset-checkpoint",
        lambda d: write_offset_checkpoint(d / "recovery-point-offset-checkpoint", {("t", 0): 5}),
        lambda d: read_offset_checkpoint(d / "recovery-point-offset-checkpoint") == {("t", 0): 5},
    ),
    "leader epoch checkpoint": (
        "leader-epoch-checkpoint",
        lambda d: write_leader_epoch_checkpoint(d / "leader-epoch-checkpoint", [(0, 3)]),
        lambda d: read_leader_epoch_checkpoint(d / "leader-epoch-checkpoint") == [(0, 3)],
    ),
    "partition.metadata": (
        "partition.metadata",
        lambda d: write_partition_metadata(d, "AAAAAAAAAAAAAAAAAAAAAg"),
        lambda d: read_partition_metadata(d) == "AAAAAAAAAAAAAAAAAAAAAg",
    ),
    "clean-shutdown marker": (
        CLEAN_SHUTDOWN_FILE,
        lambda d: write_clean_shutdown_marker(d, 7),
        lambda d: read_clean_shutdown_marker(d) == 7,
    ),
    "producer snapshot": (
        "00000000000000000000.snapshot",
        lambda d: write_empty_producer_snapshot(d / "00000000000000000000.snapshot"),
        lambda d: (d / "00000000000000000000.snapshot").read_bytes() == EMPTY_PRODUCER_SNAPSHOT,
    ),
}


@pytest.mark.parametrize("kind", sorted(_WRITERS))
@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_a_symlink_planted_at_the_tmp_file_is_never_followed(
    tmp_path: Path, kind: str, dangling: bool
) -> None:
    name, write, written = _WRITERS[kind]
    directory = tmp_path / "dir"
    directory.mkdir()
    victim = tmp_path / "outside" / "victim"
    victim.parent.mkdir()
    if not dangling:
        victim.write_bytes(b"precious\n")
    (directory / f"{name}.tmp").symlink_to(victim)
    write(directory)
    assert written(directory), kind
    assert not (directory / name).is_symlink() and not (directory / f"{name}.tmp").exists()
    if dangling:
        assert not victim.exists(), f"{kind} created a file outside the directory"
    else:
        assert victim.read_bytes() == b"precious\n", f"{kind} wrote through the symlink"


def test_a_directory_in_place_of_the_tmp_file_is_an_error_not_a_deletion(tmp_path: Path) -> None:
    (tmp_path / "recovery-point-offset-checkpoint.tmp").mkdir()
    (tmp_path / "recovery-point-offset-checkpoint.tmp" / "keep").write_text("x")
    with pytest.raises(IsADirectoryError):
        write_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint", {("t", 0): 1})
    assert (tmp_path / "recovery-point-offset-checkpoint.tmp" / "keep").read_text() == "x"


@pytest.mark.parametrize("suffix", [".log", ".index", ".timeindex"])
def test_a_segment_roll_onto_a_planted_symlink_writes_nothing_outside(tmp_path: Path, suffix: str) -> None:
    from seglogfs.config import LogConfig
    from seglogfs.log import Log

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200), create=True)
    try:
        log.append_values([b"x" * 150])
        (tmp_path / "t-0" / f"{log.end_offset:020d}{suffix}").symlink_to(victim)
        with pytest.raises(OSError):
            for _ in range(3):
                log.append_values([b"y" * 150])
        assert victim.read_bytes() == b"precious\n"
        assert next(r.value for r in log.iter_records()) == b"x" * 150
    finally:
        with contextlib.suppress(OSError):
            log.close()
    assert victim.read_bytes() == b"precious\n"
