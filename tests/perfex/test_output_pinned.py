"""perfex's output, byte for byte, against reports recorded in tests/perfex/golden.

The recorded reports were written by perfex before its start-up was made
faster (construct-free client path, lazy imports, the -I -S launcher); every
form of output - text, -y, -a, -mp, --json, --csv, --list, -t - must come out
the same, through ``python3 -m hwperfd.perfex`` and through the launcher.
Run with HWPERFD_WRITE_GOLDEN=1 to record them again after a deliberate change.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hwperfd.perfex import launcher
from tests.conftest import ROOT
from tests.perfex.conftest import drive, run_perfex

GOLDEN = Path(__file__).resolve().parent / "golden"
WRITE = os.environ.get("HWPERFD_WRITE_GOLDEN") == "1"

# (name, perfex options, user time given to the command)
DRIVEN = [
    ("default", [], "10ms"),
    ("two_events_x", ["-x", "-e", "25", "-e", "Graduated instructions"], "7ms"),
    ("y_costs", ["-e", "0", "-e", "26", "-y"], "10ms"),
    ("y_reuse", ["-e", "2", "-e", "26", "-y", "-l", "8"], "10ms"),
    ("a_multiplexed", ["-a"], "160ms"),
    ("a_y", ["-a", "-y"], "160ms"),
    ("json", ["--json", "-e", "25"], "10ms"),
    ("csv_a_y", ["--csv", "-a", "-y"], "160ms"),
    ("mp", ["-mp", "-e", "25"], "10ms"),
    ("mp_json", ["-mp", "--json", "-e", "17"], "10ms"),
]
STATIC = [
    ("list", ["--list"]),
    ("list_json_r12000", ["--list", "--json", "--cpu-type", "r12000"]),
    ("table", ["-t"]),
    ("table_r12000", ["-t", "--cpu-type", "r12000"]),
    ("help", ["--help"]),
    ("usage_error", ["-q"]),
]


@pytest.fixture(scope="module", params=["module", "launcher"])
def how(request, shared_tmp) -> list[str] | None:
    """perfex as ``python3 -m hwperfd.perfex``, and through the -I -S launcher."""
    if request.param == "module":
        return None
    path = shared_tmp / "perfex-launcher"
    launcher.write(str(path), root=str(ROOT))
    return [str(path)]


def _normal(text: str, waiter: Path, mount: Path, pid: int | None = None) -> str:
    """The parts that differ from run to run: paths and the command's pid."""
    text = text.replace(str(waiter), "WAITER").replace(str(mount), "MOUNT")
    if pid is not None:
        text = re.sub(rf"\b{pid}\b", "PID", text)
    return text


def _check(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if WRITE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no recorded output {path} (HWPERFD_WRITE_GOLDEN=1 records it)"
    assert text == path.read_text(), f"perfex's output for {name} changed"


def test_the_launcher_starts_perfex_without_site_from_the_tree_it_names(shared_tmp, manual_mount):
    path = shared_tmp / "perfex-launcher-check"
    launcher.write(str(path), root=str(ROOT))
    first = path.read_text().splitlines()[0]
    assert first == f"#!{sys.executable} -IS" and os.access(path, os.X_OK)
    # -I: PYTHONPATH pointing elsewhere changes nothing; -S: no site module.
    env = {**manual_mount.env(), "PYTHONPATH": "/nonexistent", "PYTHONSTARTUP": "/nonexistent"}
    probe = shared_tmp / "probe.py"
    probe.write_text(path.read_text().replace(
        "sys.exit(main())", "import hwperfd; print(sys.flags.no_site, sys.flags.isolated, hwperfd.__file__)"
    ))  # fmt: skip
    probe.chmod(0o755)
    out = subprocess.run([str(probe)], env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "1", str(ROOT / "hwperfd" / "__init__.py")]
    result = subprocess.run([str(path), "--list"], env=env, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("Events of the MIPS R10000 CPU")


def test_the_launcher_refuses_a_relative_interpreter(tmp_path):
    with pytest.raises(ValueError, match="absolute"):
        launcher.write(str(tmp_path / "perfex"), python="python3")
    assert not (tmp_path / "perfex").exists()


@pytest.mark.parametrize("name,args,user", DRIVEN, ids=[d[0] for d in DRIVEN])
def test_reports_are_byte_identical_to_the_recorded_ones(perfex, programs, manual_mount, how, name, args, user):
    code, report, pid = drive(perfex, args, [programs.waiter, "3"], user=user, launcher=how)
    assert code == 3, report
    _check(name, _normal(report, programs.waiter, manual_mount.path, pid))


@pytest.mark.parametrize("name,args", STATIC, ids=[s[0] for s in STATIC])
def test_descriptions_are_byte_identical_to_the_recorded_ones(manual_mount, programs, how, name, args):
    result = run_perfex(manual_mount, *args, command=how)
    text = f"status {result.returncode}\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}"
    _check(name, _normal(text, programs.waiter, manual_mount.path))
