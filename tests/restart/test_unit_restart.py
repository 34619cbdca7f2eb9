"""A restart through systemd/hwperfd.service (docs/restart.md, "Kernels and
set-ups"): the unit keeps the set-up store and restarts a killed daemon as
the docs say; where systemd runs the machine, a program counting through the
unit's daemon rides out a SIGKILL (Restart=on-failure) and a
``systemctl restart``."""

from __future__ import annotations

import configparser
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, is_mounted, preload_shim
from tests.restart.test_restart import (  # noqa: F401
    TIMEOUT, assert_user_cycles, go, irix_restart, line,
)  # fmt: skip

UNIT = ROOT / "systemd" / "hwperfd.service"


def unit_settings() -> dict[str, list[str]]:
    """[Service] as systemd reads it: each key's values in order (a key may repeat)."""
    settings: dict[str, list[str]] = {}
    section = ""
    for raw in UNIT.read_text().splitlines():
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        if text.startswith("["):
            section = text
        elif section == "[Service]":
            key, _, value = text.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_the_unit_restarts_a_killed_daemon_soon_and_keeps_the_store_across_every_stop():
    settings = unit_settings()
    assert settings["Restart"] == ["on-failure"]  # a SIGKILL is a failure; SIGTERM's clean exit is not
    assert settings["RestartSec"] == ["200ms"]
    assert settings["RuntimeDirectoryPreserve"] == ["yes"]
    assert "hwperfd-state" in settings["RuntimeDirectory"][0].split()
    exec_start = settings["ExecStart"][0].split()
    assert exec_start[exec_start.index("--state-dir") + 1] == "/run/hwperfd-state"
    assert "--no-store" not in exec_start
    # Not used, as the docs say: libfuse cannot adopt a kept /dev/fuse.
    assert "FileDescriptorStoreMax" not in settings
    configparser.ConfigParser(strict=False, interpolation=None).read_string(UNIT.read_text())


def systemd_runs_the_machine() -> bool:
    """sd_booted(3): systemd is PID 1."""
    return os.path.isdir("/run/systemd/system") and shutil.which("systemctl") is not None


@pytest.mark.skipif(not systemd_runs_the_machine(), reason="systemd is not PID 1 on this machine")
def test_a_program_rides_out_a_kill_and_a_systemctl_restart_of_the_units_daemon(irix_restart, shared_tmp):  # noqa: F811
    """The shipped unit, its daemon run from this tree on a mount of the
    test's own: SIGKILL (systemd restarts it after RestartSec), then
    ``systemctl restart``; the program's counts and generation carry on."""
    name = f"hwperfd-restart-test-{os.getpid()}"
    mount = shared_tmp / "unit-mnt"
    state = f"/run/{name}-state"
    text = UNIT.read_text()
    text = text.replace("RuntimeDirectory=hwperfd hwperfd-state", f"RuntimeDirectory={name}-state")
    exec_line = next(each for each in text.splitlines() if each.startswith("ExecStart="))
    text = text.replace(
        exec_line,
        f"ExecStart={sys.executable} -m hwperfd --clock real --state-dir {state} {mount}\nWorkingDirectory={ROOT}",
    )
    text = text.replace("Environment=HWPERFD_MOUNT=/run/hwperfd", f"Environment=HWPERFD_MOUNT={mount}")
    path = Path("/run/systemd/system") / f"{name}.service"
    path.write_text(text)
    mount.mkdir(mode=0o755, exist_ok=True)

    def systemctl(*args: str) -> None:
        subprocess.run(["systemctl", *args], check=True, timeout=60)

    def main_pid() -> int:
        out = subprocess.run(["systemctl", "show", "-P", "MainPID", name], check=True, capture_output=True, text=True)
        return int(out.stdout.strip() or 0)

    def wait_mounted(other_than: int) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not (main_pid() not in (0, other_than) and is_mounted(mount) and (mount / "control").exists()):
            assert time.monotonic() < deadline, "the unit's daemon did not come back"
            time.sleep(0.05)

    program = None
    try:
        systemctl("daemon-reload")
        systemctl("start", name)
        wait_mounted(0)
        env = {**os.environ, "HWPERFD_MOUNT": str(mount), "LD_PRELOAD": str(preload_shim())}
        program = subprocess.Popen(
            [str(irix_restart)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )  # fmt: skip
        (generation,) = line(program, "counting")
        line(program, "ready")
        first = main_pid()
        os.kill(first, signal.SIGKILL)
        wait_mounted(first)
        second = main_pid()
        systemctl("restart", name)
        wait_mounted(second)
        go(program)
        final_gen, cycles, user_ns, _, system_ns = line(program, "final")
        assert program.wait(timeout=TIMEOUT) == 0
        assert final_gen == generation
        assert_user_cycles(cycles, user_ns, system_ns)
    finally:
        if program is not None and program.poll() is None:
            program.kill()
            program.wait()
        subprocess.run(["systemctl", "stop", name], check=False, timeout=60)
        path.unlink()
        subprocess.run(["systemctl", "daemon-reload"], check=False, timeout=60)
        shutil.rmtree(state, ignore_errors=True)
