"""The power-loss "device": an LD_PRELOAD journal of a process's changes (journal_shim.c) and its replay."""
