"""sd_notify(3) in pure Python: datagrams to ``$NOTIFY_SOCKET`` (path or abstract ``@name``)."""

from __future__ import annotations

import logging
import os
import socket
import threading

log = logging.getLogger("seglogd")


class Notifier:
    """Sends ``READY=1``, ``STATUS=...``, ``WATCHDOG=1``, ``STOPPING=1`` to systemd; a no-op without it."""

    def __init__(self, address: str | None = None) -> None:
        if address is None:
            address = os.environ.get("NOTIFY_SOCKET")
        self.address: str | bytes | None = None
        if address:
            # "@name" is a socket in the abstract namespace: the leading "@" becomes a NUL byte
            self.address = b"\0" + address[1:].encode() if address.startswith("@") else address
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """True when a notify socket was given."""
        return self.address is not None

    def notify(self, *fields: str) -> bool:
        """Send ``fields`` as one datagram (``KEY=value`` lines); False when it could not be sent."""
        if self.address is None:
            return False
        message = "\n".join(fields).encode()
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.sendto(message, self.address)
                return True
            except OSError as exc:
                log.warning("sd_notify %s failed: %s", fields, exc)
                return False

    def ready(self, status: str | None = None) -> bool:
        """``READY=1`` (plus a status line)."""
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> bool:
        """``STATUS=text``: what ``systemctl status`` shows."""
        return self.notify(f"STATUS={text}")

    def stopping(self) -> bool:
        """``STOPPING=1``."""
        return self.notify("STOPPING=1")

    def reloading(self) -> bool:
        """``RELOADING=1``; send :meth:`ready` when the reload is done."""
        return self.notify("RELOADING=1")

    def watchdog(self) -> bool:
        """``WATCHDOG=1``: one keep-alive ping."""
        return self.notify("WATCHDOG=1")

    def close(self) -> None:
        """Close the socket."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


def watchdog_interval() -> float | None:
    """Seconds between WATCHDOG=1 pings: half of ``$WATCHDOG_USEC``, or None when no watchdog is set.

    ``$WATCHDOG_PID``, when set, must be this process (systemd's rule for forwarded environments).
    """
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec:
        return None
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 2 / 1_000_000 if value > 0 else None
