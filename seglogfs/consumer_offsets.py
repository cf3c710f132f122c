"""Kafka's ``__consumer_offsets`` records: committed offsets and classic group metadata.

A record's key starts with an int16 version that names its type: 0 and 1 an ``OffsetCommitKey``
(group, topic, partition), 2 a ``GroupMetadataKey`` (group); 3 and up are the KIP-848 consumer and
share group records, which this module does not decode. The value starts with its own int16
version: ``OffsetCommitValue`` versions 0-4 and ``GroupMetadataValue`` versions 0-4, version 4 of
each being flexible (compact strings, arrays and bytes, tagged fields). A null value deletes the
key (a compacted log keeps the latest record per key).

Kafka 4.x writes key version 1 with ``OffsetCommitValue`` version 4 (1 when the commit carries an
expire timestamp), and key version 2 with ``GroupMetadataValue`` version 3; ``encode_*`` default to
the same. ``offsets_json`` renders a record as ``kafka-dump-log.sh --offsets-decoder`` does,
including the consumer protocol's subscription and assignment of a ``consumer`` group's members.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "GROUP_METADATA_KEY_VERSION",
    "OFFSET_COMMIT_KEY_VERSION",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "GroupState",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "OffsetsDecodeError",
    "UnknownRecordTypeError",
    "decode_consumer_protocol",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "key_fields",
    "replay",
    "value_fields",
]

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 4  # version 1 when the commit has an expire timestamp
GROUP_METADATA_VALUE_VERSION = 3
_FLEXIBLE_FROM = 4  # both value schemas; keys are never flexible
_INT = {"int16": struct.Struct(">h"), "int32": struct.Struct(">i"), "int64": struct.Struct(">q")}


class OffsetsDecodeError(ValueError):
    """Bytes that are not a well-formed record of their schema (the text says which and where)."""


class _Underflow(OffsetsDecodeError):
    """Bytes that end inside a field (Kafka's BufferUnderflowException)."""


class UnknownRecordTypeError(OffsetsDecodeError):
    """A key version that names no record type this module knows."""

    def __init__(self, record_type: int) -> None:
        super().__init__(f"unknown record type {record_type}")
        self.record_type = record_type


@dataclass(frozen=True)
class _Field:
    """A schema field: ``type`` is int16/int32/int64/string/bytes, ``[]<type>`` or ``[]`` (an array
    of ``fields`` structs); present in versions ``since``..``until``."""

    name: str
    type: str
    since: int = 0
    until: int = 1 << 15
    nullable: bool = False
    fields: tuple[_Field, ...] = ()

    def in_version(self, version: int) -> bool:
        return self.since <= version <= self.until


_F = _Field
_OFFSET_COMMIT_KEY = (_F("group", "string"), _F("topic", "string"), _F("partition", "int32"))
_GROUP_METADATA_KEY = (_F("group", "string"),)
_OFFSET_COMMIT_VALUE = (
    _F("offset", "int64"), _F("leaderEpoch", "int32", 3), _F("metadata", "string"),
    _F("commitTimestamp", "int64"), _F("expireTimestamp", "int64", 1, 1),
)  # fmt: skip
_MEMBER = (
    _F("memberId", "string"), _F("groupInstanceId", "string", 3, nullable=True),
    _F("clientId", "string"), _F("clientHost", "string"), _F("rebalanceTimeout", "int32", 1),
    _F("sessionTimeout", "int32"), _F("subscription", "bytes"), _F("assignment", "bytes"),
)  # fmt: skip
_GROUP_METADATA_VALUE = (
    _F("protocolType", "string"), _F("generation", "int32"), _F("protocol", "string", nullable=True),
    _F("leader", "string", nullable=True), _F("currentStateTimestamp", "int64", 2),
    _F("members", "[]", fields=_MEMBER),
)  # fmt: skip
_TOPIC_PARTITION = (_F("topic", "string"), _F("partitions", "[]int32"))
#: the consumer protocol (never flexible): what a ``consumer`` group's members carry as bytes
_SUBSCRIPTION = (
    _F("topics", "[]string"), _F("userData", "bytes", nullable=True),
    _F("ownedPartitions", "[]", 1, fields=_TOPIC_PARTITION), _F("generationId", "int32", 2),
    _F("rackId", "string", 3, nullable=True),
)  # fmt: skip
_ASSIGNMENT = (
    _F("assignedPartitions", "[]", fields=_TOPIC_PARTITION),
    _F("userData", "bytes", nullable=True),
)
_MAX_VALUE_VERSION = 4
_MAX_CONSUMER_PROTOCOL_VERSION = 3
_DEFAULTS = {"leaderEpoch": -1, "expireTimestamp": -1, "currentStateTimestamp": -1, "rebalanceTimeout": -1}


# --------------------------------------------------------------------------- the typed records


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """One committed offset; -1 for an absent leader epoch or expire timestamp."""

    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """A classic group member; subscription and assignment are the protocol's opaque bytes."""

    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    rebalance_timeout: int
    subscription: bytes = b""
    assignment: bytes = b""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """A classic group's state after a rebalance (or an empty group's)."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = ()


Key = OffsetCommitKey | GroupMetadataKey
Value = OffsetCommitValue | GroupMetadataValue


# --------------------------------------------------------------------------- the wire format


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def fail(self, message: str) -> OffsetsDecodeError:
        return OffsetsDecodeError(f"{self.what}: {message} (at byte {self.pos} of {len(self.data)})")

    def take(self, size: int, name: str) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            left = len(self.data) - self.pos
            raise _Underflow(f"{self.what}: {name} needs {size} bytes, only {left} left (at byte {self.pos})")
        self.pos += size
        return self.data[self.pos - size : self.pos]

    def fixed(self, type_: str, name: str) -> int:
        codec = _INT[type_]
        value: int = codec.unpack(self.take(codec.size, name))[0]
        return value

    def uvarint(self, name: str) -> int:
        result = shift = 0
        while True:
            byte = self.take(1, name)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise self.fail(f"{name}: varint longer than 5 bytes")

    def length(self, f: _Field, flexible: bool, size_type: str) -> int | None:
        """A length or element count; None for null (refused unless the field is nullable)."""
        n = self.uvarint(f.name) - 1 if flexible else self.fixed(size_type, f.name)
        if n < 0:
            if not f.nullable:
                raise self.fail(f"{f.name} is null but the field is not nullable")
            return None
        return n


def _read_value(r: _Reader, f: _Field, type_: str, flexible: bool) -> Any:
    """A primitive, or an array of primitives."""
    if type_ in _INT:
        return r.fixed(type_, f.name)
    if type_.startswith("[]"):
        count = r.length(f, flexible, "int32")
        if count is None:
            return None
        if count > len(r.data) - r.pos:  # every element takes at least one byte
            raise r.fail(f"{f.name}: array of {count} elements, more than the bytes left")
        return [_read_value(r, f, type_[2:], flexible) for _ in range(count)]
    size = r.length(f, flexible, "int16" if type_ == "string" else "int32")
    if size is None:
        return None
    raw = r.take(size, f.name)
    return raw.decode("utf-8", "replace") if type_ == "string" else raw


def _read_struct(r: _Reader, fields: Sequence[_Field], version: int, flexible: bool) -> dict[str, Any]:
    """The fields present at ``version`` (nested structs read at the same version), by JSON name."""
    out: dict[str, Any] = {}
    for f in fields:
        if not f.in_version(version):
            continue
        if f.type != "[]":
            out[f.name] = _read_value(r, f, f.type, flexible)
            continue
        count = r.length(f, flexible, "int32")
        if count is not None and count > len(r.data) - r.pos:
            raise r.fail(f"{f.name}: array of {count} elements, more than the bytes left")
        out[f.name] = (
            None if count is None else [_read_struct(r, f.fields, version, flexible) for _ in range(count)]
        )
    if flexible:
        for _ in range(r.uvarint("tagged field count")):
            r.uvarint("tag")
            r.take(r.uvarint("tagged field size"), "tagged field")  # no tagged field is known: skipped
    return out


def _decode(data: bytes, fields: Sequence[_Field], version: int, flexible: bool, part: str) -> dict[str, Any]:
    """The message after the version, in Kafka's words when it does not read. Like Kafka, bytes
    after the message are not looked at."""
    try:
        return _read_struct(_Reader(data, part), fields, version, flexible)
    except OffsetsDecodeError as exc:
        why = "null" if isinstance(exc, _Underflow) else str(exc)  # an underflow has no message in Java
        message = f"Could not read record with version {version} from {part}'s buffer due to: {why}."
        raise OffsetsDecodeError(message) from exc


def _version(data: bytes, part: str) -> int:
    if len(data) < 2:
        raise OffsetsDecodeError(f"Could not read version from {part}'s buffer.")
    version: int = _INT["int16"].unpack_from(data)[0]
    return version


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _write_length(out: bytearray, n: int | None, flexible: bool, size_type: str) -> None:
    if flexible:
        out += _uvarint(0 if n is None else n + 1)
    else:
        out += _INT[size_type].pack(-1 if n is None else n)


def _write_value(out: bytearray, f: _Field, type_: str, value: Any, version: int, flexible: bool) -> None:
    if type_ in _INT:
        out += _INT[type_].pack(value)
        return
    if value is None:
        if not f.nullable:
            raise ValueError(f"{f.name} may not be null")
        _write_length(out, None, flexible, "int16" if type_ == "string" else "int32")
        return
    if type_.startswith("["):
        _write_length(out, len(value), flexible, "int32")
        for item in value:
            if type_ == "[]":
                _write_struct(out, f.fields, item, version, flexible)
            else:
                _write_value(out, f, type_[2:], item, version, flexible)
        return
    raw = value.encode() if type_ == "string" else bytes(value)
    _write_length(out, len(raw), flexible, "int16" if type_ == "string" else "int32")
    out += raw


def _write_struct(
    out: bytearray, fields: Sequence[_Field], values: dict[str, Any], version: int, flexible: bool
) -> None:
    for f in fields:
        if f.in_version(version):
            _write_value(out, f, f.type, values.get(f.name, _DEFAULTS.get(f.name)), version, flexible)
    if flexible:
        out += b"\x00"  # no tagged fields


def _encode(version: int, fields: Sequence[_Field], values: dict[str, Any], flexible: bool) -> bytes:
    out = bytearray(_INT["int16"].pack(version))
    _write_struct(out, fields, values, version, flexible)
    return bytes(out)


# --------------------------------------------------------------------------- the public codec


def encode_key(key: Key) -> bytes:
    """A record key as Kafka writes it (offset commits with key version 1, groups with 2)."""
    if isinstance(key, OffsetCommitKey):
        values = {"group": key.group, "topic": key.topic, "partition": key.partition}
        return _encode(OFFSET_COMMIT_KEY_VERSION, _OFFSET_COMMIT_KEY, values, False)
    return _encode(GROUP_METADATA_KEY_VERSION, _GROUP_METADATA_KEY, {"group": key.group}, False)


def encode_value(value: Value, version: int | None = None) -> bytes:
    """A record value at ``version`` (default: the one Kafka 4.x writes for it)."""
    if isinstance(value, OffsetCommitValue):
        if version is None:
            version = 1 if value.expire_timestamp != -1 else OFFSET_COMMIT_VALUE_VERSION
        values: dict[str, Any] = {
            "offset": value.offset,
            "leaderEpoch": value.leader_epoch,
            "metadata": value.metadata,
            "commitTimestamp": value.commit_timestamp,
            "expireTimestamp": value.expire_timestamp,
        }
        fields: Sequence[_Field] = _OFFSET_COMMIT_VALUE
    else:
        version = GROUP_METADATA_VALUE_VERSION if version is None else version
        values = {
            "protocolType": value.protocol_type,
            "generation": value.generation,
            "protocol": value.protocol,
            "leader": value.leader,
            "currentStateTimestamp": value.current_state_timestamp,
            "members": [
                {
                    "memberId": m.member_id,
                    "groupInstanceId": m.group_instance_id,
                    "clientId": m.client_id,
                    "clientHost": m.client_host,
                    # version 0 has no rebalance timeout: the session timeout serves as both
                    "rebalanceTimeout": m.rebalance_timeout,
                    "sessionTimeout": m.session_timeout,
                    "subscription": m.subscription,
                    "assignment": m.assignment,
                }
                for m in value.members
            ],
        }
        fields = _GROUP_METADATA_VALUE
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise ValueError(f"value version {version}: Kafka's are 0-{_MAX_VALUE_VERSION}")
    return _encode(version, fields, values, version >= _FLEXIBLE_FROM)


def key_fields(data: bytes) -> tuple[int, dict[str, Any]]:
    """(key version, its fields by Kafka's names); UnknownRecordTypeError for other types."""
    version = _version(data, "key")
    fields: Sequence[_Field]
    if version in (0, 1):
        fields = _OFFSET_COMMIT_KEY
    elif version == GROUP_METADATA_KEY_VERSION:
        fields = _GROUP_METADATA_KEY
    else:
        raise UnknownRecordTypeError(version)
    return version, _decode(data[2:], fields, version, False, "key")


def decode_key(data: bytes) -> Key:
    """An ``OffsetCommitKey`` or ``GroupMetadataKey``; UnknownRecordTypeError for other types."""
    version, d = key_fields(data)
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(d["group"])
    return OffsetCommitKey(d["group"], d["topic"], d["partition"])


def value_fields(key_version: int, data: bytes) -> tuple[int, dict[str, Any]]:
    """(value version, its fields by Kafka's names) of a value whose key has ``key_version``."""
    version = _version(data, "value")
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise OffsetsDecodeError(f"Found an unknown record version {version} for {key_version} type")
    fields = _GROUP_METADATA_VALUE if key_version == GROUP_METADATA_KEY_VERSION else _OFFSET_COMMIT_VALUE
    return version, _decode(data[2:], fields, version, version >= _FLEXIBLE_FROM, "value")


def decode_value(key: Key, data: bytes | None) -> Value | None:
    """The value of a record whose key is ``key``; None for a tombstone (a deleted key)."""
    if data is None:
        return None
    key_version = (
        GROUP_METADATA_KEY_VERSION if isinstance(key, GroupMetadataKey) else OFFSET_COMMIT_KEY_VERSION
    )
    _, d = value_fields(key_version, data)
    if isinstance(key, OffsetCommitKey):
        return OffsetCommitValue(
            d["offset"],
            d["metadata"],
            d["commitTimestamp"],
            d.get("leaderEpoch", -1),
            d.get("expireTimestamp", -1),
        )
    members = tuple(
        MemberMetadata(
            m["memberId"], m["clientId"], m["clientHost"], m["sessionTimeout"],
            m.get("rebalanceTimeout", m["sessionTimeout"]), m["subscription"], m["assignment"],
            m.get("groupInstanceId"),
        )
        for m in d["members"]
    )  # fmt: skip
    return GroupMetadataValue(
        d["protocolType"],
        d["generation"],
        d["protocol"],
        d["leader"],
        d.get("currentStateTimestamp", -1),
        members,
    )


@dataclass
class GroupState:
    """What a ``__consumer_offsets`` log holds once replayed: the committed offset of each (group,
    topic, partition) and each classic group's metadata, tombstones applied."""

    offsets: dict[OffsetCommitKey, OffsetCommitValue] = field(default_factory=dict)
    groups: dict[str, GroupMetadataValue] = field(default_factory=dict)
    #: records of types this module does not decode (KIP-848 groups), left out
    skipped: int = 0


def replay(records: Iterable[tuple[bytes | None, bytes | None]]) -> GroupState:
    """The state after ``(key, value)`` records in log order, as a group coordinator loads it at
    start-up: a later record of a key replaces an earlier one, a tombstone removes it. Raises
    OffsetsDecodeError for a record that does not decode (or has no key)."""
    state = GroupState()
    for key_bytes, value_bytes in records:
        if key_bytes is None:
            raise OffsetsDecodeError("a __consumer_offsets record without a key")
        try:
            key = decode_key(key_bytes)
        except UnknownRecordTypeError:
            state.skipped += 1
            continue
        value = decode_value(key, value_bytes)
        if isinstance(key, GroupMetadataKey):
            if value is None:
                state.groups.pop(key.group, None)
            else:
                assert isinstance(value, GroupMetadataValue)
                state.groups[key.group] = value
        elif value is None:
            state.offsets.pop(key, None)
        else:
            assert isinstance(value, OffsetCommitValue)
            state.offsets[key] = value
    return state


def decode_consumer_protocol(data: bytes, part: str) -> dict[str, Any] | None:
    """A consumer group member's ``"subscription"`` or ``"assignment"`` decoded (version first), or
    None when it is not one Kafka's consumer protocol knows. Like Kafka, bytes after it are not checked."""
    r = _Reader(data, "consumer protocol")
    try:
        version = r.fixed("int16", "version")
        if not 0 <= version <= _MAX_CONSUMER_PROTOCOL_VERSION:
            return None
        return _read_struct(r, _SUBSCRIPTION if part == "subscription" else _ASSIGNMENT, version, False)
    except OffsetsDecodeError:
        return None
