"""seglogfs, the engine: Kafka's log format, segments, logs and a data dir of them, as a plain library.

This package's names are what the adapters (``seglogfs.fs``, ``seglogfs.spark``, the Kafka listener,
the daemon ``seglogd``) and the views (``seglogfs.views``) use of the engine; ``docs/engine-api.md``
documents them and the modules they live in. Each name is imported on first use (module
``__getattr__``), so ``import seglogfs`` costs nothing until a name is asked for.

The layers are checked by ``lint-imports`` (``pyproject.toml``): the engine imports none of its
consumers, nor FUSE, YAML, Spark or network code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: public name -> the engine module that defines it
_EXPORTS = {
    # logs and a data dir of them
    "Log": "log",
    "LogManager": "log_manager",
    "LogConfig": "config",
    "CleanerConfig": "cleaner_config",
    "LogLock": "lock",
    "LogSegment": "segment",
    "Damage": "segment",
    "BUDGET": "descriptor_budget",
    "counted_bytes": "totals_counter",
    # records
    "BatchHeader": "records",
    "ProducerRecord": "records",
    "Record": "records",
    "RecordColumns": "records",
    "TimestampType": "records",
    "decode_batch_columns": "records",
    "validate_batch": "records",
    "AbortedTxn": "transaction_index",
    # read_committed
    "READ_COMMITTED": "read_committed",
    "READ_UNCOMMITTED": "read_committed",
    "Isolation": "read_committed",
    "hidden_batches": "read_committed",
    "isolation_level": "read_committed",
    # the views' bytes, JSON lines, timestamps and units
    "JSON_LINES": "stream_format",
    "VALUES": "stream_format",
    "StreamFormat": "stream_format",
    "headers_to_json": "jsonl",
    "parse_jsonl_line": "jsonl",
    "record_to_jsonl": "jsonl",
    "parse_iso8601_ms": "timestamps",
    "parse_duration_ms": "config_units",
    # on-disk names and files
    "LOG_START_OFFSET_CHECKPOINT": "log_files",
    "check_new_log_name": "log_files",
    "find_log_dirs": "log_files",
    "is_log_dir": "log_files",
    "parse_log_dir_name": "log_files",
    "parse_offset_file_name": "log_files",
    "sealed_segment_file": "log_files",
    "read_offset_checkpoint_or_empty": "checkpoint",
    # checking a data dir
    "VerifyReport": "verifier",
    "find_segments": "verifier",
    "verify_paths": "verifier",
    # errors
    "PersistentFault": "faults",
    "SeglogError": "errors",
    "ConfigError": "errors",
    "CorruptIndexError": "errors",
    "CorruptRecordError": "errors",
    "InvalidLogNameError": "errors",
    "InvalidRecordError": "errors",
    "LogLockedError": "errors",
    "LogOfflineError": "errors",
    "OffsetOutOfRangeError": "errors",
    "ReadOnlyLogError": "errors",
    "RecordTooLargeError": "errors",
    "TimestampNotFoundError": "errors",
    "OutOfOrderSequenceError": "errors",
    "ProducerFencedError": "errors",
}

__all__ = [
    "BUDGET", "JSON_LINES", "LOG_START_OFFSET_CHECKPOINT", "READ_COMMITTED", "READ_UNCOMMITTED",
    "VALUES", "AbortedTxn", "BatchHeader", "CleanerConfig", "ConfigError", "CorruptIndexError",
    "CorruptRecordError", "Damage", "InvalidLogNameError", "InvalidRecordError", "Isolation", "Log",
    "LogConfig", "LogLock", "LogLockedError", "LogManager", "LogOfflineError", "LogSegment",
    "OffsetOutOfRangeError", "OutOfOrderSequenceError", "PersistentFault", "ProducerFencedError",
    "ProducerRecord", "ReadOnlyLogError", "Record",
    "RecordColumns", "RecordTooLargeError", "SeglogError", "StreamFormat", "TimestampNotFoundError",
    "TimestampType", "VerifyReport", "check_new_log_name", "counted_bytes", "decode_batch_columns",
    "find_log_dirs", "find_segments", "headers_to_json", "hidden_batches", "is_log_dir",
    "isolation_level", "parse_duration_ms", "parse_iso8601_ms", "parse_jsonl_line",
    "parse_log_dir_name", "parse_offset_file_name", "read_offset_checkpoint_or_empty",
    "record_to_jsonl", "sealed_segment_file", "validate_batch", "verify_paths",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once: the next lookup does not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what type checkers see; at run time each name is imported on first use
    from .checkpoint import read_offset_checkpoint_or_empty
    from .cleaner_config import CleanerConfig
    from .config import LogConfig
    from .config_units import parse_duration_ms
    from .descriptor_budget import BUDGET
    from .errors import (
        ConfigError,
        CorruptIndexError,
        CorruptRecordError,
        InvalidLogNameError,
        InvalidRecordError,
        LogLockedError,
        LogOfflineError,
        OffsetOutOfRangeError,
        ReadOnlyLogError,
        RecordTooLargeError,
        SeglogError,
        TimestampNotFoundError,
    )
    from .faults import PersistentFault
    from .jsonl import headers_to_json, parse_jsonl_line, record_to_jsonl
    from .lock import LogLock
    from .log import Log
    from .log_files import (
        LOG_START_OFFSET_CHECKPOINT,
        check_new_log_name,
        find_log_dirs,
        is_log_dir,
        parse_log_dir_name,
        parse_offset_file_name,
        sealed_segment_file,
    )
    from .log_manager import LogManager
    from .read_committed import READ_COMMITTED, READ_UNCOMMITTED, Isolation, hidden_batches, isolation_level
    from .records import (
        BatchHeader,
        ProducerRecord,
        Record,
        RecordColumns,
        TimestampType,
        decode_batch_columns,
        validate_batch,
    )
    from .segment import Damage, LogSegment
    from .stream_format import JSON_LINES, VALUES, StreamFormat
    from .timestamps import parse_iso8601_ms
    from .totals_counter import counted_bytes
    from .transaction_index import AbortedTxn
    from .verifier import VerifyReport, find_segments, verify_paths
