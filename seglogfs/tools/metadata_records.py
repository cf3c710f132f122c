"""KRaft metadata records and KRaft control records as kafka-dump-log.sh prints them (JSON).

Kafka describes these messages with JSON schema files and encodes them in the "flexible" form of its
message protocol: unsigned varints for lengths, compact strings / bytes / arrays (length + 1, 0 for
null), and tagged fields (a varint count, then tag / size / bytes) at the end of every struct. Every
metadata record schema and every KRaft control record schema is flexible from version 0.

A ``__cluster_metadata`` record value is framed as: unsigned varint frame version (1), unsigned varint
api key (the record type), unsigned varint record version, then the message. kafka-dump-log.sh's
``--cluster-metadata-decoder`` prints it as ``{"type":"<TYPE>","version":N,"data":{...}}``.
A KRaft control record value is the message itself; its first field is an int16 ``Version``.

The JSON follows Kafka's generated converters: fields in schema order with the first letter lower
case, absent versions left out, a tagged field only when it differs from its default, UUIDs in
Kafka's URL-safe base64 without padding, bytes in standard base64.

This is a table of schemas and one generic reader; anything malformed raises
:class:`MetadataDecodeError` saying which record, field and byte.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

__all__ = [
    "CONTROL_SCHEMAS",
    "METADATA_SCHEMAS",
    "MetadataDecodeError",
    "Schema",
    "decode_control_record",
    "decode_metadata_record",
    "to_json",
]

#: the only frame version Kafka writes for metadata records (0 was the 2.8 preview's)
FRAME_VERSION = 1
_UNSET: Any = object()
_FIXED = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "uint16": struct.Struct(">H"),
    "uint32": struct.Struct(">I"),
    "float64": struct.Struct(">d"),
}
_ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"


class MetadataDecodeError(ValueError):
    """A record value that is not a well-formed message of its schema (the text says where).

    ``kafka_message`` is what Kafka's MetadataRecordSerde says of the same value (what
    kafka-dump-log.sh prints), or None where Kafka would decode it anyway."""

    def __init__(self, message: str, kafka_message: str | None = None) -> None:
        super().__init__(message)
        self.kafka_message = kafka_message


@dataclass(frozen=True)
class Field:
    """One field of a message schema. ``type`` is a primitive name, ``[]<primitive>``, ``[]`` (an
    array of the struct ``fields``) or ``{}`` (one struct ``fields``)."""

    name: str
    type: str
    since: int = 0
    tag: int | None = None
    nullable: bool = False
    default: Any = _UNSET
    fields: tuple[Field, ...] = ()

    @property
    def json_name(self) -> str:
        return self.name[0].lower() + self.name[1:]

    def default_json(self) -> Any:
        """The value a tagged field has when it is absent (Kafka leaves it out of the JSON)."""
        if self.default is not _UNSET:
            return self.default
        if self.nullable:
            return None
        if self.type.startswith("["):
            return []
        return {"bool": False, "string": "", "bytes": "", "uuid": _ZERO_UUID}.get(self.type, 0)


@dataclass(frozen=True)
class Schema:
    """A message: its name, the highest version we know and its fields."""

    name: str
    max_version: int
    fields: tuple[Field, ...] = field(default_factory=tuple)

    @property
    def type_name(self) -> str:
        """Kafka's MetadataRecordType constant: ``TopicRecord`` -> ``TOPIC_RECORD``."""
        out = [self.name[0]]
        for prev, char in zip(self.name, self.name[1:], strict=False):
            out.append(f"_{char}" if char.isupper() and not prev.isupper() else char)
        return "".join(out).upper()


_f = Field


def _tagged(name: str, type_: str, tag: int, since: int = 0, **kw: Any) -> Field:
    return Field(name, type_, since, tag=tag, **kw)


def _nullable_list(name: str, tag: int, since: int = 0, item: str = "int32") -> Field:
    return Field(name, f"[]{item}", since, tag=tag, nullable=True)


