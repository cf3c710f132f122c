"""Who may read, append and create logs through the mount (issue 7: #11), as another local user.

The tests run as root and act as ``nobody`` with ``su -s /bin/sh nobody -c ...`` through a real mount
with ``fuse.allow_other: true``; the kernel enforces the modes the ``fuse:`` settings give.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.mount_fixture import Seglogd, fuse_required, make_seglogd

from seglogd.config import parse_config
from seglogfs.errors import ConfigError
from seglogfs.fs.access import Access, Scope

NOBODY_UID, NOGROUP_GID = 65534, 65534
MINIMAL = "data_dir: /srv/d\nmount_point: /srv/m\n"


def as_nobody(cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(["su", "-s", "/bin/sh", "nobody", "-c", cmd], capture_output=True, text=True,
                          timeout=60, check=False)


@pytest.fixture
def daemon_with() -> Iterator[Callable[..., Seglogd]]:
    """Factory: a running seglogd with the given ``fuse:`` settings, under a directory every user can
    traverse (pytest's own temp dirs are 0700)."""
    base = Path(tempfile.mkdtemp(prefix="seglog-perm-"))
    base.chmod(0o755)
    daemons: list[Seglogd] = []

    def start(**fuse: Any) -> Seglogd:
        daemon = make_seglogd(base, name=f"run{len(daemons)}", logs={"events-0": {}})
        daemons.append(daemon)
        daemon.write_config(fuse=fuse)
        return daemon.start()

    try:
        yield start
    finally:
        for daemon in daemons:
            daemon.cleanup()
            assert "Traceback" not in daemon.stderr(), daemon.stderr()
        shutil.rmtree(base, ignore_errors=True)


def end_offset(mnt: Seglogd) -> int:
    return json.loads((mnt / "events-0" / "info").read_text())["end_offset"]


@fuse_required
def test_allow_other_lets_others_read_but_not_append_or_mkdir(daemon_with: Callable[..., Seglogd]) -> None:
    mnt = daemon_with(allow_other=True)
    (mnt / "events-0" / "append").write_bytes(b"by root\n")
    log = mnt / "events-0"
    read = as_nobody(f"cat {log}/records {log}/by-offset/0 > /dev/null && ls {mnt.mount} {log}/segments"
                     f" && cat {log}/info")
    assert read.returncode == 0, read
    assert json.loads(read.stdout[read.stdout.index("{"):])["end_offset"] == 1
    forged = as_nobody(f"echo forged >> {log}/append")
    assert forged.returncode != 0 and "Permission denied" in forged.stderr, forged
    for name in ("append.jsonl", "append.raw"):
        result = as_nobody(f"printf x > {log}/{name}")
        assert result.returncode != 0 and "Permission denied" in result.stderr, result
    made = as_nobody(f"mkdir {mnt.mount}/x-0")
    assert made.returncode != 0 and "Permission denied" in made.stderr, made
    assert end_offset(mnt) == 1
    assert sorted(os.listdir(mnt.mount)) == ["events-0"]
    st = os.stat(log / "append")
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o200, os.getuid(), os.getgid())


@fuse_required
def test_operator_lets_a_group_append_and_create_logs(daemon_with: Callable[..., Seglogd]) -> None:
    mnt = daemon_with(allow_other=True, owner="root", group="nogroup", read="group", write="group")
    log = mnt / "events-0"
    result = as_nobody(f"echo from-nobody >> {log}/append && mkdir {mnt.mount}/made-0"
                       f" && echo more >> {mnt.mount}/made-0/append")
    assert result.returncode == 0, result
    assert (log / "records").read_bytes() == b"from-nobody\n"
    assert (mnt / "made-0" / "records").read_bytes() == b"more\n"
    modes = {p: stat.S_IMODE(os.stat(mnt / p).st_mode) for p in ("", "events-0", "events-0/append",
                                                                 "events-0/records", "events-0/segments")}
    assert modes == {"": 0o770, "events-0": 0o770, "events-0/append": 0o220, "events-0/records": 0o440,
                     "events-0/segments": 0o550}
    assert os.stat(log / "by-offset" / "0").st_gid == NOGROUP_GID


@fuse_required
def test_owner_only_keeps_everyone_else_out(daemon_with: Callable[..., Seglogd]) -> None:
    mnt = daemon_with(allow_other=True, read="owner")
    (mnt / "events-0" / "append").write_bytes(b"secret\n")
    log = mnt / "events-0"
    for cmd in (f"ls {mnt.mount}", f"cat {log}/records", f"cat {log}/by-offset/0", f"echo x >> {log}/append"):
        result = as_nobody(cmd)
        assert result.returncode != 0 and "Permission denied" in result.stderr, (cmd, result)
    assert (mnt / "events-0" / "records").read_bytes() == b"secret\n"


@fuse_required
def test_a_named_owner_owns_every_path(daemon_with: Callable[..., Seglogd]) -> None:
    mnt = daemon_with(allow_other=True, owner="nobody", write="owner")
    st = os.stat(mnt / "events-0" / "append")
    assert (st.st_uid, st.st_gid) == (NOBODY_UID, NOGROUP_GID)  # the owner's primary group
    result = as_nobody(f"echo mine >> {mnt.mount}/events-0/append")
    assert result.returncode == 0, result
    assert (mnt / "events-0" / "records").read_bytes() == b"mine\n"


# ---------------------------------------------------------------- the `fuse:` settings
def test_fuse_settings_parse() -> None:
    cfg = parse_config(MINIMAL + "fuse: {owner: nobody, group: 0, read: group, write: group}\n")
    assert cfg.access == Access(NOBODY_UID, 0, Scope.GROUP, Scope.GROUP)
    cfg = parse_config(MINIMAL + "fuse: {owner: '65534', group: nogroup}\n")
    assert cfg.access == Access(NOBODY_UID, NOGROUP_GID, Scope.EVERYONE, Scope.OWNER)
    cfg = parse_config(MINIMAL)
    assert cfg.access == Access(os.getuid(), os.getgid())
    assert (cfg.access.dir_mode(writable=True), cfg.access.file_mode(),
            cfg.access.append_mode(writable=True)) == (0o755, 0o444, 0o200)


@pytest.mark.parametrize(
    ("fuse", "key", "reason"),
    [
        ("{owner: no-such-user-here}", "fuse.owner", "no such user"),
        ("{group: no-such-group-here}", "fuse.group", "no such group"),
        ("{owner: [1]}", "fuse.owner", "user name or numeric id"),
        ("{owner: true}", "fuse.owner", "user name or numeric id"),
        ("{owner: -1}", "fuse.owner", "an id is 0 to"),
        ("{group: 4294967295}", "fuse.group", "an id is 0 to"),
        ("{read: all}", "fuse.read", "expected one of owner, group, everyone"),
        ("{write: 7}", "fuse.write", "expected one of owner, group, everyone"),
        ("{read: owner, write: group}", "fuse.write", "wider than read"),
        ("{mode: 0755}", "fuse.mode", "unknown setting"),
    ],
)
def test_bad_fuse_settings_name_key_value_and_reason(fuse: str, key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(MINIMAL + f"fuse: {fuse}\n", "c.yaml")
    assert err.value.key == key
    assert reason in err.value.reason and "(c.yaml, line 3)" in err.value.reason
