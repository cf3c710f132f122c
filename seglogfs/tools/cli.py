"""The ``seglogfs`` command: ``dump`` (kafka-dump-log.sh's output), ``verify``, ``kafka-user`` and
``spark`` jobs."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from seglogfs.tools.dump import DEFAULT_MAX_MESSAGE_SIZE, INT_MAX, DumpOptions, dump_files

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seglogfs", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{dump,verify,kafka-user,spark}")

    dump = sub.add_parser(
        "dump",
        help="print .log/.index/.timeindex/.snapshot files like kafka-dump-log.sh",
        description="Parse log segment files and dump their contents, as kafka-dump-log.sh does.",
    )
    dump.add_argument("--files", required=True, help="comma-separated list of files to dump")
    dump.add_argument(
        "--print-data-log", action="store_true", help="print the keys and values (implies deep)"
    )
    dump.add_argument("--deep-iteration", action="store_true", help="print every record, not just batches")
    dump.add_argument(
        "--verify-index-only", action="store_true", help="check index entries, do not print them"
    )
    dump.add_argument("--index-sanity-check", action="store_true", help="only run Kafka's index sanity check")
    dump.add_argument("--max-message-size", type=int, default=DEFAULT_MAX_MESSAGE_SIZE, metavar="N")
    dump.add_argument(
        "--max-bytes", type=int, default=INT_MAX, metavar="N", help="read at most N bytes of a .log"
    )
    dump.add_argument("--skip-record-metadata", action="store_true", help="print only keys and values")
    dump.add_argument(
        "--cluster-metadata-decoder",
        action="store_true",
        help="print __cluster_metadata records as their JSON (implies --print-data-log)",
    )
    dump.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="print __consumer_offsets records as their JSON (implies --print-data-log)",
    )

    verify = sub.add_parser(
        "verify",
        help="check every batch CRC and index entry",
        description="Check data dirs, log dirs or segment files. Damage (records unreadable, offsets or "
        "index entries wrong, a log without its .log files) exits 1; conditions that recovery repairs "
        "without loss (missing or untrimmed indexes) are printed as notes and exit 0.",
    )
    verify.add_argument("paths", nargs="+", metavar="PATH")
    verify.add_argument("--strict", action="store_true", help="exit 1 on notes too")

    user = sub.add_parser(
        "kafka-user",
        help="make a SCRAM-SHA-256 user entry for the Kafka listener",
        description="Print a salted SCRAM-SHA-256 entry for kafka.users in the seglogd config, from a "
        "password read from the terminal (twice) or from the first line of stdin.",
    )
    user_sub = user.add_subparsers(dest="user_command", required=True)
    user_add = user_sub.add_parser("add", help="print NAME's entry")
    user_add.add_argument("name", metavar="NAME")
    user_add.add_argument("--iterations", type=int, default=8192, help="PBKDF2 iterations (>= 4096)")

    sub.add_parser("spark", help="Spark pipeline jobs (seglogfs spark --help)", add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``seglogfs`` program; returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["spark"]:
        # Imported lazily: the Spark jobs pull in pyspark, which dump/verify must not need.
        from seglogfs.spark.jobs import main as spark_main

        return int(spark_main(args_list[1:]) or 0)

    args = _parser().parse_args(args_list)
    # Record payloads are arbitrary bytes decoded as UTF-8 with replacement: never fail on output.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")
    try:
        if args.command == "dump":
            options = DumpOptions(
                cluster_metadata_decoder=args.cluster_metadata_decoder,
                offsets_decoder=args.offsets_decoder,
                print_data_log=args.print_data_log,
                deep_iteration=args.deep_iteration,
                verify_index_only=args.verify_index_only,
                index_sanity_check=args.index_sanity_check,
                max_message_size=args.max_message_size,
                max_bytes=args.max_bytes,
                skip_record_metadata=args.skip_record_metadata,
            )
            files = [f for f in args.files.split(",") if f]
            return _flushed(dump_files(files, options, sys.stdout, sys.stderr))
        if args.command == "kafka-user":
            from seglogfs.tools.kafka_user import add_user

            return _flushed(add_user(args.name, args.iterations))
        from seglogfs.tools.verify import main as verify_main

        return _flushed(verify_main(args.paths, sys.stdout, sys.stderr, strict=args.strict))
    except BrokenPipeError:  # `seglogfs dump ... | head`: the reader has all it wanted
        # the interpreter's last flush of stdout would fail again, with a traceback: discard it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _flushed(status: int) -> int:
    """``status``, once stdout is flushed: a reader gone shows here, inside main, not at exit."""
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
