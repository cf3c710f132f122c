"""The command-line tools over the engine, kept outside it as Kafka keeps its tools outside its
storage layer: ``seglogfs`` (:mod:`.cli`: ``dump``, ``verify``, ``spark``), the dumps of segments and
of state files (:mod:`.dump`, :mod:`.dump_state_files`, :mod:`.metadata_records`) and ``verify``'s
command line (:mod:`.verify`).

The checks ``verify`` runs are the engine's verifier (:mod:`seglogfs.verifier`), a library the Spark
``verify`` job calls too. Nothing in the engine, the views or an adapter imports a tool.
"""
