"""Who is on the other end of a loopback connection: the user owning the client's socket. Asked of
the kernel by the socket's addresses (a ``sock_diag`` netlink query, one socket looked up, whatever
the number of sockets on the host); where netlink is not available, read from the kernel's socket
tables (``/proc/net/tcp`` and ``tcp6``, which list both ends of a loopback connection with their
owners' uids, and cost a line per socket of the host). A listener that does not authenticate its
clients serves only its own user and root this way, as the mount serves only them unless
``fuse.allow_other`` is set."""

from __future__ import annotations

import errno
import os
import socket
import struct

__all__ = ["peer_uid"]

_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
_NO_COOKIE = 0xFFFFFFFF
_ALL_STATES = 0xFFFFFFFF
# nlmsghdr, then inet_diag_req_v2: family, protocol, extensions, pad, states, and the socket's id
# (ports and addresses big-endian, then interface and cookie in host order)
_HEADER = struct.Struct("=IHHII")
_REQUEST_HEAD = struct.Struct("=BBBxI")
_SOCKET_ID = struct.Struct(">HH16s16s")
_SOCKET_ID_TAIL = struct.Struct("=III")
_REQUEST_SIZE = _HEADER.size + _REQUEST_HEAD.size + _SOCKET_ID.size + _SOCKET_ID_TAIL.size
_UID_AT = 16 + 64  # idiag_uid in the answer: after nlmsghdr and inet_diag_msg's first 64 bytes


def peer_uid(ours: tuple, theirs: tuple) -> int | None:
    """The uid owning the socket at address ``theirs`` connected to ``ours`` (each a ``getsockname``
    / ``getpeername`` tuple); None when the kernel does not know it (the client is gone, or is not
    in this host's network namespace)."""
    try:
        return _ask_netlink(ours, theirs)
    except OSError as exc:
        if exc.errno not in (errno.EPROTONOSUPPORT, errno.EAFNOSUPPORT, errno.EPERM, errno.EACCES,
                             errno.EOPNOTSUPP, errno.EINVAL):
            raise
    return _read_tables(ours, theirs)


def _ask_netlink(ours: tuple, theirs: tuple) -> int | None:
    """The uid through a ``sock_diag`` exact lookup of the client's socket (its source is ``theirs``)."""
    family = socket.AF_INET6 if ":" in theirs[0] else socket.AF_INET
    request = b"".join((
        _HEADER.pack(_REQUEST_SIZE, _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0),
        _REQUEST_HEAD.pack(family, socket.IPPROTO_TCP, 0, _ALL_STATES),
        _SOCKET_ID.pack(theirs[1], ours[1], _packed(family, theirs[0]), _packed(family, ours[0])),
        _SOCKET_ID_TAIL.pack(0, _NO_COOKIE, _NO_COOKIE),
    ))
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as nl:
        nl.sendto(request, (0, 0))
        answer = nl.recv(8192)
    length, kind = struct.unpack_from("=IH", answer)
    if kind == _NLMSG_ERROR:
        (code,) = struct.unpack_from("=i", answer, 16)
        if code in (-errno.ENOENT, 0):
            return None  # the client is gone
        raise OSError(-code, os.strerror(-code))
    if kind != _SOCK_DIAG_BY_FAMILY or length < _UID_AT + 4:
        raise OSError(errno.EINVAL, f"unexpected sock_diag answer (type {kind}, {length} bytes)")
    (uid,) = struct.unpack_from("=I", answer, _UID_AT)
    return uid


def _packed(family: int, host: str) -> bytes:
    """An address as inet_diag_sockid holds it: 16 bytes, an IPv4 one in the first four."""
    return socket.inet_pton(family, host).ljust(16, b"\0")


def _read_tables(ours: tuple, theirs: tuple) -> int | None:
    """The uid from the kernel's socket tables (a line per socket of the host)."""
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
