"""perfctr users' programs, unchanged, against a real mount, as root and as
nobody: self-monitoring, overflow signals with iresume, a perfex-like
launcher handing its descriptor to the parent, global-mode sampling.

Counts are exact on the manual clock: Core 2 at 1000 MHz, the "balanced"
profile (0.8 instructions per cycle).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import NOBODY, finish

MS = 1_000_000


def start(mount, program, *args: str, nobody: bool = False, **env: str) -> subprocess.Popen:
    prefix = NOBODY if nobody else []
    return subprocess.Popen(
        [*prefix, str(program), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**mount.env(), **env},
    )  # fmt: skip


def fields(line: str) -> dict[str, int]:
    return {k: int(v, 0) for k, v in re.findall(r"(\w+)=(0x[0-9a-fA-F]+|\d+)", line)}


def until(proc: subprocess.Popen, prefix: str, seen: list[str] | None = None, timeout: float = 60) -> str:
    """The next line that starts with ``prefix``; the lines read are added to ``seen``.

    Past ``timeout`` seconds the program is killed, which ends its output: a
    program that never prints the line fails the test, with what it printed,
    instead of stalling the run."""
    assert proc.stdout is not None
    seen = [] if seen is None else seen
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith(prefix):
                return line
    finally:
        timer.cancel()
    late = f" within {timeout} s (killed)" if proc.poll() == -signal.SIGKILL else ""
    raise AssertionError(
        f"no {prefix!r} line{late} in {''.join(seen)!r}; stderr {proc.stderr.read() if proc.stderr else ''}"
    )


@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
def test_self_monitoring_counts_exactly(intel, perfctr_programs, nobody):
    proc = start(intel, perfctr_programs["self"], nobody=nobody)
    seen: list[str] = []
    ready = fields(until(proc, "ready", seen))
    intel.control(f"advance {ready['pid']} 2ms 1ms")
    out, err = finish(proc, "\n", timeout=30)
    assert proc.returncode == 0, err
    out = "".join(seen) + out
    assert "cpu_type\t\t18 (Intel Core 2)" in out and "cpu_nrctrs\t\t5" in out
    assert "cpus\t\t\t[0,1], total: 2" in out
    assert "evntsel[1]\t\t0x0043003C" in out
    lines = {line.split()[0]: fields(line) for line in out.splitlines() if "=" in line}
    assert lines["ctrs"] == {"tsc": 3 * MS, "pmc0": 2 * MS * 8 // 10, "pmc1": 3 * MS}
    assert lines["single"] == {**lines["ctrs"], "running": 1}
    assert lines["state"] == {"pmc1": 3 * MS, "evntsel1": 0x0043003C, "nractrs": 2}
    assert lines["stopped"] == {"running": 0, "pmc1": 3 * MS}


def test_self_runs_on_the_amd_model(amd, perfctr_programs):
    proc = start(amd, perfctr_programs["self"])
    seen: list[str] = []
    ready = fields(until(proc, "ready", seen))
    amd.control(f"advance {ready['pid']} 1ms")
    out, err = finish(proc, "\n", timeout=30)
    assert proc.returncode == 0, err
    out = "".join(seen) + out
    assert "(AMD K8)" in out
    ctrs = fields(next(line for line in out.splitlines() if line.startswith("ctrs")))
    assert ctrs == {"tsc": MS, "pmc0": MS * 8 // 10, "pmc1": MS}


@pytest.mark.parametrize(("nobody", "sa_flags"), [(False, ""), (True, ""), (False, "nodefer")],
                         ids=["root", "nobody", "SA_NODEFER"])  # fmt: skip
def test_overflow_signal_carries_si_pmc_ovf_and_iresume_continues(intel, perfctr_programs, nobody, sa_flags):
    """The handler runs as the kernel's delivery would run it: SIGIO blocked
    in it, unless its action has SA_NODEFER (libperfctr's own handler calls
    the program's, or, where a call cannot do what the action asks, queues
    the signal again)."""
    proc = start(intel, perfctr_programs["signal"], str(MS // 2), nobody=nobody, SA_FLAGS=sa_flags)
    seen: list[str] = []
    ready = fields(until(proc, "ready", seen))
    assert proc.stdin is not None
    intel.control(f"advance {ready['pid']} 500us")  # exactly one period of the i-mode counter
    proc.stdin.write("expect 1\n")
    proc.stdin.flush()
    first = fields(until(proc, "overflows", seen))
    assert first["overflows"] == 1 and first["mask"] == 0b10  # counter index 1 is the i-mode one
    assert first["pmc1"] == MS // 2 and first["pmc0"] == MS // 2 * 8 // 10 and first["tsc"] == MS // 2
    intel.control(f"advance {ready['pid']} 500us")  # resumed: overflows again
    proc.stdin.write("expect 2\n")
    proc.stdin.flush()
    second = fields(until(proc, "overflows", seen))
    assert second["overflows"] == 2 and second["pmc1"] == MS
    out, err = finish(proc, "", timeout=30)
    assert proc.returncode == 0, err
    out = "".join(seen) + out
    assert "unexpected" not in out and "not EPERM" not in out


@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
def test_launcher_reads_the_childs_final_counts_through_the_passed_descriptor(intel, perfctr_programs, nobody):
    proc = start(intel, perfctr_programs["launcher"], "sh", "-c", "read x", nobody=nobody)
    child = fields(until(proc, "child"))["pid"]
    intel.control(f"advance {child} 2ms")
    out, err = finish(proc, "\n", timeout=30)
    assert proc.returncode == 0, err
    assert fields(out.splitlines()[-1]) == {
        "exit": 0, "tsc": 2 * MS, "pmc0": 2 * MS * 8 // 10, "pmc1": 2 * MS, "evntsel0": 0x004100C0,
    }  # fmt: skip


def test_global_sampling_counts_every_cpu(intel, perfctr_programs):
    proc = start(intel, perfctr_programs["global"])
    assert until(proc, "started") == "started 2\n"
    assert proc.stdin is not None
    intel.control("advance-cpu 0 1ms 1ms")
    intel.control("advance-cpu 1 3ms")
    proc.stdin.write("\n")
    proc.stdin.flush()
    cpu0, cpu1 = fields(until(proc, "cpu=0")), fields(until(proc, "cpu=1"))
    assert (cpu0["pmc0"], cpu0["tsc"]) == (2 * MS, 2 * MS)
    assert (cpu1["pmc0"], cpu1["tsc"]) == (3 * MS, 3 * MS)
    out, err = finish(proc, "", timeout=30)
    assert proc.returncode == 0, err


def test_global_mode_as_nobody_is_refused_with_eperm(intel, perfctr_programs):
    proc = start(intel, perfctr_programs["global"], nobody=True)
    out, err = finish(proc, "", timeout=30)
    assert proc.returncode == 1
    assert "gperfctr_control: Operation not permitted" in err


@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
def test_each_thread_counts_only_its_own_time(intel, perfctr_programs, nobody):
    proc = start(intel, perfctr_programs["threads"], nobody=nobody)
    worker = fields(until(proc, "worker"))["tid"]
    main = fields(until(proc, "main"))["tid"]
    intel.control(f"advance-thread {worker} 3ms")
    intel.control(f"advance-thread {main} 1ms")
    out, err = finish(proc, "\n", timeout=30)
    assert proc.returncode == 0, err
    lines = {line.split()[0]: fields(line) for line in out.splitlines()}
    assert lines["worker"] == {"tsc": 3 * MS, "pmc0": 3 * MS}
    assert lines["main"] == {"tsc": MS, "pmc0": MS}


@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
def test_rvperfctr_controls_and_reads_a_ptrace_stopped_process(intel, perfctr_programs, nobody):
    proc = start(intel, perfctr_programs["remote"], nobody=nobody)
    child = fields(until(proc, "attached"))["pid"]
    intel.control(f"advance {child} 2ms")
    out, err = finish(proc, "\n", timeout=30)
    assert proc.returncode == 0, err
    assert "not ESRCH" not in out
    assert fields(out.splitlines()[-1]) == {"tsc": 2 * MS, "pmc0": 2 * MS}


def test_cloexec_unlinks_the_state_at_exec(intel, perfctr_programs):
    proc = subprocess.Popen(
        [str(perfctr_programs["launcher"]), "sh", "-c", "read x"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=intel.env(LAUNCHER_CLOEXEC="1"),
    )  # fmt: skip
    child = fields(until(proc, "child"))["pid"]
    deadline = time.monotonic() + 10
    while "vperfctrs 0" not in (intel.path / "perfctr").read_text():  # the exec has been seen
        assert time.monotonic() < deadline, "the exec never unlinked the perfctr"
        time.sleep(0.01)
    intel.control(f"advance {child} 2ms")
    out, err = finish(proc, "\n", timeout=30)
    assert proc.returncode == 0, err
    last = fields(out.splitlines()[-1])
    assert last["pmc0"] == last["pmc1"] == last["tsc"] == 0


def test_launcher_under_the_real_clock_counts_the_childs_cpu_time(intel_real, perfctr_programs):
    loop = "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done"
    proc = start(intel_real, perfctr_programs["launcher"], "sh", "-c", loop)
    out, err = finish(proc, "", timeout=60)
    assert proc.returncode == 0, err
    last = fields(out.splitlines()[-1])
    # the child's run time, in cycles at 1000 MHz: tens of milliseconds at least
    assert last["tsc"] > 10 * MS
    assert last["pmc1"] == last["tsc"]  # cycles in user and kernel mode: the whole run
    assert 0 < last["pmc0"] <= last["tsc"] * 8 // 10 + 1  # instructions in user mode only, 0.8 per cycle


def test_overflow_signals_under_the_real_clock_come_from_the_tick(intel_real, perfctr_programs):
    proc = start(intel_real, perfctr_programs["signal"], str(5 * MS))  # an overflow every 5 ms of user time
    until(proc, "ready")
    assert proc.stdin is not None
    proc.stdin.write("burn 3\n")
    proc.stdin.flush()
    burnt = fields(until(proc, "burnt"))
    assert burnt == {"overflows": 3, "mask": 0b10}
    out, err = finish(proc, "", timeout=60)
    assert proc.returncode == 0, err
    assert "unexpected" not in out


def test_a_period_shorter_than_a_round_trip_signals_while_running_then_stops(intel_real, perfctr_programs):
    """perfctr's examples/signal shape: i-mode counters 25 events from
    overflow around a short loop, then vperfctr_stop.  The overflow comes
    before the stop takes effect (the stop answers EINTR once, libperfctr
    calls again after the handler resumed the counters), and none after it:
    SIGIO's default action would kill the program then."""
    for _ in range(3):
        proc = start(intel_real, perfctr_programs["short_period"])
        out, err = finish(proc, timeout=60)
        assert proc.returncode == 0, (out, err)
        result = fields(out)
        assert result["running"] >= 1 and result["unexpected"] == 0
        # frozen at the overflowing event: the cycles counter's sum is whole periods plus a partial one
        assert result["sum1"] >= 25 * result["ovf1"]


