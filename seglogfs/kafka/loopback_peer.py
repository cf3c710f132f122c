"""Who is on the other end of a loopback connection: the user owning the client's socket, from the
kernel's socket table (``/proc/net/tcp`` and ``tcp6``, where both ends of a loopback connection are
listed with their owners' uids). A listener that does not authenticate its clients serves only its
own user and root this way, as the mount serves only them unless ``fuse.allow_other`` is set."""

from __future__ import annotations

import socket
import struct

__all__ = ["peer_uid"]

_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def peer_uid(ours: tuple, theirs: tuple) -> int | None:
    """The uid owning the socket at address ``theirs`` connected to ``ours`` (each a ``getsockname``
    / ``getpeername`` tuple); None when the table does not list it (the client is gone, or is not on
    this host's network namespace)."""
    want = (_kernel_address(theirs), _kernel_address(ours))
    for table in _TABLES:
        try:
            with open(table) as f:
                next(f, None)  # the header
                for line in f:
                    fields = line.split()
                    if len(fields) > 7 and (fields[1], fields[2]) == want:
                        return int(fields[7])
        except FileNotFoundError:
            continue
    return None


def _kernel_address(address: tuple) -> str:
    """``host:port`` as the kernel's table prints it: the address as 32-bit words in host byte order,
    each in hex, and the port in hex."""
    host, port = address[0], address[1]
    if ":" in host:
        words = struct.unpack("=4I", socket.inet_pton(socket.AF_INET6, host))
        return "".join(f"{word:08X}" for word in words) + f":{port:04X}"
    (word,) = struct.unpack("=I", socket.inet_aton(host))
    return f"{word:08X}:{port:04X}"
