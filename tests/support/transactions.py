"""Transactional Kafka logs built from scenario steps, and the model of what they hold.

A :class:`Scenario` records steps (``send``, ``send_plain``, ``commit``, ``abort``, ``roll``) and
writes a Kafka log dir of ``<20-digit base>.log`` segments. Nothing here uses seglogfs' encoder:
data batches come from kafka-python's ``DefaultRecordBatchBuilder``, control batches are built by hand
from the format (docs/kafka-format.md) with kafka-python's CRC-32C, and every written segment is read
back by kafka-python. The returned :class:`TxnModel` says, from the steps alone, which records a
read_committed reader sees and which aborted transactions a broker's ``.txnindex`` files would hold.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field
from pathlib import Path

from kafka.record import MemoryRecords
from kafka.record.default_records import ControlRecord, DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c, encode_varint

NOW = 1_700_000_000_000
NO_PRODUCER = -1
ABORT, COMMIT = 0, 1  # control record types of transaction markers
GZIP = DefaultRecordBatchBuilder.CODEC_GZIP
NONE = DefaultRecordBatchBuilder.CODEC_NONE

# baseOffset, length, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
# maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_AT = 17  # the crc field; it covers the bytes from the attributes (21) on
_CRC_FROM = 21
_LENGTH_AFTER = 12  # the length field counts the bytes after baseOffset and itself
_CONTROL_ATTRIBUTES = 0x30  # control + transactional, as a broker writes a marker
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type
_MARKER_VALUE = struct.Struct(">hi")  # version 0, coordinatorEpoch

AbortedTuple = tuple[int, int, int, int]  # producer id, first offset, last offset, last stable offset


@dataclass(frozen=True, slots=True)
class ModelRecord:
    """One user record as the steps wrote it; ``txn`` numbers the transaction it belongs to."""

    offset: int
    value: bytes | None
    producer_id: int
    txn: int | None
    key: bytes | None = None


@dataclass(frozen=True, slots=True)
class ModelMarker:
    """One control batch: a COMMIT / ABORT marker of ``producer_id`` at ``offset``."""

    offset: int
    producer_id: int
    control_type: int
    completes: int | None  # the transaction it ends; None for a marker with nothing open


@dataclass(slots=True)
class TxnModel:
    """What a scenario wrote, computed from its steps."""

    records: list[ModelRecord]
    markers: list[ModelMarker]
    outcomes: dict[int, int | None]  # txn number -> COMMIT, ABORT, or None while open
    aborted: list[AbortedTuple]  # in marker order, as the .txnindex entries
    aborted_by_segment: dict[int, list[AbortedTuple]]  # segment base -> its .txnindex entries
    segment_bases: list[int]
    end_offset: int
    open_txn_first_offsets: dict[int, int]  # producer id -> first offset of its open transaction
    compressed_txn_batches: int

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, else the log end offset."""
        return min(self.open_txn_first_offsets.values(), default=self.end_offset)

    @property
    def visible(self) -> list[int]:
        """Offsets a read_committed reader sees: records outside transactions and of committed ones,
        below the last stable offset (control records are not in ``records`` at all)."""
        lso = self.last_stable_offset
        return [
            r.offset
            for r in self.records
            if r.offset < lso and (r.txn is None or self.outcomes[r.txn] == COMMIT)
        ]

    def values_at(self, offsets: list[int]) -> list[bytes]:
        by_offset = {r.offset: r.value for r in self.records}
        return [by_offset[o] for o in offsets]


@dataclass(slots=True)
class _Producer:
    epoch: int = 0
    next_sequence: int = 0
    open_txn: int | None = None  # txn number


@dataclass(slots=True)
class _Build:
    """The state of one pass over the steps: segments' batches and the model's pieces."""

    segments: list[list[tuple[int, bytes]]] = field(default_factory=lambda: [[]])
    segment_bases: list[int] = field(default_factory=lambda: [0])
    next_offset: int = 0
    producers: dict[int, _Producer] = field(default_factory=dict)
    txn_first_offsets: list[int] = field(default_factory=list)
    outcomes: dict[int, int | None] = field(default_factory=dict)
    records: list[ModelRecord] = field(default_factory=list)
    markers: list[ModelMarker] = field(default_factory=list)
    aborted: list[AbortedTuple] = field(default_factory=list)
    aborted_by_segment: dict[int, list[AbortedTuple]] = field(default_factory=dict)
    compressed_txn_batches: int = 0

    def add_batch(self, batch: bytes, count: int) -> int:
        base = self.next_offset
        self.segments[-1].append((base, batch))
        self.next_offset += count
        return base

    def open_first_offsets(self, excluding: int | None = None) -> list[int]:
        return [
            self.txn_first_offsets[p.open_txn]
            for pid, p in self.producers.items()
            if p.open_txn is not None and pid != excluding
        ]


