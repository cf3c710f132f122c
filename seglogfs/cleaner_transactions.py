"""What the log cleaner does with transactions (docs/kafka-format.md section 6), batch after batch in
offset order, over one pass of a clean (Kafka's ``CleanedTransactionMetadata`` and the producer rule
of its batch filter):

- a data batch of an aborted transaction (known from the ``.txnindex`` entries the log keeps) loses
  its records, and its keys never enter the offset map;
- a transaction marker (control batch) stays while a batch of its transaction was seen in this pass;
  once none was (its transaction is empty) it may go: it first gets a delete horizon, and goes once
  the horizon has passed;
- an ABORT marker kept with its transaction's batches keeps its ``.txnindex`` entry in the output;
- the last batch of each producer the producer state knows (its last data batch, or, with none, its
  marker of the current epoch) stays, if only as an empty header: idempotence and fencing survive.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .producer_state import ControlType, EndTxnMarker
from .records import BatchHeader
from .transaction_index import AbortedTxn

__all__ = ["CleanerTransactions", "ProducerLastBatch"]


@dataclass(frozen=True, slots=True)
class ProducerLastBatch:
    """What the producer state says of a producer's last batch (Kafka's ``LastRecord``)."""

    last_data_offset: int | None  # the last offset of its last data batch; None: its last is a marker
    epoch: int


@dataclass(slots=True)
class _OngoingAbort:
    txn: AbortedTxn
    seen_batch: bool = False


class CleanerTransactions:
    """The transaction state of one pass of a clean over a log's batches, in offset order."""

    def __init__(
        self, aborted: Sequence[AbortedTxn], last_batches: Mapping[int, ProducerLastBatch] | None = None
    ) -> None:
        self._pending = deque(sorted(aborted, key=lambda txn: txn.first_offset))
        self._aborting: dict[int, _OngoingAbort] = {}  # producer id -> its aborted transaction, begun
        self._committing: set[int] = set()  # producers whose (not aborted) transaction had a batch seen
        self._last_batches = dict(last_batches or {})
        self._index_entries: list[AbortedTxn] = []

    def _begin_aborted_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0].first_offset <= offset:
            txn = pending.popleft()
            self._aborting.setdefault(txn.producer_id, _OngoingAbort(txn))

    def data_batch(self, header: BatchHeader) -> bool:
        """A data batch read: True when it belongs to an aborted transaction (its records go)."""
        self._begin_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._aborting.get(header.producer_id)
        if ongoing is None:
            self._committing.add(header.producer_id)
            return False
        ongoing.seen_batch = True
        return True

    def control_batch(self, header: BatchHeader, marker: EndTxnMarker | None, *, empty: bool) -> bool:
        """A control batch read (``marker``: the transaction marker it holds, ``empty``: it holds no
        record): True when no batch of its transaction is left, so that it may go past its horizon."""
        self._begin_aborted_up_to(header.last_offset)
        if empty:
            return True  # a marker a clean already emptied
        if marker is None:
            return False  # another control type: kept
        producer_id = header.producer_id
        if marker.control_type == ControlType.ABORT:
            ongoing = self._aborting.pop(producer_id, None)
            if ongoing is not None and ongoing.seen_batch:
                self._index_entries.append(ongoing.txn)
                return False
            return True
        if producer_id in self._committing:
            self._committing.discard(producer_id)
            return False
        return True

    def is_last_of_producer(self, header: BatchHeader) -> bool:
        """Whether the batch is its producer's last one (it stays, if only as an empty header)."""
        if header.producer_id < 0:
            return False
        last = self._last_batches.get(header.producer_id)
        if last is None:
            return False
        if last.last_data_offset is not None:
            return header.last_offset == last.last_data_offset
        return header.is_control and header.producer_epoch == last.epoch

    def take_index_entries(self) -> list[AbortedTxn]:
        """The ``.txnindex`` entries of the ABORT markers kept since the last call."""
        entries, self._index_entries = self._index_entries, []
        return entries
