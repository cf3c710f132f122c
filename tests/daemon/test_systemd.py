"""systemd/: `systemd-analyze verify` passes on every unit and each keeps its promises
(seglogfs.service runs the daemon; seglogfs-export.service/.timer keep the Parquet archive current)."""

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
EXPORT_UNIT = REPO / "systemd" / "seglogfs-export.service"
EXPORT_TIMER = REPO / "systemd" / "seglogfs-export.timer"
SHIPPED_SEGLOGFS = "/opt/seglogfs/.venv/bin/seglogfs"
CHECKOUT_SEGLOGFS = REPO / ".venv" / "bin" / "seglogfs"

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


def analyze_verify(tmp_path: Path, units: dict[str, str]) -> tuple[int, str]:
    """(exit status, output) of ``systemd-analyze verify`` over unit texts, each saved under its name
    in one directory (so a timer finds its service)."""
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: scripts/install.sh installs the systemd package"
    copies = []
    for name, text in units.items():
        copies.append(tmp_path / name)
        copies[-1].write_text(text)
    result = subprocess.run(
        [analyze, "verify", *map(str, copies)], capture_output=True, text=True, timeout=120
    )
    return result.returncode, result.stdout + result.stderr


def test_systemd_analyze_verify_passes(tmp_path: Path) -> None:
    assert CHECKOUT_SEGLOGD.exists(), "run scripts/install.sh: it installs seglogd into .venv"
    # verify checks that every Exec binary exists: point ExecStart at this checkout's seglogd,
    # change nothing else, and keep the unit's file name.
    text = UNIT.read_text()
    assert text.count(SHIPPED_SEGLOGD) == 1
    status, output = analyze_verify(
        tmp_path, {UNIT.name: text.replace(SHIPPED_SEGLOGD, str(CHECKOUT_SEGLOGD))}
    )
    assert status == 0, output
    # verify exits 0 even for unknown keys or bad values; it only warns.
    ours = [line for line in output.splitlines() if UNIT.name in line]
    assert ours == [], output


def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    """The check above can fail: a typo in the unit is reported."""
    broken = UNIT.read_text().replace(SHIPPED_SEGLOGD, str(CHECKOUT_SEGLOGD))
    broken = broken.replace("NoNewPrivileges=yes", "NoNewPrivilege=yes")
    _, output = analyze_verify(tmp_path, {UNIT.name: broken})
    assert "NoNewPrivilege" in output


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


# ------------------------------------------------------------------ the export service and its timer


def export_units(service_edit: tuple[str, str] = ("", ""), timer_edit: tuple[str, str] = ("", "")):
    """{name: text} of the export service (ExecStart on this checkout's seglogfs) and timer, each
    with one optional (old, new) replacement."""
    service = EXPORT_UNIT.read_text().replace(SHIPPED_SEGLOGFS, str(CHECKOUT_SEGLOGFS))
    timer = EXPORT_TIMER.read_text()
    return {
        EXPORT_UNIT.name: service.replace(*service_edit) if service_edit[0] else service,
        EXPORT_TIMER.name: timer.replace(*timer_edit) if timer_edit[0] else timer,
    }


def test_export_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    assert CHECKOUT_SEGLOGFS.exists(), "run scripts/install.sh: it installs seglogfs into .venv"
    assert EXPORT_UNIT.read_text().count(SHIPPED_SEGLOGFS) == 1
    status, output = analyze_verify(tmp_path, export_units())
    assert status == 0, output
    ours = [line for line in output.splitlines() if "seglogfs-export" in line]
    assert ours == [], output


@pytest.mark.parametrize(
    ("service_edit", "timer_edit", "reported"),
    [
        (("Type=oneshot", "Type=oneshoot"), ("", ""), "oneshoot"),
        (("", ""), ("OnCalendar=hourly", "OnCalender=hourly"), "OnCalender"),
        (("", ""), ("Persistent=true", "Persistent=sometimes"), "sometimes"),
    ],
)
def test_verify_catches_broken_export_units(tmp_path: Path, service_edit, timer_edit, reported) -> None:
    """The check above can fail: a bad value or a typo in either unit is reported."""
    _, output = analyze_verify(tmp_path, export_units(service_edit, timer_edit))
    assert reported in output


def test_export_service_runs_the_incremental_export(settings: dict[str, list[str]]) -> None:
    export = unit_settings(EXPORT_UNIT.read_text())
    assert export["Type"] == ["oneshot"]
    # The data dir of seglogfs.service (its StateDirectory, data_dir: /var/lib/seglogfs/data).
    data_dir = f"/var/lib/{settings['StateDirectory'][0]}/data"
    assert f"data_dir: {data_dir}" in UNIT.read_text()
    archive = "/var/lib/seglogfs-archive"
    assert export["ExecStart"] == [
        f"{SHIPPED_SEGLOGFS} spark export {data_dir} --output {archive} --incremental"
    ]
    assert export["StateDirectory"] == [archive.rsplit("/", 1)[1]]
    assert "[Install]" not in EXPORT_UNIT.read_text()  # started by the timer only


def test_export_timer_starts_the_service_hourly() -> None:
    timer = unit_settings(EXPORT_TIMER.read_text())
    assert timer["OnCalendar"] == ["hourly"]
    assert timer["Persistent"] == ["true"]
    assert timer["Unit"] == [EXPORT_UNIT.name]
    assert timer["WantedBy"] == ["timers.target"]
