"""Writes: ``df.write.format("seglog").mode("append")``.

Columns: ``value`` (binary or string, required), optional ``key`` (binary/string), ``headers``
(array<struct<key string, value binary|string>>, no null key), ``timestamp`` (timestamp, or epoch ms
as an integer; absent or null = now), ``topic`` (string) and ``partition`` (integer). Other columns
are ignored. The types are checked on the driver when the write starts (:func:`check_write_schema`),
header keys in each task before the batch holding them is staged or appended (so on the direct route
a job that meets one appends nothing): either failure is one line naming the column, the type it
needs and the target log.

Target log of a row:
- ``path`` is a log dir: every row goes to it (``topic`` / ``partition`` columns are ignored);
- ``path`` is a data dir: the log named by the ``topic`` column or option, or ``<topic>-<partition>``
  when a ``partition`` column is given. A missing log is created.

Two routes, chosen on the driver when the write starts:
- ``mount=<mount point>`` given: through the mount of the running ``seglogd`` that owns the logs. Each
  task writes its rows, in order, to ``<mount>/<log>/append.jsonl`` (one ``write()`` per chunk of whole
  lines, so each chunk is appended atomically as one batch; ``mkdir`` creates missing logs).
- no ``mount``: directly through the engine. If a live process holds a target log's owner lock
  (``.seglogfs.lock``), the write fails and asks for ``mount``. Tasks stage their rows as Arrow IPC
  files under ``stagingDir`` (default: the system temp dir; on a cluster give a shared path), and
  ``commit()`` on the driver appends every task's rows, task by task and in order, as the log's single
  writer. Nothing is appended when the job fails. Kafka topic configs given as options
  (``segment.bytes``, ``compression.type``...) apply to the logs written.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from seglogfs.log_files import (
    LOG_LOCK_FILE,
    RECOVERY_POINT_CHECKPOINT,
    is_log_dir,
    parse_log_dir_name,
    validate_log_name,
)

from .options import OptionError, parse_int

if TYPE_CHECKING:
    import pyarrow as pa

    from seglogfs.log import Log
    from seglogfs.records import ProducerRecord

_MOUNT_WRITE_BYTES = 256 * 1024  # one write() = one batch; stays well under max.message.bytes
_APPEND_CHUNK_BYTES = 512 * 1024
_APPEND_CHUNK_ROWS = 4096
_WRITER_OPTIONS = {"path", "topic", "mount", "stagingdir", "mountwritebytes"}


@dataclass
class SeglogCommitMessage(WriterCommitMessage):
    """What one task did: staged files (direct route) and row counts per log."""

    task_id: str
    staged: list[tuple[str, str]] = field(default_factory=list)  # (log name, Arrow IPC file)
    rows: dict[str, int] = field(default_factory=dict)


def _log_config_overrides(options: dict[str, str]) -> dict[str, str]:
    """Topic configs given as options (``segment.bytes``...); ``kafka.*`` producer settings of a moved
    Kafka job do not apply to the sink and are ignored."""
    return {
        k: v
        for k, v in options.items()
        if "." in k and k not in _WRITER_OPTIONS and not k.startswith("kafka.")
    }


_INTEGERS = (ByteType, ShortType, IntegerType, LongType)
_BYTES = (BinaryType, StringType)


def _is_headers(dtype: DataType) -> bool:
    element = dtype.elementType if isinstance(dtype, ArrayType) else None
    if not isinstance(element, StructType) or [f.name for f in element.fields] != ["key", "value"]:
        return False
    return isinstance(element["key"].dataType, StringType) and isinstance(element["value"].dataType, _BYTES)


#: column -> (whether a Spark type fits it, the types it takes, as an error names them)
_COLUMN_TYPES = {
    "value": (lambda t: isinstance(t, _BYTES), "binary or string"),
    "key": (lambda t: isinstance(t, _BYTES), "binary or string"),
    "headers": (_is_headers, "array<struct<key:string,value:binary>> (or value string)"),
    "timestamp": (
        lambda t: isinstance(t, (TimestampType, TimestampNTZType, *_INTEGERS)),
        "timestamp (or epoch ms as bigint)",
    ),
    "topic": (lambda t: isinstance(t, StringType), "string"),
    "partition": (lambda t: isinstance(t, _INTEGERS), "int"),
}


def check_write_schema(schema: StructType, target: str) -> None:
    """Raise OptionError naming the first column of ``schema`` the sink takes whose type it cannot
    write, the type it needs and ``target`` (the log, or where the logs are)."""
    for column in schema.fields:
        rule = _COLUMN_TYPES.get(column.name)
        if rule is not None and not rule[0](column.dataType):
            raise OptionError(
                f"seglog sink ({target}): column {column.name!r} is {column.dataType.simpleString()}, "
                f"expected {rule[1]}"
            )


class SeglogWriter(DataSourceArrowWriter):
    """Arrow writer; see the module docstring for routes and columns."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = options
        path = options.get("path")
        if not path:
            raise OptionError("the seglog sink needs a path: .save('<data dir or log dir>')")
        names = set(schema.fieldNames())
        if "value" not in names:
            raise OptionError("the seglog sink needs a 'value' column")
        root = Path(path)
        self.single_log: str | None = None
        if is_log_dir(root):
            self.data_dir, self.single_log = str(root.parent), root.name
        else:
            self.data_dir = str(root)
        self.default_topic = options.get("topic")
        self.topic_column = "topic" in names
        if self.single_log is None and self.default_topic is None and "topic" not in names:
            raise OptionError("seglog sink: writing to a data dir needs a 'topic' column or option")
        check_write_schema(schema, self._target())
        self.mount = options.get("mount")
        self.mount_write_bytes = parse_int(options, "mountWriteBytes", _MOUNT_WRITE_BYTES, minimum=1)
        self.staging = options.get("stagingdir") or os.path.join(tempfile.gettempdir(), "seglog-staging")
        self.job_id = uuid.uuid4().hex
        self.config_overrides = _log_config_overrides(options)
        if self.mount is None:
            self._check_not_owned()

    # ------------------------------------------------------------------ driver-side checks

    def _target(self, log: str | None = None) -> str:
        """The log(s) written, as errors name them."""
        if log or self.single_log:
            return f"log {log or self.single_log} under {self.data_dir}"
        if self.default_topic and not self.topic_column:
            return f"log {self.default_topic} under {self.data_dir}"
        return f"the logs of the topic column under {self.data_dir}"

    def _check_not_owned(self) -> None:
        """Refuse direct writes to a log a live daemon owns (probe its flock, then let go)."""
        from seglogfs.errors import LogLockedError
        from seglogfs.lock import LogLock

        candidates = [Path(self.data_dir) / self.single_log] if self.single_log else []
        if not candidates and self.default_topic:
            candidates = [Path(self.data_dir) / self.default_topic]
        if not self.single_log and Path(self.data_dir).is_dir():
            candidates += [p for p in Path(self.data_dir).iterdir() if (p / LOG_LOCK_FILE).exists()]
        for log_dir in candidates:
            if not (log_dir / LOG_LOCK_FILE).exists():
                continue
            try:
                LogLock(log_dir).acquire().release()
            except LogLockedError as exc:
                raise OptionError(
                    f"seglog sink: {exc}; a running seglogd owns it, so write through its mount: "
                    ".option('mount', '<mount point>')"
                ) from None

    # ------------------------------------------------------------------ executor side

    def _log_names(self, batch: pa.RecordBatch) -> list[str]:
        n = batch.num_rows
        if self.single_log is not None:
            return [self.single_log] * n
        names = batch.schema.names
        topics = batch.column("topic").to_pylist() if "topic" in names else [None] * n
        parts = batch.column("partition").to_pylist() if "partition" in names else [None] * n
        out = []
        for topic, part in zip(topics, parts, strict=True):
            topic = topic if topic is not None else self.default_topic
            if topic is None:
                raise OptionError("seglog sink: a row has a null topic and no topic option is set")
            out.append(topic if part is None else f"{topic}-{part}")
        return out

    def _check_header_keys(self, batch: pa.RecordBatch, names: list[str]) -> None:
        """A null header key cannot be written (Kafka's are strings): fail the task before the batch
        is staged or appended, naming the log of the first row that has one."""
        import numpy as np
        import pyarrow.compute as pc

        if "headers" not in batch.schema.names:
            return
        headers = batch.column("headers")
        keys = pc.struct_field(pc.list_flatten(headers), "key")  # null for a null header too
        if keys.null_count == 0:
            return
        first = int(np.flatnonzero(keys.is_null().to_numpy(zero_copy_only=False))[0])
        row = int(pc.list_parent_indices(headers)[first].as_py())
        raise OptionError(
            f"seglog sink ({self._target(names[row])}): column 'headers' holds a header with a null key "
            "(or a null header); header keys must be non-null strings"
        )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SeglogCommitMessage:
        import pyarrow as pa

        message = SeglogCommitMessage(task_id=uuid.uuid4().hex)
        sinks: dict[str, _StageSink | _MountSink] = {}
        try:
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                batch = _normalise(batch)
                names = self._log_names(batch)
                self._check_header_keys(batch, names)
                groups: dict[str, list[int]] = {}
                for i, name in enumerate(names):
                    groups.setdefault(name, []).append(i)
                for name, rows in groups.items():
                    validate_log_name(name)
                    part = batch if len(groups) == 1 else batch.take(pa.array(rows))
                    sink = sinks.get(name)
                    if sink is None:
                        sink = sinks[name] = self._open_sink(name, message)
                    sink.write(part)
                    message.rows[name] = message.rows.get(name, 0) + part.num_rows
        finally:
            for sink in sinks.values():
                sink.close()
        return message

    def _open_sink(self, name: str, message: SeglogCommitMessage) -> _StageSink | _MountSink:
        if self.mount is not None:
            return _MountSink(Path(self.mount), name, self.mount_write_bytes or _MOUNT_WRITE_BYTES)
        directory = Path(self.staging) / self.job_id
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{message.task_id}-{name}.arrow"
        message.staged.append((name, str(path)))
        return _StageSink(path)

    # ------------------------------------------------------------------ driver side

    def commit(self, messages: list[SeglogCommitMessage | None]) -> None:
        if self.mount is not None:
            return
        try:
            staged: dict[str, list[str]] = {}
            for message in messages:
                if message is None:
                    continue
                for name, path in message.staged:
                    staged.setdefault(name, []).append(path)
            self._append_staged(staged)
        finally:
            shutil.rmtree(Path(self.staging) / self.job_id, ignore_errors=True)

    def abort(self, messages: list[SeglogCommitMessage | None]) -> None:
        shutil.rmtree(Path(self.staging) / self.job_id, ignore_errors=True)

    def _append_staged(self, staged: dict[str, list[str]]) -> None:
        """Append every staged file, log by log, in task order, as the logs' single writer."""
        from seglogfs.config import LogConfig

        config = LogConfig.from_mapping(self.config_overrides) if self.config_overrides else None
        if self.single_log is not None:
            from seglogfs.checkpoint import read_offset_checkpoint_or_empty
            from seglogfs.log import Log

            # A log dir on its own: recover only past the data dir's recovery point, if it has one.
            points = read_offset_checkpoint_or_empty(
                Path(self.data_dir) / RECOVERY_POINT_CHECKPOINT, unreadable_is_empty=True
            )
            recovery_point = points.get(parse_log_dir_name(self.single_log), 0)
            handle = Log.open(Path(self.data_dir) / self.single_log, config, recovery_point=recovery_point)
            try:
                for path in staged.get(self.single_log, []):
                    _append_file(handle, path)
            finally:
                handle.close()
            return
        from seglogfs.log_manager import LogManager

        with LogManager(self.data_dir, config) as manager:
            for name, paths in staged.items():
                handle = manager.create_log(name, config)
                for path in paths:
                    _append_file(handle, path)


