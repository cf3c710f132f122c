"""The append files' open handles: bytes written to ``append``, ``append.jsonl``, ``append.raw`` -> records.

``append`` takes one record per line, ``append.jsonl`` one JSON line per record (:mod:`seglogfs.jsonl`),
``append.raw`` the whole body of the file as one record. Splitting lines into batches under
max.message.bytes is the engine's (``Log.append_split``, ``Log.max_value_bytes``); this module only
keeps what a writer has not finished (a partial line, the raw body) and decides what a refused write
takes with it.

No flush(): every open sets noflush. FLUSH comes at each close() of each dup of a descriptor
(`{ printf 'a'; echo b; } > append` closes three), so the partial line and the append.raw body
are committed at RELEASE, the last close of the open file. The kernel sends RELEASE without
waiting for it, just after that close() returns: a reader may see the record a moment later.
"""

from __future__ import annotations

import logging
import threading

from seglogfs.errors import RecordTooLargeError
from seglogfs.fs.handles import OpenFile
from seglogfs.fs.paths import Node
from seglogfs.jsonl import parse_jsonl_line
from seglogfs.log import Log
from seglogfs.records import ProducerRecord

log = logging.getLogger("seglogfs.fs")


class Appender(OpenFile):
    """An open append file: what its writer has not committed yet, committed at release."""

    __slots__ = ("discarding", "lock", "log", "node", "pending")

    def __init__(self, node: Node, lg: Log) -> None:
        self.node = node
        self.log = lg
        self.lock = threading.Lock()
        self.pending = bytearray()  # partial line, or the append.raw body
        self.discarding = False  # the line / append.raw record being written is over the limit: dropped

    def write(self, data: bytes) -> None:
        with self.lock:
            self._write_locked(data)

    def _write_locked(self, data: bytes) -> None:
        raise NotImplementedError

    def _commit_pending(self) -> None:
        """At the last close: what the writer left unfinished becomes a record."""
        raise NotImplementedError

    def fsync(self) -> None:
        self.log.flush()

    def release(self, why: str) -> None:
        try:
            self._commit_pending()
        except Exception as exc:  # nobody is left to tell; the close() that could have is gone
            log.error("%s of %s/%s: dropped pending data: %s", why, self.node.log, self.node.kind.value, exc)


class LineAppender(Appender):
    """``append``: each line is a record's value."""

    __slots__ = ("refused",)

    def __init__(self, node: Node, lg: Log) -> None:
        super().__init__(node, lg)
        self.refused = b""  # a refused write's bytes through its first newline: see _write_locked

    def _write_locked(self, data: bytes) -> None:
        """Append the complete lines that ``data`` ends, keep its trailing partial line.

        A write fails as a whole: nothing of it is appended. On EFBIG, which no retry can cure, every
        line the write touches is discarded whole, so that a writer that goes on never gets a
        fragment or a splice: the line begun in earlier writes, and the line it leaves unfinished,
        whose later bytes fail with EFBIG too, up to and including the write with its newline.

        The write after that starts a new line, with one exception: the kernel splits a large
        write(2) into requests, and after a short count the writer (cat) sends the refused request
        again. When the refused write continued a partial line, a write that begins with the same
        bytes through its first newline is taken for that retry and fails with EFBIG too; appending
        it would append the discarded line's tail as a record.
        """
        if self.discarding or (self.refused and data.startswith(self.refused)):
            self.discarding = not data.endswith(b"\n")  # the line it leaves unfinished goes as well
            raise RecordTooLargeError("the rest of a line over max.message.bytes: discarded")
        self.refused = b""
        try:
            limit = self._line_limit()
            first_newline, last_newline = data.find(b"\n"), data.rfind(b"\n")
            first_line = len(self.pending) + (first_newline if first_newline >= 0 else len(data))
            if first_line > limit or len(data) - last_newline - 1 > limit:  # can never fit a batch
                limit_name = f"max.message.bytes={self.log.config.max_message_bytes}"
                raise RecordTooLargeError(f"line longer than {limit} bytes ({limit_name})")
            if last_newline < 0:
                self.pending += data  # no complete line yet
                return
            head = bytes(self.pending)
            self._commit_lines(head + data[:last_newline] if head else data[:last_newline])
        except RecordTooLargeError:
            self.discarding = not data.endswith(b"\n")
            if self.pending and not self.discarding:
                self.refused = data[: first_newline + 1]
            self.pending = bytearray()
            raise
        self.pending = bytearray(data[last_newline + 1 :])

    def _line_limit(self) -> int:
        """The longest line worth buffering: the largest value a batch of its own can hold."""
        return self.log.max_value_bytes()

    def _commit_lines(self, complete: bytes) -> None:
        """Append the lines of ``complete`` (no trailing newline): one batch, or several when together
        they exceed max.message.bytes (``Log.append_split``); nothing when a line alone is too large."""
        self.log.append_split(complete.split(b"\n"))

    def _commit_pending(self) -> None:
        with self.lock:
            if self.pending:
                body, self.pending = bytes(self.pending), bytearray()
                self._commit_lines(body)


class JsonLineAppender(LineAppender):
    """``append.jsonl``: each non-blank line is a record as JSON (key, value, headers, timestamp)."""

    __slots__ = ()

    def _line_limit(self) -> int:
        """A record's key, value and headers together are under max.message.bytes, and JSON may spell
        one byte of them as six (``\\u00ff``); its exact size is known only once the line is parsed,
        at its newline."""
        return 6 * self.log.config.max_message_bytes

    def _commit_lines(self, complete: bytes) -> None:
        records = [parse_jsonl_line(line) for line in complete.split(b"\n") if line.strip()]
        if records:
            self.log.append_split(records)


class RawAppender(Appender):
    """``append.raw``: the whole body, written in any number of writes, is one record at release."""

    __slots__ = ("written",)

    def __init__(self, node: Node, lg: Log) -> None:
        super().__init__(node, lg)
        self.written = False  # a record is due at close even if empty

    def _write_locked(self, data: bytes) -> None:
        """Collect the body; once it cannot fit a batch of its own it is gone for good."""
        limit = self.log.max_value_bytes()
        if self.discarding or len(self.pending) + len(data) > limit:
            self.pending, self.written, self.discarding = bytearray(), False, True
            raise RecordTooLargeError(
                f"append.raw record over {limit} bytes (max.message.bytes="
                f"{self.log.config.max_message_bytes}): discarded"
            )
        self.pending += data
        self.written = True

    def _commit_pending(self) -> None:
        with self.lock:
            if not self.written:
                return
            body, self.pending, self.written = bytes(self.pending), bytearray(), False
            self.log.append([ProducerRecord(value=body)])
