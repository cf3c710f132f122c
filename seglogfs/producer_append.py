"""An idempotent producer's batch against what the log knows of that producer (Kafka's
ProducerAppendInfo checks): a duplicate of one of its last batches is answered with that batch's
offsets and not appended again; an older epoch is fenced; a sequence that does not follow is refused.

Kafka keeps each producer's last five batches; the snapshot holds only the last one, so after a restart
only that one is recognised as a duplicate until the producer has sent more.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .errors import OutOfOrderSequenceError, ProducerFencedError
from .producer_state import ProducerStateEntry
from .records import BatchHeader

__all__ = ["BATCHES_KEPT", "ProducerBatch", "RecentBatches"]

BATCHES_KEPT = 5  # Kafka's NUM_BATCHES_TO_RETAIN: a client has at most five requests in flight
_SEQUENCE_WRAP = 2**31


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """Where one of a producer's batches landed."""

    epoch: int
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int


def _follows(last_sequence: int, first_sequence: int) -> bool:
    return first_sequence == (last_sequence + 1) % _SEQUENCE_WRAP


class RecentBatches:
    """Each idempotent producer's last :data:`BATCHES_KEPT` batches (in memory, per log)."""

    def __init__(self) -> None:
        self._batches: dict[int, deque[ProducerBatch]] = {}

    def check(self, header: BatchHeader, entry: ProducerStateEntry | None) -> ProducerBatch | None:
        """The earlier batch ``header`` repeats (append nothing, answer with its offsets), else None
        when it may be appended; ProducerFencedError or OutOfOrderSequenceError when it may not.
        ``entry``: the producer's state as the log's producer state has it (None when unknown)."""
        if header.producer_id < 0:
            return None
        first, last = header.base_sequence, header.last_sequence
        recent = self._batches.get(header.producer_id)
        if recent is None and entry is not None and entry.last_offset >= 0:
            recent = deque([_from_entry(entry)], maxlen=BATCHES_KEPT)  # what a snapshot kept
            self._batches[header.producer_id] = recent
        for batch in recent or ():
            same = (batch.first_sequence, batch.last_sequence) == (first, last)
            if same and batch.epoch == header.producer_epoch:
                return batch
        if entry is None or entry.epoch < 0:
            return None  # a producer the log does not know yet: Kafka takes any sequence
        if header.producer_epoch < entry.epoch:
            raise ProducerFencedError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than {entry.epoch}"
            )
        if header.producer_epoch > entry.epoch:
            if first != 0 and entry.last_sequence >= 0:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id}: new epoch {header.producer_epoch} starts at sequence "
                    f"{first}, not 0"
                )
            return None
        if entry.last_sequence >= 0 and not _follows(entry.last_sequence, first):
            raise OutOfOrderSequenceError(
                f"producer {header.producer_id} epoch {header.producer_epoch}: sequence {first} does not "
                f"follow {entry.last_sequence}"
            )
        return None

    def appended(self, header: BatchHeader) -> None:
        """Remember ``header`` (at its final offsets) as its producer's newest batch."""
        if header.producer_id < 0:
            return
        recent = self._batches.get(header.producer_id)
        if recent is None or (recent and recent[-1].epoch != header.producer_epoch):
            recent = self._batches[header.producer_id] = deque(maxlen=BATCHES_KEPT)
        recent.append(
            ProducerBatch(
                header.producer_epoch, header.base_sequence, header.last_sequence,
                header.base_offset, header.last_offset, header.max_timestamp,
            )
        )


def _from_entry(entry: ProducerStateEntry) -> ProducerBatch:
    first_sequence = (entry.last_sequence - entry.offset_delta) % _SEQUENCE_WRAP
    first_offset = entry.last_offset - entry.offset_delta
    return ProducerBatch(
        entry.epoch, first_sequence, entry.last_sequence, first_offset, entry.last_offset, entry.timestamp
    )