def _append_file(handle: Log, path: str) -> None:
    import pyarrow as pa

    with pa.memory_map(path) as source:
        for batch in pa.ipc.open_stream(source):
            for chunk in _producer_chunks(batch):
                if chunk and isinstance(chunk[0], bytes):
                    handle.append_values(chunk)
                else:
                    handle.append(chunk)


def _normalise(batch: pa.RecordBatch) -> pa.RecordBatch:
    """value/key as binary, headers values as binary, timestamp as epoch ms int64 (null kept)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = batch.schema.names
    cols = {}
    for name in ("value", "key"):
        if name in names:
            col = batch.column(name)
            if not pa.types.is_binary(col.type):
                col = col.cast(pa.binary())
            cols[name] = col
    if "headers" in names:
        col = batch.column("headers")
        header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
        cols["headers"] = col.cast(header_type)
    if "timestamp" in names:
        col = batch.column("timestamp")
        if pa.types.is_timestamp(col.type):
            col = pc.divide(col.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()), 1000)
        cols["timestamp"] = col.cast(pa.int64())
    for name in ("topic", "partition"):
        if name in names:
            cols[name] = batch.column(name)
    return pa.RecordBatch.from_arrays(list(cols.values()), names=list(cols.keys()))


def _producer_chunks(batch: pa.RecordBatch) -> Iterator[list[bytes] | list[ProducerRecord]]:
    """Append calls for one normalised batch: lists of raw values (fast path) or of ProducerRecords,
    each small enough for one RecordBatch under the default ``max.message.bytes``."""
    from seglogfs.records import ProducerRecord

    names = batch.schema.names
    values = batch.column("value").to_pylist()
    fast = set(names) <= {"value", "topic", "partition"} and None not in values
    keys = batch.column("key").to_pylist() if "key" in names else None
    headers = batch.column("headers").to_pylist() if "headers" in names else None
    stamps = batch.column("timestamp").to_pylist() if "timestamp" in names else None
    start = 0
    size = 0
    n = len(values)
    for i in range(n):
        size += len(values[i] or b"") + (len(keys[i] or b"") if keys else 0) + 16
        last = i == n - 1
        if not last and size < _APPEND_CHUNK_BYTES and i - start + 1 < _APPEND_CHUNK_ROWS:
            continue
        if fast:
            yield values[start : i + 1]
        else:
            yield [
                ProducerRecord(
                    value=values[j],
                    key=keys[j] if keys else None,
                    headers=[(h["key"], h["value"]) for h in (headers[j] or [])] if headers else (),
                    timestamp=stamps[j] if stamps else None,
                )
                for j in range(start, i + 1)
            ]
        start, size = i + 1, 0


class _StageSink:
    """Arrow IPC stream file of one task's rows for one log (direct route)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._writer = None

    def write(self, batch: pa.RecordBatch) -> None:
        import pyarrow as pa

        if self._writer is None:
            self._writer = pa.ipc.new_stream(str(self.path), batch.schema)
        self._writer.write_batch(batch)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


class _MountSink:
    """``<mount>/<log>/append.jsonl``, written in chunks of whole lines (mount route)."""

    def __init__(self, mount: Path, name: str, chunk_bytes: int) -> None:
        log_dir = mount / name
        if not log_dir.exists():
            with contextlib.suppress(FileExistsError):
                log_dir.mkdir()
        self.path = log_dir / "append.jsonl"
        self.chunk_bytes = chunk_bytes
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)

    def write(self, batch: pa.RecordBatch) -> None:
        from seglogfs.jsonl import record_to_jsonl
        from seglogfs.records import ProducerRecord

        for chunk in _producer_chunks(batch):
            if chunk and isinstance(chunk[0], bytes):
                chunk = [ProducerRecord(value=v) for v in chunk]
            buf = bytearray()
            for record in chunk:
                line = record_to_jsonl(record)
                if buf and len(buf) + len(line) > self.chunk_bytes:
                    self._write_all(bytes(buf))
                    buf.clear()
                buf += line
            if buf:
                self._write_all(bytes(buf))

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def close(self) -> None:
        os.close(self._fd)
