"""ecadmin enables the global counters, ecstats reads them: exact counts.

Under the manual clock ``advance-cpu CPU USER SYSTEM`` makes an emulated CPU
busy.  ecadmin counts every event in user and kernel mode (U|K): user time
counts whole, system time only for its kernel share - hwperfd splits it by
exl_share 1/10 into exception level (not counted without HWPERF_CNTEN_E)
and kernel (9/10).  Other events follow from cycles by the "balanced"
profile's rates; the CPUs' counts are summed (HWPERF_GET_SYSCNTRS).
"""

import subprocess
from pathlib import Path

import pytest

from hwperfd.client import Control, ProcessCounters, spec
from structs import HWPERF_CNTEN_K, HWPERF_CNTEN_U
from tests.conftest import finish
from tests.ec.conftest import CYCLES_PER_MS, absolute, values

UK = HWPERF_CNTEN_U | HWPERF_CNTEN_K


def enabled_specs(mount) -> dict[int, int]:
    with Control(mount=mount.path) as control:
        _, specs = control.system_control()
    return {slot: word for slot, word in enumerate(specs) if word}


def listed(stdout: str) -> list[int]:
    """Event numbers from ``ecadmin -l``."""
    return [int(line.split()[0]) for line in stdout.splitlines()[1:]]


