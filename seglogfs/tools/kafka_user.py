"""``seglogfs kafka-user add NAME``: a SCRAM-SHA-256 user entry for the daemon's ``kafka.users``,
made from a password (read from the terminal twice, or one line of stdin) and printed as YAML."""

from __future__ import annotations

import getpass
import json
import sys
from typing import TextIO

from seglogfs.kafka.sasl_scram import MIN_ITERATIONS, make_credential

__all__ = ["add_user"]


def _password(stdin: TextIO, stderr: TextIO) -> str | None:
    if stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            print("seglogfs kafka-user: the passwords differ", file=stderr)
            return None
        return first
    return stdin.readline().rstrip("\r\n")


def add_user(name: str, iterations: int, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout,
             stderr: TextIO = sys.stderr) -> int:
    """Print ``name``'s entry; 2 for an empty password or too few iterations."""
    if iterations < MIN_ITERATIONS:
        print(f"seglogfs kafka-user: --iterations must be at least {MIN_ITERATIONS}", file=stderr)
        return 2
    password = _password(stdin, stderr)
    if not password:
        print("seglogfs kafka-user: no password given", file=stderr)
        return 2
    fields = make_credential(password, iterations).to_yaml_fields()
    # JSON strings and numbers are YAML flow scalars: the line is valid YAML whatever the name
    entry = ", ".join(f"{key}: {json.dumps(value)}" for key, value in fields.items())
    print("# under kafka: in the seglogd config (the password itself is not stored)", file=stdout)
    print("users:", file=stdout)
    print(f"  {json.dumps(name)}: {{{entry}}}", file=stdout)
    return 0