def data_batch(
    base_offset: int,
    values: list[bytes | None],
    *,
    keys: list[bytes] | None = None,
    producer_id: int = NO_PRODUCER,
    epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    compression: int = NONE,
    timestamp: int = NOW,
) -> bytes:
    """A v2 data batch from kafka-python's builder, placed at ``base_offset`` (outside the CRC);
    ``keys``: one per value (default: none)."""
    builder = DefaultRecordBatchBuilder(
        2, compression, transactional, producer_id, epoch, base_sequence, batch_size=1 << 30
    )
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else None
        builder.append(i, timestamp=timestamp + i, key=key, value=value, headers=[])
    batch = bytearray(builder.build())
    struct.pack_into(">q", batch, 0, base_offset)
    attributes = _V2_HEADER.unpack_from(batch)[5]
    if attributes & 0x07 != compression:
        raise ValueError(f"kafka-python stored the batch at {base_offset} uncompressed: use longer values")
    return bytes(batch)


def control_batch(
    offset: int,
    producer_id: int,
    epoch: int,
    control_type: int,
    *,
    coordinator_epoch: int = 0,
    timestamp: int = NOW,
) -> bytes:
    """A transaction marker as a broker writes it: one control record (key version 0 + type, value
    version 0 + coordinatorEpoch), attributes control | transactional, no sequence."""
    key = _CONTROL_KEY.pack(0, control_type)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    body = bytearray(b"\x00")  # record attributes
    for number in (0, 0, len(key)):  # timestampDelta, offsetDelta, key length
        encode_varint(number, body.append)
    body += key
    encode_varint(len(value), body.append)
    body += value
    encode_varint(0, body.append)  # header count
    record = bytearray()
    encode_varint(len(body), record.append)
    record += body
    size = _V2_HEADER.size + len(record)
    header = bytearray(
        _V2_HEADER.pack(
            offset,
            size - _LENGTH_AFTER,
            0,  # partitionLeaderEpoch
            2,  # magic
            0,  # crc, stamped below
            _CONTROL_ATTRIBUTES,
            0,  # lastOffsetDelta: one record
            timestamp,  # baseTimestamp
            timestamp,  # maxTimestamp
            producer_id,
            epoch,
            -1,  # baseSequence: markers carry none
            1,  # recordsCount
        )
    )
    batch = header + record
    struct.pack_into(">I", batch, _CRC_AT, calc_crc32c(memoryview(batch)[_CRC_FROM:]))
    return bytes(batch)


