"""The ``append.jsonl`` line format <-> :class:`ProducerRecord`.

One line is one JSON object::

    {"value": "text", "key": "k", "headers": [["h1", "v1"], ["h2", null]], "timestamp": 1763800000000}

- ``value`` / ``key``: UTF-8 text, or ``value_b64`` / ``key_b64`` (standard base64) for bytes;
  absent or ``null`` means a null value / key. Giving both forms of one field is an error.
- ``headers``: a list of ``[name, value]`` pairs (order and duplicates are kept, as in Kafka), or an
  object ``{"name": value}`` for convenience. A header value is text, ``null``, or ``{"b64": "..."}``.
- ``timestamp``: epoch milliseconds (integer) or an ISO-8601 string; absent or ``null`` = now. Either
  form must lie in [0, 2^63): Kafka's timestamps are non-negative int64 (-1 means "none").

:func:`record_to_jsonl` writes the same format: text where the bytes are valid UTF-8, base64 otherwise,
headers always as a list of pairs.

:func:`columns_to_jsonl` writes the ``records.jsonl`` lines of a whole batch: the same format plus
``offset`` and ``timestamp_type``, which :func:`parse_jsonl_line` accepts and ignores (so those lines
append as they are), with every field present (``null`` / ``[]`` when empty).
"""

from __future__ import annotations

import base64
import binascii
import json
from json.encoder import encode_basestring  # ensure_ascii=False, in C
from typing import Any, cast

import numpy as np

from seglogfs.errors import InvalidRecordError
from seglogfs.records import ProducerRecord, Record, RecordColumns
from seglogfs.timestamps import parse_iso8601_ms

_FIELDS = frozenset({"value", "value_b64", "key", "key_b64", "headers", "timestamp"})
#: what records.jsonl adds for readers; append.jsonl ignores them (the log assigns offsets, and an
#: appended record's timestamp is CreateTime), so `cat a/records.jsonl > b/append.jsonl` copies a log
_READ_ONLY_FIELDS = frozenset({"offset", "timestamp_type"})
_MAX_TIMESTAMP = (1 << 63) - 1


def _utf8(text: str, what: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate (``"\\ud800"`` in JSON) has no UTF-8 form and is invalid,
    as a raw line that is not UTF-8 is."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRecordError(
            f"{what} is not valid Unicode: a lone surrogate {text[exc.start]!r} at character {exc.start}"
        ) from None


def _bytes_field(obj: dict[str, Any], name: str) -> bytes | None:
    text, b64 = obj.get(name), obj.get(name + "_b64")
    if text is not None and b64 is not None:
        raise InvalidRecordError(f'both "{name}" and "{name}_b64" given')
    if b64 is not None:
        if not isinstance(b64, str):
            raise InvalidRecordError(f'"{name}_b64" must be a base64 string, not {type(b64).__name__}')
        try:
            return base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidRecordError(f'"{name}_b64" is not valid base64: {exc}') from None
    if text is None:
        return None
    if not isinstance(text, str):
        raise InvalidRecordError(f'"{name}" must be a string or null, not {type(text).__name__}')
    return _utf8(text, f'"{name}"')