_ENDPOINT = (_f("Name", "string"), _f("Host", "string"), _f("Port", "uint16"))
_LISTENERS = (*_ENDPOINT, _f("SecurityProtocol", "int16"))
_FEATURES = (_f("Name", "string"), _f("MinSupportedVersion", "int16"), _f("MaxSupportedVersion", "int16"))
_BROKER_EPOCH = (_f("Id", "int32"), _f("Epoch", "int64"))

#: api key -> schema, from Kafka's metadata/src/main/resources/common/metadata/*.json
METADATA_SCHEMAS: dict[int, Schema] = {
    0: Schema("RegisterBrokerRecord", 3, (
        _f("BrokerId", "int32"), _f("IsMigratingZkBroker", "bool", 2), _f("IncarnationId", "uuid"),
        _f("BrokerEpoch", "int64"), _f("EndPoints", "[]", fields=_LISTENERS),
        _f("Features", "[]", fields=_FEATURES), _f("Rack", "string", nullable=True),
        _f("Fenced", "bool"), _f("InControlledShutdown", "bool", 1),
        _tagged("LogDirs", "[]uuid", 0, 3),
    )),
    1: Schema("UnregisterBrokerRecord", 0, (_f("BrokerId", "int32"), _f("BrokerEpoch", "int64"))),
    2: Schema("TopicRecord", 0, (_f("Name", "string"), _f("TopicId", "uuid"))),
    3: Schema("PartitionRecord", 2, (
        _f("PartitionId", "int32"), _f("TopicId", "uuid"), _f("Replicas", "[]int32"),
        _f("Isr", "[]int32"), _f("RemovingReplicas", "[]int32"), _f("AddingReplicas", "[]int32"),
        _f("Leader", "int32"), _tagged("LeaderRecoveryState", "int8", 0), _f("LeaderEpoch", "int32"),
        _f("PartitionEpoch", "int32"), _f("Directories", "[]uuid", 1),
        _nullable_list("EligibleLeaderReplicas", 1, 2), _nullable_list("LastKnownElr", 2, 2),
    )),
    4: Schema("ConfigRecord", 0, (
        _f("ResourceType", "int8"), _f("ResourceName", "string"), _f("Name", "string"),
        _f("Value", "string", nullable=True),
    )),
    5: Schema("PartitionChangeRecord", 2, (
        _f("PartitionId", "int32"), _f("TopicId", "uuid"), _nullable_list("Isr", 0),
        _tagged("Leader", "int32", 1, default=-2), _nullable_list("Replicas", 2),
        _nullable_list("RemovingReplicas", 3), _nullable_list("AddingReplicas", 4),
        _tagged("LeaderRecoveryState", "int8", 5, default=-1),
        _nullable_list("Directories", 8, 1, item="uuid"),
        _nullable_list("EligibleLeaderReplicas", 6, 2), _nullable_list("LastKnownElr", 7, 2),
    )),
    7: Schema("FenceBrokerRecord", 0, _BROKER_EPOCH),
    8: Schema("UnfenceBrokerRecord", 0, _BROKER_EPOCH),
    9: Schema("RemoveTopicRecord", 0, (_f("TopicId", "uuid"),)),
    10: Schema("DelegationTokenRecord", 0, (
        _f("Owner", "string"), _f("Requester", "string"), _f("Renewers", "[]string"),
        _f("IssueTimestamp", "int64"), _f("MaxTimestamp", "int64"),
        _f("ExpirationTimestamp", "int64"), _f("TokenId", "string"),
    )),
    11: Schema("UserScramCredentialRecord", 0, (
        _f("Name", "string"), _f("Mechanism", "int8"), _f("Salt", "bytes"), _f("StoredKey", "bytes"),
        _f("ServerKey", "bytes"), _f("Iterations", "int32"),
    )),
    12: Schema("FeatureLevelRecord", 0, (_f("Name", "string"), _f("FeatureLevel", "int16"))),
    14: Schema("ClientQuotaRecord", 0, (
        _f("Entity", "[]", fields=(_f("EntityType", "string"), _f("EntityName", "string", nullable=True))),
        _f("Key", "string"), _f("Value", "float64"), _f("Remove", "bool"),
    )),
    15: Schema("ProducerIdsRecord", 0, (
        _f("BrokerId", "int32"), _f("BrokerEpoch", "int64"), _f("NextProducerId", "int64"),
    )),
    17: Schema("BrokerRegistrationChangeRecord", 2, (
        _f("BrokerId", "int32"), _f("BrokerEpoch", "int64"), _tagged("Fenced", "int8", 0),
        _tagged("InControlledShutdown", "int8", 1, 1), _tagged("LogDirs", "[]uuid", 2, 2),
    )),
    18: Schema("AccessControlEntryRecord", 0, (
        _f("Id", "uuid"), _f("ResourceType", "int8"), _f("ResourceName", "string"),
        _f("PatternType", "int8"), _f("Principal", "string"), _f("Host", "string"),
        _f("Operation", "int8"), _f("PermissionType", "int8"),
    )),
    19: Schema("RemoveAccessControlEntryRecord", 0, (_f("Id", "uuid"),)),
    20: Schema("NoOpRecord", 0),
    21: Schema("ZkMigrationStateRecord", 0, (_f("ZkMigrationState", "int8"),)),
    22: Schema("RemoveUserScramCredentialRecord", 0, (_f("Name", "string"), _f("Mechanism", "int8"))),
    23: Schema("BeginTransactionRecord", 0, (_tagged("Name", "string", 0, nullable=True),)),
    24: Schema("EndTransactionRecord", 0),
    25: Schema("AbortTransactionRecord", 0, (_tagged("Reason", "string", 0, nullable=True),)),
    26: Schema("RemoveDelegationTokenRecord", 0, (_f("TokenId", "string"),)),
    27: Schema("RegisterControllerRecord", 0, (
        _f("ControllerId", "int32"), _f("IncarnationId", "uuid"), _f("ZkMigrationReady", "bool"),
        _f("EndPoints", "[]", fields=_LISTENERS), _f("Features", "[]", fields=_FEATURES),
    )),
    28: Schema("ClearElrRecord", 0, (_f("TopicName", "string"),)),
    29: Schema("UnregisterControllerRecord", 0, (_f("ControllerId", "int32"),)),
}  # fmt: skip

