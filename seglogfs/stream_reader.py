"""``StreamReader``: one open file of a :class:`~seglogfs.value_stream.ValueStream` (``records``,
``from/<n>``...). It reads by the stream's positions, except where the stream's hole begins (see the
value_stream module docstring): a reader never sees a torn or repeated line."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from seglogfs.errors import OffsetOutOfRangeError

if TYPE_CHECKING:
    from seglogfs.value_stream import ValueStream

log = logging.getLogger("seglogfs.value_stream")

_NEWLINE = 10


class StreamReader:
    """One open ``records`` file: reads by position, as :meth:`ValueStream.read`, except where the
    stream's hole begins (see the module docstring): a reader never sees a torn or repeated line."""

    def __init__(self, stream: ValueStream) -> None:
        self.stream = stream
        self._lock = threading.Lock()
        self._skip = 0  # added to every position asked: the bytes of the hole this reader jumped over
        self._started = False  # a read was answered (bytes, or the end of the stream)
        self._next = 0  # the position after the last bytes returned
        self._at_line_start = True  # the last bytes returned ended a line
        self._eof_in_hole: int | None = None  # position of the last read answered b"" for the hole
        self._closed = False

    def close(self) -> None:
        """The file is closed (the stream may then drop its hole, see :meth:`ValueStream.size`)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self.stream._reader_closed()

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes at this reader's ``position``."""
        if size <= 0 or position < 0:
            return b""
        with self._lock, self.stream._lock:  # one refresh (in bounds) serves the read
            while True:
                target = position + self._skip
                readable, live = self.stream.bounds()
                fresh = not self._started and target < live
                if fresh or (target < readable and position == self._eof_in_hole):
                    # A new reader starts at the log start offset; one that met the hole and asks again
                    # (tail -f after its end of file) goes on from there.
                    if not fresh:
                        log.warning(
                            "%s: a records reader fell behind retention: %d bytes of records skipped",
                            self.stream.log.name, live - target,
                        )
                    self._skip += live - target
                    self._eof_in_hole = None
                    target = live
                elif target < readable:
                    if position == self._next and not self._at_line_start:
                        raise OffsetOutOfRangeError(
                            f"the record being read from the records of log {self.stream.log.name} "
                            f"was removed by retention"
                        )
                    self._eof_in_hole = position
                    return b""
                try:
                    data = self.stream._read_refreshed(target, size)
                except OffsetOutOfRangeError:
                    continue  # the hole grew meanwhile: decide again
                self._started = True  # one that opened an empty log follows it from its start
                if data:
                    self._next = position + len(data)
                    self._at_line_start = data[-1] == _NEWLINE
                return data
