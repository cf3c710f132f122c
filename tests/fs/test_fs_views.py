"""The read views ``from/<n>``, ``records.jsonl`` and ``from/<n>.jsonl`` through a real mount and real
tools: head, tail -f, wc, cat, jq, and a shell copy of one log into another's append.jsonl."""

from __future__ import annotations

import base64
import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.engine_helpers import config
from support.mount_fixture import fuse_required, make_seglogd, read_stdout_until, seglogd  # noqa: F401 (fixture)

from seglogfs.log_manager import LogManager

pytestmark = fuse_required
LOG = "events-0"
SMALL_SEGMENTS = {"segment.bytes": 20000, "index.interval.bytes": 512}


def lines(first: int, last: int) -> bytes:
    """The values ``line-<i>`` for i in [first, last), one a line, as `records` shows them."""
    return b"".join(b"line-%d\n" % i for i in range(first, last))


def append_lines(log_dir: Path, first: int, last: int) -> None:
    with open(log_dir / "append", "ab") as f:
        f.write(lines(first, last))


def run(*argv: str, cwd: Path | None = None) -> bytes:
    done = subprocess.run(argv, capture_output=True, timeout=60, check=False, cwd=cwd)
    assert done.returncode == 0, f"{argv}: {done.stderr!r}"
    return done.stdout


def errno_of(path: Path) -> int:
    with pytest.raises(OSError) as caught:
        os.stat(path)
    return caught.value.errno


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_head_wc_cat_of_from_n(seglogd, codec: str) -> None:  # noqa: F811
    """`head -n 1000 from/<n>` is exactly records n..n+999, in a middle segment too; `wc -l` and
    `stat` agree; `from/0` is `records`; compressed batches read the same."""
    segment_bytes = 20000 if codec == "none" else 2000  # several segments either way
    daemon = seglogd(defaults={**SMALL_SEGMENTS, "segment.bytes": segment_bytes, "compression.type": codec})
    log_dir = daemon / LOG
    for start in range(0, 6000, 100):  # one batch a write
        append_lines(log_dir, start, start + 100)
    assert sum(name.endswith(".log") for name in os.listdir(log_dir / "segments")) >= 3
    for n in (0, 1, 2345, 4999):
        head = run("head", "-n", "1000", str(log_dir / "from" / str(n)))
        assert head == lines(n, min(n + 1000, 6000)), n
        assert run("wc", "-l", str(log_dir / "from" / str(n))).split()[0] == b"%d" % (6000 - n)
        assert os.stat(log_dir / "from" / str(n)).st_size == len(lines(n, 6000))
    assert run("cat", str(log_dir / "from" / "0")) == run("cat", str(log_dir / "records"))
    jsonl = run("cat", str(log_dir / "from" / "2345.jsonl")).splitlines()
    assert [json.loads(x)["offset"] for x in jsonl] == list(range(2345, 6000))
    assert json.loads(jsonl[0])["value"] == "line-2345"
    assert os.stat(log_dir / "from" / "2345.jsonl").st_size == sum(len(x) + 1 for x in jsonl)


def test_tail_f_from_n_follows_appends(seglogd) -> None:  # noqa: F811
    """`tail -f from/<n>` (and its .jsonl twin, and n past the end) prints what is there from n,
    then the records appended later, each once."""
    daemon = seglogd(defaults=SMALL_SEGMENTS)
    log_dir = daemon / LOG
    append_lines(log_dir, 0, 100)
    end = 100
    for name, first in (("98", 98), ("98.jsonl", 98), ("150", 150)):
        proc = subprocess.Popen(
            ["tail", "-n", "+1", "-s", "0.2", "-f", str(log_dir / "from" / name)], stdout=subprocess.PIPE
        )
        try:
            new_end = max(end, first) + 3
            append_lines(log_dir, end, new_end)
            end = new_end
            count = end - first
            got = read_stdout_until(proc, lambda b, count=count: b.count(b"\n") >= count, 20.0).splitlines()
            if name.endswith(".jsonl"):
                assert [json.loads(x)["value"] for x in got] == lines(first, end).decode().splitlines()
            else:
                assert got == lines(first, end).splitlines(), name
        finally:
            proc.kill()
            proc.wait(10)


APPENDED = [
    {"value": "plain", "timestamp": 1_700_000_000_000},
    {"value": "caf\u00e9 \"q\" \\ \n\t\u0000", "key": "k\u00e9y", "timestamp": 1_700_000_000_001,
     "headers": [["h1", "v1"], ["h2", None], ["h3", {"b64": base64.b64encode(b"\xff\x00").decode()}]]},
    {"value_b64": base64.b64encode(b"\xff\xfe\x00binary\x80").decode(),
     "key_b64": base64.b64encode(b"\xc3(").decode(), "timestamp": 5},
    {"key": "tombstone", "timestamp": 1_700_000_000_002},
    {"value": "", "key": "", "headers": {"only": "one"}, "timestamp": 0},
]


