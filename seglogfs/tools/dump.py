"""``seglogfs dump``: kafka-dump-log.sh's output, line for line (docs/kafka-format.md section 7).

Files are dispatched by suffix like Kafka's DumpLogSegments: ``.log`` (and KRaft ``.checkpoint``
snapshots) print batches and, with deep iteration, records; ``.index`` / ``.timeindex`` print their
entries and check them against the ``.log`` next to them (problems go to stderr at the very end, in
Kafka's words); ``.snapshot`` prints producer-state entries; ``.txnindex`` aborted transactions;
anything else is ignored with a note on stderr.

Where we differ: kafka-dump-log.sh ignores a data dir's text checkpoints ("Ignoring unknown file":
their names have no suffix it knows); ``seglogfs dump`` lists them, one ``topic: T partition: P
offset: O`` line per entry for the offset checkpoints (``cleaner-offset-checkpoint``,
``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint``) and ``epoch: E startOffset: O`` for a log's
``leader-epoch-checkpoint``. A malformed checkpoint is an error naming the file and the line (exit 1).

KRaft control records print as Kafka prints them: ``LeaderChange:``, ``SnapshotHeader``,
``SnapshotFooter``, ``KRaftVersion`` and ``KRaftVoters`` followed by the message's JSON. With the
cluster-metadata decoder (``DumpOptions.cluster_metadata_decoder``, kafka-dump-log.sh's
``--cluster-metadata-decoder``; like Kafka it implies ``--print-data-log``) each record's payload is
its metadata record as JSON (``seglogfs/tools/metadata_records.py``); a value that does not decode prints
Kafka's ``Error at <offset>, skipping. <why>`` in its place.

With the offsets decoder (``DumpOptions.offsets_decoder``, ``--offsets-decoder``; it implies
``--print-data-log`` too) a ``__consumer_offsets`` record prints its key and value as Kafka's JSON
(``seglogfs/consumer_offsets.py``): committed offsets and classic group metadata, a ``consumer``
group's subscriptions and assignments decoded, ``<DELETE>`` for a tombstone, Kafka's error text for
a record that does not decode. Where we differ: a KIP-848 group record (key version 3 and up), which
Kafka decodes, prints ``Unknown record type N at offset O, skipping.`` (Kafka's line for a type it
does not know), and a record without a key prints an error line where Kafka's dump stops.

Not supported: the key/value decoder classes and the transaction-log /
remote-log-metadata / share-group-state decoders (``--print-data-log`` otherwise decodes as UTF-8
text, Kafka's default StringDecoder).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from seglogfs.checkpoint import CorruptCheckpointError
from seglogfs.errors import CorruptIndexError, CorruptRecordError
from seglogfs.index import OffsetIndex, TimeIndex
from seglogfs.log_files import (
    BOOTSTRAP_CHECKPOINT,
    INDEX_SUFFIX,
    KRAFT_SNAPSHOT_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    PRODUCER_SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    base_offset_from_name,
    sibling_path,
)
from seglogfs.records import BatchHeader, DecodedRecord, decode_batch_all, iter_batch_headers, validate_batch
from seglogfs.regular_files import FileBuffer, non_regular_kind, open_readonly, require_regular_file
from seglogfs.tools.dump_state_files import (
    INT_MAX,
    OFFSET_CHECKPOINTS,
    dump_leader_epoch_checkpoint,
    dump_offset_checkpoint,
    dump_producer_snapshot,
    dump_txn_index,
)
from seglogfs.tools.metadata_records import (
    CONTROL_SCHEMAS,
    MetadataDecodeError,
    decode_control_record,
    decode_metadata_record,
    to_json,
)
from seglogfs.tools.offsets_json import offsets_json

__all__ = ["DEFAULT_MAX_MESSAGE_SIZE", "INT_MAX", "DumpOptions", "dump_files"]

#: KRaft metadata snapshots, ``<20-digit end offset>-<10-digit epoch>.checkpoint`` (record-batch files)

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CONTROL_TYPES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}
#: what Kafka prints before a KRaft control record's JSON (its LeaderChange label has the colon)
CONTROL_JSON_LABELS = {
    2: "LeaderChange:",
    3: "SnapshotHeader",
    4: "SnapshotFooter",
    5: "KRaftVersion",
    6: "KRaftVoters",
}


@dataclass
class DumpOptions:
    """The kafka-dump-log.sh options seglogfs understands."""

    print_data_log: bool = False
    deep_iteration: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_bytes: int = INT_MAX
    skip_record_metadata: bool = False
    cluster_metadata_decoder: bool = False
    offsets_decoder: bool = False

    @property
    def prints_data(self) -> bool:
        # Kafka: every decoder option implies --print-data-log
        return self.print_data_log or self.cluster_metadata_decoder or self.offsets_decoder

    @property
    def is_deep(self) -> bool:
        # Kafka: --print-data-log implies deep iteration
        return self.deep_iteration or self.prints_data


@dataclass
class _Problems:
    """What Kafka prints on stderr after every file was dumped."""

    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def print(self, err: TextIO) -> None:
        # Kafka prepends to these two lists, so they come out newest first.
        for name, pairs in self.index_mismatches.items():
            err.write(f"Mismatches in :{name}\n")
            for index_offset, log_offset in reversed(pairs):
                err.write(f"  Index offset: {index_offset}, log offset: {log_offset}\n")
        for name, pairs in self.time_mismatches.items():
            err.write(f"Found timestamp mismatch in :{name}\n")
            for index_ts, log_ts in pairs:
                err.write(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}\n")
        for name, pairs in self.time_out_of_order.items():
            err.write(f"Found out of order timestamp in :{name}\n")
            for index_ts, prev_ts in pairs:
                err.write(f"  Index timestamp: {index_ts}, Previously indexed timestamp: {prev_ts}\n")
        for pairs in self.time_not_found.values():
            err.write("The following indexed offsets are not found in the log.\n")
            for index_offset, log_offset in pairs:
                err.write(f"Indexed offset: {index_offset}, found log offset: {log_offset}\n")
        for name, pairs in self.non_consecutive.items():
            err.write(f"Non-consecutive offsets in {name}\n")
            for first, second in reversed(pairs):
                err.write(f"  {first} is followed by {second}\n")


def _text(data: bytes) -> str:
    # Kafka's StringDecoder: new String(bytes, UTF-8), malformed input replaced
    return data.decode("utf-8", "replace")


def _optional_long(header: BatchHeader) -> str:
    # deleteHorizonMs is the base timestamp when attribute bit 0x40 is set (KIP-534)
    return f"OptionalLong[{header.base_timestamp}]" if header.has_delete_horizon else "OptionalLong.empty"


def batch_line(header: BatchHeader, position: int, is_valid: bool) -> str:
    """One batch as DumpLogSegments prints it (v2, or a legacy v0/v1 entry)."""
    if header.magic >= 2:
        head = (
            f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
            f"count: {header.records_count} "
            f"baseSequence: {header.base_sequence} lastSequence: {header.last_sequence} "
            f"producerId: {header.producer_id} producerEpoch: {header.producer_epoch} "
            f"partitionLeaderEpoch: {header.leader_epoch} "
            f"isTransactional: {str(header.is_transactional).lower()} "
            f"isControl: {str(header.is_control).lower()} deleteHorizonMs: {_optional_long(header)}"
        )
    else:
        head = f"offset: {header.last_offset}"
    return (
        f"{head} position: {position} {header.timestamp_type.kafka_name}: {header.max_timestamp} "
        f"size: {header.size} magic: {header.magic} "
        f"compresscodec: {CODEC_NAMES.get(header.compression, str(header.compression))} "
        f"crc: {header.crc} isvalid: {str(is_valid).lower()}"
    )


def _control_suffix(record: DecodedRecord) -> str:
    key = record.key or b""
    if len(key) < 4:
        return " controlType: UNKNOWN(-1)"
    (type_id,) = struct.unpack_from(">h", key, 2)
    name = CONTROL_TYPES.get(type_id, "UNKNOWN")
    value = record.value or b""
    if type_id in (0, 1) and len(value) >= 6:
        (epoch,) = struct.unpack_from(">i", value, 2)
        return f" endTxnMarker: {name} coordinatorEpoch: {epoch}"
    if type_id in CONTROL_SCHEMAS:
        try:
            message = decode_control_record(type_id, record.value)
        except MetadataDecodeError as exc:
            # Kafka would stop with an exception; we say what is wrong and go on
            return f" controlType: {name}({type_id}) cannot be decoded at offset {record.offset}: {exc}"
        return f" {CONTROL_JSON_LABELS[type_id]} {to_json(message)}"
    return f" controlType: {name}({type_id})"


def _metadata_payload(record: DecodedRecord) -> str:
    """``--cluster-metadata-decoder``'s payload: the record as JSON, or Kafka's error text."""
    try:
        return to_json(decode_metadata_record(record.value))
    except MetadataDecodeError as exc:
        return f"Error at {record.offset}, skipping. {exc.kafka_message or exc}"


def record_line(header: BatchHeader, record: DecodedRecord, options: DumpOptions) -> str:
    """One record of a deep iteration (``| offset: ...``)."""
    parts: list[str] = []
    prefix = "| "
    if not options.skip_record_metadata:
        key_size = -1 if record.key is None else len(record.key)
        value_size = -1 if record.value is None else len(record.value)
        parts.append(
            f"{prefix}offset: {record.offset} {header.timestamp_type.kafka_name}: {record.timestamp} "
            f"keySize: {key_size} valueSize: {value_size}"
        )
        prefix = " "
        if header.magic >= 2:
            keys = ",".join(k for k, _ in record.headers)
            parts.append(f" sequence: {record.sequence} headerKeys: [{keys}]")
        else:
            # the stray "}" is in Kafka's output too
            parts.append(f" isValid: {str(record.is_valid).lower()} crc: {record.crc}}}")
        if header.is_control:
            parts.append(_control_suffix(record))
    if options.prints_data and not header.is_control:
        if options.cluster_metadata_decoder:
            parts.append(f" payload: {_metadata_payload(record)}")  # metadata records have no key
        elif options.offsets_decoder:
            key_text, payload = offsets_json(record.offset, record.key, record.value)
            parts.append(f"{prefix}key: {key_text}")
            if payload is not None:
                parts.append(f" payload: {payload}")
        else:
            if record.key is not None:
                parts.append(f"{prefix}key: {_text(record.key)}")
            if record.value is not None:
                parts.append(f" payload: {_text(record.value)}")
    return "".join(parts)


def _dump_log(path: Path, options: DumpOptions, out: TextIO, err: TextIO, problems: _Problems) -> None:
    name = path.name
    if name.endswith(LOG_SUFFIX):
        out.write(f"Log starting offset: {base_offset_from_name(path.name)}\n")
    elif name == BOOTSTRAP_CHECKPOINT:
        out.write("KRaft bootstrap snapshot\n")
    else:  # <20-digit end offset>-<10-digit epoch>.checkpoint
        offset, _, epoch = name.split(".")[0].partition("-")
        out.write(f"Snapshot end offset: {int(offset)}, epoch: {int(epoch)}\n")
    with open_readonly(path) as buf:
        end = min(len(buf), options.max_bytes)
        valid_bytes = 0
        last_offset = -1
        abs_path = str(path.absolute())
        try:
            for header in iter_batch_headers(buf, 0, end, path=path):
                try:
                    validate_batch(buf, header, path=path)
                    is_valid = True
                except CorruptRecordError:
                    is_valid = False
                out.write(batch_line(header, valid_bytes, is_valid) + "\n")
                if options.is_deep:
                    try:
                        records = decode_batch_all(buf, header, path=path)
                    except CorruptRecordError as exc:
                        err.write(f"{exc}\n")
                        records = []
                    for record in records:
                        if last_offset != -1 and record.offset != last_offset + 1:
                            problems.non_consecutive.setdefault(abs_path, []).append(
                                (last_offset, record.offset)
                            )
                        last_offset = record.offset
                        out.write(record_line(header, record, options) + "\n")
                valid_bytes += header.size
        except CorruptRecordError as exc:
            # Kafka stops with an exception here (impossible batch size); we say where and go on.
            err.write(f"{exc}\n")
        trailing = end - valid_bytes
        if trailing > 0 and options.max_bytes == INT_MAX:
            out.write(f"Found {trailing} invalid bytes at the end of {name}\n")


def _batch_at(buf: FileBuffer, position: int, end: int, path: Path) -> BatchHeader | None:
    """The complete batch starting at ``position`` within ``[position, end)``, or None."""
    if position < 0 or position >= end:
        return None
    try:
        return next(iter_batch_headers(buf, position, end, path=path), None)
    except CorruptRecordError:
        return None


def _dump_index(
    path: Path, display: str, options: DumpOptions, out: TextIO, err: TextIO, problems: _Problems
) -> None:
    base = base_offset_from_name(path.name)
    index = OffsetIndex(path, base, writable=False)
    try:
        if index.entries == 0:
            out.write(f"{display} is empty.\n")
            return
        if options.index_sanity_check:
            index.sanity_check()
            out.write(f"{display} passed sanity check.\n")
            return
        log_path = sibling_path(path, LOG_SUFFIX)
        has_log = _readable_sibling(path, log_path, err)
        with open_readonly(log_path) if has_log else _empty() as buf:
            for i in range(index.entries):
                offset, position = index.entry(i)
                # a crash can leave a zero-filled preallocated tail: stop at the first zero entry
                if offset == base and i > 0:
                    return
                if has_log:
                    end = min(len(buf), position + options.max_message_size)
                    batch = _batch_at(buf, position, end, log_path)
                    log_offset = -1 if batch is None else batch.last_offset
                    if log_offset != offset:
                        problems.index_mismatches.setdefault(str(path.absolute()), []).append(
                            (offset, log_offset)
                        )
                if not options.verify_index_only:
                    out.write(f"offset: {offset} position: {position}\n")
    finally:
        index.close()


def _readable_sibling(path: Path, sibling: Path, err: TextIO) -> bool:
    """True when ``sibling`` (the file ``path`` is checked against) can be read; else says why."""
    kind = non_regular_kind(sibling)
    if kind is not None:
        err.write(f"Cannot check {path}: {sibling} is {kind}, not a regular file\n")
        return False
    if not sibling.exists():
        err.write(f"Cannot check {path}: {sibling} does not exist\n")
        return False
    return True


@contextmanager
def _empty() -> Iterator[bytes]:
    yield b""


def _max_record_timestamp(buf: FileBuffer, header: BatchHeader, path: Path) -> int:
    try:
        records = decode_batch_all(buf, header, path=path)
    except CorruptRecordError:
        return header.max_timestamp
    return max((r.timestamp for r in records), default=-1)


def _scan_start(
    offset_index: OffsetIndex | None,
    index_path: Path,
    offset: int,
    log_size: int,
    log_path: Path,
    err: TextIO,
    bad: set[int],
) -> int:
    """Where to look for the batch holding ``offset``: the position of its ``.index`` entry, or the
    start of the .log without a usable index (an entry outside the .log is reported once in ``bad``)."""
    if offset_index is None:
        return 0
    entry_offset, position = offset_index.lookup(offset)
    if 0 <= position <= log_size:
        return position
    if position not in bad:  # once per bad entry, not per timestamp
        bad.add(position)
        err.write(
            f"{index_path}: the entry for offset {entry_offset} has position {position}, outside "
            f"{log_path} ({log_size} bytes); searching from the start of the .log instead\n"
        )
    return 0


def _first_batch_reaching(
    buf: FileBuffer, position: int, offset: int, log_path: Path, err: TextIO
) -> BatchHeader | None:
    """The first batch from ``position`` on whose lastOffset is >= ``offset``, or None."""
    try:
        for header in iter_batch_headers(buf, position, path=log_path):
            if header.last_offset >= offset:
                return header
    except CorruptRecordError as exc:
        err.write(f"{exc}\n")
    return None


def _check_time_entry(
    problems: _Problems,
    abs_path: str,
    timestamp: int,
    offset: int,
    prev_ts: int,
    found: BatchHeader | None,
    buf: FileBuffer,
    log_path: Path,
) -> None:
    """Kafka's checks of one time-index entry against the batch ``found`` for its offset."""
    if found is None:
        problems.time_not_found.setdefault(abs_path, []).append((offset, -1))
    elif found.last_offset != offset:
        problems.time_not_found.setdefault(abs_path, []).append((offset, found.last_offset))
    else:
        max_ts = _max_record_timestamp(buf, found, log_path)
        if max_ts != timestamp:
            problems.time_mismatches.setdefault(abs_path, []).append((timestamp, max_ts))
        if prev_ts >= timestamp:
            problems.time_out_of_order.setdefault(abs_path, []).append((timestamp, prev_ts))


