"""The cleaner's dedupe map: key digest -> latest offset, in a fixed memory budget (Kafka's
``SkimpyOffsetMap``; docs/kafka-format.md section 6).

Each slot holds a 128-bit digest of a key and an offset: 24 bytes, as Kafka's MD5-based map. The
table is open addressing with double hashing over a prime number of slots; it counts as *full* at
``load_factor`` of its slots (``log.cleaner.io.buffer.load.factor``, 0.9).

Digests: Kafka keeps only the MD5 of a key and accepts that two keys with the same digest count as
one. We do the same with a different digest, computed for a whole column of keys at once with numpy
(MD5 per key costs a Python call per record): two 64-bit lanes, each mixing the key's 8-byte words
with a multiply and Murmur3's 64-bit finaliser, from a per-map random seed. Two distinct keys collide
with probability about 2**-128 per pair, and the seed is secret and new for every map, so keys cannot
be chosen to collide on purpose (it is not a cryptographic hash, but nothing outside the process
ever sees a digest).
"""

from __future__ import annotations

import os

import numpy as np

from .cleaner_config import OFFSET_MAP_BYTES_PER_ENTRY

__all__ = ["OffsetMap", "largest_prime_at_most"]

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_K1 = np.uint64(0x9E3779B97F4A7C15)
_K2 = np.uint64(0xD6E8FEB86659FD93)
_S33 = np.uint64(33)
_ALL_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)
#: the table starts with at most this many slots and doubles as keys come, up to what the budget
#: allows: a map of few keys stays in the CPU caches (a 96 MiB table probed at random misses them at
#: every record, which made a clean of 10^7 records over 10^5 keys 1.7x slower)
INITIAL_SLOTS = 1 << 16
#: the table doubles before the keys it holds and those coming would fill more than this share of it
#: (the budget's full-size table still fills to ``load_factor``)
_GROW_AT = 0.5


def largest_prime_at_most(n: int) -> int:
    """The largest prime <= ``n`` (2 when ``n`` < 3): a table size every probe step cycles through."""
    if n < 3:
        return 2
    candidate = n if n % 2 else n - 1
    while candidate > 3:
        limit = int(candidate**0.5)
        if all(candidate % d for d in range(3, limit + 1, 2)):
            return candidate
        candidate -= 2
    return 3


def _fmix(h: np.ndarray) -> np.ndarray:
    h ^= h >> _S33
    h *= _M1
    h ^= h >> _S33
    h *= _M2
    h ^= h >> _S33
    return h


