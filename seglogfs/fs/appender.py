"""The append files' open handles: bytes written to ``append``, ``append.jsonl``, ``append.raw`` -> records.

``append`` takes one record per line (``key<sep>value`` when the log sets ``fs.append.key.separator``),
``append.jsonl`` one JSON line per record (:mod:`seglogfs.jsonl`), ``append.raw`` the whole body of the
file as one record. Splitting lines into batches under
max.message.bytes is the engine's (``Log.append_split``, ``Log.max_value_bytes``); this module only
keeps what a writer has not finished (a partial line, the raw body) and decides what a refused write
takes with it.

FLUSH comes at each close() of each dup of a descriptor (`{ printf 'a'; echo b; } > append`
closes three), so the partial line and the append.raw body are committed at RELEASE, the last
close of the open file. The kernel sends RELEASE without waiting for it, just after that close()
returns: a reader may see the record a moment later, and nobody hears an error. So on a log whose
compression.type names a codec, where a body's size against max.message.bytes is known only once
compressed, the append files open without noflush and each FLUSH checks what RELEASE would append:
a close() gets EFBIG, and the body is discarded whole, when compression makes it too large. Without
a codec the size checked at each write is exact, and opens keep noflush (no round trip at close).
"""

from __future__ import annotations

import logging
import threading

from seglogfs.errors import InvalidRecordError, RecordTooLargeError
from seglogfs.fs.handles import OpenFile
from seglogfs.fs.mount_config import MountConfigs
from seglogfs.fs.paths import Node
from seglogfs.jsonl import parse_jsonl_line
from seglogfs.log import Log
from seglogfs.records import ProducerRecord
from seglogfs.records.encode import KeyedValues, NoSeparatorError

log = logging.getLogger("seglogfs.fs")


class Appender(OpenFile):
    """An open append file: what its writer has not committed yet, committed at release."""

    __slots__ = ("configs", "discarding", "lock", "log", "node", "pending")

    def __init__(self, node: Node, lg: Log, configs: MountConfigs) -> None:
        self.node = node
        self.log = lg
        self.configs = configs  # the mount's settings (fs.append.key.separator), read at each write
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

    @property
    def checks_at_close(self) -> bool:
        return self.log.compresses

    def flush(self) -> None:
        """At a close(): EFBIG when what RELEASE would append cannot make a batch once compressed.
        The body is then discarded whole, with any bytes a dup still writes to continue it."""
        with self.lock:
            if self.discarding or not self.pending or not _may_outgrow_when_compressed(self):
                return
            try:
                self._check_pending()
            except RecordTooLargeError:
                self._discard_pending()
                raise
            except InvalidRecordError:
                pass  # a dup may still finish the line; RELEASE reports what stays wrong

    def _check_pending(self) -> None:
        """Raise what committing the unfinished body now would raise, appending nothing."""
        raise NotImplementedError

    def _discard_pending(self) -> None:
        self.pending = bytearray()
        self.discarding = True

    def _refuse_keyless(self, what: str) -> None:
        """When every record of this file would have no key, fail its first write at once rather than
        the release nobody hears (:meth:`~seglogfs.log.Log.refuse_keyless`)."""
        self.log.refuse_keyless(what)

    def release(self, why: str) -> None:
        try:
            self._commit_pending()
        except Exception as exc:  # nobody is left to tell; the close() that could have is gone
            log.error("%s of %s/%s: dropped pending data: %s", why, self.node.log, self.node.kind.value, exc)


