"""The log as the mount shows it (ratarmount's MountSource role): the byte streams of a log's records
(:mod:`.value_stream`), the totals they share (:mod:`.stream_totals`), a log dir's files
(:mod:`.log_dir_files`) and the ``by-offset`` listing (:mod:`.offset_listing`).

Views sit between the engine (:mod:`seglogfs`) and the adapters: they import the engine, never an
adapter (``seglogfs.fs``, ``seglogfs.spark``, ``seglogfs.kafka``) or a tool.
"""
