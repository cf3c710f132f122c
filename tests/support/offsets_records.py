"""A ``__consumer_offsets`` log of every record shape Kafka's offsets decoder knows, written with
seglogfs' encoder: group metadata values v0-v4 (consumer protocol subscriptions v0 and v3, an
assignment with user data, a member whose subscription does not decode, a ``connect`` group whose
bytes stay bytes, an empty group), offset commit values v0-v4 (an expire timestamp in v1), key
version 0, tombstones of both kinds, and the records Kafka reports instead of decoding: an unknown
record type, truncated values, an unknown value version, a truncated key.

The consumer protocol's bytes are built here by hand from its schema, not by seglogfs.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

from seglogfs.config import LogConfig
from seglogfs.consumer_offsets import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_value,
)
from seglogfs.log import Log
from seglogfs.records import ProducerRecord

NOW = 1_700_000_000_000


def _string(s: str | None) -> bytes:
    return struct.pack(">h", -1) if s is None else struct.pack(">h", len(s.encode())) + s.encode()


def _bytes(b: bytes | None) -> bytes:
    return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b


def _partitions(parts: Sequence[tuple[str, Sequence[int]]]) -> bytes:
    out = struct.pack(">i", len(parts))
    for topic, ps in parts:
        out += _string(topic) + struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
    return out


def subscription(
    version: int,
    topics: list[str],
    user: bytes | None = None,
    owned: Sequence[tuple[str, Sequence[int]]] = (),
    gen: int = -1,
    rack: str | None = None,
) -> bytes:
    """ConsumerProtocolSubscription at ``version`` (0-3)."""
    out = struct.pack(">hi", version, len(topics)) + b"".join(_string(t) for t in topics) + _bytes(user)
    if version >= 1:
        out += _partitions(owned)
    if version >= 2:
        out += struct.pack(">i", gen)
    if version >= 3:
        out += _string(rack)
    return out


def assignment(version: int, parts, user: bytes | None = None) -> bytes:
    """ConsumerProtocolAssignment at ``version``."""
    return struct.pack(">h", version) + _partitions(parts) + _bytes(user)


def offsets_records() -> list[ProducerRecord]:
    group = GroupMetadataKey('gr\u00e9 "q"')
    members = (
        MemberMetadata(
            "m-1", "client", "/127.0.0.1", 10_000, 20_000,
            subscription(0, ["a", "b"]), assignment(0, [("a", [0, 1])], b"\x00\xff"),
        ),
        MemberMetadata(
            "m-2", "c2", "/h", 1, 2, subscription(3, ["t"], b"ud", [("t", [3])], 5, "rack1"),
            assignment(3, [("t", [3])]), "instance",
        ),
        MemberMetadata("m-3", "c3", "/h", 1, 2, b"\x00\x09garbage", b""),
    )  # fmt: skip
    out = [
        ProducerRecord(
            key=encode_key(group),
            value=encode_value(GroupMetadataValue("consumer", v, "range", "m-1", NOW + v, members), v),
        )
        for v in range(5)
    ]
    connect = GroupMetadataValue("connect", 3, "sessioned", None, -1, members[:1])
    out.append(ProducerRecord(key=encode_key(group), value=encode_value(connect)))
    empty = GroupMetadataValue("", 0, None, None, 5)
    out.append(ProducerRecord(key=encode_key(group), value=encode_value(empty, 4)))
    for v in range(5):
        commit = OffsetCommitValue(100 + v, "meta\n\t\x01", NOW, 7, NOW + 9999 if v == 1 else -1)
        key = encode_key(OffsetCommitKey("grp", "topic-\u00fc", v))
        out.append(ProducerRecord(key=key, value=encode_value(commit, v)))
    old_key = struct.pack(">h", 0) + encode_key(OffsetCommitKey("old", "t", 1))[2:]
    out.append(ProducerRecord(key=old_key, value=encode_value(OffsetCommitValue(5, "", 6), 0)))
    out.append(ProducerRecord(key=encode_key(OffsetCommitKey("grp", "t", 9)), value=None))
    out.append(ProducerRecord(key=encode_key(group), value=None))
    key = encode_key(OffsetCommitKey("grp", "t", 1))
    value = encode_value(OffsetCommitValue(1, "", 2), 3)
    out += [
        ProducerRecord(key=struct.pack(">h", 99) + b"zz", value=b"\x00\x00"),
        ProducerRecord(key=key, value=b"\x00\x03\x00\x00"),
        ProducerRecord(key=key, value=b"\x00\x07" + bytes(30)),
        ProducerRecord(key=key, value=value + b"extra"),  # Kafka reads past nothing it does not need
        ProducerRecord(key=b"\x00\x01\x00", value=b"\x00\x03"),
        ProducerRecord(key=key + b"x", value=value),
        ProducerRecord(key=key, value=b"\x00"),
    ]
    return out


def write_offsets_log(log_dir: Path) -> Path:
    """The records in one batch each, in ``log_dir``; returns the segment's path."""
    with Log.open(log_dir, LogConfig(), create=True) as lg:
        for record in offsets_records():
            lg.append([record])
    return log_dir / f"{0:020d}.log"