def test_two_i_mode_periods_each_signal_at_their_own_and_their_sums_are_exact(intel_real, perfctr_programs):
    """Real clock: per counter, sum == signals x period + the partial period,
    exactly (the counters stop at the overflowing event; late is allowed,
    lost or extra counts are not).  Cycles at 1 000 MHz: 2 ms and 3 ms."""
    periods = (2 * MS, 3 * MS)
    proc = start(intel_real, perfctr_programs["short_period"], "burn", "200", *map(str, periods))
    out, err = finish(proc, timeout=120)
    assert proc.returncode == 0, (out, err)
    r = fields(out)
    assert r["unexpected"] == 0 and r["ovf0"] >= 2 and r["ovf1"] >= 1
    for i, period in enumerate(periods):
        assert 0 <= r[f"sum{i}"] - r[f"ovf{i}"] * period < period, r


def test_a_thread_that_exits_keeps_its_last_run_in_its_counts_under_the_real_clock(intel_real, perfctr_programs):
    """The daemon looked at the thread only when it set its counters up; its
    whole run after that comes from the kernel's exit accounting for the
    thread (taskstats), as /proc lets the thread go at its exit."""
    proc = start(intel_real, perfctr_programs["thread_exit"], "60")
    out, err = finish(proc, "", timeout=60)
    assert proc.returncode == 0, err
    result = fields(out.splitlines()[-1])
    # cycles at 1000 MHz are the thread's nanoseconds; the kernel's record ends
    # a little after the thread's last clock read (its exit path)
    assert result["ran_ns"] >= 60 * MS
    assert result["ran_ns"] * 97 // 100 <= result["pmc0"] <= result["ran_ns"] * 110 // 100 + MS


