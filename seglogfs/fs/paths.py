"""Path parsing for the mount: every path the kernel hands us becomes one :class:`Node`.

This is the only place that knows the layout of docs/mount.md section 1; the operations dispatch on
``Node.kind`` and never split paths themselves.
"""

from __future__ import annotations

import errno
from enum import Enum
from typing import NamedTuple

from mfusepy import FuseOSError

from seglogfs.timestamps import parse_iso8601_ms


class Kind(Enum):
    """What a path names."""

    ROOT = "root"
    LOG = "log"
    APPEND = "append"
    APPEND_JSONL = "append.jsonl"
    APPEND_RAW = "append.raw"
    RECORDS = "records"
    RECORDS_JSONL = "records.jsonl"
    INFO = "info"
    BY_OFFSET_DIR = "by-offset"
    BY_TIME_DIR = "by-time"
    SEGMENTS_DIR = "segments"
    FROM_DIR = "from"
    BY_OFFSET = "by-offset/<n>"
    BY_TIME = "by-time/<ts>"
    SEGMENT_FILE = "segments/<file>"
    FROM = "from/<n>"
    FROM_JSONL = "from/<n>.jsonl"

    # Members are singletons: identity hashing, in C, instead of Enum's hash of the name in Python
    # (every request looks its kind up in a dict or a set).
    __hash__ = object.__hash__


#: names inside a log directory, in `ls` order
LOG_ENTRIES: dict[str, Kind] = {
    "append": Kind.APPEND,
    "append.jsonl": Kind.APPEND_JSONL,
    "append.raw": Kind.APPEND_RAW,
    "by-offset": Kind.BY_OFFSET_DIR,
    "by-time": Kind.BY_TIME_DIR,
    "from": Kind.FROM_DIR,
    "info": Kind.INFO,
    "records": Kind.RECORDS,
    "records.jsonl": Kind.RECORDS_JSONL,
    "segments": Kind.SEGMENTS_DIR,
}
WRITABLE = frozenset({Kind.APPEND, Kind.APPEND_JSONL, Kind.APPEND_RAW})
DIRECTORIES = frozenset(
    {Kind.ROOT, Kind.LOG, Kind.BY_OFFSET_DIR, Kind.BY_TIME_DIR, Kind.SEGMENTS_DIR, Kind.FROM_DIR}
)
_CHILD_KINDS = {
    "by-offset": Kind.BY_OFFSET,
    "by-time": Kind.BY_TIME,
    "segments": Kind.SEGMENT_FILE,
    "from": Kind.FROM,
}
_JSONL = ".jsonl"
#: parsed paths remembered by :func:`node_of` (emptied when full: refilling costs one parse a path)
NODE_CACHE_ENTRIES = 1 << 16


class Node(NamedTuple):
    """A parsed path: its kind, the log it belongs to, and the offset / timestamp / file name in it.
    (A named tuple: built once per new path, and a tuple costs a third of a frozen dataclass.)"""

    kind: Kind
    log: str | None = None
    name: str | None = None  # segment file name, or the original text of an offset / timestamp
    number: int | None = None  # offset (by-offset, from) or epoch ms (by-time)


def _enoent() -> FuseOSError:
    return FuseOSError(errno.ENOENT)


def parse_offset(text: str) -> int:
    """An offset name: decimal digits only (no sign, no spaces); ENOENT otherwise."""
    if not text.isascii() or not text.isdigit():
        raise _enoent()
    return int(text)


def parse_time(text: str) -> int:
    """A ``by-time`` name: epoch milliseconds or ISO-8601; ENOENT otherwise."""
    if text.isascii() and text.isdigit():
        return int(text)
    try:
        return parse_iso8601_ms(text)
    except ValueError:
        raise _enoent() from None


def parse_path(path: str) -> Node:
    """The :class:`Node` for an absolute mount path; ENOENT for anything outside the layout."""
    parts = path.split("/")
    if len(parts) == 4 and parts[2] == "by-offset" and parts[1] and parts[3]:  # the kernel's usual spelling
        return Node(Kind.BY_OFFSET, parts[1], parts[3], parse_offset(parts[3]))
    parts = [p for p in parts if p]
    depth = len(parts)
    if depth == 0:
        return Node(Kind.ROOT)
    log = parts[0]
    if depth == 1:
        return Node(Kind.LOG, log)
    kind = LOG_ENTRIES.get(parts[1])
    if kind is None:
        raise _enoent()
    if depth == 2:
        return Node(kind, log)
    child = _CHILD_KINDS.get(parts[1])
    if depth != 3 or child is None:
        raise _enoent()
    name = parts[2]
    if child is Kind.BY_OFFSET:
        return Node(child, log, name, parse_offset(name))
    if child is Kind.BY_TIME:
        return Node(child, log, name, parse_time(name))
    if child is Kind.FROM:
        if name.endswith(_JSONL):
            return Node(Kind.FROM_JSONL, log, name, parse_offset(name[: -len(_JSONL)]))
        return Node(child, log, name, parse_offset(name))
    if name.startswith("."):  # the real files never start with a dot; keeps ".", ".." and probes out
        raise _enoent()
    return Node(child, log, name)


_nodes: dict[str, Node] = {}


def node_of(path: str) -> Node:
    """:func:`parse_path`, remembered: a parse depends on the path string alone, and the kernel asks
    about the same paths again and again (lookup, open, getxattr). Errors are not remembered."""
    node = _nodes.get(path)
    if node is None:
        node = parse_path(path)
        if len(_nodes) >= NODE_CACHE_ENTRIES:
            _nodes.clear()  # dict operations are atomic under the GIL: safe in the multi-threaded loop
        _nodes[path] = node
    return node