_VOTER_ID = (_f("VoterId", "int32"),)
#: control record type -> schema (Kafka's clients/src/main/resources/common/message/*.json)
CONTROL_SCHEMAS: dict[int, Schema] = {
    2: Schema("LeaderChangeMessage", 0, (
        _f("Version", "int16"), _f("LeaderId", "int32"), _f("Voters", "[]", fields=_VOTER_ID),
        _f("GrantingVoters", "[]", fields=_VOTER_ID),
    )),
    3: Schema("SnapshotHeaderRecord", 0, (_f("Version", "int16"), _f("LastContainedLogTimestamp", "int64"))),
    4: Schema("SnapshotFooterRecord", 0, (_f("Version", "int16"),)),
    5: Schema("KRaftVersionRecord", 0, (_f("Version", "int16"), _f("KRaftVersion", "int16"))),
    6: Schema("VotersRecord", 0, (
        _f("Version", "int16"),
        _f("Voters", "[]", fields=(
            _f("VoterId", "int32"), _f("VoterDirectoryId", "uuid"), _f("Endpoints", "[]", fields=_ENDPOINT),
            _f("KRaftVersionFeature", "{}", fields=_FEATURES[1:]),
        )),
    )),
}  # fmt: skip


class _Reader:
    """A cursor over one message's bytes; every read checks that the bytes are there."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def fail(self, message: str) -> MetadataDecodeError:
        return MetadataDecodeError(f"{self.what}: {message} (at byte {self.pos} of {len(self.data)})")

    def take(self, size: int, field_name: str) -> bytes:
        end = self.pos + size
        if end > len(self.data):
            left = len(self.data) - self.pos
            raise self.fail(f"{field_name} needs {size} bytes, only {left} left")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def uvarint(self, field_name: str) -> int:
        result = shift = 0
        while True:
            if self.pos >= len(self.data):
                raise self.fail(f"{field_name}: varint runs past the end")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 28:  # Kafka's unsigned varints are at most 5 bytes (32 bits)
                raise self.fail(f"{field_name}: varint longer than 5 bytes")

    def fixed(self, type_: str, field_name: str) -> int | float:
        codec = _FIXED[type_]
        return codec.unpack(self.take(codec.size, field_name))[0]

    def length(self, f: Field) -> int | None:
        """A compact length (stored + 1); None for a null that the field allows."""
        stored = self.uvarint(f.name)
        if stored == 0:
            if not f.nullable:
                raise self.fail(f"{f.name} is null but the field is not nullable")
            return None
        return stored - 1


def _primitive(r: _Reader, type_: str, f: Field) -> Any:
    if type_ in _FIXED:
        return r.fixed(type_, f.name)
    if type_ == "bool":
        return r.take(1, f.name)[0] != 0
    if type_ == "uuid":
        return base64.urlsafe_b64encode(r.take(16, f.name)).rstrip(b"=").decode()
    size = r.length(f)
    if size is None:
        return None
    raw = r.take(size, f.name)
    if type_ == "string":
        return raw.decode("utf-8", "replace")
    if type_ == "bytes":
        return base64.b64encode(raw).decode()
    raise r.fail(f"{f.name}: unknown type {type_}")  # a schema table mistake, not bad input


def _value(r: _Reader, f: Field, version: int) -> Any:
    if f.type == "{}":
        return _struct(r, f.fields, version)
    if not f.type.startswith("["):
        return _primitive(r, f.type, f)
    count = r.length(f)
    if count is None:
        return None
    if count > len(r.data) - r.pos:  # every element takes at least one byte
        raise r.fail(f"{f.name}: array of {count} elements, more than the bytes left")
    if f.type == "[]":
        return [_struct(r, f.fields, version) for _ in range(count)]
    item = Field(f.name, f.type[2:])
    return [_primitive(r, item.type, item) for _ in range(count)]


def _struct(r: _Reader, fields: Sequence[Field], version: int) -> dict[str, Any]:
    present = [f for f in fields if f.since <= version]
    values = {f.name: _value(r, f, version) for f in present if f.tag is None}
    by_tag = {f.tag: f for f in present if f.tag is not None}
    for _ in range(r.uvarint("tagged field count")):
        tag = r.uvarint("tag")
        size = r.uvarint(f"size of tag {tag}")
        raw = r.take(size, f"tag {tag}")
        known = by_tag.get(tag)
        if known is None:
            continue  # unknown tags are skipped, as Kafka does
        sub = _Reader(raw, f"{r.what}, tagged field {known.name}")
        values[known.name] = _value(sub, known, version)
        if sub.pos != len(raw):
            raise sub.fail(f"{len(raw) - sub.pos} bytes left over in tagged field {known.name}")
    out: dict[str, Any] = {}
    for f in present:
        if f.tag is None or (f.name in values and values[f.name] != f.default_json()):
            out[f.json_name] = values[f.name]
    return out


def _message(schema: Schema, data: bytes, version: int, what: str) -> tuple[dict[str, Any], int]:
    """The JSON object of ``data`` read as ``schema`` at ``version``, and the bytes it used."""
    reader = _Reader(data, what)
    return _struct(reader, schema.fields, version), reader.pos


def _header_field(head: _Reader, name: str, kafka_name: str) -> int:
    try:
        return head.uvarint(name)
    except MetadataDecodeError as exc:
        raise MetadataDecodeError(str(exc), f"Error while reading {kafka_name}") from None


def decode_metadata_record(value: bytes | None) -> dict[str, Any]:
    """``{"type", "version", "data"}`` of one ``__cluster_metadata`` record value."""
    if value is None:
        raise MetadataDecodeError("the record has no value", "Error while reading frame version")
    head = _Reader(value, "metadata record header")
    frame = _header_field(head, "frame version", "frame version")
    if frame == 0:
        raise MetadataDecodeError(
            "frame version 0 (KRaft's 2.8 preview)",
            "Could not deserialize metadata record with frame version 0. Note that upgrades from the "
            "preview release of KRaft in 2.8 to newer versions are not supported.",
        )
    if frame != FRAME_VERSION:
        raise MetadataDecodeError(
            f"unknown frame version {frame} (only {FRAME_VERSION} is known)",
            # sic: no space before the parenthesis in Kafka's message
            f"Could not deserialize metadata record due to unknown frame version {frame}"
            f"(only frame version {FRAME_VERSION} is supported)",
        )
    api_key = _header_field(head, "api key", "type")
    version = _header_field(head, "record version", "version")
    schema = METADATA_SCHEMAS.get(api_key)
    if schema is None:
        raise MetadataDecodeError(
            f"unknown metadata record type: api key {api_key}, version {version}",
            f"org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id {api_key}",
        )
    if version > schema.max_version:
        # (differs) Kafka reads a newer version with the fields it knows; we refuse to guess
        raise MetadataDecodeError(
            f"unknown version {version} of {schema.type_name} (api key {api_key}; "
            f"known versions 0-{schema.max_version})"
        )
    what = f"{schema.type_name} v{version}"
    try:
        data, used = _message(schema, value[head.pos :], version, what)
    except MetadataDecodeError as exc:
        raise MetadataDecodeError(str(exc), f"Failed to deserialize record with type {api_key}") from None
    left = len(value) - head.pos - used
    if left:
        raise MetadataDecodeError(
            f"{left} bytes of garbage after {what}", f"Found {left} byte(s) of garbage after {api_key}"
        )
    return {"type": schema.type_name, "version": version, "data": data}


def decode_control_record(type_id: int, value: bytes | None) -> dict[str, Any]:
    """The JSON object of a KRaft control record (types 2-6) from its value."""
    schema = CONTROL_SCHEMAS[type_id]
    if value is None:
        raise MetadataDecodeError(f"{schema.name}: the record has no value")
    if len(value) < 2:
        raise MetadataDecodeError(f"{schema.name}: {len(value)} bytes, too short for its version")
    (version,) = _FIXED["int16"].unpack_from(value)
    if not 0 <= version <= schema.max_version:
        raise MetadataDecodeError(f"{schema.name}: unknown version {version}")
    return _message(schema, value, version, f"{schema.name} v{version}")[0]


# Jackson's escapes: the short forms, else \u00XX (upper-case hex); other characters as they are.
_ESCAPES = {i: f"\\u{i:04X}" for i in range(0x20)} | {
    ord('"'): '\\"',
    ord("\\"): "\\\\",
    8: "\\b",
    9: "\\t",
    10: "\\n",
    12: "\\f",
    13: "\\r",
}


def _java_double(value: float) -> str:
    """Java's Double.toString (shortest digits): plain in [1e-3, 1e7), else ``d.dddE<n>``."""
    if value != value or value in (math.inf, -math.inf):
        return '"NaN"' if value != value else ('"Infinity"' if value > 0 else '"-Infinity"')
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)  # Python's repr is plain in this range, with the same shortest digits
    _, digits, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    text = "".join(map(str, digits))
    sign = "-" if value < 0 else ""
    return f"{sign}{text[0]}.{text[1:] or '0'}E{len(text) - 1 + int(exponent)}"


def to_json(value: Any) -> str:
    """Compact JSON as Jackson's ``JsonNode.toString`` writes it."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, str):
        return f'"{value.translate(_ESCAPES)}"'
    if isinstance(value, list):
        return "[" + ",".join(to_json(v) for v in value) + "]"
    return "{" + ",".join(f"{to_json(k)}:{to_json(v)}" for k, v in value.items()) + "}"
