"""append.jsonl's parser: text fields must be valid Unicode, as a raw line must be valid UTF-8."""

from __future__ import annotations

import errno
import os

import pytest
from support.mount_fixture import fuse_required, seglogd  # noqa: F401  (fixture)

from seglogfs.errors import InvalidRecordError
from seglogfs.jsonl import parse_jsonl_line

_LONE_SURROGATES = [
    b'{"value": "\\ud800"}',
    b'{"value": "a\\udfffb"}',
    b'{"key": "\\udc80", "value": "v"}',
    b'{"value": "v", "headers": [["h", "\\ud800"]]}',
]


@pytest.mark.parametrize("line", _LONE_SURROGATES)
def test_a_lone_surrogate_in_text_is_invalid(line: bytes) -> None:
    with pytest.raises(InvalidRecordError, match="surrogate"):
        parse_jsonl_line(line)


def test_a_surrogate_pair_is_one_valid_character() -> None:
    assert parse_jsonl_line(b'{"value": "\\ud83d\\ude00"}').value == "\N{GRINNING FACE}".encode()


@fuse_required
def test_a_lone_surrogate_through_the_mount_is_einval_with_nothing_appended(seglogd) -> None:  # noqa: F811
    d = seglogd()
    path = d / "events-0" / "append.jsonl"
    for line in _LONE_SURROGATES:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            with pytest.raises(OSError) as info:
                os.write(fd, line + b"\n")
            assert info.value.errno == errno.EINVAL, line
        finally:
            os.close(fd)
    (d / "events-0" / "append").write_text("marker\n")
    assert (d / "events-0" / "records").read_bytes() == b"marker\n"
    assert d.stop() == 0
    assert "Traceback" not in d.stderr()
