"""``seglogfs dump`` against Kafka's own ``kafka.tools.DumpLogSegments`` (kafka-dump-log.sh) on the
same files: the broker-written test data and a data dir seglogfs wrote (rolled, compacted, with
transactions). stdout must match line for line; stderr's problem reports match as a set, since
Kafka prints them in a hash map's order.

Files left out, as docs/oracle.md says: the text checkpoints, which Kafka does not dump
(``leader-epoch-checkpoint`` even crashes it), and seglogfs' own hidden files.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.dump_compare import assert_same_dumps, segment_files
from support.kafka_broker import require_kafka
from support.offsets_records import write_offsets_log
from support.oracle_logs import write_oracle_logs
from support.testdata import KAFKA_LOG_DIR

pytestmark = pytest.mark.oracle

#: the non-empty broker-written logs, and one empty one
TESTDATA_LOGS = ("__consumer_offsets-15", "__cluster_metadata-0", "demo-topic-0")
@pytest.fixture(scope="module")
def testdata(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_kafka()
    dst = tmp_path_factory.mktemp("testdata")
    for name in TESTDATA_LOGS:
        shutil.copytree(KAFKA_LOG_DIR / name, dst / name)
    return dst


@pytest.fixture(scope="module")
def seglogfs_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_kafka()
    data = tmp_path_factory.mktemp("seglogfs")
    write_oracle_logs(data)
    return data


def test_dumps_of_broker_written_logs_match_kafka_dump_log(testdata: Path) -> None:
    files = segment_files([testdata / n for n in TESTDATA_LOGS])
    # the offsets log's values are no metadata records: Kafka's error for each, in its words
    logs = [p for p in files if p.suffix == ".log"]
    assert_same_dumps(
        [
            (files, []),
            (files, ["--print-data-log"]),
            (files, ["--index-sanity-check"]),
            (logs, ["--cluster-metadata-decoder"]),
            (logs, ["--max-bytes", "5000", "--deep-iteration"]),
            (logs, ["--max-message-size", "100", "--deep-iteration"]),
            (files, ["--print-data-log", "--skip-record-metadata"]),
            (files, ["--deep-iteration", "--verify-index-only"]),
        ]
    )


def test_dumps_of_seglogfs_written_logs_match_kafka_dump_log(seglogfs_data: Path) -> None:
    """Rolled, compressed with each codec (Kafka decompresses seglogfs' gzip, xerial snappy, lz4
    frames and zstd), compacted by seglogfs' cleaner, transactional with its .txnindex and
    producer snapshots: every file as Kafka prints it."""
    files = segment_files(sorted(p for p in seglogfs_data.iterdir() if p.is_dir()))
    suffixes = {p.suffix for p in files}
    assert {".log", ".index", ".timeindex", ".txnindex", ".snapshot"} <= suffixes
    assert_same_dumps(
        [
            (files, []),
            (files, ["--print-data-log"]),
            (files, ["--verify-index-only"]),
            (files, ["--index-sanity-check"]),
        ]
    )


def test_offsets_decoder_matches_kafka_on_broker_written_consumer_offsets(tmp_path: Path) -> None:
    """The real ``__consumer_offsets`` a broker wrote, all 50 partitions: group metadata with a
    consumer group's subscription and assignment, offset commits (the other 49 are empty)."""
    for log in KAFKA_LOG_DIR.glob("__consumer_offsets-*"):
        shutil.copytree(log, tmp_path / log.name)
    files = segment_files(sorted(tmp_path.iterdir()))
    assert len([p for p in files if p.suffix == ".log"]) == 50
    short = ["--offsets-decoder", "--skip-record-metadata"]
    assert_same_dumps([(files, ["--offsets-decoder"]), (files, short)])


def test_offsets_decoder_matches_kafka_on_every_record_shape(tmp_path: Path) -> None:
    """Every value version of both record types, the consumer protocol's versions, tombstones, and
    the records Kafka reports instead of decoding, in Kafka's words."""
    log = write_offsets_log(tmp_path / "__consumer_offsets-0")
    assert_same_dumps([([log], ["--offsets-decoder"])])
