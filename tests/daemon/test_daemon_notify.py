"""sd_notify against real datagram sockets (path and abstract namespace), no mount needed."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import pytest

from seglogd.notify import Notifier, watchdog_interval


def _server(address: str | bytes) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(5)
    return sock


def test_notify_path_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "notify.sock")
    with _server(path) as server:
        notifier = Notifier(path)
        assert notifier.enabled
        assert notifier.ready("serving 1 log(s)")
        assert server.recv(4096) == b"READY=1\nSTATUS=serving 1 log(s)"
        assert notifier.watchdog()
        assert server.recv(4096) == b"WATCHDOG=1"
        assert notifier.stopping()
        assert server.recv(4096) == b"STOPPING=1"
        notifier.close()


def test_notify_abstract_socket() -> None:
    name = f"seglogd-test-{uuid.uuid4().hex}"
    with _server(b"\0" + name.encode()) as server:
        notifier = Notifier("@" + name)
        assert notifier.status("hello")
        assert server.recv(4096) == b"STATUS=hello"
        notifier.close()


def test_notify_without_socket_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    notifier = Notifier()
    assert not notifier.enabled
    assert notifier.ready() is False


def test_notify_to_a_vanished_socket_does_not_raise(tmp_path: Path) -> None:
    assert Notifier(str(tmp_path / "gone.sock")).ready() is False


def test_watchdog_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    assert watchdog_interval() is None
    monkeypatch.setenv("WATCHDOG_USEC", "3000000")
    assert watchdog_interval() == 1.5
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    assert watchdog_interval() is None
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert watchdog_interval() == 1.5
