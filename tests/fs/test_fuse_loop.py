"""The notifier stops before libfuse tears the mount down (seglogfs/fs/fuse_loop.py).

``fuse_destroy`` frees the node tables that ``fuse_invalidate_path`` searches before it calls the
filesystem's ``destroy``; an invalidation from the notifier thread in between would read freed
memory. The daemon runs here under a harness that wraps libfuse's ``fuse_destroy`` and records, at
the moment it is called, whether the notifier thread is still alive.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.mount_fixture import REPO, fuse_required, make_seglogd, mounted, unmount

pytestmark = [pytest.mark.fuse, fuse_required]

HARNESS = r"""
import json, sys, threading
import seglogfs.fs  # selects libfuse3
import mfusepy
from seglogfs.fs.operations import SeglogOperations

events = []
instances = []
original_init = SeglogOperations.__init__

def init(self, *args, **kwargs):
    original_init(self, *args, **kwargs)
    instances.append(self)

SeglogOperations.__init__ = init
real_destroy = mfusepy._libfuse.fuse_destroy

def fuse_destroy(fuse):
    notifier = instances[0].notifier if instances else None
    thread = notifier._thread if notifier is not None else None
    events.append({"step": "fuse_destroy", "notifier_alive": bool(thread and thread.is_alive()),
                   "notifier_started": thread is not None})
    return real_destroy(fuse)

mfusepy._libfuse.fuse_destroy = fuse_destroy
from seglogd.__main__ import main
code = main(["--config", sys.argv[1]])
with open(sys.argv[2], "w") as f:
    json.dump({"code": code, "events": events}, f)
sys.exit(code)
"""


@pytest.mark.parametrize("how", ["sigterm", "fusermount"])
def test_the_notifier_is_stopped_before_libfuse_destroys_the_mount(tmp_path: Path, how: str) -> None:
    daemon = make_seglogd(tmp_path, logs={"busy-0": {}})
    report = tmp_path / "report.json"
    stderr = tmp_path / "stderr"
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", HARNESS, str(daemon.config_path), str(report)],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=daemon.env,
        )
    try:
        deadline = time.monotonic() + 30
        while not mounted(daemon.mount):
            assert proc.poll() is None and time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.05)
        for i in range(200):  # changes for the notifier to invalidate while the mount goes away
            with open(daemon.mount / "busy-0" / "append", "ab") as f:
                f.write(b"r%d\n" % i)
            (daemon.mount / "busy-0" / "records").stat()
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
        else:
            assert subprocess.run(["fusermount3", "-u", str(daemon.mount)], check=False).returncode == 0
        assert proc.wait(30) == 0, stderr.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        unmount(daemon.mount)
    result = json.loads(report.read_text())
    assert result["events"] == [
        {"step": "fuse_destroy", "notifier_alive": False, "notifier_started": True}
    ], stderr.read_text()
    assert "Traceback" not in stderr.read_text()