def _header_value(name: str, value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return _utf8(value, f"header {name!r} value")
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidRecordError(f"header {name!r}: invalid base64: {exc}") from None
    raise InvalidRecordError(f'header {name!r}: value must be a string, null or {{"b64": ...}}')


def _headers(raw: Any) -> list[tuple[str, bytes | None]]:
    if raw is None:
        return []
    if isinstance(raw, dict):
        pairs = list(raw.items())
    elif isinstance(raw, list):
        pairs = []
        for item in raw:
            if not (isinstance(item, list) and len(item) == 2):
                raise InvalidRecordError('"headers" list entries must be [name, value] pairs')
            pairs.append((item[0], item[1]))
    else:
        raise InvalidRecordError('"headers" must be a list of [name, value] pairs or an object')
    out = []
    for name, value in pairs:
        if not isinstance(name, str):
            raise InvalidRecordError(f"header name must be a string, not {type(name).__name__}")
        _utf8(name, "header name")  # Kafka's header keys are UTF-8 strings
        out.append((name, _header_value(name, value)))
    return out


def _timestamp(raw: Any) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool):
        raise InvalidRecordError('"timestamp" must be epoch milliseconds or an ISO-8601 string')
    if isinstance(raw, str):
        try:
            ms = parse_iso8601_ms(raw)
        except ValueError:
            raise InvalidRecordError(f'"timestamp" is not ISO-8601: {raw!r}') from None
    elif isinstance(raw, int):
        ms = raw
    else:
        raise InvalidRecordError('"timestamp" must be epoch milliseconds or an ISO-8601 string')
    if ms < 0:
        raise InvalidRecordError(f'"timestamp" must not be negative (before 1970): {raw!r}')
    if ms > _MAX_TIMESTAMP:
        raise InvalidRecordError(f'"timestamp" must be under 2^63 epoch milliseconds: {raw!r}')
    return ms


