"""``kafka-dump-log.sh --offsets-decoder``'s text for a ``__consumer_offsets`` record: its key and
value (decoded by :mod:`seglogfs.consumer_offsets`) as Kafka's JSON."""

from __future__ import annotations

import base64
from typing import Any

from seglogfs.consumer_offsets import (
    GROUP_METADATA_KEY_VERSION,
    OffsetsDecodeError,
    UnknownRecordTypeError,
    decode_consumer_protocol,
    key_fields,
    value_fields,
)
from seglogfs.tools.metadata_records import to_json

__all__ = ["offsets_json"]


def _jsonable(d: Any) -> Any:
    """Kafka's JSON converters: bytes as base64, everything else as it is."""
    if isinstance(d, bytes):
        return base64.b64encode(d).decode()
    if isinstance(d, dict):
        return {k: _jsonable(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_jsonable(v) for v in d]
    return d


def _group_json(d: dict[str, Any]) -> dict[str, Any]:
    if d.get("protocolType") == "consumer":
        for member in d.get("members") or ():
            for name in ("subscription", "assignment"):
                if isinstance(member.get(name), bytes):
                    decoded = decode_consumer_protocol(member[name], name)
                    if decoded is not None:
                        member[name] = decoded
    return d


def offsets_json(offset: int, key: bytes | None, value: bytes | None) -> tuple[str, str | None]:
    """``--offsets-decoder``'s (key text, payload text or None) for one record, in Kafka's words:
    ``{"type":"<key version>","data":{...}}`` and ``{"version":"<value version>","data":{...}}``,
    ``<DELETE>`` for a tombstone; an unknown type or an undecodable record is one line of text in
    the key's place and no payload."""
    if key is None:
        return f"Error at offset {offset}, skipping. the record has no key", None
    try:
        key_version, key_data = key_fields(key)
        key_text = to_json({"type": str(key_version), "data": key_data})
        if value is None:
            return key_text, "<DELETE>"
        version, data = value_fields(key_version, value)
    except UnknownRecordTypeError as exc:
        return f"Unknown record type {exc.record_type} at offset {offset}, skipping.", None
    except OffsetsDecodeError as exc:
        return f"Error at offset {offset}, skipping. {exc}", None
    if key_version == GROUP_METADATA_KEY_VERSION:
        data = _group_json(data)
    return key_text, to_json({"version": str(version), "data": _jsonable(data)})
