"""Append / roll / lookup against a plain in-memory model, across tiny segments and index intervals."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.engine_helpers import config

from seglogfs.errors import OffsetOutOfRangeError, TimestampNotFoundError
from seglogfs.log import Log
from seglogfs.records import ProducerRecord

values = st.binary(min_size=0, max_size=120)
records = st.builds(
    ProducerRecord,
    value=st.one_of(st.none(), values),
    key=st.one_of(st.none(), st.binary(max_size=10)),
    headers=st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2),
    timestamp=st.integers(min_value=0, max_value=10_000),
)
batches = st.lists(st.lists(records, min_size=1, max_size=12), min_size=1, max_size=25)
settings_for_logs = st.fixed_dictionaries(
    {
        "segment_bytes": st.integers(min_value=100, max_value=3000),
        "index_interval_bytes": st.integers(min_value=0, max_value=600),
        "segment_index_bytes": st.sampled_from([24, 36, 120, 4096]),
        "compression_type": st.sampled_from(["producer", "gzip", "lz4"]),
    }
)


def check_against_model(log: Log, model: list[ProducerRecord], probes: list[int]) -> None:
    assert (log.start_offset, log.end_offset) == (0, len(model))
    got = list(log.iter_records())
    assert [(r.offset, r.key, r.value, r.timestamp) for r in got] == [
        (i, m.key, m.value, m.timestamp) for i, m in enumerate(model)
    ]
    assert [r.headers for r in got] == [tuple(m.headers) for m in model]
    for offset in range(len(model)):
        assert log.read(offset).value == model[offset].value
    for start in probes:
        start %= len(model) + 1
        assert [r.offset for r in log.iter_records(start)] == list(range(start, len(model)))
    try:
        log.read(len(model))
        raise AssertionError("read past the end succeeded")
    except OffsetOutOfRangeError:
        pass
    for target in [*probes, 0, 10_000]:
        expected = next((i for i, m in enumerate(model) if m.timestamp >= target), None)
        try:
            assert log.offset_for_timestamp(target) == expected
        except TimestampNotFoundError:
            assert expected is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=batches, cfg=settings_for_logs, probes=st.lists(st.integers(0, 10_000), max_size=5))
def test_log_matches_model_through_rolls_reopen_and_recovery(batches, cfg, probes):
    root = Path(tempfile.mkdtemp())
    try:
        log_config = config(**cfg)
        log = Log.open(root / "p-0", log_config, create=True)
        model: list[ProducerRecord] = []
        for batch in batches:
            log.append(batch)
            model.extend(batch)
        check_against_model(log, model, probes)

        # an unclean copy (as after a crash) recovers to the same content
        shutil.copytree(log.dir, root / "crash-0", ignore=shutil.ignore_patterns(".seglogfs.lock"))
        log.close()
        recovered = Log.open(root / "crash-0", log_config, recovery_point=0)
        check_against_model(recovered, model, probes)
        recovered.close()

        # a clean reopen trusts the trimmed indexes
        reopened = Log.open(root / "p-0", log_config)
        check_against_model(reopened, model, probes)
        reopened.close()
    finally:
        shutil.rmtree(root)
