"""Kafka's request and response schemas through ``kio`` (generated from Kafka's own JSON schemas):
the class of each (api key, version), entities built from keyword values whatever fields a version
has, and their encoding. Record batches inside them stay opaque bytes."""

from __future__ import annotations

import functools
import io
import sys
from dataclasses import fields
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

__all__ = ["decode_request", "encode", "encode_frame", "make", "nested", "request_class", "response_class"]


@functools.cache
def request_class(api_key: int, version: int) -> type:
    """kio's request class of ``api_key`` at ``version``."""
    return load_request_schema(api_key, version)


@functools.cache
def response_class(api_key: int, version: int) -> type:
    """kio's response class of ``api_key`` at ``version``."""
    return load_response_schema(api_key, version)


@functools.cache
def nested(cls: type, name: str) -> type:
    """The nested entity ``name`` of the schema module ``cls`` comes from (``PartitionData``...)."""
    return getattr(sys.modules[cls.__module__], name)


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def make(cls: type, **values: Any) -> Any:
    """An instance of ``cls`` from ``values``, dropping those its version does not have."""
    names = _field_names(cls)
    return cls(**{key: value for key, value in values.items() if key in names})


@functools.cache
def _reader(cls: type) -> Any:
    return entity_reader(cls)


@functools.cache
def _writer(cls: type) -> Any:
    return entity_writer(cls)


def decode_request(cls: type, buffer: bytes | memoryview, offset: int) -> Any:
    """The request of type ``cls`` at ``offset`` of ``buffer`` (kio raises on malformed bytes)."""
    entity, _ = _reader(cls)(buffer, offset)
    return entity


def encode(entity: Any) -> bytes:
    """The wire bytes of a kio entity."""
    out = io.BytesIO()
    _writer(type(entity))(out, entity)
    return out.getvalue()


def encode_frame(head: bytes, entity: Any) -> bytes:
    """A whole frame: the size, ``head`` (a response header) and ``entity``, written into one buffer
    (a Fetch response's record bytes are copied once, not once per layer)."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(head)
    _writer(type(entity))(out, entity)
    size = out.tell() - 4
    out.seek(0)
    out.write(size.to_bytes(4, "big"))
    return out.getvalue()
