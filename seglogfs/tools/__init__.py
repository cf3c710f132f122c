"""The command-line tools over the engine, as Kafka keeps its tools outside its storage layer:
``seglogfs`` (:mod:`.cli`: ``dump``, ``verify``, ``spark``), the segment and state-file dumps
(:mod:`.dump`, :mod:`.dump_state_files`, :mod:`.metadata_records`) and ``verify``'s command line
(:mod:`.verify`) over the engine's verifier (:mod:`seglogfs.verifier`).

Nothing in the engine, the views or an adapter imports a tool.
"""
