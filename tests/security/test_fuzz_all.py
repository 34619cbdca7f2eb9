"""Eight users (two processes each) fuzz every personality at once (tests/security/personality_fuzz.py:
IRIX PIOC* on an R10000 mount, libcpc on both, perfctr and pctr on a Core 2
mount) while their processes fork, exec and exit and root winds the pid
counter back so that pids are reused as fast as they are freed.  Under the
manual clock, root's own counters (an IRIX process and a libcpc LWP bind
on the R10000, a vperfctr on the Core 2) count exactly what the clock gave them; every errno is one the
personality's documentation gives; neither daemon crashes or logs a
traceback.

The suite runs 8 000 calls (about 20 s); HWPERFD_FUZZ_CALLS sets
another total (10^6 for the full run, some minutes), HWPERFD_FUZZ_PROCS
the processes per user and HWPERFD_FUZZ_SECONDS a bound in time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import running_hwperfd
from tests.cpc.conftest import cpc_programs, driver  # noqa: F401 - fixtures: cpc_driver.c
from tests.perfctr.test_perfctr_driver import CYCLES, EN, USR, control
from tests.security.conftest import NS_LAST_PID

HERE = Path(__file__).resolve().parent
USERS = [65534 - i for i in range(8)]
CALLS = int(os.environ.get("HWPERFD_FUZZ_CALLS", "8000"))
# Fuzzing processes each user starts: more keep more calls waiting at each
# daemon at once, which on a loaded machine sets the pace.
PER_USER = int(os.environ.get("HWPERFD_FUZZ_PROCS", "2"))
# A bound in time for a long run on a busy machine: the fuzzers stop there
# with what they made (every other check stands).
SECONDS = os.environ.get("HWPERFD_FUZZ_SECONDS")
MS = 1_000_000
SHOWN = ("calls ", "errno", "cpc error", "open")  # figures printed beside the totals
TICKS = 50  # milliseconds root's witnesses are given, one at a time, while the fuzz runs

IRIX_WITNESS = """
import sys
from hwperfd.client import ProcessCounters, user
c = ProcessCounters(mount=sys.argv[1])
c.enable({0: user(0)})  # cycles, user mode
print("ready", flush=True)
sys.stdin.readline()
print(c.read()[1][0], flush=True)
"""

PERFCTR_WITNESS = """
import fcntl, os, sys, threading
from structs import perfctr as abi
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.ioctl(fd, abi.VPERFCTR_ATTACH, abi.vperfctr_attach.build({"tid": 0, "creat": 1}))
fcntl.ioctl(fd, abi.VPERFCTR_CONTROL, bytes.fromhex(sys.argv[2]))
print(threading.get_native_id(), flush=True)
sys.stdin.readline()
sums = abi.perfctr_sum_ctrs.parse(fcntl.ioctl(fd, abi.VPERFCTR_READ_SUM, bytes(abi.SUM_CTRS_SIZE)))
print(sums.tsc, sums.pmc[0], flush=True)
"""


@pytest.fixture(scope="module")
def mounts(shared_tmp):
    """(R10000 at 200 MHz, Core 2 at 1000 MHz), manual clocks, daemons of the fuzz's own."""
    folder = Path(tempfile.mkdtemp(prefix="fuzz-all-", dir=shared_tmp))
    os.chmod(folder, 0o755)
    (folder / "state").mkdir()
    common = ("--clock", "manual", "--cpus", "2", "--state-dir", str(folder / "state"), "--no-store")
    with running_hwperfd(folder / "mips", folder / "mips.log", *common, "--mhz", "200") as mips:
        with running_hwperfd(folder / "intel", folder / "intel.log", *common, "--cpu-type", "intel",
                             "--mhz", "1000") as intel:  # fmt: skip
            yield mips, intel