def test_records_jsonl_copies_a_log_through_append_jsonl(seglogd) -> None:  # noqa: F811
    """`jq -c . records.jsonl` reads it; `cat a/records.jsonl > b/append.jsonl` makes b a copy of a:
    keys, values (binary too), headers and timestamps byte-exact, so b's records.jsonl equals a's."""
    assert shutil.which("jq"), "jq is installed by scripts/install.sh"
    daemon = seglogd(logs={"a-0": {}, "b-0": {}})
    with open(daemon / "a-0" / "append.jsonl", "wb") as f:
        f.write(b"".join(json.dumps(obj).encode() + b"\n" for obj in APPENDED))
    source = run("cat", str(daemon / "a-0" / "records.jsonl"))
    assert len(source.splitlines()) == len(APPENDED)
    parsed = [json.loads(x) for x in run("jq", "-c", ".", str(daemon / "a-0" / "records.jsonl")).splitlines()]
    assert [p["offset"] for p in parsed] == list(range(len(APPENDED)))
    assert [p["timestamp"] for p in parsed] == [obj["timestamp"] for obj in APPENDED]
    assert parsed[1]["headers"][2] == ["h3", {"b64": "/wA="}]
    run("sh", "-c", "cat a-0/records.jsonl > b-0/append.jsonl", cwd=daemon.mount)
    assert run("cat", str(daemon / "b-0" / "records.jsonl")) == source
    assert (daemon / "b-0" / "by-offset" / "2").read_bytes() == b"\xff\xfe\x00binary\x80"
    assert os.getxattr(daemon / "b-0" / "by-offset" / "2", "user.seglog.key") == b"\xc3("
    assert os.stat(daemon / "b-0" / "by-offset" / "1").st_mtime_ns == 1_700_000_000_001 * 1_000_000


def test_errnos_listings_and_retention(tmp_path: Path) -> None:
    """ENOENT for names that are not offsets and for offsets retention removed; `from/` lists empty;
    the log dir lists the new entries; writes are EROFS on a read-only mount, reads work."""
    cfg = {"segment.bytes": 1000, "retention.bytes": 2500}
    data_dir = tmp_path / "data"
    with LogManager(data_dir, config(segment_bytes=1000, retention_bytes=2500)) as manager:
        lg = manager.create_log(LOG)
        for start in range(0, 200, 10):
            lg.append_values([b"line-%d" % i for i in range(start, start + 10)])
        lg.delete_old_segments()
        start = lg.start_offset
    assert start > 0
    daemon = make_seglogd(tmp_path, data_dir=data_dir, read_only=True, defaults=cfg, logs={LOG: {}})
    try:
        daemon.start()
        log_dir = daemon / LOG
        assert {"from", "records.jsonl"} <= set(os.listdir(log_dir))
        assert os.listdir(log_dir / "from") == []
        assert os.stat(log_dir).st_nlink == 2 + 4
        removed = (str(start - 1), f"{start - 1}.jsonl")  # retention removed it
        for name in ("abc", "-1", "1e3", "12x.jsonl", ".jsonl", "5.json", *removed):
            assert errno_of(log_dir / "from" / name) == errno.ENOENT, name
        assert run("head", "-n", "2", str(log_dir / "from" / str(start))) == lines(start, start + 2)
        assert run("cat", str(log_dir / "from" / "100000")) == b""  # past the end: empty
        with pytest.raises(OSError) as caught:
            os.open(log_dir / "from" / str(start), os.O_WRONLY)
        assert caught.value.errno == errno.EROFS
        assert errno_of(daemon / "no-such-log" / "from" / "1") == errno.ENOENT
    finally:
        daemon.cleanup()


def test_views_of_an_offline_log_are_eio(tmp_path: Path) -> None:
    """A log that cannot be opened (a corrupt .swap, its segment gone) is offline: its views are EIO
    while another log's serve."""
    data_dir = tmp_path / "data"
    with LogManager(data_dir, config()) as manager:
        for name in ("bad-0", "good-0"):
            manager.create_log(name).append_values([b"line-0", b"line-1"])
    first = data_dir / "bad-0" / "00000000000000000000.log"
    swap = first.with_name(first.name + ".swap")
    first.rename(swap)
    with open(swap, "r+b") as f:
        f.seek(30)
        f.write(b"\xff\xff")
    daemon = make_seglogd(tmp_path, data_dir=data_dir, logs={"bad-0": {}, "good-0": {}})
    try:
        daemon.start()
        assert run("cat", str(daemon / "good-0" / "from" / "1")) == b"line-1\n"
        for path in ("records.jsonl", "from/0", "from/0.jsonl", "from"):
            assert errno_of(daemon / "bad-0" / path) == errno.EIO, path
    finally:
        daemon.cleanup()