def _dump_time_index(
    path: Path, display: str, options: DumpOptions, out: TextIO, err: TextIO, problems: _Problems
) -> None:
    base = base_offset_from_name(path.name)
    time_index = TimeIndex(path, base, writable=False)
    index_path = sibling_path(path, INDEX_SUFFIX)
    # Without a readable .index, each timestamp's batch is searched for from the start of the .log.
    usable_index = index_path.exists() and non_regular_kind(index_path) is None
    offset_index = OffsetIndex(index_path, base, writable=False) if usable_index else None
    try:
        if options.index_sanity_check:
            time_index.sanity_check()
            out.write(f"{display} passed sanity check.\n")
            return
        log_path = sibling_path(path, LOG_SUFFIX)
        has_log = _readable_sibling(path, log_path, err)
        abs_path = str(path.absolute())
        prev_ts = -1
        bad_positions: set[int] = set()
        with open_readonly(log_path) if has_log else _empty() as buf:
            for i in range(time_index.entries):
                timestamp, offset = time_index.entry(i)
                if offset == base and i > 0:
                    return
                if has_log:
                    position = _scan_start(
                        offset_index, index_path, offset, len(buf), log_path, err, bad_positions
                    )
                    found = _first_batch_reaching(buf, position, offset, log_path, err)
                    _check_time_entry(problems, abs_path, timestamp, offset, prev_ts, found, buf, log_path)
                if not options.verify_index_only:
                    out.write(f"timestamp: {timestamp} offset: {offset}\n")
                prev_ts = timestamp
    finally:
        time_index.close()
        if offset_index is not None:
            offset_index.close()


