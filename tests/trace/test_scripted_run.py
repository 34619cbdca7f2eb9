"""A scripted run on the manual clock, recorded with --trace and read back
event by event: IRIX counters with a multiplexed counter and an overflow
signal, a fork whose child is folded back, and libcpc's cpustat(1M) and IRIX
system mode taking the hardware from each other."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from hwperfd.client import Control, ProcessCounters, spec, user
from hwperfd.trace.export import PMU_PID
from structs import HWPERF_CNTEN_E, HWPERF_CNTEN_K
from tests.conftest import run_as_nobody, running_hwperfd

MS = 1_000_000
TIMEOUT = 20.0
# The counted process: it catches the overflow signal, and forks a child that
# exits at once (and reaps it) when told.
TARGET = r"""
import os, signal, sys
signal.signal(signal.SIGUSR1, lambda *a: os.write(1, b"usr1\n"))
print("ready", flush=True)
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print(pid, flush=True)
"""


@pytest.fixture(scope="module")
def traced(shared_tmp):
    """2 R10000s at 200 MHz (1 ms = 200 000 cycles) recording from the start."""
    path = shared_tmp / "trace-scripted.json"
    args = ("--clock", "manual", "--cpus", "2", "--mhz", "200", "--state-dir", str(shared_tmp / "trace-state"),
            "--trace", str(path), "--trace-size", "1000")  # fmt: skip
    with running_hwperfd(shared_tmp / "mnt-trace", shared_tmp / "hwperfd-trace.log", *args) as mount:
        yield mount, path


def cpustat(mount, *argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hwperfd.cpc.tools", "cpustat", "-c", "PAPI_tot_cyc", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mount.env())  # fmt: skip


def run_script(mount) -> dict[str, int]:
    """The run; returns the pids it involved."""
    target = subprocess.Popen([sys.executable, "-c", TARGET], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    control = Control(mount=mount.path)
    try:
        assert target.stdout is not None and target.stdin is not None
        assert target.stdout.readline() == "ready\n"
        with ProcessCounters(target.pid, mount=mount.path) as counters:
            # Counter 0 multiplexes cycles and issued instructions; counter 1
            # counts cycles and interrupts every million.
            request = {0: user(0), 1: user(1), 16: user(0, interrupt=True)}
            assert counters.enable(request, {16: 1_000_000}, signal=signal.SIGUSR1) == 1
            control.advance(target.pid, 25 * MS)  # 5 million cycles: 5 overflows, a signal each
            assert target.stdout.readline() == "usr1\n"
            # Each goes once the last was taken; CPython's handler may run
            # once for several of them.
            deadline = time.monotonic() + TIMEOUT
            while "overflow signals sent 5," not in control.status():
                assert time.monotonic() < deadline, control.status()
                time.sleep(0.01)
            target.stdin.write("fork\n")
            target.stdin.flush()
            child = int(next(line for line in target.stdout if line != "usr1\n"))
            deadline = time.monotonic() + TIMEOUT
            while f"{child}" not in counters.summary():  # folded: the parent's text lists it
                assert time.monotonic() < deadline, counters.summary()
                time.sleep(0.01)
            # cpustat binds every CPU: the hardware is libcpc's.
            stat = cpustat(mount, "0.2")
            assert stat.stdout is not None and stat.stdout.readline().startswith("   time cpu event")
            control.advance_cpu(0, 5 * MS)
            with pytest.raises(OSError) as busy:
                control.enable_system({0: spec(0, HWPERF_CNTEN_K)})
            assert busy.value.errno == 16  # EBUSY
            stat.send_signal(signal.SIGINT)
            assert stat.wait(TIMEOUT) == 0
            control.advance_cpu(1, 5 * MS)
            # System mode takes the hardware, and the process's counters with it.
            # Kernel and exception level: every system-mode cycle counts.
            assert control.enable_system({0: spec(0, HWPERF_CNTEN_K | HWPERF_CNTEN_E)}) == 1
            control.advance_cpu(0, 0, 10 * MS)
            refused = cpustat(mount, "0.2", "1")
            _, err = refused.communicate(timeout=TIMEOUT)
            assert refused.returncode == 1 and "Resource temporarily unavailable" in err
            control.release_system()
            control.command("trace stop")
        target.stdin.close()
        assert target.wait(TIMEOUT) == 0
        return {"target": target.pid, "child": child}
    finally:
        control.close()
        if target.poll() is None:
            target.kill()
            target.wait()


def timeline(trace: dict) -> list[tuple]:
    """(phase, name, track, time in emulated ns, the arguments that do not
    depend on the host) of each event, in the file's order."""
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    host = {"mono_ns", "lateness_ns", "uid", "call"}
    rows = []
    for e in trace["traceEvents"]:
        if e["ph"] == "M":
            continue
        track = names.get((e["pid"], e["tid"]), f"{e['pid']}/{e['tid']}")
        track = track if e["pid"] == PMU_PID else f"{e['pid']}: {track}"
        args = {k: v for k, v in e.get("args", {}).items() if k not in host}
        if "id" in e:
            args["id"] = e["id"]
        when = round(e["ts"] * 1000)
        if e["ph"] == "X":
            rows.append(("X", e["name"], track, when, round(e["dur"] * 1000), args))
        else:
            rows.append((e["ph"], e["name"], track, when, args))
    return rows