class Scenario:
    """Steps of transactional and plain producers; ``write(log_dir)`` makes the files and the model."""

    def __init__(self) -> None:
        self.steps: list[tuple] = []

    def send(
        self,
        pid: int,
        values: list[bytes | None],
        *,
        txn: bool = True,
        compression: int = NONE,
        keys: list[bytes] | None = None,
    ) -> Scenario:
        """One batch of producer ``pid``; transactional (opening its transaction if none is open) or,
        with ``txn=False``, idempotent only; ``keys``: one per value (default: none)."""
        self.steps.append(("send", pid, list(values), txn, compression, keys))
        return self

    def send_plain(
        self, values: list[bytes | None], *, compression: int = NONE, keys: list[bytes] | None = None
    ) -> Scenario:
        """One batch without a producer id (what seglogfs appends)."""
        self.steps.append(("send", NO_PRODUCER, list(values), False, compression, keys))
        return self

    def commit(self, pid: int, *, coordinator_epoch: int = 0) -> Scenario:
        self.steps.append(("marker", pid, COMMIT, coordinator_epoch))
        return self

    def abort(self, pid: int, *, coordinator_epoch: int = 0) -> Scenario:
        self.steps.append(("marker", pid, ABORT, coordinator_epoch))
        return self

    def bump_epoch(self, pid: int) -> Scenario:
        """The producer's next batches carry epoch + 1 and sequences from 0."""
        self.steps.append(("bump", pid))
        return self

    def roll(self) -> Scenario:
        """Start a new segment at the next offset (nothing when the current one is empty)."""
        self.steps.append(("roll",))
        return self

    def build(self) -> tuple[list[tuple[int, list[tuple[int, bytes]]]], TxnModel]:
        """Every segment as (base offset, [(batch base offset, batch bytes)]), and the model."""
        state = _Build()
        for step in self.steps:
            getattr(self, f"_apply_{step[0]}")(state, *step[1:])
        segments = [(b, s) for b, s in zip(state.segment_bases, state.segments, strict=True) if s]
        model = TxnModel(
            records=state.records,
            markers=state.markers,
            outcomes=state.outcomes,
            aborted=state.aborted,
            aborted_by_segment={b: e for b, e in state.aborted_by_segment.items() if e},
            segment_bases=[b for b, _ in segments] or [0],
            end_offset=state.next_offset,
            open_txn_first_offsets={
                pid: state.txn_first_offsets[p.open_txn]
                for pid, p in state.producers.items()
                if p.open_txn is not None
            },
            compressed_txn_batches=state.compressed_txn_batches,
        )
        return segments, model

    def write(self, log_dir: Path) -> TxnModel:
        """Write the segments into ``log_dir`` (created if needed), check kafka-python reads each back
        as built, and return the model."""
        segments, model = self.build()
        log_dir.mkdir(parents=True, exist_ok=True)
        for base, batches in segments:
            data = b"".join(batch for _, batch in batches)
            check_with_kafka_python(data, model, [b for b, _ in batches])
            (log_dir / f"{base:020d}.log").write_bytes(data)
        if not segments:
            (log_dir / f"{0:020d}.log").write_bytes(b"")
        return model

    @staticmethod
    def _apply_send(
        state: _Build,
        pid: int,
        values: list[bytes | None],
        txn: bool,
        compression: int,
        keys: list[bytes] | None = None,
    ) -> None:
        producer = state.producers.setdefault(pid, _Producer()) if pid != NO_PRODUCER else None
        txn_number = None
        if producer is not None and txn:
            if producer.open_txn is None:
                producer.open_txn = len(state.txn_first_offsets)
                state.txn_first_offsets.append(state.next_offset)
                state.outcomes[producer.open_txn] = None
            txn_number = producer.open_txn
        batch = data_batch(
            state.next_offset,
            values,
            producer_id=pid,
            epoch=producer.epoch if producer else -1,
            base_sequence=producer.next_sequence if producer else -1,
            transactional=txn_number is not None,
            compression=compression,
            timestamp=NOW + state.next_offset,
            keys=keys,
        )
        if producer is not None:
            producer.next_sequence += len(values)
        if txn_number is not None and compression != NONE:
            state.compressed_txn_batches += 1
        base = state.add_batch(batch, len(values))
        state.records += [
            ModelRecord(base + i, v, pid, txn_number, keys[i] if keys else None) for i, v in enumerate(values)
        ]

    @staticmethod
    def _apply_marker(state: _Build, pid: int, control_type: int, coordinator_epoch: int) -> None:
        producer = state.producers.setdefault(pid, _Producer())
        offset = state.next_offset
        batch = control_batch(
            offset,
            pid,
            producer.epoch,
            control_type,
            coordinator_epoch=coordinator_epoch,
            timestamp=NOW + offset,
        )
        completed = producer.open_txn
        state.add_batch(batch, 1)
        state.markers.append(ModelMarker(offset, pid, control_type, completed))
        if completed is None:
            return  # a marker with no open transaction completes nothing
        state.outcomes[completed] = control_type
        if control_type == ABORT:
            # lastStableOffset: the oldest open transaction of another producer, else marker + 1
            lso = min(state.open_first_offsets(excluding=pid), default=offset + 1)
            entry = (pid, state.txn_first_offsets[completed], offset, lso)
            state.aborted.append(entry)
            state.aborted_by_segment.setdefault(state.segment_bases[-1], []).append(entry)
        producer.open_txn = None

    @staticmethod
    def _apply_bump(state: _Build, pid: int) -> None:
        producer = state.producers.setdefault(pid, _Producer())
        producer.epoch += 1
        producer.next_sequence = 0

    @staticmethod
    def _apply_roll(state: _Build) -> None:
        if state.segments[-1]:
            state.segments.append([])
            state.segment_bases.append(state.next_offset)


def check_with_kafka_python(data: bytes, model: TxnModel, bases: list[int]) -> None:
    """kafka-python reads the segment ``data`` as the batches at ``bases``, every CRC valid, with the
    model's values at the model's offsets and the model's marker types."""
    values = {r.offset: r.value for r in model.records}
    markers = {m.offset: m.control_type for m in model.markers}
    records = MemoryRecords(data)
    seen = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc(), f"kafka-python rejects the CRC of the batch at {batch.base_offset}"
        seen.append(batch.base_offset)
        for record in batch:
            if isinstance(record, ControlRecord):
                assert batch.is_control_batch and markers[record.offset] == record.type
            else:
                assert not batch.is_control_batch and values[record.offset] == record.value
    assert seen == bases, f"kafka-python read batches at {seen}, {bases} were written"


