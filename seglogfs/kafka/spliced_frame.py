"""A response frame whose record bytes stay in the segment files: its bytes are encoded with a short
marker in each large ``records`` field, then split there into the encoded parts and the file regions,
which go to the socket with ``sendfile`` (zero-copy; asyncio reads and writes them over TLS)."""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.serial.writers import write_unsigned_varint
from kio.static.primitive import uvarint

from seglogfs.fetch_data_info import FileSlice

from .zero_copy_descriptors import ZeroCopyDescriptors

__all__ = ["FileRegion", "SplicedBody", "SplicedFrame", "splice"]

MARKER_BYTES = 16


@dataclass(slots=True)
class FileRegion:
    """``size`` bytes at ``position`` of an open file the frame owns."""

    file: object  # an unbuffered binary file (os.fdopen(fd, "rb", buffering=0))
    position: int
    size: int
    release: Callable[[], None] | None = None  # gives the descriptor's place back, once

    def close(self) -> None:
        """Close the file and give its descriptor's place back (again: nothing)."""
        release, self.release = self.release, None
        if release is not None:
            try:
                self.file.close()  # type: ignore[attr-defined]
            finally:
                release()


@dataclass(slots=True)
class SplicedBody:
    """A handler's response entity whose ``records`` fields hold markers, and the regions they stand
    for. Owns the regions' files until :func:`splice` hands them to a frame."""

    entity: object
    descriptors: ZeroCopyDescriptors
    regions: dict[bytes, FileRegion] = field(default_factory=dict)

    def add(self, records: FileSlice) -> bytes | None:
        """A marker standing for ``records``, whose file is opened now (it stays the same file whatever
        retention or the cleaner do before the frame is sent); None when the listener holds all the
        descriptors it may (the caller copies the records)."""
        if not self.descriptors.acquire():
            return None
        try:
            file = os.fdopen(records.open(), "rb", buffering=0)
        except BaseException:
            self.descriptors.release()
            raise
        marker = os.urandom(MARKER_BYTES)
        self.regions[marker] = FileRegion(file, records.position, records.size, self.descriptors.release)
        return marker

    def close(self) -> None:
        """Close the files of regions no frame took."""
        for region in self.regions.values():
            region.close()
        self.regions.clear()


class SplicedFrame:
    """A whole frame as bytes parts and file regions, in order."""

    def __init__(self, parts: list[bytes | FileRegion]) -> None:
        self.parts = parts

    async def send(self, writer: asyncio.StreamWriter) -> None:
        """Write the frame; ConnectionError when a region's file came up short (it was cut under the
        daemon: the frame cannot be completed, so the connection must close). Closes the files."""
        loop = asyncio.get_running_loop()
        try:
            for part in self.parts:
                if isinstance(part, bytes):
                    writer.write(part)
                    continue
                if writer.transport.is_closing():  # loop.sendfile would raise RuntimeError
                    raise ConnectionError("the client went away during a Fetch response")
                sent = await loop.sendfile(writer.transport, part.file, part.position, part.size)  # type: ignore[arg-type]
                if sent != part.size:
                    raise ConnectionError(f"a segment file ended {part.size - sent} bytes short of a Fetch")
            await writer.drain()
        finally:
            self.close()

    def close(self) -> None:
        """Close the regions' files."""
        for part in self.parts:
            if isinstance(part, FileRegion):
                part.close()


def splice(frame: bytes, body: SplicedBody, *, flexible: bool) -> SplicedFrame:
    """``frame`` (encoded from ``body.entity``, its size first) with each marker's field replaced by
    its region: the length prefix is rewritten for the region's size, and so is the frame's size."""
    parts: list[bytes | FileRegion] = []
    prefix = 1 if flexible else 4  # a compact length (uvarint of 17) or an INT32 (16)
    at, grown = 0, 0
    placed = sorted((frame.index(marker), marker) for marker in body.regions)
    for where, marker in placed:
        region = body.regions[marker]
        length = _compact_length(region.size) if flexible else region.size.to_bytes(4, "big")
        parts += [frame[at:where - prefix], length, region]
        grown += len(length) + region.size - prefix - MARKER_BYTES
        at = where + MARKER_BYTES
    parts.append(frame[at:])
    size = int.from_bytes(frame[:4], "big") + grown
    first = parts[0]
    assert isinstance(first, bytes)
    parts[0] = size.to_bytes(4, "big") + first[4:]
    body.regions.clear()  # the frame owns the files now
    return SplicedFrame([part for part in parts if not isinstance(part, bytes) or part])


def _compact_length(size: int) -> bytes:
    """A COMPACT_RECORDS length: the size plus one as an unsigned varint (kio's writer)."""
    out = io.BytesIO()
    write_unsigned_varint(out, uvarint(size + 1))
    return out.getvalue()
