"""``seglogfs dump`` beside Kafka's DumpLogSegments on the same files: stdout must match line for
line, stderr's problem reports as a set (Kafka prints them in a hash map's order)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from seglogfs.tools.dump import DumpOptions, dump_files
from support.kafka_broker import dump_log_segments_many

_OPTION_FIELDS = {
    "--print-data-log": "print_data_log",
    "--deep-iteration": "deep_iteration",
    "--verify-index-only": "verify_index_only",
    "--index-sanity-check": "index_sanity_check",
    "--cluster-metadata-decoder": "cluster_metadata_decoder",
    "--offsets-decoder": "offsets_decoder",
    "--skip-record-metadata": "skip_record_metadata",
}


def segment_files(log_dirs: Sequence[Path]) -> list[Path]:
    """Every segment-named file (.log, .index, .timeindex, .txnindex, .snapshot) of the dirs."""
    return [p for d in log_dirs for p in sorted(d.iterdir()) if p.name[:1].isdigit()]


_VALUE_OPTIONS = {"--max-bytes": "max_bytes", "--max-message-size": "max_message_size"}


def seglogfs_dump(files: Sequence[Path], options: Sequence[str]) -> tuple[str, str]:
    """``seglogfs dump`` in this process with kafka-dump-log.sh's options (flags, ``--max-bytes N``,
    ``--max-message-size N``)."""
    settings: dict[str, bool | int] = {}
    words = iter(options)
    for word in words:
        if word in _VALUE_OPTIONS:
            settings[_VALUE_OPTIONS[word]] = int(next(words))
        else:
            settings[_OPTION_FIELDS[word]] = True
    out, err = io.StringIO(), io.StringIO()
    dump_files([str(f) for f in files], DumpOptions(**settings), out, err)  # type: ignore[arg-type]
    return out.getvalue(), err.getvalue()


def problem_blocks(stderr: str) -> set[str]:
    """stderr as its reports: a line and the indented lines under it."""
    blocks: list[str] = []
    for line in stderr.splitlines():
        if line.startswith(" ") and blocks:
            blocks[-1] += "\n" + line
        else:
            blocks.append(line)
    return set(blocks)


def assert_same_dumps(runs: Sequence[tuple[Sequence[Path], Sequence[str]]]) -> None:
    """Each run's Kafka output equals seglogfs' (stdout line for line, stderr as a set of reports)."""
    for (files, options), (k_out, k_err) in zip(runs, dump_log_segments_many(runs), strict=True):
        assert "Exception" not in k_err, k_err
        s_out, s_err = seglogfs_dump(files, options)
        k_lines, s_lines = k_out.splitlines(), s_out.splitlines()
        for n, (k, s) in enumerate(zip(k_lines, s_lines, strict=False)):
            assert s == k, f"{' '.join(options) or 'no options'}: line {n + 1} differs"
        assert len(s_lines) == len(k_lines), options
        assert problem_blocks(s_err) == problem_blocks(k_err), options