def parse_jsonl_line(line: bytes | str) -> ProducerRecord:
    """Parse one ``append.jsonl`` line; :class:`InvalidRecordError` names what is wrong."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRecordError(f"not a JSON object: {exc}") from None
    except RecursionError:  # the decoder recurses per nesting level: [[[[...]]]] exhausts it
        raise InvalidRecordError("JSON nested too deeply") from None
    if not isinstance(obj, dict):
        raise InvalidRecordError(f"a line must be a JSON object, not {type(obj).__name__}")
    unknown = set(obj) - _FIELDS - _READ_ONLY_FIELDS
    if unknown:
        allowed = sorted(_FIELDS | _READ_ONLY_FIELDS)
        raise InvalidRecordError(f"unknown field(s) {sorted(unknown)}; allowed: {allowed}")
    return ProducerRecord(
        value=_bytes_field(obj, "value"),
        key=_bytes_field(obj, "key"),
        headers=_headers(obj.get("headers")),
        timestamp=_timestamp(obj.get("timestamp")),
    )


def _put_bytes(obj: dict[str, Any], name: str, data: bytes | None) -> None:
    if data is None:
        return
    try:
        obj[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        obj[name + "_b64"] = base64.b64encode(data).decode("ascii")


def _header_json(value: bytes | None) -> Any:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(value).decode("ascii")}


def headers_to_json(headers: Any) -> list[list[Any]]:
    """Headers as the JSON list of ``[name, value]`` pairs used by this format."""
    return [[name, _header_json(value)] for name, value in headers]


def record_to_jsonl(record: ProducerRecord | Record) -> bytes:
    """One ``append.jsonl`` line (with the trailing newline) that parses back to ``record``."""
    obj: dict[str, Any] = {}
    _put_bytes(obj, "value", record.value)
    _put_bytes(obj, "key", record.key)
    if record.headers:
        obj["headers"] = headers_to_json(record.headers)
    if record.timestamp is not None:
        obj["timestamp"] = record.timestamp
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


# ---------------------------------------------------------------- records.jsonl, a batch at a time
#: the bytes a key or value may hold to be copied as they are between quotes: printable ASCII but the
#: quote and the backslash (anything else goes through the UTF-8 decoder and the JSON escaper)
_PLAIN = bytes(b for b in range(0x20, 0x80) if b not in b'"\\')
_NOT_PLAIN = np.ones(256, dtype=bool)
_NOT_PLAIN[np.frombuffer(_PLAIN, dtype=np.uint8)] = False
_POWERS = np.array([10**j for j in range(1, 20)], dtype=np.uint64)


def _is_plain(data: bytes) -> bool:
    return not data.translate(None, _PLAIN)


def _json_field(name: bytes, data: bytes | None) -> bytes:
    """``"name":"text"``, ``"name_b64":"..."`` (not UTF-8) or ``"name":null``."""
    if data is None:
        return b'"%s":null' % name
    if _is_plain(data):
        return b'"%s":"%s"' % (name, data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return b'"%s_b64":"%s"' % (name, base64.b64encode(data))
    return b'"%s":%s' % (name, encode_basestring(text).encode("utf-8"))


def _headers_field(headers: Any) -> bytes:
    if not headers:
        return b"[]"
    return json.dumps(headers_to_json(headers), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _line_format(cols: RecordColumns, value: bytes, key: bytes, headers: bytes) -> bytes:
    stamp_type = cols.timestamp_type.kafka_name.encode()
    return (
        b'{"offset":%%d,"timestamp":%%s,"timestamp_type":"%s",%s,%s,"headers":%s}\n'
        % (stamp_type, key, value, headers)
    )


def _all_plain(cols: RecordColumns) -> bool:
    """No key, no headers, every value present and plain, every offset and timestamp >= 0 (a
    negative one, which only damage writes, has a "-" that _digits does not count): the fast path."""
    return (
        cols.headers is None
        and bool((cols.key_lengths < 0).all())
        and bool((cols.value_lengths >= 0).all())
        and bool((cols.timestamps >= 0).all())
        and bool((cols.offsets >= 0).all())
    )


def columns_to_jsonl(cols: RecordColumns) -> bytes:
    """The ``records.jsonl`` lines of one batch's records::

        {"offset":5,"timestamp":1763800000000,"timestamp_type":"CreateTime","key":null,"value":"hi","headers":[]}

    Each line is what :func:`record_to_jsonl` writes for the record (text where the bytes are UTF-8,
    ``*_b64`` / ``{"b64": ...}`` where not) plus offset and timestamp type, every field present. A
    timestamp below 0 (a legacy message without one) is ``null``.
    """
    if len(cols) == 0:
        return b""
    keys, values = cols.keys_and_values()
    offsets = cols.offsets.tolist()
    if _all_plain(cols) and _is_plain(b"".join(cast("list[bytes]", values))):  # at once: the common case
        fmt = _line_format(cols, b'"value":"%s"', b'"key":null', b"[]").replace(b"%s", b"%d", 1)
        return b"".join([fmt % line for line in zip(offsets, cols.timestamps.tolist(), values, strict=True)])
    fmt = _line_format(cols, b"%s", b"%s", b"%s")
    stamps = [b"%d" % t if t >= 0 else b"null" for t in cols.timestamps.tolist()]
    if cols.headers is None:
        headers = [b"[]"] * len(offsets)
    else:  # records of one batch often carry the same headers: encode each distinct tuple once
        encoded = {h: _headers_field(h) for h in set(cols.headers)}
        headers = [encoded[h] for h in cols.headers]
    lines = zip(
        offsets,
        stamps,
        [_json_field(b"key", k) for k in keys],
        [_json_field(b"value", v) for v in values],
        headers,
        strict=True,
    )
    return b"".join([fmt % line for line in lines])


def jsonl_length(cols: RecordColumns) -> int:
    """``len(columns_to_jsonl(cols))``, without building the lines when every record takes the fast
    path (the digits of offsets and timestamps counted with numpy)."""
    n = len(cols)
    if n == 0:
        return 0
    lengths = cols.value_lengths
    if not _all_plain(cols):
        return len(columns_to_jsonl(cols))
    data = cols.data
    not_plain = np.concatenate(([0], np.cumsum(_NOT_PLAIN[data], dtype=np.int64)))
    if (not_plain[cols.value_starts + lengths] != not_plain[cols.value_starts]).any():
        return len(columns_to_jsonl(cols))
    fixed = len(_line_format(cols, b'"value":""', b'"key":null', b"[]")) - 4  # without the two %d/%s
    return n * fixed + _digits(cols.offsets) + _digits(cols.timestamps) + int(lengths.sum())


def _digits(numbers: np.ndarray) -> int:
    """How many decimal digits the (non-negative) ``numbers`` take, all together."""
    x = numbers.astype(np.uint64)
    return int(x.shape[0] + (x[:, None] >= _POWERS[None, :]).sum())
