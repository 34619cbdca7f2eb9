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


@pytest.mark.parametrize("name,args,user", DRIVEN, ids=[d[0] for d in DRIVEN])
def test_reports_are_byte_identical_to_the_recorded_ones(perfex, programs, manual_mount, name, args, user):
    code, report, pid = drive(perfex, args, [programs.waiter, "3"], user=user)
    assert code == 3, report
    _check(name, _normal(report, programs.waiter, manual_mount.path, pid))


@pytest.mark.parametrize("name,args", STATIC, ids=[s[0] for s in STATIC])
def test_descriptions_are_byte_identical_to_the_recorded_ones(manual_mount, programs, name, args):
    result = run_perfex(manual_mount, *args)
    text = f"status {result.returncode}\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}"
    _check(name, _normal(text, programs.waiter, manual_mount.path))