def dump_files(paths: Sequence[str], options: DumpOptions, out: TextIO, err: TextIO) -> int:
    """Dump every file in ``paths`` (as given on the command line); returns an exit status."""
    problems = _Problems()
    status = 0
    for arg in paths:
        path = Path(arg)
        out.write(f"Dumping {arg}\n")
        suffix = path.suffix
        try:
            require_regular_file(path)
            if path.name in OFFSET_CHECKPOINTS:
                dump_offset_checkpoint(path, out)
            elif path.name == LEADER_EPOCH_CHECKPOINT:
                dump_leader_epoch_checkpoint(path, out)
            elif suffix in (LOG_SUFFIX, KRAFT_SNAPSHOT_SUFFIX):
                _dump_log(path, options, out, err, problems)
            elif suffix == INDEX_SUFFIX:
                _dump_index(path, arg, options, out, err, problems)
            elif suffix == TIME_INDEX_SUFFIX:
                _dump_time_index(path, arg, options, out, err, problems)
            elif suffix == PRODUCER_SNAPSHOT_SUFFIX:
                dump_producer_snapshot(path, out, err)
            elif suffix == TXN_INDEX_SUFFIX:
                dump_txn_index(path, out)
            else:
                err.write(f"Ignoring unknown file {arg}\n")
        except BrokenPipeError:
            raise  # the reader of stdout is gone (`| head`): not a fault of this file
        except (OSError, ValueError, CorruptIndexError, CorruptCheckpointError) as exc:
            # CorruptIndexError: --index-sanity-check failed; ValueError: a name that is not an offset;
            # CorruptCheckpointError names the file and the line
            err.write(f"{type(exc).__name__}: {exc}\n")
            status = 1
    out.flush()
    problems.print(err)
    return status