def _advance(mount, text: str) -> None:
    """Root moves the clock; EAGAIN (a /proc read past its deadline on a
    machine the fuzz loads: host/procread.py) says to try again."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return mount.control(text)
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wind_back_pids(lowest: int, stop: threading.Event) -> None:
    """Root keeps the pid counter just below the fuzzers: each fork takes
    the first pid freed above it (children's pids come round again and again)."""
    while not stop.wait(0.01):
        try:
            with open(NS_LAST_PID, "w") as f:
                f.write(str(lowest - 1))
        except OSError:
            return


def test_eight_users_fuzz_every_personality_while_roots_counts_stay_exact(
    mounts, nobody_python, shared_tmp, driver  # noqa: F811 - the fixture imported above
):
    mips, intel = mounts
    interpreter, env = nobody_python
    script = shared_tmp / "personality_fuzz.py"
    shutil.copy(HERE / "personality_fuzz.py", script)
    root_env = {**os.environ, "PYTHONPATH": env["PYTHONPATH"]}
    irix = subprocess.Popen([sys.executable, "-c", IRIX_WITNESS, str(mips.path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=root_env)  # fmt: skip
    vperf = subprocess.Popen([sys.executable, "-c", PERFCTR_WITNESS, str(intel.path / "perfctr"),
                              control(nractrs=1, evntsel=(CYCLES | USR | EN,)).hex()],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=root_env)  # fmt: skip
    lwp = driver(mips)  # on the Core 2, any vperfctr (the fuzzers') holds the machine: per-LWP binds EAGAIN
    stop = threading.Event()
    fuzzers: list[subprocess.Popen] = []
    try:
        assert irix.stdout.readline() == "ready\n"
        vtid = int(vperf.stdout.readline())
        lwp("add PAPI_tot_cyc 0 6")
        assert lwp("bind") == "ok"
        began = time.monotonic()
        for i, uid in enumerate(USERS * PER_USER):
            who = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
            fuzzers.append(subprocess.Popen([*who, interpreter, str(script), str(mips.path), str(intel.path),
                                             str(1000 + i), str(CALLS // len(USERS) // PER_USER),
                                             *([SECONDS] if SECONDS else [])],
                                            stdout=subprocess.PIPE, text=True, env=env, cwd="/"))  # fmt: skip
        winder = threading.Thread(target=_wind_back_pids, args=(min(p.pid for p in fuzzers), stop), daemon=True)
        winder.start()
        for _ in range(TICKS):
            _advance(mips, f"advance {irix.pid} 1ms")
            _advance(intel, f"advance-thread {vtid} 1ms")
            _advance(mips, f"advance-thread {lwp.tid} 1ms")
            time.sleep(0.02)
        outputs = [p.communicate(timeout=max(3600, CALLS // 50))[0] for p in fuzzers]
        seconds = time.monotonic() - began
        stop.set()
        figures: Counter[str] = Counter()
        for out in outputs:
            for line in out.splitlines():
                key, _, value = line.rpartition(" ")
                figures[key] += int(value)
        cpu = [_cpu_s(m.process.pid) for m in (mips, intel)]
        print(f"\n{figures['calls']} calls in {seconds:.1f} s ({figures['calls'] / seconds:.0f}/s; daemons' CPU "
              f"{cpu[0]:.1f} s + {cpu[1]:.1f} s), "
              f"{figures['forks']} forks, ok {figures['ok']}; "
              + ", ".join(f"{k} {v}" for k, v in sorted(figures.items()) if k.startswith(SHOWN)))
        assert [p.returncode for p in fuzzers] == [0] * len(fuzzers)
        assert (figures["calls"] >= CALLS or SECONDS) and figures["ok"] > 0
        # Every personality was reached (a node the users could not open would go unfuzzed).
        assert all(figures[f"calls {p}"] > CALLS // 20 for p in ("irix", "cpc", "perfctr", "pctr")), figures
        assert sum(v for k, v in figures.items() if k.startswith("cpc error")) > 0
        assert not {k: v for k, v in figures.items() if k.startswith("unexpected")}
        # Root's counts: exactly the clock's 50 ms, whatever the eight users did.
        irix.stdin.write("read\n")
        irix.stdin.flush()
        assert int(irix.stdout.readline()) == TICKS * 200_000  # R10000 cycles at 200 MHz
        vperf.stdin.write("read\n")
        vperf.stdin.flush()
        assert vperf.stdout.readline().split() == [str(TICKS * MS)] * 2  # TSC and cycles at 1000 MHz
        assert lwp("sample").split()[:2] == ["ok", str(TICKS * 200_000)]
        for mount in (mips, intel):
            assert mount.process.poll() is None
            assert "Traceback" not in mount.log_text()
    finally:
        stop.set()
        for p in [*fuzzers, irix, vperf]:
            if p.poll() is None:
                p.kill()
            p.wait()
