"""Keys from the shell (issue 10): ``fs.append.key.separator`` turns ``key<sep>value`` lines of ``append``
into keyed records, as Kafka's console producer does with ``parse.key=true``; a compacted log refuses
records without a key (EINVAL) whichever append file brings them. Real programs against a real seglogd:
bash's ``echo`` and coreutils ``printf`` (one write() for all its lines), ``getfattr``, ``jq``."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pytest
from kafka.record import MemoryRecords
from support.mount_fixture import Seglogd, end_offset, fuse_required, make_seglogd, sh, wait_end

pytestmark = [pytest.mark.fuse, fuse_required]

LOGS = {
    "users-0": {"cleanup.policy": "compact", "fs.append.key.separator": ":"},
    "multi-0": {"fs.append.key.separator": "=>"},
    "arrow-0": {"fs.append.key.separator": "→"},  # three bytes of UTF-8
    "plain-0": {"cleanup.policy": "compact"},  # compacted, no separator: every line is keyless
    "both-0": {"cleanup.policy": "compact,delete"},
    "small-0": {"fs.append.key.separator": "::", "max.message.bytes": 1000},
}


@pytest.fixture(scope="module")
def mnt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seglogd]:
    """One daemon serving every log of ``LOGS``; no traceback in its log at the end."""
    daemon = make_seglogd(tmp_path_factory.mktemp("keys"), logs=LOGS)
    try:
        yield daemon.start()
    finally:
        daemon.cleanup()
    assert "Traceback" not in daemon.stderr(), daemon.stderr()





def key_of(mnt: Seglogd, log: str, offset: int) -> str:
    """``getfattr -n user.seglog.key --only-values`` of by-offset/<offset>."""
    got = sh(f"getfattr -n user.seglog.key --only-values {mnt / log / 'by-offset' / str(offset)}")
    assert got.returncode == 0, got.stderr
    return got.stdout


def jq_records(mnt: Seglogd, log: str, start: int) -> list[list]:
    """[key, value] of each record from ``start`` on, read with jq from records.jsonl."""
    got = sh(f"jq -c 'select(.offset >= {start}) | [.key, .value]' {mnt / log / 'records.jsonl'}")
    assert got.returncode == 0, got.stderr
    return [json.loads(line) for line in got.stdout.splitlines()]


def refused(mnt: Seglogd, cmd: str, log: str) -> subprocess.CompletedProcess:
    """Run ``cmd``: it must fail with EINVAL and append nothing to ``log``."""
    before = end_offset(mnt, log)
    got = sh(cmd)
    assert got.returncode != 0, got
    assert "Invalid argument" in got.stderr, got.stderr
    time.sleep(0.3)  # a wrongly committed partial line would arrive at release
    assert end_offset(mnt, log) == before
    return got


def test_echo_key_value_gives_a_keyed_record(mnt: Seglogd) -> None:
    start = end_offset(mnt, "users-0")
    assert sh(f"echo 'user42:online' >> {mnt / 'users-0' / 'append'}").returncode == 0
    assert end_offset(mnt, "users-0") == start + 1
    assert key_of(mnt, "users-0", start) == "user42"
    assert (mnt / "users-0" / "by-offset" / str(start)).read_bytes() == b"online"
    assert jq_records(mnt, "users-0", start) == [["user42", "online"]]


def test_one_write_is_one_batch_of_keyed_records(mnt: Seglogd) -> None:
    """Several lines of one write(): one batch, keys and values as kafka-python reads them."""
    start = end_offset(mnt, "users-0")
    segments = sorted((mnt.data_dir / "users-0").glob("*.log"))
    size_before = segments[-1].stat().st_size
    lines = "a:1\\nb:2\\nc:\\n:empty-key\\n"
    assert sh(f"/usr/bin/printf '{lines}' >> {mnt / 'users-0' / 'append'}").returncode == 0
    assert end_offset(mnt, "users-0") == start + 4
    data = segments[-1].read_bytes()[size_before:]
    batches = MemoryRecords(data)
    batch = batches.next_batch()
    got = [(r.offset, r.key, r.value) for r in batch]
    assert got == [
        (start, b"a", b"1"), (start + 1, b"b", b"2"), (start + 2, b"c", b""), (start + 3, b"", b"empty-key")
    ]
    assert batches.next_batch() is None


def test_separator_inside_the_value_stays_there_and_multi_byte_separators(mnt: Seglogd) -> None:
    start = end_offset(mnt, "multi-0")
    assert sh(f"/usr/bin/printf 'k1=>v=>1\\nk2=>=>\\n' >> {mnt / 'multi-0' / 'append'}").returncode == 0
    assert jq_records(mnt, "multi-0", start) == [["k1", "v=>1"], ["k2", "=>"]]
    start = end_offset(mnt, "arrow-0")
    assert sh(f"echo 'schlüssel→wert→mehr' >> {mnt / 'arrow-0' / 'append'}").returncode == 0
    assert key_of(mnt, "arrow-0", start) == "schlüssel"
    assert (mnt / "arrow-0" / "by-offset" / str(start)).read_bytes() == "wert→mehr".encode()


def test_a_line_without_the_separator_fails_the_whole_write(mnt: Seglogd) -> None:
    log = mnt / "multi-0" / "append"
    got = refused(mnt, f"/usr/bin/printf 'a=>1\\nno separator here\\nb=>2\\n' >> {log}", "multi-0")
    assert "write error" in got.stderr
    refused(mnt, f"echo 'a:1' >> {log}", "multi-0")  # another log's separator is just text
    refused(mnt, f"echo >> {log}", "multi-0")  # an empty line has no separator either
    start = end_offset(mnt, "multi-0")
    assert sh(f"echo 'after=>fine' >> {log}").returncode == 0  # the file goes on working
    assert jq_records(mnt, "multi-0", start) == [["after", "fine"]]


def test_partial_lines_across_writes(mnt: Seglogd) -> None:
    """The key, the separator and the value may come in different writes: one record."""
    start = end_offset(mnt, "users-0")
    pieces = "printf 'use'; sleep 0.2; printf 'r7:'; sleep 0.2; printf 'on'; echo line"  # four writes
    cmd = f"{{ {pieces}; }} >> {mnt / 'users-0' / 'append'}"
    assert sh(cmd).returncode == 0
    wait_end(mnt, "users-0", start + 1)
    assert jq_records(mnt, "users-0", start) == [["user7", "online"]]
    # a final line without newline is committed at close, split like the others
    assert sh(f"/usr/bin/printf 'user8:off' >> {mnt / 'users-0' / 'append'}").returncode == 0
    wait_end(mnt, "users-0", start + 2)
    assert key_of(mnt, "users-0", start + 1) == "user8"


def test_refused_write_keeps_the_partial_line_before_it(mnt: Seglogd) -> None:
    """All or nothing, as for a malformed JSON line: a refused write leaves the open file as it was,
    so a partial line written before it is still there for the next write."""
    start = end_offset(mnt, "users-0")
    cmd = (
        f"exec 3>>{mnt / 'users-0' / 'append'}; /usr/bin/printf 'u9' >&3; "
        "/usr/bin/printf ':x\\nbad\\n' >&3 && exit 9; /usr/bin/printf ':ok\\n' >&3; exec 3>&-"
    )
    got = sh(cmd)
    assert got.returncode == 0, got
    assert "Invalid argument" in got.stderr
    assert jq_records(mnt, "users-0", start) == [["u9", "ok"]]


def test_efbig_counts_key_bytes(mnt: Seglogd) -> None:
    """max.message.bytes 1000: a one-record batch holds 930 bytes of key and value together (a key
    costs no more than a null key's varint byte while it is short), so with "::" a line of 932 fits."""
    log = mnt / "small-0" / "append"
    start = end_offset(mnt, "small-0")
    assert sh(f"/usr/bin/printf 'k::%s\\n' $(head -c 929 /dev/zero | tr '\\0' x) >> {log}").returncode == 0
    assert sh(f"/usr/bin/printf '::%s\\n' $(head -c 930 /dev/zero | tr '\\0' y) >> {log}").returncode == 0
    assert end_offset(mnt, "small-0") == start + 2
    got = sh(f"/usr/bin/printf 'k::%s\\n' $(head -c 930 /dev/zero | tr '\\0' x) >> {log}")
    assert "File too large" in got.stderr, got
    got = sh(f"/usr/bin/printf 'kk::%s\\n' $(head -c 929 /dev/zero | tr '\\0' x) >> {log}")
    assert "File too large" in got.stderr, got
    assert end_offset(mnt, "small-0") == start + 2
    assert key_of(mnt, "small-0", start) == "k"
    assert (mnt / "small-0" / "by-offset" / str(start)).stat().st_size == 929
    assert (mnt / "small-0" / "by-offset" / str(start + 1)).stat().st_size == 930


def test_append_raw_never_splits_keys(mnt: Seglogd) -> None:
    start = end_offset(mnt, "multi-0")
    assert sh(f"/usr/bin/printf 'k=>v\\nmore' > {mnt / 'multi-0' / 'append.raw'}").returncode == 0
    wait_end(mnt, "multi-0", start + 1)
    assert (mnt / "multi-0" / "by-offset" / str(start)).read_bytes() == b"k=>v\nmore"
    got = sh(f"getfattr -n user.seglog.key {mnt / 'multi-0' / 'by-offset' / str(start)}")
    assert "No such attribute" in got.stderr


@pytest.mark.parametrize("log", ["plain-0", "both-0"])
def test_a_compacted_log_refuses_keyless_records(mnt: Seglogd, log: str) -> None:
    """echo into append without a separator, append.raw, and JSON lines without "key": EINVAL, nothing
    appended; a JSON line with a key goes in."""
    refused(mnt, f"echo x >> {mnt / log / 'append'}", log)
    refused(mnt, f"/usr/bin/printf 'partial' >> {mnt / log / 'append'}", log)
    refused(mnt, f"printf body > {mnt / log / 'append.raw'}", log)
    jsonl = mnt / log / "append.jsonl"
    refused(mnt, f"""/usr/bin/printf '{{"key":"k","value":"1"}}\\n{{"value":"2"}}\\n' >> {jsonl}""", log)
    refused(mnt, f"""/usr/bin/printf '{{"key":null,"value":"1"}}\\n' >> {jsonl}""", log)
    start = end_offset(mnt, log)
    keyed = '{"key":"k","value":"1"}\\n{"key":"k"}\\n'
    assert sh(f"/usr/bin/printf '{keyed}' >> {jsonl}").returncode == 0
    assert jq_records(mnt, log, start) == [["k", "1"], ["k", None]]  # a tombstone has a key
