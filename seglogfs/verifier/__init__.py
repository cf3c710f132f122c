"""The verifier: check every batch CRC and every index entry of data dirs, log dirs or segments.

An engine service: ``seglogfs verify`` (:mod:`seglogfs.tools.verify`, the command line) and the Spark
``verify`` job (:mod:`seglogfs.spark.jobs`, one task per log) both call :func:`verify_paths`. Modules:
:mod:`.report` (findings and totals), :mod:`.segments` (finding segments, the ``.log`` scan, log dirs),
:mod:`.indexes` (``.index`` / ``.timeindex`` against the batches), :mod:`.transactions` (producer
state replayed over the batches, against ``.txnindex`` and ``.snapshot`` files).

A segment is sound when:

* every batch header is plausible and its CRC matches (CRC-32C for v2, CRC-32 for v0/v1), offsets
  increase from batch to batch, a batch's record count fits the offsets it spans, and no bytes trail
  the last complete batch; with ``decode_records`` (the Spark ``verify`` job), every record of every
  CRC-valid batch also decodes and record offsets strictly increase inside the batch. Offset gaps,
  inside a batch or between batches, are legal: compaction leaves them (a batch keeps its offsets,
  even emptied to no record), and a delete-horizon batch's baseTimestamp is the horizon, not a
  record's time (no check looks at it);
* every ``.index`` entry (O, P) points at the start P of a batch whose lastOffset is O (Kafka's
  per-batch indexing rule, also what kafka-dump-log.sh checks), with offsets and positions increasing;
* every ``.timeindex`` entry (T, O) names the lastOffset O of a batch whose max timestamp is T, with
  timestamps increasing; in an inactive segment the last entry holds the segment's max timestamp
  (Kafka writes it on roll, and retention reads it);
* the index files exist, pass Kafka's sanity check, and are trimmed unless the segment is the active
  (last) one, which a running writer keeps preallocated;
* transactions: each segment's ``.txnindex`` holds exactly the aborted transactions whose markers it
  holds (with Kafka's last stable offsets); snapshots parse and equal the producer state replayed from
  the log; COMMIT/ABORT markers are transactional with a producer id; a batch with a fenced (lower)
  epoch is a warning;
* every log dir still has its ``.log`` files.

Every finding names the file and the byte position in it. Findings are damage (records unreadable,
offsets or index entries wrong, a log without its ``.log`` files) or notes: conditions that recovery
repairs without loss, as a broker's crash or an older broker leaves them (a missing index, an untrimmed
index tail, no final time-index entry, an index left behind by a deleted segment). Reading needs no
lock: only complete batches are looked at.
"""

from .report import Problem, VerifyProgress, VerifyReport
from .segments import find_segments, verify_paths, verify_segment

__all__ = ["Problem", "VerifyProgress", "VerifyReport", "find_segments", "verify_paths", "verify_segment"]
