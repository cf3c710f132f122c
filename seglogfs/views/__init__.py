"""The log as the mount shows it (ratarmount's MountSource role): the byte streams of a log's records
(:mod:`.value_stream`), the totals the read_committed streams share (:mod:`.stream_totals`), a log
dir's files (:mod:`.log_dir_files`) and the ``by-offset`` listing (:mod:`.offset_listing`).

What the engine itself needs stays in the engine: the stream formats (:mod:`seglogfs.stream_format`,
:mod:`seglogfs.jsonl`), because every segment's stream bytes are counted as batches are appended
(:mod:`seglogfs.segment_totals`), and which offsets hold a record (:mod:`seglogfs.record_offsets`),
which ``Log.info`` and read_committed lookups use.

Views import the engine, never an adapter (``seglogfs.fs``, ``seglogfs.spark``, ``seglogfs.kafka``)
or a tool; ``lint-imports`` checks it.
"""
