"""Kafka's framing: a 4-byte big-endian size before each request and response; request header v1
(api key, version, correlation id, client id) or v2 (v1 + tagged fields, for flexible versions);
response header v0 (correlation id) or v1 (+ tagged fields; never for ApiVersions)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["FrameError", "RequestHeader", "frame", "parse_request_header", "response_header"]

_HEAD = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_SIZE = struct.Struct(">i")
API_VERSIONS_KEY = 18


class FrameError(ValueError):
    """A request whose header cannot be read: the connection is closed."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """A request's header; ``body_at`` is where its body starts in the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_at: int


def _skip_uvarint(buf: bytes | memoryview, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(buf) or shift > 28:
            raise FrameError("truncated or oversized varint in the request header")
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def skip_tagged_fields(buf: bytes | memoryview, at: int) -> int:
    """The position after a tagged-fields section starting at ``at``."""
    count, at = _skip_uvarint(buf, at)
    for _ in range(count):
        _, at = _skip_uvarint(buf, at)
        size, at = _skip_uvarint(buf, at)
        at += size
        if at > len(buf):
            raise FrameError("tagged field runs past the request")
    return at


def parse_request_header(buf: bytes | memoryview, flexible: bool | None) -> RequestHeader:
    """The header of the request frame ``buf`` (without its size prefix). ``flexible``: whether the
    api version uses header v2; None when the version is unknown (the body is not read then)."""
    if len(buf) < _HEAD.size:
        raise FrameError(f"a request of {len(buf)} bytes has no header")
    api_key, version, correlation_id, client_len = _HEAD.unpack_from(buf, 0)
    at = _HEAD.size
    client_id = None
    if client_len >= 0:
        if at + client_len > len(buf):
            raise FrameError("client id runs past the request")
        client_id = bytes(buf[at : at + client_len]).decode("utf-8", "replace")
        at += client_len
    if flexible:
        at = skip_tagged_fields(buf, at)
    return RequestHeader(api_key, version, correlation_id, client_id, at)


def peek_api(buf: bytes | memoryview) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a request frame, before its header is parsed."""
    if len(buf) < 8:
        raise FrameError(f"a request of {len(buf)} bytes has no header")
    api_key, version, correlation_id, _ = _HEAD.unpack_from(buf + b"\0\0" if len(buf) < 10 else buf, 0)
    return api_key, version, correlation_id


def response_header(correlation_id: int, flexible: bool, api_key: int) -> bytes:
    """Response header v1 for a flexible version (except ApiVersions, always v0), else v0."""
    head = _SIZE.pack(correlation_id)
    return head + b"\0" if flexible and api_key != API_VERSIONS_KEY else head


def frame(*parts: bytes) -> bytes:
    """``parts`` joined behind their total size."""
    body = b"".join(parts)
    return _SIZE.pack(len(body)) + body