def test_ecstats_shows_user_and_kernel_counts_summed_over_the_cpus(ec, manual_mount):
    got = ec("ecadmin", "-D", "-e", "0,25")
    assert got.returncode == 0, got.stderr
    assert "HWPERF_ENSYSCNTRS slot 0=0x000a, slot 25=0x012a" in got.stderr
    # Cycles in slot 0 and L1 data cache misses (event 9 of counter 1) in slot 25, in U|K.
    assert enabled_specs(manual_mount) == {0: spec(0, UK), 25: spec(9, UK)}
    manual_mount.control("advance-cpu 0 3ms")
    manual_mount.control("advance-cpu 1 2ms 10ms")
    cpu0 = 3 * CYCLES_PER_MS
    cpu1 = (2 + 9) * CYCLES_PER_MS  # user 2 ms, kernel 9/10 of 10 ms
    report = ec("ecstats", "-a", "-s", "1", "0.1")
    assert report.returncode == 0, report.stderr
    # Cycles: (3 + 2 + 9) ms x 200 MHz; L1 D misses: 1 per 100 cycles on each CPU.
    assert (cpu0 + cpu1, cpu0 // 100 + cpu1 // 100) == (2_800_000, 28_000)
    assert absolute(report.stdout) == {0: 2_800_000, 25: 28_000}
    assert "*" not in report.stdout.split("\n", 1)[1]  # nothing multiplexed


def test_ecstats_rates_are_per_second_of_wall_time_over_each_interval(ec, manual_mount, children):
    assert ec("ecadmin", "-e", "cycles").returncode == 0
    proc = children(
        ["ecstats", "-s", "2", "0.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=manual_mount.env()
    )  # the console script, installed by pip install -e
    title = proc.stdout.readline()  # printed once the first (baseline) sample is taken
    assert "rates per second" in title, title + proc.stderr.read()
    manual_mount.control("advance-cpu 0 5ms")  # within the first interval
    out, err = finish(proc, timeout=30)
    assert proc.returncode == 0, err
    first, second = out.strip().split("\n\n")
    seconds = float(first.split("interval ")[1].split()[0])
    assert 0.5 <= seconds < 1.5
    rate = float(values(first)[0][0])
    assert rate == pytest.approx(5 * CYCLES_PER_MS / seconds, rel=1e-5)
    assert values(second) == {0: ("0.00", False)}  # nothing ran in the second interval


def test_list_shows_what_enable_enabled_by_name_or_number(ec, manual_mount):
    assert ec("ecadmin", "-l").stdout == "No global event counters are enabled.\n"
    got = ec("ecadmin", "-e", "CYCLES,primary_data-cache misses", "-e", "23", "-l")
    assert got.returncode == 0, got.stderr
    assert listed(got.stdout) == [0, 23, 25]
    assert all(line.endswith("mode uk") for line in got.stdout.splitlines()[1:])
    assert "TLB misses" in got.stdout
    again = ec("ecadmin", "-l")
    assert again.stdout == got.stdout
    assert enabled_specs(manual_mount) == {0: spec(0, UK), 23: spec(7, UK), 25: spec(9, UK)}


def test_a_second_enable_adds_events_and_keeps_the_first_ones_count(ec, manual_mount):
    assert ec("ecadmin", "-e", "0").returncode == 0
    manual_mount.control("advance-cpu 0 5ms")
    got = ec("ecadmin", "-D", "-e", "25")
    assert got.returncode == 0, got.stderr
    assert "HWPERF_SET_SYSEVCTRL slot 0=0x000a, slot 25=0x012a" in got.stderr
    assert "ENSYSCNTRS" not in got.stderr
    manual_mount.control("advance-cpu 1 5ms")
    report = ec("ecstats", "-a", "-s", "1", "0.05")
    # Cycles kept the first 5 ms; event 25 counts only the second.
    assert absolute(report.stdout) == {0: 10 * CYCLES_PER_MS, 25: 5 * CYCLES_PER_MS // 100}
    assert listed(ec("ecadmin", "-l").stdout) == [0, 25]
    nothing = ec("ecadmin", "-D", "-e", "0,25")  # already enabled: nothing to change
    assert "nothing to change" in nothing.stderr and "SET_SYSEVCTRL" not in nothing.stderr


def test_disable_leaves_the_rest_counting_and_the_last_one_releases(ec, manual_mount):
    assert ec("ecadmin", "-e", "0,25").returncode == 0
    manual_mount.control("advance-cpu 0 5ms")
    assert ec("ecadmin", "-d", "cycles").returncode == 0
    assert listed(ec("ecadmin", "-l").stdout) == [25]
    manual_mount.control("advance-cpu 0 5ms")
    report = ec("ecstats", "-a", "-f", "-s", "1", "0.05")
    shown = values(report.stdout)
    assert shown[25] == (str(10 * CYCLES_PER_MS // 100), False)
    assert shown[0] == ("disabled", False)
    assert sorted(shown) == list(range(32))  # -f: every event, enabled or not
    assert ec("ecadmin", "-D", "-d", "25").stderr.count("HWPERF_RELSYSCNTRS") == 1
    assert "system mode free" in (manual_mount.path / "control").read_text()
    again = ec("ecadmin", "-d", "25")
    assert again.returncode == 0 and again.stderr == "ecadmin: event 25 was not enabled\n"


def test_release_frees_system_mode_and_says_when_there_was_nothing(ec, manual_mount):
    assert ec("ecadmin", "-e", "0,17").returncode == 0
    assert "system mode held" in (manual_mount.path / "control").read_text()
    released = ec("ecadmin", "-r")
    assert released.returncode == 0 and released.stderr == ""
    assert "system mode free" in (manual_mount.path / "control").read_text()
    again = ec("ecadmin", "-r")
    assert again.returncode == 0
    assert again.stderr == "ecadmin: the global event counters were not enabled: nothing to release\n"
    stats = ec("ecstats", "-s", "1", "0.05")
    assert stats.returncode == 1
    assert stats.stderr == "ecstats: no global event counters are enabled (enable some with ecadmin -e)\n"


def test_multiplexed_events_are_scaled_and_marked(ec, manual_mount):
    # Events 0 and 1 share hardware counter 0; 25 has counter 1 to itself.
    assert ec("ecadmin", "-e", "0,1,25").returncode == 0
    manual_mount.control("advance-cpu 0 20ms")  # two 10 ms ticks: one each on counter 0
    with Control(mount=manual_mount.path) as control:
        raw = control.read_system()[1]
    assert (raw[0], raw[1], raw[25]) == (2_000_000, 1_800_000, 40_000)
    report = ec("ecstats", "-a", "-s", "1", "0.05")
    assert values(report.stdout) == {
        0: ("4000000", True),  # 2 x the 10 ms it was loaded: all 20 ms of cycles
        1: ("3600000", True),  # 2 x 0.9 per cycle of its 10 ms
        25: ("40000", False),
    }


def test_all_events_multiplex_sixteen_per_counter(ec, manual_mount):
    got = ec("ecadmin", "-a", "-l")
    assert got.returncode == 0, got.stderr
    assert listed(got.stdout) == list(range(32))
    manual_mount.control("advance-cpu 1 160ms")  # 16 ticks: each slot is loaded for one
    shown = values(ec("ecstats", "-a", "-s", "1", "0.05").stdout)
    assert len(shown) == 32 and all(starred for _, starred in shown.values())
    assert shown[0] == shown[16] == ("32000000", True)  # 16 x 10 ms of cycles, on either counter
    assert shown[25] == (str(16 * 2_000_000 // 100), True)


def test_star_is_all_events_and_disable_applies_after_enable(ec):
    got = ec("ecadmin", "-e", "*", "-d", "5,issued_loads", "-l")
    assert got.returncode == 0, got.stderr
    assert listed(got.stdout) == [n for n in range(32) if n not in (2, 5)]


def test_enable_is_refused_while_a_process_counts_in_user_mode(ec, manual_mount, counting_child):
    comm = Path(f"/proc/{counting_child.pid}/comm").read_text().strip()
    got = ec("ecadmin", "-e", "0")
    assert got.returncode == 1
    assert got.stderr == (
        "ecadmin: cannot enable global event counters: process-based counters are in use "
        f"by pid {counting_child.pid} ({comm}) (see ecfind)\n"
    )
    assert "system mode free" in (manual_mount.path / "control").read_text()
    with ProcessCounters(counting_child.pid, mount=manual_mount.path) as theirs:
        assert theirs.control()[0] == 1  # still enabled, not displaced: generation 1
    counting_child.stdin.close()  # it releases and exits
    counting_child.wait(timeout=10)
    assert ec("ecadmin", "-e", "0").returncode == 0


def test_M_and_T_are_accepted_and_change_nothing(ec):
    got = ec("ecadmin", "-MT", "-D", "-l")
    assert got.returncode == 0
    assert got.stdout == "No global event counters are enabled.\n"
    assert "-M: no effect" in got.stderr and "-T: no effect" in got.stderr
