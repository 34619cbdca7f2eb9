"""The README's examples, one per personality (examples/*.c, examples/perfex.sh),
built the way the README says - pkg-config against an installed prefix - and
run against real mounts on the real clock, as root and as nobody; and the
README shows each exactly as the file has it, so neither can drift."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import NOBODY, ROOT, running_hwperfd

EXAMPLES = ROOT / "examples"
# example -> the pkg-config package it builds with
PROGRAMS = {
    "irix_counters": "hwperfd",
    "cpc_counters": "libcpc",
    "perfctr_self": "libperfctr",
    "pctr_read": "libpctr",
}
USERS = ["root", "nobody"]


def readme_region(path: Path) -> str:
    """The lines of ``path`` between its ``README: begin`` and ``README: end`` marks."""
    lines = path.read_text().splitlines(keepends=True)
    begin = next(i for i, line in enumerate(lines) if "README: begin" in line)
    end = next(i for i, line in enumerate(lines) if "README: end" in line)
    return "".join(lines[begin + 1 : end])


def readme_blocks() -> list[str]:
    return re.findall(r"^```(?:c|sh)\n(.*?)^```$", (ROOT / "README.md").read_text(), re.M | re.S)


@pytest.mark.parametrize("example", [*(f"{name}.c" for name in PROGRAMS), "perfex.sh"])
def test_readme_shows_the_example_as_the_file_has_it(example):
    assert readme_region(EXAMPLES / example) in readme_blocks(), f"README.md lacks examples/{example}'s snippet"


@pytest.fixture(scope="module")
def built(shared_tmp) -> dict[str, Path]:
    """Each example built by pkg-config from a prefix installed by `make install`,
    in a folder every user can read."""
    prefix, out = shared_tmp / "examples-prefix", shared_tmp / "examples-bin"
    made = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "install", f"PREFIX={prefix}", f"BUILD={shared_tmp / 'examples-build'}"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    out.mkdir(mode=0o755)
    env = {**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib" / "pkgconfig")}
    for name, package in PROGRAMS.items():
        command = f"cc -Wall -Wextra -Werror -o {out / name} {EXAMPLES / name}.c"
        command += f" $(pkg-config --cflags --libs {package})"
        result = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True)
        assert result.returncode == 0, command + "\n" + result.stderr
    shutil.copy(EXAMPLES / "perfex.sh", out)
    for path in (prefix, prefix / "lib"):
        path.chmod(0o755)
    return {name: out / name for name in [*PROGRAMS, "perfex.sh"]}


@pytest.fixture(scope="module")
def mips(shared_tmp):
    with running_hwperfd(shared_tmp / "mnt-examples-mips", shared_tmp / "hwperfd-examples-mips.log") as mount:
        yield mount


@pytest.fixture(scope="module")
def intel(shared_tmp):
    with running_hwperfd(
        shared_tmp / "mnt-examples-intel", shared_tmp / "hwperfd-examples-intel.log", "--cpu-type", "intel"
    ) as mount:
        yield mount


@pytest.fixture(scope="module")
def perfex_bin(shared_tmp, nobody_python) -> dict[str, Path]:
    """A `perfex` on the PATH of each user that runs this tree's perfex."""
    interpreter, env = nobody_python
    # The script's exec must reach the interpreter as nobody: a folder on its path may be root's alone.
    if subprocess.run([*NOBODY, "sh", "-c", f"exec {interpreter} -c pass"], capture_output=True).returncode != 0:
        interpreter = "/usr/bin/python3"
    folders = {}
    for user, python, path in (("root", sys.executable, str(ROOT)), ("nobody", interpreter, env["PYTHONPATH"])):
        folder = shared_tmp / f"examples-perfex-{user}"
        folder.mkdir(mode=0o755)
        (folder / "perfex").write_text(f'#!/bin/sh\nPYTHONPATH={path} exec {python} -m hwperfd.perfex "$@"\n')
        (folder / "perfex").chmod(0o755)
        folders[user] = folder
    return folders


def run(program: Path, mount, user: str, perfex_bin: dict[str, Path] | None = None) -> str:
    """Run as the README says: under hwperfd-run's shim (mount.env), pointed at the mount."""
    env = mount.env(LD_LIBRARY_PATH=str(program.parent.parent / "examples-prefix" / "lib"))
    if perfex_bin is not None:
        env["PATH"] = f"{perfex_bin[user]}:{env['PATH']}"
    argv = ["sh", str(program)] if program.suffix == ".sh" else [str(program)]
    result = subprocess.run(
        (NOBODY if user == "nobody" else []) + argv, env=env, capture_output=True, text=True, timeout=120, cwd="/"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def numbers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\b\d+\b", text)]


@pytest.mark.parametrize("user", USERS)
def test_irix_example_counts_cycles_and_their_misses(built, mips, user):
    """The balanced profile's L1 data cache misses are 1 per 100 cycles, exactly."""
    cycles, misses = numbers(run(built["irix_counters"], mips, user).split("cycles", 1)[1])[:2]
    assert cycles > 0 and misses == cycles // 100


@pytest.mark.parametrize("user", USERS)
def test_perfex_example_reports_both_forms(built, mips, user, perfex_bin):
    text = run(built["perfex.sh"], mips, user, perfex_bin)
    assert text.count("Summary for execution of ls -lR /usr/include") == 2
    # perfex counts user mode, as wait4 splits the command's time, and a short
    # command full of system calls can be all system time there: Linux gives
    # a task with system ticks and no user tick all its run time as system
    # time (cputime_adjust), which beside CPU-bound processes ls -lR got in 4
    # runs of 20.  So its cycles may be 0; its misses follow them exactly.
    cycles = [int(n) for n in re.findall(r"^ 0 Cycles\.+\s+(\d+)", text, re.M)]
    misses = int(re.search(r"^25 Primary data cache misses\.+\s+(\d+)", text, re.M).group(1))
    assert len(cycles) == 2 and misses == cycles[0] // 100
    assert "Based on 195 MHz MIPS R10000 CPU" in text  # -y's cost table


@pytest.mark.parametrize("user", USERS)
@pytest.mark.parametrize("model", ["mips", "intel"])
def test_libcpc_example_counts_with_generic_events(built, request, model, user):
    cycles, insts = numbers(run(built["cpc_counters"], request.getfixturevalue(model), user))[:2]
    assert 0 < insts <= cycles


@pytest.mark.parametrize("user", USERS)
def test_perfctr_example_reads_its_own_counters(built, intel, user):
    tsc, insts = numbers(run(built["perfctr_self"], intel, user))[:2]
    assert 0 < insts <= tsc


@pytest.mark.parametrize("user", USERS)
def test_pctr_example_times_a_loop_and_reads_the_counters(built, intel, user):
    text = run(built["pctr_read"], intel, user)
    assert numbers(text.splitlines()[0])[0] > 0
    assert [line.split(":")[0] for line in text.splitlines()[1:]] == ["ctr0", "ctr1", "ctr2", "ctr3"]
