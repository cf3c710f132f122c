"""``seglogfs verify``: the command line over the engine's verifier (:mod:`seglogfs.verifier`).

It prints every finding (damage, then notes, by file and position) on stdout, a progress bar and a
summary on stderr, and exits 0 without damage, 1 with damage (with ``--strict``, with notes too).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TextIO

from seglogfs.verifier import verify_paths

__all__ = ["Progress", "main"]


class Progress:
    """A plain ``\\r`` progress bar over a byte total, drawn at most 10 times a second."""

    def __init__(self, total: int, stream: TextIO, width: int = 30) -> None:
        self.total = max(total, 1)
        self.stream = stream
        self.width = width
        self.done = 0
        self._last_draw = 0.0
        self._label = ""

    def start_file(self, label: str) -> None:
        self._label = label
        self._draw(force=True)

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        self._draw()

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_draw < 0.1:
            return
        self._last_draw = now
        frac = min(self.done / self.total, 1.0)
        filled = int(frac * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        label = self._label[-40:]
        self.stream.write(
            f"\r[{bar}] {frac * 100:5.1f}% {_human(self.done)}/{_human(self.total)} {label:<40}"
        )
        self.stream.flush()

    def finish(self) -> None:
        self.done = self.total
        self._draw(force=True)
        self.stream.write("\n")
        self.stream.flush()


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def main(
    paths: Sequence[str], out: TextIO = sys.stdout, err: TextIO = sys.stderr, *, strict: bool = False
) -> int:
    """Run ``seglogfs verify``: damage and notes on ``out``, progress and summary on ``err``.

    Exit 0 without damage, 1 with damage (or, when ``strict``, with notes too).
    """
    progress = (lambda total: Progress(total, err)) if err.isatty() else None
    report = verify_paths(paths, progress=progress)
    for finding in sorted(report.problems + report.notes, key=lambda p: (str(p.path), p.position or 0)):
        out.write(f"{finding}\n")
    out.flush()
    verdict = "OK" if report.ok else f"{len(report.problems)} problem(s)"
    if report.notes:
        verdict += f", {len(report.notes)} note(s)"
    err.write(
        f"verified {report.logs} log(s), {report.segments} segment(s), {report.batches} batch(es), "
        f"{report.bytes} bytes: {verdict}\n"
    )
    return 0 if report.ok and not (strict and report.notes) else 1
