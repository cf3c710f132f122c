"""Decompression has a cap (issue 10 follow-up): a small batch in a hostile data dir that decompresses
to gigabytes is CorruptRecordError naming its file and position, found without building the output,
and the rest of the log still serves. Real batches (the cap is 64 MiB, or 64 times the compressed
size) decompress as before."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import cramjam
import pytest

from seglogfs.compression import Compression, CompressionError, compress, decompress
from seglogfs.records.decode import max_records_area

CAP = 3 * 1024 * 1024 + 5  # not a multiple of any block size


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
@pytest.mark.parametrize("pattern", [b"\0", b"0123456789abcdef" * 7 + b"!"])
def test_up_to_the_cap_decompresses_and_a_byte_more_does_not(codec: Compression, pattern: bytes) -> None:
    data = (pattern * (CAP // len(pattern) + 1))[:CAP]
    assert decompress(codec, compress(codec, data), CAP) == data
    with pytest.raises(CompressionError, match=f"decompresses to more than {CAP - 1} bytes"):
        decompress(codec, compress(codec, data), CAP - 1)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.ZSTD])
def test_a_ratio_past_the_first_buffer_still_decompresses(codec: Compression) -> None:
    """Zeros compress far beyond 32:1: the first buffer is too small, the one of the cap is not."""
    data = bytes(20 * 1024 * 1024)
    packed = compress(codec, data)
    assert 32 * len(packed) < len(data)
    assert decompress(codec, packed) == data


def test_uncompressed_data_has_the_cap_too() -> None:
    assert decompress(Compression.NONE, b"abc", 3) == b"abc"
    with pytest.raises(CompressionError, match="more than 2 bytes"):
        decompress(Compression.NONE, b"abc", 2)


def test_the_records_cap_is_64_mib_or_64_times_the_compressed_size() -> None:
    assert max_records_area(100) == 64 * 1024 * 1024
    assert max_records_area(4 * 1024 * 1024) == 256 * 1024 * 1024


def _bomb_script(data_dir: Path, codec: Compression) -> str:
    """A subprocess: a log whose offset 5 is a one-record batch of 1 GiB of zeros compressed with
    ``codec`` (0..4 and 6..9 are plain), read under a 1 GiB address-space limit."""
    return textwrap.dedent(
        f"""
        import resource, struct, sys
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        from pathlib import Path
        from support.bombs import bomb
        from support.record_batches import raw_v2_batch
        from seglogfs.errors import CorruptRecordError
        from seglogfs.log_manager import LogManager
        from seglogfs.records import iter_batch_headers

        data_dir = Path({str(data_dir)!r})
        with LogManager(data_dir) as manager:
            lg = manager.create_log("b-0")
            for i in range(5):
                lg.append_values([b"value %d" % i])
            path = lg.active_segment.log_path
        area = bomb({int(codec)}, 1 << 30)
        batch = raw_v2_batch(area, 1, base_offset=5, attributes={int(codec)})
        position = path.stat().st_size
        with open(path, "ab") as f:
            f.write(batch)
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        with LogManager(data_dir) as manager:
            lg = manager.get("b-0")
            for i in range(6, 10):
                lg.append_values([b"value %d" % i])
            try:
                lg.read(5)
            except CorruptRecordError as exc:
                assert exc.path == str(path) and exc.position == position, exc
                assert "decompresses to more than" in str(exc), exc
            else:
                raise AssertionError("the bomb decompressed")
            values = [lg.read(i).value for i in (*range(5), *range(6, 10))]
            assert values == [b"value %d" % i for i in (*range(5), *range(6, 10))], values
        print("ok", len(area))
        """
    )


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_a_bomb_batch_is_corrupt_and_the_rest_of_the_log_serves(tmp_path: Path, codec: Compression) -> None:
    """1 GiB of zeros in a batch of a few KiB: CorruptRecordError at the batch's file and position,
    under an address-space limit it could not decompress in; every other record still reads."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # ASan cannot run under RLIMIT_AS
    code = _bomb_script(tmp_path / "data", codec)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env)
    assert run.returncode == 0 and run.stdout.startswith("ok"), run.stderr[-3000:]
    assert int(run.stdout.split()[1]) < 8 * 1024 * 1024  # a small batch: the ratio is what is hostile


def test_the_limit_is_what_stops_the_bomb_without_the_cap(tmp_path: Path) -> None:
    """The subprocess's address-space limit is real: decompressing the bomb whole fails under it."""
    code = textwrap.dedent(
        f"""
        import resource, sys
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        import cramjam
        from support.bombs import bomb
        area = bomb(4, 1 << 30)
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        try:
            cramjam.zstd.decompress(area)
        except MemoryError:
            print("limited")
        else:
            print("decompressed")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env)
    # MemoryError, or an abort where the allocation fails in Rust: never a whole gigabyte
    assert run.stdout.strip() == "limited" or (run.returncode != 0 and not run.stdout), run.stderr[-2000:]


def test_cramjam_stops_at_a_full_buffer() -> None:
    """The cap relies on cramjam's decompress_into failing with this message when the output does
    not fit (the message only names the error; any failure is corrupt data)."""
    out = bytearray(10)
    with pytest.raises(cramjam.DecompressionError, match="failed to write whole buffer"):
        cramjam.zstd.decompress_into(bytes(cramjam.zstd.compress(bytes(11))), out)