def random_scenario(seed: int, *, producers: int = 3, steps: int = 40, open_at_end: bool = True) -> Scenario:
    """Interleaved transactional producers and plain appends: commits, aborts (some followed by an
    epoch bump), markers with nothing open (empty transactions), rolls (often inside transactions),
    gzip transactional batches; with ``open_at_end`` some transaction is still open at the end."""
    rng = random.Random(seed)
    scenario = Scenario()
    open_pids: set[int] = set()
    pids = [1000 + i for i in range(producers)]
    for n in range(steps):
        choice = rng.random()
        pid = rng.choice(pids)
        if choice < 0.4:
            compression = GZIP if rng.random() < 0.3 else NONE
            scenario.send(pid, _values(rng, pid, n), compression=compression)
            open_pids.add(pid)
        elif choice < 0.55:
            scenario.send_plain(_values(rng, NO_PRODUCER, n))
        elif choice < 0.8 and open_pids:
            pid = rng.choice(sorted(open_pids))
            _end(scenario, rng, pid)
            open_pids.discard(pid)
        elif choice < 0.88 and pid not in open_pids:
            _end(scenario, rng, pid)  # an empty transaction: a marker with nothing open
        else:
            scenario.roll()
    if open_at_end and not open_pids:
        scenario.send(rng.choice(pids), _values(rng, pids[0], steps))
    return scenario


def _end(scenario: Scenario, rng: random.Random, pid: int) -> None:
    if rng.random() < 0.5:
        scenario.commit(pid, coordinator_epoch=rng.randrange(3))
    else:
        scenario.abort(pid, coordinator_epoch=rng.randrange(3))
        if rng.random() < 0.3:
            scenario.bump_epoch(pid)


def _values(rng: random.Random, pid: int, step: int) -> list[bytes]:
    # long, repetitive values: gzip must shrink them or kafka-python stores the batch uncompressed
    return [(f"p{pid}-s{step}-r{i}|" * 6).encode() for i in range(rng.randint(1, 5))]


TXN_LOG_SEGMENTS = 4


class _Builder:
    """Batches at consecutive offsets, and the values a read_committed reader sees."""

    def __init__(self) -> None:
        self.offset = 0
        self.pieces: list[bytes] = []
        self.visible: list[bytes] = []

    def send(self, values: list[bytes], pid: int = -1, *, show: bool = True) -> None:
        txn = pid >= 0
        self.pieces.append(data_batch(self.offset, values, producer_id=pid, epoch=0 if txn else -1,
                                      base_sequence=0 if txn else -1, transactional=txn))
        self.offset += len(values)
        if show:
            self.visible.extend(values)

    def marker(self, pid: int, kind: int) -> None:
        self.pieces.append(control_batch(self.offset, pid, 0, kind))
        self.offset += 1

    def fill(self, template: bytes, count: int) -> None:
        """``count`` copies of the one-record batch ``template`` (the CRC leaves out the base offset)."""
        fill = bytearray(template * count)
        for i in range(count):
            struct.pack_into(">q", fill, i * len(template), self.offset + i)
        self.pieces.append(bytes(fill))
        self.offset += count
        self.visible.extend([b"plain"] * count)

    def segment(self) -> bytes:
        data, self.pieces = b"".join(self.pieces), []
        return data


def write_txn_log(log_dir: Path, filler: int) -> bytes:
    """A broker-shaped log of 4 segments, each with committed and aborted transactions around
    ``filler`` plain one-record batches, and a transaction left open in the last one (followed by more
    batches, which read_committed never shows); the ``records`` bytes a read_committed reader sees."""
    log_dir.mkdir(parents=True)
    template = data_batch(0, [b"plain"])
    b = _Builder()
    for k in range(TXN_LOG_SEGMENTS):
        base = b.offset
        b.send([b"aborted-%d-a" % k, b"aborted-%d-b" % k], 1000 + k, show=False)
        b.send([b"plain-%d" % k])
        b.send([b"committed-%d" % k], 2000 + k)
        b.marker(1000 + k, ABORT)
        b.marker(2000 + k, COMMIT)
        b.fill(template, filler)
        b.send([b"aborted-late-%d" % k], 3000 + k, show=False)
        b.marker(3000 + k, ABORT)
        if k == TXN_LOG_SEGMENTS - 1:
            b.send([b"open"], 4000, show=False)  # never completed: the last stable offset
            b.send([b"after-the-open-one"], show=False)
        (log_dir / f"{base:020d}.log").write_bytes(b.segment())
    return b"".join(v + b"\n" for v in b.visible)
