"""systemd/seglogfs.service: `systemd-analyze verify` passes and the unit keeps its promises."""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "seglogfs.service"
SHIPPED_SEGLOGD = "/opt/seglogfs/.venv/bin/seglogd"
CHECKOUT_SEGLOGD = REPO / ".venv" / "bin" / "seglogd"

# Options that give the service a private mount namespace, whose mounts never reach the host
# (systemd.exec(5): PrivateMounts=, MountFlags=). The FUSE mount must be visible to everyone.
NAMESPACING = {
    "ProtectSystem",
    "ProtectHome",
    "PrivateTmp",
    "PrivateDevices",
    "PrivateMounts",
    "ReadWritePaths",
    "ReadOnlyPaths",
    "InaccessiblePaths",
    "ExecPaths",
    "NoExecPaths",
    "BindPaths",
    "BindReadOnlyPaths",
    "TemporaryFileSystem",
    "ProtectKernelTunables",
    "ProtectKernelModules",
    "ProtectKernelLogs",
    "ProtectControlGroups",
    "ProtectProc",
    "ProcSubset",
    "ProtectHostname",
    "RootDirectory",
    "RootImage",
    "MountAPIVFS",
    "DynamicUser",
    "MountFlags",
}


def unit_settings(text: str) -> dict[str, list[str]]:
    """``Key`` -> values in order, over all sections (keys are unique across our sections)."""
    settings: dict[str, list[str]] = defaultdict(list)
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        settings[key.strip()].append(value.strip())
    return settings


@pytest.fixture(scope="module")
def settings() -> dict[str, list[str]]:
    return unit_settings(UNIT.read_text())


def test_systemd_analyze_verify_passes(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: scripts/install.sh installs the systemd package"
    assert CHECKOUT_SEGLOGD.exists(), "run scripts/install.sh: it installs seglogd into .venv"
    # verify checks that every Exec binary exists: point ExecStart at this checkout's seglogd,
    # change nothing else, and keep the unit's file name.
    text = UNIT.read_text()
    assert text.count(SHIPPED_SEGLOGD) == 1
    copy = tmp_path / UNIT.name
    copy.write_text(text.replace(SHIPPED_SEGLOGD, str(CHECKOUT_SEGLOGD)))
    result = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # verify exits 0 even for unknown keys or bad values; it only warns.
    ours = [line for line in output.splitlines() if UNIT.name in line]
    assert ours == [], output


def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    """The check above can fail: a typo in the unit is reported."""
    analyze = shutil.which("systemd-analyze")
    assert analyze
    broken = UNIT.read_text().replace(SHIPPED_SEGLOGD, str(CHECKOUT_SEGLOGD))
    broken = broken.replace("NoNewPrivileges=yes", "NoNewPrivilege=yes")
    copy = tmp_path / UNIT.name
    copy.write_text(broken)
    result = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=120)
    assert "NoNewPrivilege" in result.stdout + result.stderr


def test_notify_service_running_seglogd(settings: dict[str, list[str]]) -> None:
    assert settings["Type"] == ["notify"]
    assert settings["NotifyAccess"] == ["main"]
    assert settings["ExecStart"] == [f"{SHIPPED_SEGLOGD} --config /etc/seglogfs/seglogfs.yaml"]
    assert settings["WatchdogSec"] and settings["TimeoutStopSec"]
    assert settings["Restart"] == ["on-failure"]
    assert settings["KillSignal"] == ["SIGTERM"]


def test_stale_mount_is_cleared_before_start_and_after_stop(settings: dict[str, list[str]]) -> None:
    first_pre = settings["ExecStartPre"][0]
    assert first_pre.startswith("-/usr/bin/fusermount3 -uz /")
    mount_point = first_pre.split()[-1]
    assert settings["ExecStopPost"] == [f"-/usr/bin/fusermount3 -uz {mount_point}"]


def test_exec_lines_use_absolute_paths(settings: dict[str, list[str]]) -> None:
    for key in ("ExecStartPre", "ExecStart", "ExecReload", "ExecStopPost"):
        for value in settings[key]:
            assert value.lstrip("-@:+!").startswith("/"), f"{key}={value}"


def test_hardening_without_hiding_the_mount(settings: dict[str, list[str]]) -> None:
    assert settings["NoNewPrivileges"] == ["yes"]
    assert settings["CapabilityBoundingSet"] == ["CAP_SYS_ADMIN"]
    assert settings["DevicePolicy"] == ["closed"]
    assert settings["DeviceAllow"] == ["/dev/fuse rw"]
    assert "@mount" in settings["SystemCallFilter"][0]
    hiding = NAMESPACING & settings.keys()
    assert not hiding, f"{sorted(hiding)} would keep the FUSE mount inside the unit's mount namespace"