class LineAppender(Appender):
    """``append``: each line is a record's value."""

    __slots__ = ("refused",)

    def __init__(self, node: Node, lg: Log, configs: MountConfigs) -> None:
        super().__init__(node, lg, configs)
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
        self._check_keys()
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

    def _separator(self) -> bytes | None:
        """``fs.append.key.separator`` as bytes (read at each write: a reload changes it live)."""
        separator = self.configs.of(self.log.name).append_key_separator
        return separator.encode() if separator is not None else None

    def _check_keys(self) -> None:
        if self._separator() is None:
            self._refuse_keyless("a line of append without fs.append.key.separator")

    def _line_limit(self) -> int:
        """The longest line worth buffering: the largest value a batch of its own can hold, plus the
        separator when lines carry keys (an empty key costs what a null key does: one varint byte)."""
        separator = self._separator()
        return self.log.max_value_bytes() + (len(separator) if separator is not None else 0)

    def _records(self, complete: bytes) -> list[bytes] | KeyedValues | list[ProducerRecord]:
        """The records of the lines of ``complete`` (no trailing newline); EINVAL when a line lacks
        the key separator."""
        separator = self._separator()
        if separator is None:
            return complete.split(b"\n")  # the fast path: key-less values
        return keyed_records(complete, separator)

    def _commit_lines(self, complete: bytes) -> None:
        """Append the lines of ``complete`` (no trailing newline): one batch, or several when together
        they exceed max.message.bytes (``Log.append_split``); nothing when a line alone is too large,
        or (EINVAL) when a line is malformed."""
        records = self._records(complete)
        if records:
            self.log.append_split(records)

    def _check_pending(self) -> None:
        self.log.check_append(self._records(bytes(self.pending)))

    def _commit_pending(self) -> None:
        with self.lock:
            if self.pending:
                body, self.pending = bytes(self.pending), bytearray()
                self._commit_lines(body)


class JsonLineAppender(LineAppender):
    """``append.jsonl``: each non-blank line is a record as JSON (key, value, headers, timestamp)."""

    __slots__ = ()

    def _check_keys(self) -> None:
        """Each JSON line says whether it has a key: the engine judges them."""

    def _line_limit(self) -> int:
        """A record's key, value and headers together are under max.message.bytes, and JSON may spell
        one byte of them as six (``\\u00ff``); its exact size is known only once the line is parsed,
        at its newline."""
        return 6 * self.log.config.max_message_bytes

    def _records(self, complete: bytes) -> list[ProducerRecord]:
        return [parse_jsonl_line(line) for line in complete.split(b"\n") if line.strip()]


class RawAppender(Appender):
    """``append.raw``: the whole body, written in any number of writes, is one record at release."""

    __slots__ = ("written",)

    def __init__(self, node: Node, lg: Log, configs: MountConfigs) -> None:
        super().__init__(node, lg, configs)
        self.written = False  # a record is due at close even if empty

    def _write_locked(self, data: bytes) -> None:
        """Collect the body; once it cannot fit a batch of its own it is gone for good."""
        self._refuse_keyless("an append.raw record")
        limit = self.log.max_value_bytes()
        if self.discarding or len(self.pending) + len(data) > limit:
            self.pending, self.written, self.discarding = bytearray(), False, True
            raise RecordTooLargeError(
                f"append.raw record over {limit} bytes (max.message.bytes="
                f"{self.log.config.max_message_bytes}): discarded"
            )
        self.pending += data
        self.written = True

    def _check_pending(self) -> None:
        self.log.check_append([ProducerRecord(value=bytes(self.pending))])

    def _discard_pending(self) -> None:
        super()._discard_pending()
        self.written = False

    def _commit_pending(self) -> None:
        with self.lock:
            if not self.written:
                return
            body, self.pending, self.written = bytes(self.pending), bytearray(), False
            self.log.append([ProducerRecord(value=body)])


def _may_outgrow_when_compressed(appender: Appender) -> bool:
    """Whether compression could push the unfinished body over max.message.bytes: the worst
    expansion of the four codecs (snappy's n/6 + 32, plus xerial framing) only matters near the
    limit, so bodies below it skip the trial encoding."""
    size = len(appender.pending)
    return size + size // 6 + 1024 > appender.log.max_value_bytes()


def keyed_records(text: bytes, separator: bytes) -> KeyedValues:
    """``key<sep>value`` lines (``text`` without its last newline) -> keyed records, split at the FIRST
    separator (Kafka's console producer with ``parse.key=true``: a separator in the value stays in
    the value). A line without the separator is refused, as that producer refuses it:
    :class:`InvalidRecordError` naming the line (1-based, within the write) and nothing appended."""
    try:
        return KeyedValues.split_lines(text, separator)
    except NoSeparatorError as exc:
        line = text.split(b"\n")[exc.line]
        raise InvalidRecordError(
            f"no key separator {separator!r} (fs.append.key.separator) on line {exc.line + 1} of the "
            f"write: {line[:80]!r}"
        ) from None