@pytest.fixture(scope="module")
def scripted(traced):
    """The run, and the trace the control node's ``trace stop`` wrote of it."""
    mount, path = traced
    pids = run_script(mount)
    return json.loads(path.read_text()), pids, path


def test_a_scripted_run_is_traced_event_by_event(scripted):
    trace, pids, _ = scripted
    t, c = pids["target"], pids["child"]
    me = next(e["args"]["pid"] for e in trace["traceEvents"] if e.get("name") == "EBUSY irix-syssgi")
    rows = timeline(trace)
    cpu = next(r[5]["cpu"] for r in rows if r[1] == "generation 1" and r[2] == f"{t}: IRIX counters")
    irix = f"irix {t}"
    slots = {"0": "Cycles", "1": "Issued instructions", "16": "Cycles"}
    # The child's counts go to its parent at its exit if the daemon learns of
    # it while the parent waits, else when the parent has reaped it.
    fold = ("i", f"fold {c}", f"{t}: IRIX counters", 25 * MS, {"child": c, "counts": {}})
    ended = ("X", "generation 1 (inherited)", f"{c}: IRIX counters", 25 * MS, 0,
             {"ended": "exited", "generation": 1, "parent": t})  # fmt: skip
    folded = next(r[4]["folded"] for r in rows if r[1] == "exit")
    exit_ = ("i", "exit", f"{c}: IRIX counters", 25 * MS, {"pid": c, "parent": t, "folded": folded})
    fold_and_exit = [fold, ended, exit_] if folded else [ended, exit_, fold]
    expected = [  # fmt: skip
        ("i", "recording started", "daemon", 0, {"what": "recording started", "size": 1000}),
        ("i", "restored", "daemon", 0, {"what": "restored", "processes": 0, "system": False, "refused": 0}),
        # 25 ms of the process's time (its counters' occupancy is laid out at
        # the end): counter 1 overflows 5 times; a SIGUSR1 each, the next
        # once the last was taken.
        ("C", f"{irix} counts", f"{t}: IRIX counters", 25 * MS,
         {"0 Cycles": 15 * 200_000, "1 Issued instructions": 1_800_000, "16 Cycles": 25 * 200_000}),
        ("X", "overflow", f"{t}: IRIX counters", 25 * MS, 1, {"count": 5}),
        ("X", "signal 10 owed", f"{t}: IRIX counters", 25 * MS, 1, {"count": 5, "flow": 1}),
        ("s", "overflow signal", f"{t}: IRIX counters", 25 * MS, {"id": 1}),
        *[("X", "signal 10 sent", f"{t}: IRIX counters", 25 * MS, 1, {"flows": [1], "tid_reached": t}),
          ("f", "overflow signal", f"{t}: IRIX counters", 25 * MS, {"id": 1})] * 5,
        # The fork: the child counts under its parent's control, and its
        # counts (none: it ran no time) go back to the parent that reaped it.
        ("i", f"fork {c}", f"{t}: IRIX counters", 25 * MS,
         {"parent": t, "child": c, "inherited": True, "generation": 1}),
        ("i", f"forked from {t}", f"{c}: IRIX counters", 25 * MS,
         {"parent": t, "child": c, "inherited": True, "generation": 1}),
        *fold_and_exit,
        # cpustat holds the hardware; system mode is refused, twice over: by the
        # reservation (its holder) and at the call (EBUSY to its caller).
        ("i", "refused irix-system-mode", "reservation", 30 * MS, {"asker": "irix-system-mode", "holder": "cpc"}),
        ("i", "EBUSY irix-syssgi", "refusals", 30 * MS, {"errno": "EBUSY", "personality": "irix-syssgi", "pid": me}),
        # cpustat's CPU binds programmed each CPU's counter 0 for those 5 ms.
        ("X", "Cycles", "cpu0 counter0 (cpc)", 25 * MS, 5 * MS, {"context": "cpc", "counter": 0, "slot": 0}),
        ("X", "Cycles", "cpu1 counter0 (cpc)", 25 * MS, 5 * MS, {"context": "cpc", "counter": 0, "slot": 0}),
        ("X", "cpc", "reservation", 25 * MS, 5 * MS, {"service": "cpc"}),
        # System mode takes it: the process's counters are lost (a new generation).
        ("X", "generation 1", f"{t}: IRIX counters", 0, 35 * MS,
         {"ended": "lost", "generation": 1, "cpu": cpu, "slots": slots, "signal": 10, "thresholds": {"16": 1_000_000}}),
        ("i", "generation 1 -> 2", f"{t}: IRIX counters", 35 * MS, {"why": "lost"}),
        ("i", "system mode on, generation 1", "IRIX system mode", 35 * MS, {}),
        ("C", "irix-system cpu0 counts", "IRIX system mode", 45 * MS, {"0 Cycles": 10 * 200_000}),
        # cpustat is refused in its turn (EAGAIN in libcpc's dialect).
        ("i", "refused cpc", "reservation", 45 * MS, {"asker": "cpc", "holder": "irix-system-mode"}),
        ("i", "EAGAIN cpc", "refusals", 45 * MS, {"errno": "EAGAIN", "personality": "cpc", "pid": ANY}),
        ("i", "system mode off, generation 1", "IRIX system mode", 45 * MS, {}),
        ("X", "irix-system-mode", "reservation", 35 * MS, 10 * MS, {"service": "irix-system-mode"}),
        # The CPUs' counters, in order of time: counter 0 of the process's CPU
        # turns from slot 0 to slot 1 and back at each 10 ms tick; system mode
        # occupies counter 0 of every CPU it ran on.
        ("X", "Cycles", f"cpu{cpu} counter1", 0, 25 * MS, {"context": irix, "counter": 1, "slot": 16}),
        ("X", "Cycles", f"cpu{cpu} counter0", 0, 10 * MS, {"context": irix, "counter": 0, "slot": 0}),
        ("X", "Issued instructions", f"cpu{cpu} counter0", 10 * MS, 10 * MS,
         {"context": irix, "counter": 0, "slot": 1}),
        ("X", "Cycles", f"cpu{cpu} counter0", 20 * MS, 5 * MS, {"context": irix, "counter": 0, "slot": 0}),
        ("X", "Cycles", "cpu0 counter0", 35 * MS, 10 * MS, {"context": "irix-system cpu0", "counter": 0, "slot": 0}),
    ]
    assert len(rows) == len(expected), "\n".join(map(str, rows))
    for row, want in zip(rows, expected):
        assert row == want, f"\n{row}\n{want}"


