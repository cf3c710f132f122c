"""``seglogd --config FILE``: the seglogfs daemon (foreground; logs to stderr)."""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import logging
import os
import resource
import signal
import sys
import threading
from types import FrameType

#: Set by SIGTERM/SIGINT during start-up; the daemon then stops cleanly instead of mounting.
STOP_REQUESTED = threading.Event()


def _request_stop(signum: int, frame: FrameType | None) -> None:
    STOP_REQUESTED.set()


# First thing, before the slow imports: under the default disposition a SIGTERM during start-up
# (reading the config, opening the logs) killed the process (exit 143). The daemon hands both signals
# back to libfuse just before it mounts (see Daemon.run).
signal.signal(signal.SIGTERM, _request_stop)
signal.signal(signal.SIGINT, _request_stop)


def _setup_logging(level: str) -> None:
    # under systemd the journal adds its own timestamps
    fmt = "%(levelname)s %(name)s: %(message)s" if os.environ.get("JOURNAL_STREAM") else (
        "%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), format=fmt, stream=sys.stderr)


def _raise_open_files_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit: segments in use hold their .log (and, while
    written, their indexes) open, up to a budget of half this limit (seglogfs.descriptor_budget);
    the systemd unit sets LimitNOFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            logging.getLogger("seglogd").warning("cannot raise the open-files limit from %d: %s", soft, exc)


def _tune_malloc() -> None:
    """Keep the append path's ~1 MB numpy buffers on the heap (glibc only; must run before threads).

    By default glibc serves blocks over 128 KiB with fresh mmaps (and, in the multi-threaded loop
    benchmarks can select, each libfuse worker thread gets its own arena): every write() then
    page-faults in new zeroed memory. Measured with `cat` of
    2M 100-byte lines into append (multi-threaded loop): 1.45 s by default, 0.78 s with these
    settings, same RSS (~50 MB).
    """
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return
    try:
        libc = ctypes.CDLL(libc_name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold, m_arena_max = -1, -3, -8
    mallopt(m_mmap_threshold, 16 << 20)
    mallopt(m_trim_threshold, 32 << 20)
    mallopt(m_arena_max, 1)  # one arena: threads reuse each other's freed buffers (the GIL serialises anyway)


#: how long a thread holding the GIL keeps it while another waits (Python's default is 5 ms)
GIL_SWITCH_INTERVAL_S = 0.001


def main(argv: list[str] | None = None) -> int:
    """Run the daemon; the exit code is 0 after a clean stop (SIGTERM, SIGINT or an external unmount)."""
    parser = argparse.ArgumentParser(prog="seglogd", description="Mount seglogfs logs with FUSE.")
    parser.add_argument("--config", "-c", required=True, help="YAML config file (see config/seglogfs.yaml)")
    parser.add_argument("--log-level", default=os.environ.get("SEGLOGD_LOG_LEVEL", "INFO"),
                        help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    args = parser.parse_args(argv)
    _tune_malloc()
    # A thread that computes (the cleaner, retention, a reload) hands the GIL to a waiting request
    # after this long instead of Python's 5 ms: each request takes the GIL a few times (bench/stall.py).
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    _setup_logging(args.log_level)
    _raise_open_files_limit()

    import seglogfs.fs  # noqa: F401  (selects libfuse3 before mfusepy is imported)
    from seglogd.service import Daemon

    return Daemon(args.config, stop_requested=STOP_REQUESTED).run()


if __name__ == "__main__":
    sys.exit(main())