class OffsetMap:
    """Key digest -> latest offset. ``memory`` bytes of budget (24 a slot), full at ``load_factor``.

    ``table_slots`` may make the table smaller than the budget allows (a small dirty section needs no
    128 MiB table); fullness is then still judged against the smaller table. The table itself starts
    small and grows (:data:`INITIAL_SLOTS`) up to that size, ``max_slots``: fullness is always judged
    against ``max_slots``, as Kafka's fixed map.
    """

    def __init__(self, memory: int, load_factor: float = 0.9, *, table_slots: int | None = None) -> None:
        budget_slots = max(memory // OFFSET_MAP_BYTES_PER_ENTRY, 2)
        self.max_slots = largest_prime_at_most(min(budget_slots, table_slots or budget_slots))
        self.slots = min(self.max_slots, largest_prime_at_most(INITIAL_SLOTS))
        self.capacity = max(int(self.max_slots * load_factor), 1)
        # One row a slot: digest lanes and offset side by side, so that a probe touches one cache line.
        # The third column holds offset + 1: 0 is an empty slot, so the zeroed table needs no fill
        # (untouched pages are never even mapped).
        self._table = np.zeros((self.slots, 3), dtype=np.int64)
        seed = np.frombuffer(os.urandom(16), dtype=np.uint64)
        self._seed1, self._seed2 = seed[0], seed[1]
        self.size = 0
        self.latest_offset = -1  # the last offset the map has seen (Kafka's latestOffset)

    @property
    def nbytes(self) -> int:
        """The memory the table holds."""
        return self._table.nbytes

    @property
    def full(self) -> bool:
        return self.size >= self.capacity

    def clear(self) -> None:
        """Empty the map (a new pass), with a new seed."""
        self._table[:, 2] = 0
        self.size = 0
        self.latest_offset = -1
        seed = np.frombuffer(os.urandom(16), dtype=np.uint64)
        self._seed1, self._seed2 = seed[0], seed[1]

    # ------------------------------------------------------------------ digests

    def digests(
        self,
        buf: bytes | bytearray | memoryview,
        starts: np.ndarray,
        lengths: np.ndarray,
        *,
        padded: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The two 64-bit digest lanes of the keys ``buf[starts[i] : starts[i] + lengths[i]]`` (every
        length >= 0). ``padded``: ``buf`` ends with 8 bytes no key covers (else it is copied)."""
        n = len(starts)
        if padded:
            room = np.frombuffer(buf, dtype=np.uint8)
        else:  # 8 spare bytes: a word read never runs off
            room = np.zeros(len(buf) + 8, dtype=np.uint8)
            room[: len(buf)] = np.frombuffer(buf, dtype=np.uint8)
        # Every byte position read as a little-endian uint64 (an unaligned, overlapping view: no copy).
        words_at = np.ndarray(shape=(len(room) - 7,), dtype="<u8", buffer=room, strides=(1,))
        lengths = lengths.astype(np.int64)
        with np.errstate(over="ignore"):
            h1 = _fmix(self._seed1 ^ (lengths.astype(np.uint64) * _K1))
            h2 = _fmix(self._seed2 ^ (lengths.astype(np.uint64) * _K2))
            if n == 0:
                return h1, h2
            # Longer keys take more words: sorted by length, the keys still going are a suffix.
            same_words = (int(lengths.min()) + 7) // 8 == (int(lengths.max()) + 7) // 8
            # All keys of as many words (the usual case): whole columns, no index arrays.
            order: slice | np.ndarray = slice(None) if same_words else np.argsort(lengths, kind="stable")
            sorted_lengths = lengths[order]
            for w in range((int(sorted_lengths.max()) + 7) // 8):
                rows = order
                if not same_words:
                    rows = order[int(np.searchsorted(sorted_lengths, 8 * w, side="right")) :]  # type: ignore[index]
                left = np.minimum(lengths[rows] - 8 * w, 8).astype(np.uint64)
                mask = np.where(left >= 8, _ALL_ONES, (np.uint64(1) << (left * np.uint64(8))) - np.uint64(1))
                word = words_at[starts[rows] + 8 * w] & mask
                h1[rows] = _fmix((h1[rows] ^ word) * _K1)
                h2[rows] = _fmix((h2[rows] ^ (word * _K2)) + _K1)
        return h1, h2

    # ------------------------------------------------------------------ lookups

    def _probe(self, h1: np.ndarray, h2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        slots = np.uint64(self.slots)
        start = (h1 % slots).astype(np.int64)
        step = (h2 % np.uint64(self.slots - 1)).astype(np.int64) + 1
        return start, step

    def get(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        """The offset stored for each digest, -1 where the key is not in the map."""
        found = np.full(len(h1), -1, dtype=np.int64)
        k1, k2 = h1.view(np.int64), h2.view(np.int64)
        slot, step = self._probe(h1, h2)
        pending = np.arange(len(h1))
        while len(pending):
            s = slot[pending]
            rows = self._table.take(s, axis=0)  # take: ~8x faster than fancy indexing a 2-D array
            empty = rows[:, 2] <= 0
            match = ~empty & (rows[:, 0] == k1[pending]) & (rows[:, 1] == k2[pending])
            found[pending[match]] = rows[match, 2] - 1
            go_on = ~(empty | match)
            pending = pending[go_on]
            slot[pending] = (s[go_on] + step[pending]) % self.slots
        return found

    def put_prefix(self, h1: np.ndarray, h2: np.ndarray, offsets: np.ndarray) -> int:
        """Put the keys in order (a later offset wins) until the map is full, as Kafka does record by
        record: a record is taken while the map holds fewer than ``capacity`` keys. Returns how many
        of the records were taken (all of them unless the map filled up)."""
        n = len(h1)
        if n == 0 or self.full:
            return 0
        taken = n
        if self.size + n > self.capacity:  # it may fill up part-way: find where
            taken = self._records_before_full(h1, h2)
            h1, h2, offsets = h1[:taken], h2[:taken], offsets[:taken]
        self._insert(h1, h2, offsets)
        if taken:
            self.latest_offset = max(self.latest_offset, int(offsets[taken - 1]))
        return taken

    def _records_before_full(self, h1: np.ndarray, h2: np.ndarray) -> int:
        """How many of these records Kafka's rule takes: up to the first one met with the map full."""
        new_key = _first_occurrences(h1, h2) & (self.get(h1, h2) < 0)
        before = self.size + np.cumsum(new_key) - new_key  # keys in the map before each record
        stops = np.flatnonzero(before >= self.capacity)
        return int(stops[0]) if len(stops) else len(h1)

    def _insert(self, h1: np.ndarray, h2: np.ndarray, offsets: np.ndarray) -> None:
        """Store each digest with the largest of its offsets: update a key present, claim an empty slot
        otherwise (a key may come several times)."""
        self._make_room(len(h1))
        self._place(h1, h2, offsets)

    def _make_room(self, incoming: int) -> None:
        """Grow the table, doubling up to ``max_slots``, until the keys it holds plus ``incoming`` new
        ones (at most) fill no more than :data:`_GROW_AT` of it."""
        wanted = self.size + incoming
        slots = self.slots
        while slots < self.max_slots and wanted > _GROW_AT * slots:
            slots *= 2
        if slots == self.slots:
            return
        live = self._table[self._table[:, 2] > 0]
        self.slots = min(largest_prime_at_most(slots), self.max_slots)
        self._table = np.zeros((self.slots, 3), dtype=np.int64)
        self.size = 0
        self._place(live[:, 0].view(np.uint64), live[:, 1].view(np.uint64), live[:, 2] - 1)

    def _place(self, h1: np.ndarray, h2: np.ndarray, offsets: np.ndarray) -> None:
        """:meth:`_insert` into the table as it is (it has room for every key)."""
        table = self._table
        k1, k2 = h1.view(np.int64), h2.view(np.int64)
        slot, step = self._probe(h1, h2)
        pending = np.arange(len(h1))
        while len(pending):
            s = slot[pending]
            rows = table.take(s, axis=0)
            empty = rows[:, 2] <= 0
            match = ~empty & (rows[:, 0] == k1[pending]) & (rows[:, 1] == k2[pending])
            if match.any():
                np.maximum.at(table[:, 2], s[match], offsets[pending[match]] + 1)
            # Of the records reaching one empty slot together, one claims it (the marker written last);
            # the others stay put and next time find it taken: by their own key (an update) or another.
            candidates = np.flatnonzero(empty)
            claimed = np.zeros(len(pending), dtype=bool)
            if len(candidates):
                marks = -1 - candidates
                table[s[candidates], 2] = marks
                winners = candidates[table[s[candidates], 2] == marks]
                ws, wp = s[winners], pending[winners]
                table[ws, 0], table[ws, 1], table[ws, 2] = k1[wp], k2[wp], offsets[wp] + 1
                self.size += len(winners)
                claimed[winners] = True
            moving = ~(match | empty)  # another key's slot: probe on
            slot[pending[moving]] = (s[moving] + step[pending[moving]]) % self.slots
            pending = pending[~(match | claimed)]

    def update_latest_offset(self, offset: int) -> None:
        """The map has seen the batches up to ``offset`` (a batch's last offset, after its records)."""
        self.latest_offset = max(self.latest_offset, offset)


def _first_occurrences(h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
    """The mask of each key's first occurrence."""
    n = len(h1)
    order = np.lexsort((np.arange(n), h2, h1))
    s1, s2 = h1[order], h2[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = (s1[1:] != s1[:-1]) | (s2[1:] != s2[:-1])
    first = np.zeros(n, dtype=bool)
    first[order[starts]] = True
    return first
