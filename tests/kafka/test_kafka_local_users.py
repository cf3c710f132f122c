"""A listener that does not authenticate serves the daemon's user and root only (as the mount without
``fuse.allow_other``): another local user's client is refused at connect, named in the daemon log;
``kafka.loopback.users: everyone`` serves every local user."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from support.kafka_fixture import bootstrap, kcat, start_kafka_daemon
from support.mount_fixture import Seglogd, fuse_required

pytestmark = fuse_required
NOBODY = 65534


def _kcat_as(uid: int, *args: str) -> subprocess.CompletedProcess:
    """kcat run as ``uid`` (util-linux's setpriv; the suite runs as root, as its mounts need)."""
    command = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "kcat", *args]
    return subprocess.run(command, capture_output=True, timeout=30, check=False)


@pytest.fixture(scope="module", params=["owner", "everyone"])
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seglogd]:
    kafka = {} if request.param == "owner" else {"loopback.users": "everyone"}
    daemon = start_kafka_daemon(tmp_path_factory.mktemp("local-users"), logs={"events-0": {}}, kafka=kafka)
    daemon.extra["users"] = request.param
    try:
        yield daemon
    finally:
        daemon.cleanup()


def test_another_local_user_is_served_only_when_the_config_says_everyone(daemon: Seglogd) -> None:
    kcat("-b", bootstrap(daemon), "-P", "-t", "events", input=b"from root\n")  # root: always served
    theirs = _kcat_as(NOBODY, "-b", bootstrap(daemon), "-C", "-t", "events", "-o", "beginning", "-e", "-q",
                      "-m", "5")
    if daemon.extra["users"] == "everyone":
        assert theirs.returncode == 0 and theirs.stdout == b"from root\n", theirs.stderr
    else:
        assert theirs.returncode != 0 and b"from root" not in theirs.stdout
        assert f"(uid {NOBODY}) is neither the daemon's nor root" in daemon.stderr()
    assert (daemon.mount / "events-0" / "records").read_bytes() == b"from root\n"  # nothing else came in


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_the_kernel_names_the_clients_user_by_netlink_and_by_its_tables_alike(host: str) -> None:
    """The netlink query (one socket looked up) and the socket tables (a line per socket of the host)
    name the same owner: another user's client, ours, and none for a connection nobody made."""
    import socket

    from seglogfs.kafka.loopback_peer import _ask_netlink, _read_tables, peer_uid

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as server:
        server.bind((host, 0))
        server.listen()
        server.settimeout(20)
        port = server.getsockname()[1]
        client = f"exec 3<>/dev/tcp/{host}/{port}; sleep 30"  # bash's connect: runs as any user
        as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        other = subprocess.Popen([*as_nobody, "bash", "-c", client])
        try:
            accepted, _ = server.accept()
            with accepted:
                ours, theirs = accepted.getsockname(), accepted.getpeername()
                assert _ask_netlink(ours, theirs) == _read_tables(ours, theirs) == NOBODY
                assert peer_uid(ours, theirs) == NOBODY
        finally:
            other.kill()
            other.wait()
        with socket.create_connection((host, port)) as mine:
            accepted, _ = server.accept()
            with accepted:
                ours, theirs = accepted.getsockname(), accepted.getpeername()
                assert _ask_netlink(ours, theirs) == _read_tables(ours, theirs) == 0  # root's, the suite's
            assert mine.fileno() >= 0
    unknown = ((host, 1), (host, 2))
    assert _ask_netlink(*unknown) is None and _read_tables(*unknown) is None