@pytest.mark.parametrize("model, pmu", [("intel", "36"), ("amd", "16,15,5,1"), ("mips", "")])
def test_hwperfd_run_tells_libpfm_the_mounts_cpu(request, model, pmu):
    """libpfm 3 (PAPI's perfctr event library) asks the host's CPUID for the
    PMU; hwperfd-run names the model's instead: Core 2 (PMU 36), a K8 of
    revision B (PMU 16 with family, model and stepping), none on MIPS."""
    mount = request.getfixturevalue(model)
    env = {k: v for k, v in mount.env().items() if k != "LIBPFM_FORCE_PMU"}
    show = [sys.executable, "-m", "hwperfd.run", "sh", "-c", 'echo "pmu=[$LIBPFM_FORCE_PMU]"']
    out = subprocess.run(show, env=env, capture_output=True, text=True, check=True).stdout
    assert out == f"pmu=[{pmu}]\n"
    out = subprocess.run(show, env={**env, "LIBPFM_FORCE_PMU": "16"}, capture_output=True, text=True, check=True)
    assert out.stdout == "pmu=[16]\n"  # the user's choice stands


def test_user_mode_cycles_follow_the_threads_cpu_time_interval_by_interval(intel_real, perfctr_programs):
    """PAPI's bar (ctests zero, first, high-level): cycles counted in user
    mode over pure user-mode work are CPU time x clock rate within 5%, each
    interval like the others, and instructions are not cycles (0.8 a cycle
    under the balanced profile).  The vperfctr's reads bracket each interval
    a little wider than the CPU clock's, so a count may run a little over.
    Before counting, the program spends 60 ms in system calls, as
    PAPI_library_init does: the split of the thread's time at the start must
    not be the split of the time it counts."""
    proc = start(intel_real, perfctr_programs["papi_intervals"], "6", "40", "60")
    out, err = finish(proc, "", timeout=120)
    assert proc.returncode == 0, err
    rows = [fields(line) for line in out.splitlines() if line.startswith("interval")]
    assert len(rows) == 6
    for row in rows:
        expected = row["cpu_ns"]  # cycles at 1000 MHz
        assert expected * 95 // 100 <= row["cycles"] <= expected * 110 // 100, rows
        assert abs(row["instructions"] - row["cycles"] * 8 // 10) <= row["cycles"] // 100 + 1, rows


# Branch events per ms of user time (1000 MHz, the balanced profile: 0.11
# branches a cycle, 0.07 taken, 0.09 conditional; 0.006 mispredicted, 0.002
# of them taken, 0.005 conditional).
BRANCH_SELECTS = {
    "intel": [
        # PAPI's Core 2 presets: PAPI_BR_NTK is BR_INST_RETIRED with unit mask
        # PRED_NOT_TAKEN|MISPRED_NOT_TAKEN, PAPI_BR_TKN with TAKEN, PAPI_BR_INS
        # BR_INST_EXEC, PAPI_BR_CN BR_CND_EXEC, PAPI_BR_MSP BR_MISSP_EXEC.
        (("3c4", "cc4"), (40_000, 70_000)),
        (("c4", "88"), (110_000, 110_000)),  # every retired branch; every executed one
        (("1c4", "2c4"), (36_000, 4_000)),  # predicted, mispredicted not taken
        (("4c4", "8c4"), (68_000, 2_000)),  # predicted, mispredicted taken
        (("8b", "8c"), (90_000, 5_000)),
        (("89", "c9"), (6_000, 70_000)),
    ],
    # The K8's retired branches: all, taken, mispredicted, mispredicted taken
    # (PAPI_BR_INS, PAPI_BR_TKN, PAPI_BR_MSP; PAPI_BR_NTK = INS - TKN).
    "amd": [(("c2", "c4", "c3", "c5"), (110_000, 70_000, 6_000, 2_000))],
}


@pytest.mark.parametrize("model", ["intel", "amd"])
def test_branch_events_count_their_own_outcomes_and_never_mirror_each_other(request, perfctr_programs, model):
    """PAPI's branch presets are distinct counts on a real CPU: not-taken
    branches are not all branches (Core 2's BR_INST_RETIRED unit mask selects
    outcomes), taken branches are not 0 (the K8's 0xC4), and a unit mask's
    parts add up to the whole."""
    mount = request.getfixturevalue(model)
    for selects, per_ms in BRANCH_SELECTS[model]:
        proc = start(mount, perfctr_programs["evntsels"], *selects)
        ready = fields(until(proc, "ready"))
        mount.control(f"advance {ready['pid']} 2ms")
        out, err = finish(proc, "\n", timeout=30)
        assert proc.returncode == 0, err
        counts = fields(next(line for line in out.splitlines() if line.startswith("counts")))
        assert counts == {f"pmc{i}": 2 * n for i, n in enumerate(per_ms)}, selects


def test_multiplexed_slices_add_up_to_the_cpu_time_and_each_counts_at_its_events_rate(intel_real, perfctr_programs):
    """PAPI's software multiplexing (ctests multiplex*, reset_multiplex,
    sdsc*-mpx) switches a vperfctr's event from SIGPROF every 10 ms of CPU
    time - read, stop, control - and scales each event by the cycles of its
    own slices: over 300 ms of user-mode work (more where the kernel's
    SIGPROF, looked at only at ticks that find the process running, came
    too seldom for three slices of each event) the slices' cycles are the CPU
    time x clock rate within 5% (switching costs system time, which user-mode
    cycles do not count), or where it cost more, the user time Linux reports
    within a tick, and each slice counts its event at the profile's
    rate (0.8 instructions, 0.11 branches a cycle)."""
    proc = start(intel_real, perfctr_programs["mpx_slices"], "10", "300")
    out, err = finish(proc, "", timeout=120)
    assert proc.returncode == 0, err
    row = fields(next(line for line in out.splitlines() if line.startswith("slices")))
    # 1000 MHz.  Cycles count user mode, at Linux's split of the thread's
    # time (stat's ticks, as its rusage): a switching that cost more than 5%
    # in system time leaves them at the user time Linux reports, within a tick.
    floor = min(row["cpu_ns"] * 95 // 100, row["user_us"] * 1000 - 10_000_000)
    assert floor <= row["cycles"] <= row["cpu_ns"] * 101 // 100, row
    assert row["slices0"] >= 3 and row["slices1"] >= 3, row
    assert abs(row["count0"] - row["cycles0"] * 8 // 10) <= row["cycles0"] // 1000 + row["slices0"], row
    assert abs(row["count1"] - row["cycles1"] * 11 // 100) <= row["cycles1"] // 1000 + row["slices1"], row