def test_a_signal_carries_its_lateness_in_host_time(scripted):
    trace, pids, _ = scripted
    sent = [e for e in trace["traceEvents"] if e["name"] == "signal 10 sent"]
    (owed,) = [e for e in trace["traceEvents"] if e["name"] == "signal 10 owed"]
    assert len(sent) == 5
    for each in sent:  # each from the overflows' look, which owed all five
        assert each["args"]["lateness_ns"] == each["args"]["mono_ns"] - owed["args"]["mono_ns"] > 0


def test_the_file_says_what_it_holds(scripted):
    trace, _, _ = scripted
    events = sum(1 for _ in trace["traceEvents"])
    assert trace["metadata"] == {"producer": "hwperfd", "clock": "manual", "events": 35, "recorded": 35,
                                 "dropped": 0, "size": 1000}  # fmt: skip
    assert events > 35  # tracks' names, slices drawn from pairs of events, flows


def test_the_summary_reads_the_run(scripted, tmp_path):
    _, pids, path = scripted
    done = subprocess.run([sys.executable, "-m", "hwperfd.trace.summary", "summary", str(path)], capture_output=True,
                          text=True, timeout=TIMEOUT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"{path}: manual clock, 35 events (0 dropped), 45.000 ms emulated"
    irix = f"irix {pids['target']}"
    rows = [line.split(irix) for line in lines if line.startswith(f"  {irix} ")]
    # Counter 0 of the process: cycles 15 ms (60 %), issued instructions 10 ms (40 %).
    cpu = rows[0][1].split()[0]
    assert [row[1].split() for row in rows] == [
        [cpu, "counter0", "0", "Cycles", "15.000", "60.0%"],
        [cpu, "counter0", "1", "Issued", "instructions", "10.000", "40.0%"],
        [cpu, "counter1", "16", "Cycles", "25.000"],
    ]
    assert "overflows 5; signals owed 5, sent 5, merged 0" in lines
    assert any(line.startswith("  lateness (host time from overflow to signal, us): p50 ") for line in lines)
    refusals = lines[lines.index("refusals per personality") + 1 :]
    assert [r.split() for r in refusals] == [
        ["cpc", "EAGAIN", "1"],
        ["cpc", "reservation", "held", "by", "irix-system-mode", "1"],
        ["irix-syssgi", "EBUSY", "1"],
        ["irix-system-mode", "reservation", "held", "by", "cpc", "1"],
    ]


def test_the_summary_draws_the_occupancy(scripted, tmp_path):
    pytest.importorskip("matplotlib")
    _, _, path = scripted
    picture = tmp_path / "occupancy.png"
    done = subprocess.run([sys.executable, "-m", "hwperfd.trace.summary", "summary", str(path), "--png", str(picture)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_picture_without_matplotlib_says_what_is_missing(scripted, tmp_path):
    _, _, path = scripted
    hide = "import sys; sys.modules['matplotlib'] = None; from hwperfd.trace.summary import main; sys.exit(main())"
    done = subprocess.run([sys.executable, "-c", hide, "summary", str(path), "--png", str(tmp_path / "x.png")],
                          capture_output=True, text=True, timeout=TIMEOUT)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == "hwperfd-trace: --png needs matplotlib (pip install matplotlib)\n"
    assert not (tmp_path / "x.png").exists()


def test_tracing_is_roots_and_takes_an_absolute_path(traced, nobody_python):
    mount, _ = traced
    for command in ("trace start relative.json", "trace start /nonexistent-dir/t.json", "trace stop", "trace"):
        with pytest.raises(OSError) as refused:
            mount.control(command)
        assert refused.value.errno == 22, command  # EINVAL
    assert "trace: off" in (mount.path / "control").read_text()
    done = run_as_nobody(nobody_python, "-c", "open(__import__('sys').argv[1], 'w').write('trace stop\\n')",
                         str(mount.path / "control"))  # fmt: skip
    assert "PermissionError" in done.stderr


class _Any:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, int) and other > 0


ANY = _Any()


def test_a_daemon_started_with_trace_writes_it_when_it_stops(shared_tmp):
    path = shared_tmp / "trace-stop.json"
    args = ("--clock", "manual", "--cpus", "1", "--no-store", "--trace", str(path))
    with running_hwperfd(shared_tmp / "mnt-trace-stop", shared_tmp / "hwperfd-trace-stop.log", *args) as mount:
        assert f"trace: recording to {path}, 1 of 100000 events held, 0 dropped" in (mount.path / "control").read_text()
        mount.control("advance-cpu 0 7ms")
        assert not path.exists()
    trace = json.loads(path.read_text())
    daemon = [(e["name"], e["ts"]) for e in trace["traceEvents"] if e.get("cat") == "daemon"]
    assert daemon == [("recording started", 0.0), ("stopped", 7000.0)]


def test_a_trace_needs_a_directory_to_go_to(shared_tmp):
    done = subprocess.run([sys.executable, "-m", "hwperfd", "--trace", "/nonexistent-dir/t.json", str(shared_tmp)],
                          capture_output=True, text=True, timeout=TIMEOUT)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.endswith("hwperfd: error: --trace: no directory /nonexistent-dir\n")
