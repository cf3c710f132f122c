"""Splitting a write into batches under max.message.bytes by exact encoded size (seglogfs.batch_split);
Log.append_split itself is exercised through the mount in tests/fs/test_fs_write_faults.py."""

from __future__ import annotations

import pytest
from support.engine_helpers import config, open_log

from seglogfs.batch_split import batch_encoder, largest_single_value, split_into_batches
from seglogfs.compression import Compression
from seglogfs.errors import RecordTooLargeError
from seglogfs.records import ProducerRecord, TimestampType, encode_values, single_value_batch_size


def _encoder(items):
    return batch_encoder(items, 1_700_000_000_000, Compression.NONE, TimestampType.CREATE_TIME)


@pytest.mark.parametrize("count", [1, 2, 7, 100])
def test_batches_are_each_as_long_as_fits_and_cover_every_item_in_order(count):
    values = [b"v%03d" % i * 10 for i in range(count)]
    limit = len(encode_values(values[:5], 0, 0)) + 1  # five records fit, six do not
    planned = split_into_batches(_encoder(values), count, 40, limit, "t-0")
    assert sum(n for _, n in planned) == count
    assert all(len(batch) <= limit for batch, _ in planned)
    assert [n for _, n in planned[:-1]] == [5] * (len(planned) - 1)


def test_one_batch_when_everything_fits():
    records = [ProducerRecord(b"x", key=b"k")] * 3
    [(batch, n)] = split_into_batches(_encoder(records), 3, 0, 10_000, "t-0")
    assert n == 3 and batch == _encoder(records)(0, 3, 0)


def test_a_record_too_large_alone_is_named_by_its_index():
    values = [b"a", b"b" * 500, b"c"]
    with pytest.raises(RecordTooLargeError) as caught:
        split_into_batches(_encoder(values), 3, 0, 200, "t-0")
    assert caught.value.index == 1


@pytest.mark.parametrize("limit", [100, 1000, 1_048_588])
def test_largest_single_value_fits_exactly(limit):
    size = largest_single_value(limit)
    assert single_value_batch_size(size) <= limit < single_value_batch_size(size + 1)
    assert largest_single_value(10) == -1


def test_log_max_value_bytes_follows_max_message_bytes(tmp_path):
    log = open_log(tmp_path / "t", config(max_message_bytes=1000))
    assert log.max_value_bytes() == largest_single_value(1000)
    log.append_values([b"x" * log.max_value_bytes()])
    log.close()
