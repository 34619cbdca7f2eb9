"""OpenBSD pctr(4) programs, unchanged, against a real mount (root and nobody).

The programs open _PATH_PCTR ("/dev/pctr"), which the hwperfd-run shim sends
to <mount>/pctr, and read the TSC and counters with rdtsc()/rdpmc() through
libpctr.  Counts are exact on the manual clock: one emulated CPU at 1000 MHz,
the default "balanced" profile (instructions 0.8, data-cache misses 0.01,
mispredicted branches 0.006 per cycle).
"""

from __future__ import annotations

import os
import signal
import re
import stat
import subprocess
import sys

from structs.pctr import PCTR_EN, PCTR_K, PCTR_U
from tests.conftest import NOBODY, ROOT, finish

MS = 1_000_000  # cycles in 1 ms at 1000 MHz


def start(mount, program, *args: str, nobody: bool = False) -> subprocess.Popen:
    prefix = NOBODY if nobody else []
    return subprocess.Popen(
        [*prefix, str(program), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=mount.env(),
    )  # fmt: skip


def fields(line: str) -> dict[str, int]:
    return {k: int(v, 16 if k.startswith("fn") else 10) for k, v in re.findall(r"(\w+)=(\w+)", line)}


def test_the_node_is_root_owned_and_world_readable_as_dev_pctr(intel):
    info = os.stat(intel.path / "pctr")
    assert stat.S_IMODE(info.st_mode) == 0o644 and info.st_uid == 0 and stat.S_ISREG(info.st_mode)


def test_read_set_read_counts_every_cycle_of_the_cpu_exactly(intel, pctr_programs):
    fn0 = 0xC0 | PCTR_U | PCTR_K | PCTR_EN  # INST_RETIRED, user and kernel
    fn1 = 0x3C | PCTR_U | PCTR_EN  # unhalted cycles, user only
    proc = start(intel, pctr_programs["read_set_read"], "0", f"{fn0:x}", "1", f"{fn1:x}")
    assert proc.stdout is not None and proc.stdin is not None
    before = fields(proc.stdout.readline())
    assert before["fn0"] == 0 and before["hwc0"] == 0
    after_set = fields(proc.stdout.readline())
    assert (after_set["fn0"], after_set["fn1"], after_set["hwc0"], after_set["hwc1"]) == (fn0, fn1, 0, 0)
    # Every process on the CPU counts: the manual clock says the CPU was
    # busy 2 ms in user and 1 ms in kernel mode.
    intel.control("advance-cpu 0 2ms 1ms")
    out, err = finish(proc, "\n", timeout=30)
    assert proc.returncode == 0, err
    after = fields(out)
    assert after["hwc0"] == 3 * MS * 8 // 10
    assert after["hwc1"] == 2 * MS
    assert after["tsc"] - after_set["tsc"] == 3 * MS
    assert after["fn2"] == after["fn3"] == after["hwc2"] == after["hwc3"] == 0  # Intel has two


def test_counts_are_zeroed_only_when_the_function_changes(intel, pctr_programs):
    fn = 0x3C | PCTR_U | PCTR_K | PCTR_EN

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(pctr_programs["read_set_read"]), *args], input="", capture_output=True, text=True, env=intel.env(),
            check=False,
        )  # fmt: skip

    run("0", f"{fn:x}")
    intel.control("advance-cpu 0 1ms")
    assert fields(run("0", f"{fn:x}").stdout.splitlines()[1])["hwc0"] == MS  # same function: kept
    changed = fn & ~PCTR_K
    assert fields(run("0", f"{changed:x}").stdout.splitlines()[1])["hwc0"] == 0


def test_p6_style_two_counter_setup(intel, pctr_programs):
    proc = start(intel, pctr_programs["p6_two_counters"])
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    intel.control("advance-cpu 0 5ms 5ms")
    out, err = finish(proc, "\n", timeout=30)
    assert proc.returncode == 0, err
    # L2_LD with all four MESI states counts every L1 data miss.
    assert out == f"cycles {10 * MS} instructions {10 * MS * 8 // 10} l2_loads {10 * MS // 100}\n"


def test_amd_four_counter_setup(amd, pctr_programs):
    proc = start(amd, pctr_programs["amd_four_counters"])
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    amd.control("advance-cpu 0 2ms 1ms")
    out, err = finish(proc, "\n", timeout=30)
    assert proc.returncode == 0, err
    expected = [3 * MS, 3 * MS * 8 // 10, 3 * MS // 100, 2 * MS * 6 // 1000]  # the last counts user mode only
    assert out.splitlines() == [f"ctr{i} {n} {n}" for i, n in enumerate(expected)]


def test_an_unprivileged_user_reads_but_cannot_set(intel, pctr_programs):
    proc = start(intel, pctr_programs["read_set_read"], nobody=True)
    out, err = proc.communicate("", timeout=30)
    assert proc.returncode == 0, err
    assert out.startswith("before tsc=")
    proc = start(intel, pctr_programs["read_set_read"], "0", "4300c0", nobody=True)
    out, err = proc.communicate("", timeout=30)
    assert proc.returncode == 1 and "/dev/pctr: Permission denied" in err
    proc = start(intel, pctr_programs["p6_two_counters"], nobody=True)
    out, err = proc.communicate("", timeout=30)
    assert proc.returncode == 1 and "Permission denied" in err


def test_the_man_page_rdtsc_example_times_in_emulated_cycles(intel_real_mount, pctr_programs):
    for nobody in (False, True):
        proc = start(intel_real_mount, pctr_programs["rdtsc_timing"], nobody=nobody)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        cycles = int(re.fullmatch(r"Functionx took (\d+) cycles.\n", out).group(1))
        # functionx sleeps 20 ms; the TSC runs at 1000 MHz in wall time.
        assert 20 * MS <= cycles < 5_000 * MS


def test_hwperfd_run_sends_dev_pctr_to_the_mount(intel, pctr_programs):
    env = {k: v for k, v in intel.env().items() if k != "LD_PRELOAD"}
    result = subprocess.run(
        [sys.executable, "-m", "hwperfd.run", str(pctr_programs["read_set_read"])],
        input="", capture_output=True, text=True, env={**env, "PYTHONPATH": str(ROOT)}, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("before tsc=")
    plain = subprocess.run(
        [str(pctr_programs["read_set_read"])], input="", capture_output=True, text=True, env=env, check=False
    )
    assert plain.returncode == 1 and "/dev/pctr" in plain.stderr  # no such device on Linux without the shim


def test_rdpmc_of_a_counter_the_model_lacks_faults_as_the_instruction_does(intel, amd, manual_mount, pctr_programs):
    """rdpmc with a counter index the CPU does not have raises a general
    protection fault: the program gets SIGSEGV, not a 0 it could take for a
    count.  The Intel model has 2 counters, the AMD 4, the R10000 none pctr
    knows."""
    def rdpmc(mount, n: int) -> subprocess.CompletedProcess:
        return subprocess.run([str(pctr_programs["rdpmc_one"]), str(n)], capture_output=True, text=True,
                              env=mount.env(), timeout=30)  # fmt: skip

    assert rdpmc(intel, 1).returncode == 0
    for mount, n in ((intel, 2), (intel, 3), (intel, -1), (amd, 4), (manual_mount, 0)):
        done = rdpmc(mount, n)
        assert done.returncode == -signal.SIGSEGV and done.stdout == "", (mount.path, n, done)
    assert rdpmc(amd, 3).stdout == "0\n"
