"""The cleaner's offset map: digests, latest offset per key, Kafka's fill rule, the memory budget."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seglogfs.offset_map import INITIAL_SLOTS, OffsetMap, largest_prime_at_most


def columns(keys: list[bytes], prefix: bytes = b"") -> tuple[bytes, np.ndarray, np.ndarray]:
    lengths = np.array([len(k) for k in keys], dtype=np.int64)
    starts = len(prefix) + np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    return prefix + b"".join(keys), starts, lengths


def test_largest_prime_at_most() -> None:
    assert [largest_prime_at_most(n) for n in (0, 2, 3, 4, 10, 100, 1000)] == [2, 2, 3, 3, 7, 97, 997]


def test_digests_depend_on_the_key_bytes_only() -> None:
    keys = [b"", b"a", b"a\0", b"\0", b"12345678", b"12345678\0", b"x" * 200, b"y" * 70, b"key-1", b"key-10"]
    m = OffsetMap(24 * 100)
    h1, h2 = m.digests(*columns(keys))
    assert len({(int(a), int(b)) for a, b in zip(h1, h2, strict=True)}) == len(keys)
    g1, g2 = m.digests(*columns(keys, prefix=b"junk"))  # the same keys elsewhere in a buffer
    assert (g1 == h1).all() and (g2 == h2).all()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=300))
def test_latest_offset_per_key(keys: list[bytes]) -> None:
    m = OffsetMap(24 * 2000)
    h1, h2 = m.digests(*columns(keys))
    offsets = np.arange(100, 100 + len(keys), dtype=np.int64)
    # in two calls, as windows of a segment arrive
    half = len(keys) // 2
    assert m.put_prefix(h1[:half], h2[:half], offsets[:half]) == half
    assert m.put_prefix(h1[half:], h2[half:], offsets[half:]) == len(keys) - half
    latest = {key: 100 + i for i, key in enumerate(keys)}
    assert m.size == len(latest)
    assert m.get(h1, h2).tolist() == [latest[k] for k in keys]
    assert m.latest_offset == 100 + len(keys) - 1
    other = [b"never-" + k for k in keys]
    o1, o2 = m.digests(*columns(other))
    assert (m.get(o1, o2) == -1).all()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=200))
def test_a_full_map_stops_where_kafka_stops(key_ids: list[int]) -> None:
    """Kafka puts a record while the map holds fewer than slots * 0.9 keys, and stops at the first
    record met when it is full (even one whose key is already in)."""
    keys = [b"k%d" % i for i in key_ids]
    m = OffsetMap(24 * 23, 0.9)  # 23 slots, full at 20 keys
    assert (m.slots, m.capacity) == (23, 20)
    h1, h2 = m.digests(*columns(keys))
    taken = m.put_prefix(h1, h2, np.arange(len(keys), dtype=np.int64))
    expected, seen = len(keys), set()
    for i, key in enumerate(keys):
        if len(seen) >= 20:
            expected = i
            break
        seen.add(key)
    assert taken == expected
    assert m.size == len(seen)
    if taken:
        assert m.latest_offset == taken - 1
    assert m.put_prefix(h1, h2, np.arange(len(keys), dtype=np.int64)) == (0 if m.full else len(keys))


def test_memory_is_the_budget() -> None:
    m = OffsetMap(1 << 20)
    assert m.nbytes <= 1 << 20
    assert m.slots == largest_prime_at_most((1 << 20) // 24)
    small = OffsetMap(1 << 20, table_slots=1000)
    assert small.slots == 997 and small.nbytes < 24 * 1000


def test_the_table_grows_with_its_keys_up_to_the_budget_and_keeps_every_one() -> None:
    """The table starts small (a map of few keys stays in the CPU caches) and doubles as keys come;
    every key keeps its latest offset across the growths, and fullness is still the budget's."""
    m = OffsetMap(24 * 1_000_003, 0.9)
    assert m.slots == largest_prime_at_most(INITIAL_SLOTS) and m.max_slots == largest_prime_at_most(1_000_003)
    assert m.capacity == int(m.max_slots * 0.9)
    keys = [b"key-%d" % i for i in range(300_000)]
    sizes = []
    for lo in range(0, len(keys), 20_000):  # windows, each key twice: the later offset wins
        window = keys[lo : lo + 20_000] * 2
        h1, h2 = m.digests(*columns(window))
        assert m.put_prefix(h1, h2, np.arange(2 * lo, 2 * lo + len(window), dtype=np.int64)) == len(window)
        sizes.append(m.slots)
    assert sizes == sorted(sizes) and INITIAL_SLOTS < m.slots <= m.max_slots
    assert m.size == len(keys) and m.nbytes == 24 * m.slots
    h1, h2 = m.digests(*columns(keys))
    expected = [2 * (i - i % 20_000) + 20_000 + i % 20_000 for i in range(len(keys))]
    assert m.get(h1, h2).tolist() == expected
    small = OffsetMap(24 * 1_000_003, 0.9, table_slots=5000)
    assert small.slots == small.max_slots == 4999  # a small dirty section: never grows
