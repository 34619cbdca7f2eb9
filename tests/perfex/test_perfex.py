"""perfex(1) run for real against the manual-clock hwperfd.

Every number checked here is predicted: 1 ms of a process's user time is
200 000 cycles on the test mount, and the "balanced" profile gives each
other event at an exact rate per cycle (graduated instructions 0.8,
primary data cache misses 0.01, secondary 0.001, ...).
"""

import csv
import io
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hwperfd.perfex import costs
from tests.conftest import NOBODY, ROOT
from tests.perfex.conftest import CYCLES_PER_MS, blocks, counts_of, drive, run_perfex, run_waiting
from tests.waiting import process_state

MS = CYCLES_PER_MS


# -- counting -------------------------------------------------------------------------


def test_counts_cycles_of_the_command_by_default(perfex, programs):
    code, report, _ = drive(perfex, [], [programs.waiter])
    assert code == 0, report
    assert report.startswith(f"Summary for execution of {programs.waiter}\n")
    assert counts_of(report) == {0: 10 * MS}


def test_one_event_and_cycles_on_the_free_counter(perfex, programs):
    code, report, _ = drive(perfex, ["-e", "25"], [programs.waiter], user="7ms")
    assert counts_of(report) == {0: 7 * MS, 25: 7 * MS // 100}
    assert " 0 Cycles......" in report and "25 Primary data cache misses....." in report


def test_events_by_name_as_in_the_page(perfex, programs):
    _, report, _ = drive(perfex, ["-e", "Graduated instructions"], [programs.waiter])
    assert counts_of(report) == {15: 10 * MS * 8 // 10, 16: 10 * MS}
    _, report, _ = drive(perfex, ["-e", "secondary-data-cache-misses", "-e", "10"], [programs.waiter])
    assert counts_of(report) == {10: 10 * MS * 2 // 10_000, 26: 10 * MS // 1000}


def test_conflicting_counters_is_an_error_and_the_command_never_runs(manual_mount, programs):
    result = run_perfex(manual_mount, "-e", "9", "-e", "10", programs.waiter)
    assert result.returncode == 125
    assert "conflicting counters" in result.stderr
    assert "events 9 (Primary instruction cache misses) and 10" in result.stderr
    assert "counting" not in result.stderr


def test_cycles_moves_to_the_other_counter_instead_of_conflicting(perfex, programs):
    _, report, _ = drive(perfex, ["-e", "0", "-e", "9"], [programs.waiter])
    assert counts_of(report) == {9: 10 * MS * 2 // 1000, 16: 10 * MS}


def test_t5_event_variables_choose_events_unless_e_is_given(perfex, programs, manual_mount):
    env = manual_mount.env(T5_EVENT0="9", T5_EVENT1="25")
    _, report, _ = drive(perfex, [], [programs.waiter], env=env)
    assert counts_of(report) == {9: 4000, 25: 20000}
    _, report, _ = drive(perfex, ["-e", "21"], [programs.waiter], env=env)
    assert counts_of(report) == {0: 10 * MS, 21: 10 * MS // 20}


def test_exception_level_counts_only_with_x(perfex, programs):
    # 10 ms of system time: exl_share 1/10 of it runs at exception level.
    _, report, _ = drive(perfex, [], [programs.waiter], user="10ms", system="10ms")
    assert counts_of(report) == {0: 10 * MS}
    _, report, _ = drive(perfex, ["-x"], [programs.waiter], user="10ms", system="10ms")
    assert counts_of(report) == {0: 11 * MS}


# -- exit status, output ----------------------------------------------------------------


def test_exit_status_is_the_commands(perfex, programs):
    code, report, _ = drive(perfex, ["-e", "25"], [programs.waiter, "3"])
    assert code == 3
    assert counts_of(report)[25] == 20000  # and the counts are still reported


def test_a_command_killed_by_a_signal_gives_128_plus_the_signal(perfex, programs):
    code, report, _ = drive(perfex, [], [programs.waiter, "-k", str(int(signal.SIGTERM))])
    assert code == 128 + signal.SIGTERM
    assert "killed by signal 15" in report
    assert counts_of(report) == {0: 10 * MS}


def test_a_command_that_cannot_run(manual_mount, shared_tmp):
    missing = run_perfex(manual_mount, "/no/such/program")
    assert missing.returncode == 127
    assert "cannot run /no/such/program: No such file or directory" in missing.stderr
    plain = shared_tmp / "not-executable"
    plain.write_text("data\n")
    plain.chmod(0o644)
    denied = run_perfex(manual_mount, plain)
    assert denied.returncode == 126
    assert "Permission denied" in denied.stderr


def test_o_writes_the_report_to_a_file(perfex, programs, tmp_path):
    out = tmp_path / "report"
    code, stderr, _ = drive(perfex, ["-o", out, "-e", "25"], [programs.waiter])
    assert code == 0
    assert stderr == ""  # only the command's own stderr, read by the driver
    assert counts_of(out.read_text()) == {0: 10 * MS, 25: 20000}


def test_not_mounted_names_the_mount_point_and_how_to_start_it(programs, tmp_path):
    import subprocess
    import sys

    missing = tmp_path / "nothing-here"
    result = subprocess.run(
        [sys.executable, "-m", "hwperfd.perfex", str(programs.waiter)],
        capture_output=True, text=True, env={**os.environ, "HWPERFD_MOUNT": str(missing)}, timeout=30,
    )  # fmt: skip
    assert result.returncode == 125
    assert f"hwperfd is not mounted at {missing}" in result.stderr
    assert f"hwperfd {missing}" in result.stderr and "HWPERFD_MOUNT" in result.stderr
    assert "counting" not in result.stderr


# -- -a: multiplexing ---------------------------------------------------------------------


def test_a_projects_every_event_exactly_when_each_had_its_share(perfex, programs):
    # 160 ms = 16 ticks: each of the 16 slots of a counter was loaded for one.
    code, report, _ = drive(perfex, ["-a"], [programs.waiter], user="160ms")
    assert code == 0
    counts = counts_of(report)
    cycles = 160 * MS
    assert len(counts) == 32
    assert counts[0] == counts[16] == cycles
    assert counts[15] == counts[17] == cycles * 8 // 10
    assert counts[18] == cycles * 22 // 100 and counts[19] == cycles * 9 // 100
    assert counts[25] == cycles // 100 and counts[26] == cycles // 1000
    assert counts[8] == 0  # no ECC errors in this profile
    assert report.count("[  6.25%]") == 32
    assert "Counts projected from multiplexed counting" in report


def test_a_scales_by_the_time_each_slot_was_counted_and_marks_the_rest(perfex, programs):
    # 40 ms = 4 ticks: slots 0-3 of each counter counted 10 ms each, 12 never.
    _, report, _ = drive(perfex, ["-a", "--json"], [programs.waiter], user="40ms")
    events = {e["event"]: e for e in json.loads(report[report.index("{"):])["events"]}
    assert events[0]["raw_count"] == 10 * MS and events[0]["count"] == 40 * MS
    assert events[0]["fraction_counted"] == 0.25
    assert events[18]["count"] == 40 * MS * 22 // 100
    assert events[25]["count"] == 0 and events[25]["fraction_counted"] is None
    assert sum(1 for e in events.values() if e["fraction_counted"] is None) == 24


# -- -y: cost estimates ------------------------------------------------------------------


def _section(report, start, end=None):
    text = report[report.index(start):]
    return text[: text.index(end)] if end else text


def _statistics(report):
    out = {}
    for line in _section(report, "Statistics\n").splitlines()[2:]:
        name, value = line.rsplit(None, 1)
        out[name.rstrip(".")] = float(value)
    return out


def test_y_estimates_time_per_event_sorted_by_cost_with_statistics(perfex, programs):
    code, report, _ = drive(perfex, ["-a", "-y"], [programs.waiter], user="160ms")
    assert code == 0
    assert "Based on 200 MHz MIPS R10000 CPU" in report
    lines = [l for l in _section(report, "=====\n", "\nStatistics").splitlines()[1:] if l.strip()]
    by_event = {int(l[:2]): l[64:].split()[:4] for l in lines}
    # count, typical, minimum, maximum seconds (built-in table, 200 MHz)
    cycles = by_event[0]
    assert cycles == ["32000000", "0.160000", "0.160000", "0.160000"]
    assert by_event[25] == ["320000", "0.014400", "0.004640", "0.016000"]  # 9 / 2.9 / 10 clks
    assert by_event[26] == ["32000", "0.012160", "0.008000", "0.013440"]  # 380 / 250 / 420 ns
    assert by_event[21] == ["1600000", "0.008000", "0.004000", "0.416000"]  # 1 / 0.5 / 52 clks
    # cycles first, then the most costly (typical) first
    order = [int(l[:2]) for l in lines]
    assert order[:2] == [0, 16] and order[2:6] == [18, 19, 25, 26]
    typical = [float(by_event[e][1]) for e in order[2:]]
    assert typical == sorted(typical, reverse=True)

    c = 32_000_000
    loads, stores, fp = c * 22 // 100, c * 9 // 100, c * 5 // 100
    l1, l2, tlb, l1wb, l2wb = c // 100, c // 1000, c * 5 // 10_000, c * 8 // 1000, c * 2 // 1000
    seconds = c / 200e6
    expected = {
        "Graduated instructions/cycle": 0.8,
        "Graduated floating point instructions/cycle": 0.05,
        "Graduated loads & stores/cycle": 0.31,
        "Graduated loads & stores/floating point instruction": (loads + stores) / fp,  # 6.2
        "L1 Cache Line Reuse": (loads + stores - l1) / l1,  # 30
        "L2 Cache Line Reuse": (l1 - l2) / l2,  # 9
        "L1 Data Cache Hit Rate": 1 - l1 / (loads + stores),
        "L2 Data Cache Hit Rate": 1 - l2 / l1,  # 0.9
        # typical: loads, stores 1 clk; L1 miss 9 clks; L2 miss 380 ns = 76 clks; TLB 60 clks
        "Time accessing memory/Total time": (loads + stores + 9 * l1 + 76 * l2 + 60 * tlb) / c,  # 0.506
        "L1--L2 bandwidth used (MB/s, average per process)": (32 * l1 + 16 * l1wb) / seconds / 1e6,  # 89.6
        "Memory bandwidth used (MB/s, average per process)": (128 * l2 + 16 * l2wb) / seconds / 1e6,  # 32.0
        "MFLOPS (average per process)": fp / seconds / 1e6,  # 10.0
    }
    got = _statistics(report)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, abs=5e-7), name
    assert got["L1 Cache Line Reuse"] == 30.0 and got["Time accessing memory/Total time"] == 0.506
    assert got["L1--L2 bandwidth used (MB/s, average per process)"] == 89.6
    assert got["Memory bandwidth used (MB/s, average per process)"] == 32.0


def test_y_prints_only_statistics_whose_events_were_counted(perfex, programs):
    _, report, _ = drive(perfex, ["-y", "-e", "21"], [programs.waiter])
    assert _statistics(report) == {
        "Graduated floating point instructions/cycle": 0.05,
        "MFLOPS (average per process)": 10.0,
    }
    _, report, _ = drive(perfex, ["-y", "-e", "25"], [programs.waiter])
    assert "Statistics" not in report


def test_l_gives_data_reuse_for_n_byte_elements(perfex, programs):
    _, report, _ = drive(perfex, ["-a", "-y", "-l", "8"], [programs.waiter], user="160ms")
    got = _statistics(report)
    c = 32_000_000
    accesses, l1, l2 = c * 31 // 100, c // 100, c // 1000
    assert got["L1 Data Reuse"] == pytest.approx(accesses * 8 / (l1 * 32) - 1)  # 6.75
    assert got["L2 Data Reuse"] == pytest.approx(l1 * 32 / (l2 * 128) - 1)  # 1.5
    assert "L1 Cache Line Reuse" not in got


def test_cost_files_system_then_c(perfex, programs, manual_mount, tmp_path):
    system = tmp_path / "perfex.costs"
    system.write_text("25 Primary data cache misses 20 clks 20 clks 20 clks\n")
    mine = tmp_path / "mine.costs"
    mine.write_text("# from -t\n25 40 clks 10 clks 80 clks\n")
    env = manual_mount.env(PERFEX_COSTS=str(system))
    _, report, _ = drive(perfex, ["-y", "-e", "25"], [programs.waiter], env=env)
    assert counts_of(report)[25] == 20000
    assert "0.002000     0.002000     0.002000" in report  # 20000 x 20 clks at 200 MHz
    _, report, _ = drive(perfex, ["-y", "-c", mine, "-e", "25"], [programs.waiter], env=env)
    assert "0.004000     0.001000     0.008000" in report  # -c wins: 40 / 10 / 80 clks


def test_a_bad_cost_file_is_refused_with_its_line(manual_mount, programs, tmp_path):
    bad = tmp_path / "bad.costs"
    bad.write_text("25 40 clks 10 clks 80 clks\n26 fast clks 1 clks 1 clks\n")
    result = run_perfex(manual_mount, "-y", "-c", bad, programs.waiter)
    assert result.returncode == 125
    assert f"{bad}:2: cost 'fast' is not a number" in result.stderr
    assert "counting" not in result.stderr


def test_t_prints_the_table_that_c_reads(manual_mount, tmp_path):
    result = run_perfex(manual_mount, "-t")
    assert result.returncode == 0
    assert costs.parse(result.stdout, "r10000") == dict(enumerate(costs.BUILTIN["r10000"]))
    mine = tmp_path / "mine.costs"
    lines = [l.replace(" 380.00 nsec", " 999.00 nsec", 1) if l.startswith("26 ") else l
             for l in result.stdout.splitlines()]
    mine.write_text("\n".join(lines) + "\n")
    again = run_perfex(manual_mount, "-t", "-c", mine)
    assert "26 Secondary data cache misses" in again.stdout
    assert costs.parse(again.stdout, "r10000")[26].typical == costs.Cost(999, costs.NSEC)
    r12k = run_perfex(manual_mount, "-t", "--cpu-type", "r12000")
    assert "16 Executed prefetch instructions" in r12k.stdout


# -- -mp and descendants -------------------------------------------------------------------


def _children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


# hwperfd folds a child into its parent when it sees the parent reap it.  A
# shell that exits the moment it has reaped its last child can beat that
# (see test_bare_pipeline_last_child_race), so these scripts end with a short
# sleep: the shell outlives its children's reaping, as long-running parents do.
SETTLE = "sleep 0.3"


def test_a_shell_pipeline_is_counted_with_all_its_descendants(perfex, programs):
    w = programs.waiter
    run = perfex("-e", "25", "sh", "-c", f"{w} | {w} 4; {w}; {SETTLE}")
    first, second = run.announced(2)
    (shell,) = _children(run.proc.pid)
    run.advance(first, "10ms")
    run.advance(second, "20ms")
    run.advance(shell, "1ms")
    run.release(first, second)
    (third,) = run.announced()
    run.advance(third, "4ms")
    run.release(third)
    code, _, report = run.finish()
    assert code == 0
    assert counts_of(report) == {0: 35 * MS, 25: 35 * MS // 100}


def test_bare_pipeline_children_reaped_by_an_exiting_shell_still_count(perfex, programs):
    w = programs.waiter
    run = perfex("sh", "-c", f"{w} | {w}")
    pids = run.announced(2)
    for pid in pids:
        run.advance(pid, "10ms")
    run.release(*pids)
    code, _, report = run.finish()
    assert counts_of(report) == {0: 20 * MS}


def test_mp_labels_each_process_by_pid_then_totals(perfex, programs):
    w = programs.waiter
    run = perfex("-mp", "-e", "25", "sh", "-c", f"{w} | {w} 4; status=$?; {SETTLE}; exit $status")
    first, second = run.announced(2)
    (shell,) = _children(run.proc.pid)
    run.advance(first, "10ms")
    run.advance(second, "20ms")
    run.advance(shell, "1ms")
    run.release(first, second)
    code, _, report = run.finish()
    assert code == 4  # the pipeline's status
    parts = blocks(report)
    assert counts_of(parts[f"pid {first}"]) == {0: 10 * MS, 25: 10 * MS // 100}
    assert counts_of(parts[f"pid {second}"]) == {0: 20 * MS, 25: 20 * MS // 100}
    assert counts_of(parts[f"pid {shell}"]) == {0: 1 * MS, 25: 1 * MS // 100}
    assert counts_of(parts["Totals"]) == {0: 31 * MS, 25: 31 * MS // 100}
    assert f"Counts for pid {shell} (sh)" in report
    assert list(parts)[-2:] == [f"pid {shell}", "Totals"]  # descendants first, the command last


def test_mp_with_a_projects_each_process(perfex, programs):
    run = perfex("-mp", "-a", "--json", "sh", "-c", f"{programs.waiter}; {SETTLE}")
    (child,) = run.announced(1)
    (shell,) = _children(run.proc.pid)
    run.advance(child, "160ms")  # 16 ticks: one for each slot of a counter
    run.release(child)
    code, _, report = run.finish()
    data = json.loads(report[report.index("{"):])
    processes = {p["pid"]: p["counts"] for p in data["processes"]}
    assert data["processes"][-1]["pid"] == shell
    assert processes[child]["0"] == 160 * MS  # each slot counted 1/16 of its time, x 16
    assert processes[child]["25"] == 160 * MS // 100
    assert processes[shell]["0"] == 0
    assert data["events"][0]["count"] == 160 * MS


# -- -s -------------------------------------------------------------------------------------


def test_s_counts_between_sigusr1_and_sigusr2_and_aggregates_repeats(perfex, programs):
    run = perfex("-s", "-e", "25", programs.waiter)
    (pid,) = run.announced()
    run.advance(pid, "5ms")  # before SIGUSR1: not counted
    os.kill(run.proc.pid, signal.SIGUSR1)
    run.wait_for_line("counting started")
    run.advance(pid, "10ms")
    os.kill(run.proc.pid, signal.SIGUSR2)
    run.wait_for_line("counting stopped")
    run.advance(pid, "7ms")  # stopped: not counted
    os.kill(run.proc.pid, signal.SIGUSR1)
    run.wait_for_line("counting started")
    run.advance(pid, "3ms")  # counted until the command exits
    run.release(pid)
    code, _, report = run.finish()
    assert code == 0
    assert counts_of(report) == {0: 13 * MS, 25: 13 * MS // 100}


def test_s_without_sigusr1_counts_nothing_and_says_so(perfex, programs):
    code, report, _ = drive(perfex, ["-s"], [programs.waiter])
    assert code == 0
    assert "never got a start (SIGUSR1) signal" in report
    assert counts_of(report) == {0: 0}


def test_s_and_mp_together_are_refused(manual_mount, programs):
    result = run_perfex(manual_mount, "-s", "-mp", programs.waiter)
    assert result.returncode == 125
    assert "-s and -mp cannot be combined" in result.stderr


# -- machine-readable output, listing, repeats ------------------------------------------------


def test_json_report(perfex, programs):
    code, report, pid = drive(perfex, ["--json", "-x", "-e", "25"], [programs.waiter, "2"])
    data = json.loads(report)
    assert code == 2 and data["exit_status"] == 2
    assert data["command"] == [str(programs.waiter), "2"]
    assert data["cpu"] == {"type": "r10000", "name": "MIPS R10000 CPU", "mhz": 200.0, "count": 2}
    assert data["modes"] == ["user", "exception"] and data["multiplexed"] is False
    assert [(e["event"], e["name"], e["counter"], e["count"], e["fraction_counted"]) for e in data["events"]] == [
        (0, "Cycles", 0, 10 * MS, 1.0),
        (25, "Primary data cache misses", 1, 20000, 1.0),
    ]


def test_csv_report_with_costs_and_statistics(perfex, programs):
    _, report, _ = drive(perfex, ["--csv", "-a", "-y"], [programs.waiter], user="160ms")
    rows = list(csv.DictReader(io.StringIO(report)))
    totals = {int(r["event"]): r for r in rows if r["scope"] == "total"}
    assert len(totals) == 32
    assert int(totals[26]["count"]) == 32000 and float(totals[26]["fraction_counted"]) == 0.0625
    assert float(totals[26]["typical_sec"]) == pytest.approx(32000 * 380e-9)
    statistics = {r["name"]: float(r["count"]) for r in rows if r["scope"] == "statistic"}
    assert statistics["Graduated instructions/cycle"] == pytest.approx(0.8)
    assert statistics["MFLOPS (average per process)"] == pytest.approx(10.0)


def test_list_events_per_cpu_type_with_descriptions(manual_mount):
    r10k = run_perfex(manual_mount, "--list")
    assert r10k.returncode == 0
    assert "Events of the MIPS R10000 CPU (hwperfd at" in r10k.stdout and "2 CPUs at 200 MHz" in r10k.stdout
    assert " 26  1        Secondary data cache misses" in r10k.stdout
    assert "Incremented when the next data item is not in the secondary cache." in r10k.stdout
    r12k = json.loads(run_perfex(manual_mount, "--list", "--json", "--cpu-type", "r12000").stdout)
    assert len(r12k["events"]) == 32
    assert r12k["events"][16]["name"] == "Executed prefetch instructions"
    assert r12k["events"][16]["counters"] == [0, 1]


def test_r_repeats_and_reports_mean_and_spread(perfex, programs):
    run = perfex("-r", "3", "--json", "-e", "25", programs.waiter)
    for ms in (10, 20, 30):
        (pid,) = run.announced()
        run.advance(pid, f"{ms}ms")
        run.release(pid)
    code, _, report = run.finish()
    assert code == 0
    data = json.loads(report)
    cycles = data["events"][0]
    assert data["runs"] == 3
    assert cycles["run_counts"] == [10 * MS, 20 * MS, 30 * MS]
    assert cycles["count"] == 20 * MS and cycles["stddev"] == 10 * MS


def test_r_text_shows_relative_spread(perfex, programs):
    run = perfex("-r", "2", programs.waiter)
    for ms in (10, 30):
        (pid,) = run.announced()
        run.advance(pid, f"{ms}ms")
        run.release(pid)
    code, _, report = run.finish()
    assert "Mean of 2 runs" in report
    # mean 20 ms, sample standard deviation 14.142 ms: 70.71 %
    assert " 0 Cycles" in report and f"{20 * MS:>15}  (+- 70.71%)" in report


# -- privileges ------------------------------------------------------------------------------


def test_perfex_runs_unprivileged(manual_mount, programs, nobody_python, shared_tmp):
    interpreter, env = nobody_python
    code, _, report = run_waiting(
        [interpreter, "-m", "hwperfd.perfex", "-e", "25", programs.waiter], manual_mount, "10ms", prefix=NOBODY,
        env={**env, "HWPERFD_MOUNT": str(manual_mount.path)}, cwd=shared_tmp,
    )  # fmt: skip
    assert code == 0, report
    assert counts_of(report) == {0: 10 * MS, 25: 20000}


def test_programs_are_reachable_for_nobody(programs):
    assert os.stat(programs.waiter).st_mode & stat.S_IXOTH


def _usr1_blocked(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next(line for line in f if line.startswith("SigBlk:")).split()[1]
    except (OSError, StopIteration):
        return False
    return bool(int(mask, 16) & (1 << (signal.SIGUSR1 - 1)))


def _has_children(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return bool(f.read().split())
    except OSError:
        return True


def _stopped_while_starting(proc: subprocess.Popen, ran: Path) -> bool:
    """Stop perfex between its holding SIGUSR1 and its running the command:
    True, stopped there; False, that moment was missed (it is let go).  The
    mask alone does not say "starting": while perfex waits for the command
    in sigtimedwait(2), the kernel shows the waited-for signals unblocked,
    and once the command is done they are blocked again, with no child
    either - so the command leaves ``ran`` behind, and a perfex stopped
    after it is let go (a loaded machine can keep this poll from running
    until then)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and proc.poll() is None:
        if _usr1_blocked(proc.pid) and not _has_children(proc.pid):
            os.kill(proc.pid, signal.SIGSTOP)
            while process_state(proc.pid) not in ("T", None):
                time.sleep(0.001)
            if _usr1_blocked(proc.pid) and not _has_children(proc.pid) and not ran.exists():
                return True
            os.kill(proc.pid, signal.SIGCONT)
            return False
    return False


@pytest.mark.parametrize("args", [["-s"], []])
def test_a_sigusr1_as_perfex_starts_does_not_kill_it(manual_mount, args, tmp_path):
    """perfex(1) -s: SIGUSR1 starts counting.  One sent while perfex is still
    starting (importing) is held, not fatal: with -s it starts the counting
    once the command runs, without -s it does nothing."""
    for attempt in range(10):  # each try a new perfex, until one is stopped while it starts
        ran = tmp_path / f"ran{attempt}"
        command = ["sh", "-c", f"touch {ran}; sleep 0.3"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "hwperfd.perfex", *args, "-e", "0", *command],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=manual_mount.env(), cwd=ROOT,
        )  # fmt: skip
        if _stopped_while_starting(proc, ran):
            break
        proc.communicate(timeout=30)
    else:
        pytest.fail("perfex was never caught between holding SIGUSR1 and running its command")
    os.kill(proc.pid, signal.SIGUSR1)
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert ("SIGUSR1: counting started" in err) == bool(args), err
    assert "Cycles" in err


_LATE_START = """
import os, signal, sys
from hwperfd.client import ProcessCounters
from hwperfd.perfex import runner
from hwperfd.perfex.plan import choose
waited = {signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2}
signal.pthread_sigmask(signal.SIG_BLOCK, waited)
pid = os.posix_spawnp("true", ["true"], os.environ)
os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
os.kill(os.getpid(), signal.SIGUSR1)  # came before perfex looked
counters = ProcessCounters(pid)
counting = runner._Counting(counters, choose([0], "r10000"), print)
runner._wait_and_read(["true"], pid, counters, counting, set(), waited, print)
print("started" if counting.started else "not started")
"""


def test_s_a_sigusr1_pending_when_the_command_has_exited_still_starts(manual_mount):
    """perfex -s serves the signals in the order they came: a SIGUSR1 sent
    while the command ran, still pending when perfex (slow on a loaded
    machine) first looks and finds the command gone, starts the counting
    all the same."""
    result = subprocess.run(
        [sys.executable, "-c", _LATE_START], capture_output=True, text=True, env=manual_mount.env(), cwd=ROOT,
        timeout=30,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["SIGUSR1: counting started", "started"], result.stdout


def test_s_descendants_keep_counting_and_their_counts_are_kept(perfex, programs):
    """perfex(1) -s: "counting for descendants of the child will not be
    affected": a child forked while counting counts on after SIGUSR2, and
    its counts reach the report when the command reaps it."""
    from tests.waiting import wait_for

    run = perfex("-s", "-e", "25", "sh", "-c", f"sleep 1; {programs.waiter}; {SETTLE}")
    assert wait_for(lambda: _children(run.proc.pid), timeout=10)  # the shell runs
    os.kill(run.proc.pid, signal.SIGUSR1)
    run.wait_for_line("counting started")
    (child,) = run.announced()  # forked by the counting shell: inherits
    os.kill(run.proc.pid, signal.SIGUSR2)
    run.wait_for_line("counting stopped")
    run.advance(child, "10ms")
    run.release(child)
    code, _, report = run.finish()
    assert code == 0
    assert counts_of(report) == {0: 10 * MS, 25: 10 * MS // 100}


def test_a_y_prints_no_statistic_of_events_that_never_got_a_tick(perfex, programs):
    """-a for 20 ms: each counter loads only its first two events (one per
    10 ms tick), so only statistics made of cycles (0, 16) and issued
    instructions (1) / graduated instructions (17) may appear; perfex(1): "A
    statistic is only printed if counts for the events which define it have
    been gathered"."""
    code, report, _ = drive(perfex, ["-a", "-y", "--json"], [programs.waiter], user="20ms")
    assert code == 0
    data = json.loads(report[report.index("{"):])
    counted = {e["event"] for e in data["events"] if e.get("fraction_counted") is not None}
    assert counted == {0, 1, 16, 17}, data["events"]
    names = [s["name"] for s in data["statistics"]]
    assert names == ["Graduated instructions/cycle"], names


def test_y_sorts_most_to_least_costly_without_pinning_cycles(perfex, programs, manual_mount, tmp_path):
    """perfex(1), -y: "sorted from most costly to least costly"; with a cost
    table that makes 20 000 data cache misses cost 4 000 000 clks, they come
    before the run's 2 000 000 cycles."""
    mine = tmp_path / "mine.costs"
    mine.write_text("25 200 clks 200 clks 200 clks\n")
    _, report, _ = drive(perfex, ["-y", "-c", mine, "-e", "0", "-e", "25"], [programs.waiter])
    order = [int(line.split()[0]) for line in report.splitlines() if line[:2].strip().isdigit()]
    assert order == [25, 0]
    assert counts_of(report) == {0: 2_000_000, 25: 20_000}


@pytest.mark.parametrize("rule", [[], ["--times-16"]], ids=["measured", "times-16"])
def test_mp_with_a_blocks_add_up_to_the_totals_under_one_rule(perfex, programs, rule):
    """-a -mp: every process's block and the totals are projected by one rule,
    so the blocks add up to the totals (before, descendants were multiplied by
    16 and the totals scaled by the measured share).  --times-16 is the page's
    rule: every count multiplied by 16."""
    w = programs.waiter
    run = perfex("-mp", "-a", *rule, "--json", "sh", "-c", f"{w}; {w}; {SETTLE}")
    (first,) = run.announced(1)
    (shell,) = _children(run.proc.pid)
    run.advance(first, "35ms")
    run.release(first)
    (second,) = run.announced(1)
    run.advance(second, "27ms")
    run.advance(shell, "3ms")
    run.release(second)
    code, _, report = run.finish()
    assert code == 0
    data = json.loads(report[report.index("{"):])
    pids = [p["pid"] for p in data["processes"]]
    # Folded as hwperfd saw each reaped (either order), the settling sleep, the shell.
    assert set(pids[:2]) == {first, second} and pids[-1] == shell
    for event in data["events"]:
        number, total = str(event["event"]), event["count"]
        assert sum(p["counts"][number] for p in data["processes"]) == total, number
        if rule:
            assert total == event["raw_count"] * 16, number
    if not rule:  # the measured share projects 65 ms of cycles exactly; x 16 over 6.5 ticks cannot
        assert next(e for e in data["events"] if e["event"] == 0)["count"] == 65 * MS


def test_mp_gives_each_thread_its_block_labelled_by_tid_then_the_totals(perfex, programs, manual_mount):
    """perfex(1), -mp: "the counters for each thread ... printed out, followed
    by the counts aggregated across all threads"; a pthread's label is its
    thread id, as an IRIX sproc'd thread's was its pid."""
    run = perfex("-mp", "-e", "25", programs.threads, "3")
    (pid,) = run.announced()
    tids = [int(run.wait_for_line("thread ").split()[1]) for _ in range(3)]
    for tid, ms in zip(tids, (10, 20, 30)):
        manual_mount.control(f"advance-thread {tid} {ms}ms")
    run.advance(pid, "5ms")  # the main thread
    run.release(pid)
    code, _, report = run.finish()
    assert code == 0, report
    parts = blocks(report)
    # Threads in the order they ended (any), the main thread last, then the totals.
    assert sorted(list(parts)[:3]) == sorted(f"pid {tid}" for tid in tids)
    assert list(parts)[3:] == [f"pid {pid}", "Totals"]
    for tid, ms in zip([*tids, pid], (10, 20, 30, 5)):
        assert counts_of(parts[f"pid {tid}"]) == {0: ms * MS, 25: ms * MS // 100}, tid
    assert counts_of(parts["Totals"]) == {0: 65 * MS, 25: 65 * MS // 100}
    assert "Totals over 4 threads" in report
