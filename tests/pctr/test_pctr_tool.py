"""pctr(1): OpenBSD's options, output and messages, against real mounts."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import NOBODY, ROOT

MS = 1_000_000


def pctr(mount, *args: str, nobody_python=None) -> subprocess.CompletedProcess:
    if nobody_python is not None:
        interpreter, env = nobody_python
        argv = [*NOBODY, interpreter, "-m", "hwperfd.pctr.tool", *args]
        env = {**env, "HWPERFD_MOUNT": str(mount.path)}
    else:
        argv = [sys.executable, "-m", "hwperfd.pctr.tool", *args]
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HWPERFD_MOUNT": str(mount.path)}
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=False)


def test_set_then_read_prints_openbsds_lines(intel):
    assert pctr(intel, "-s", "0", "-f", "c0").returncode == 0
    assert pctr(intel, "-s", "1", "-f", "29", "-k", "-M", "-E", "-S", "-I").returncode == 0
    intel.control("advance-cpu 0 2ms 1ms")
    result = pctr(intel)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f" ctr0 = {3 * MS * 8 // 10:16d}  [--ku c0 00   INST_RET]"
    assert lines[1] == f" ctr1 = {MS // 100:16d}  [--k- 29 0f  MESI L2_LD]"
    assert lines[2].startswith("  tsc = ") and len(lines) == 3


def test_threshold_invert_edge_and_unit_mask_reach_the_function(intel):
    assert pctr(intel, "-s", "1", "-f", "0xc0", "-t", "2", "-i", "-e", "-u", "-m", "5").returncode == 0
    line = pctr(intel).stdout.splitlines()[1]
    assert line.endswith("[ie-u c0 05 +2  INST_RET]")


def test_amd_reads_four_counters(amd):
    for ctr, func in enumerate(("76", "c0", "41", "c3")):
        assert pctr(amd, "-s", str(ctr), "-f", func, "-u").returncode == 0
    amd.control("advance-cpu 0 1ms 1ms")
    lines = pctr(amd).stdout.splitlines()
    assert lines[:4] == [
        f" ctr0 = {MS:16d}  [---u 76 00 ]",
        f" ctr1 = {MS * 8 // 10:16d}  [---u c0 00 ]",
        f" ctr2 = {MS // 100:16d}  [---u 41 00 ]",
        f" ctr3 = {MS * 6 // 1000:16d}  [---u c3 00 ]",
    ]


def test_list_shows_the_models_events_with_descriptions(intel, amd):
    intel_list = pctr(intel, "-l").stdout.splitlines()
    assert "c0  INST_RET" in intel_list and "      Instructions retired." in intel_list
    assert "29  L2_LD  (MESI)" in intel_list and "70  BUS_TRAN_ANY  (A)  (needs unit mask)" in intel_list
    assert "3b  THERMAL_TRIP  (needs unit mask)" in intel_list
    assert "76  CPU clocks not halted" in pctr(amd, "-l").stdout.splitlines()


def test_errors_are_openbsds(intel, nobody_python):
    cases = {
        ("-s", "2", "-f", "c0"): "pctr: only 2 counters are supported\n",
        ("-s", "9"): "pctr: counter number is too large: 9\n",
        ("-s", "x"): "pctr: counter number is invalid: x\n",
        ("-t", "300"): "pctr: threshold is too large: 300\n",
        ("-f", "100"): "pctr: invalid function number\n",
        ("-f", "zz"): "pctr: invalid function number\n",
        ("-m", "1ff"): "pctr: invalid unit mask number\n",
        ("-s", "0", "-f", "1"): "pctr: function 01 is not supported\n",
        ("-s", "0", "-f", "3c"): "pctr: function 3c needs unit mask specification\n",
        ("-A", "-M"): "usage: pctr [-AEeIiklMSu] [-f funct] [-m umask] [-s ctr] [-t thold]\n",
        ("extra",): "usage: pctr [-AEeIiklMSu] [-f funct] [-m umask] [-s ctr] [-t thold]\n",
        ("-x",): "pctr: unknown option -- x\nusage: pctr [-AEeIiklMSu] [-f funct] [-m umask] [-s ctr] [-t thold]\n",
    }
    for args, message in cases.items():
        result = pctr(intel, *args)
        assert (result.returncode, result.stderr) == (1, message), args
    denied = pctr(intel, "-s", "0", "-f", "c0", nobody_python=nobody_python)
    assert (denied.returncode, denied.stderr) == (1, "pctr: pctr_set_cntr: Permission denied\n")
    reading = pctr(intel, nobody_python=nobody_python)
    assert reading.returncode == 0 and reading.stdout.count(" ctr") == 2


def test_busy_hardware_is_reported_as_the_set_failing(intel):
    intel.control("reserve libcpc-cpu-bind")
    try:
        result = pctr(intel, "-s", "0", "-f", "c0")
    finally:
        intel.control("release libcpc-cpu-bind")
    assert (result.returncode, result.stderr) == (1, "pctr: pctr_set_cntr: Device or resource busy\n")


def test_architectures_pctr_never_ran_on_are_refused(manual_mount):
    result = pctr(manual_mount)
    assert (result.returncode, result.stderr) == (1, "pctr: architecture mips is not supported\n")
