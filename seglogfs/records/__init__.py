"""Record batch codec: Kafka's RecordBatch v2 (read and write) and legacy v0/v1 message sets (read).

Layout facts are in docs/kafka-format.md section 1. The package, by direction:

- ``types``: the value types: TimestampType, ProducerRecord (in), Record, DecodedRecord, RecordColumns
  and RecordBounds (out).
- ``batch_header``: BatchHeader and its field accessors, the shallow scan of a file's batches
  (``read_batch_header``, ``iter_batch_headers``), the CRC check (``validate_batch``), header sizes.
- ``encode``: v2 batches built with numpy scatter writes (``encode_values``, ``encode_batch``), and
  the exact size of a one-value batch (``single_value_batch_size``).
- ``decode``: v2 batches parsed into numpy columns (``decode_batch_columns``), record bounds, one record
  (``decode_record``), a batch's values as lines (``batch_values``, ``batch_values_size``) or plain
  JSON lines (``batch_plain_jsonl``), and the decoders of whole batches, which pass legacy entries to
  ``legacy``.
- ``scan``: the C scanner (``_scan.c``, built by ``pip install -e .``) that every v2 decoder uses: one
  pass over a batch's records, every length checked, errors as CorruptRecordError.
- ``legacy``: v0/v1 messages and compressed wrappers.

Encoding keeps its own varint helpers; decoding reads varints in the C scanner (and a few fields
outside it in ``decode``). CRC-32C runs in C (the ``crc32c`` package), codecs in C (cramjam). Import
from ``seglogfs.records``; the modules are the package's layout, not its API.
"""

from __future__ import annotations

from ..compression import Compression
from .batch_header import (
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    V2_HEADER_SIZE,
    BatchHeader,
    batch_max_timestamp,
    iter_batch_headers,
    read_batch_header,
    unchecked_v2_header,
    validate_batch,
)
from .decode import (
    batch_plain_jsonl,
    batch_values,
    batch_values_size,
    decode_batch,
    decode_batch_all,
    decode_batch_columns,
    decode_record,
    first_record_stamp,
    max_records_area,
    read_record_in_batch,
    record_bounds,
    records_area,
)
from .encode import encode_batch, encode_values, single_value_batch_size
from .types import (
    DecodedRecord,
    Header,
    ProducerRecord,
    Record,
    RecordBounds,
    RecordColumns,
    TimestampType,
)

__all__ = [
    "HEADER_SIZE_UP_TO_MAGIC",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "V2_HEADER_SIZE",
    "BatchHeader",
    "Compression",
    "DecodedRecord",
    "Header",
    "ProducerRecord",
    "Record",
    "RecordBounds",
    "RecordColumns",
    "TimestampType",
    "batch_max_timestamp",
    "batch_plain_jsonl",
    "batch_values",
    "batch_values_size",
    "decode_batch",
    "decode_batch_all",
    "decode_batch_columns",
    "decode_record",
    "encode_batch",
    "encode_values",
    "first_record_stamp",
    "iter_batch_headers",
    "max_records_area",
    "read_batch_header",
    "read_record_in_batch",
    "record_bounds",
    "records_area",
    "single_value_batch_size",
    "unchecked_v2_header",
    "validate_batch",
]
