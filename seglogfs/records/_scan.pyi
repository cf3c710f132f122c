"""Types of the C records scanner (``_scan.c``, ``_scan_run.h``): see their docstrings."""

from typing import Any

from numpy.typing import NDArray
from typing_extensions import Buffer

ROWS: int

class MalformedRecords(ValueError): ...

def scan(area: Buffer, count: int, out: Buffer | NDArray[Any], /) -> int: ...
def bounds(
    area: Buffer, count: int, starts: Buffer | NDArray[Any], deltas: Buffer | NDArray[Any], /
) -> tuple[int, bool]: ...
def record(data: Buffer, /) -> tuple[int, int, int, int, int, int, int, int]: ...
def values(area: Buffer, count: int, min_delta: int, build: bool, /) -> tuple[bytes | int, int]: ...
def plain_jsonl(
    area: Buffer, count: int, min_delta: int, base_offset: int, base_timestamp: int,
    fixed_timestamp: int | None, type_name: str, build: bool, /,
) -> tuple[bytes | int | None, int]: ...
def count_run(
    buf: Buffer, next_offset: int, limit_offset: int, check_crc: bool = True, /
) -> tuple[bytes, int, int]: ...
def render_run(
    buf: Buffer, jsonl: bool, next_offset: int, limit_offset: int, /
) -> tuple[bytes, int, int, int, int]: ...
def record_in_batch(
    fd: int, area_position: int, starts: Buffer | NDArray[Any], deltas: Buffer | NDArray[Any] | None,
    area_size: int, delta: int, /,
) -> tuple[int, int, bytes | None, bytes | None, bytes | None] | int | None: ...
