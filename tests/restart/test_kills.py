"""The issue's test of a restart that loses nothing (docs/restart.md): programs
of two users on every personality, the daemons behind them killed at random
moments twenty times and stopped once with SIGTERM, each started again as
the unit does (Restart=on-failure, RestartSec=200ms).

One daemon per set of programs that can share the hardware: IRIX process
counters (with a fork storm), IRIX system mode (syssgi), perfctr vperfctrs
(a-mode and i-mode), libcpc per-LWP sets (one with overflow), pctr.  The
programs read all the time, and the storm forks and reaps all the time, so
kills land mid-ioctl, mid-fork and mid-exit."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.conftest import NOBODY, Mount
from tests.restart.test_personalities import (  # noqa: F401
    CYCLES_ALL, INTEL, PERIOD, busy_ns, check_final, pctr_cpu0, set_pctr, x86_restart,
)  # fmt: skip
from tests.restart.test_restart import (  # noqa: F401
    TIMEOUT, Restartable, assert_user_cycles, go, irix_restart, lib_restart, line,
)  # fmt: skip

KILLS = int(os.environ.get("HWPERFD_TEST_KILLS", "20"))  # fewer, to look into a failure
NAMES = ("irix storm", "irix nobody", "syssgi", "perfctr-a", "perfctr-i", "cpc", "cpc-ovf", "pctr reader")
RESTART_SEC = 0.2  # systemd/hwperfd.service
# Five daemons start at once on a machine others load too: a start's
# imports alone can take seconds of wall time there.
START_WAIT = 120
# How long the programs' libraries wait for a new daemon: past the default
# 30 s, which five starts at once can take on a loaded machine.
RECONNECT_MS = 300_000


def start(binary: Path, mount: Mount, *args: str, nobody: bool = False, **env: str) -> subprocess.Popen:
    argv = [str(binary), *args]
    return subprocess.Popen(
        NOBODY + argv if nobody else argv,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**mount.env(), "HWPERFD_RECONNECT_MS": str(RECONNECT_MS), **env},
    )  # fmt: skip


def reserved_by(mount: Mount) -> str:
    found = re.search(r"^reserved-by (\S+)", (mount.path / "pctr").read_text(), re.M)
    assert found
    return found.group(1)


def test_programs_of_two_users_on_every_personality_ride_out_twenty_kills_and_a_sigterm(
    shared_tmp, irix_restart, lib_restart, x86_restart  # noqa: F811
):
    base = shared_tmp / "kills"
    base.mkdir(mode=0o755, exist_ok=True)
    with ThreadPoolExecutor(5) as pool:
        irix, system, perfctr, cpc, pctr = daemons = list(pool.map(
            lambda item: Restartable(base / item[0], *item[1], wait=START_WAIT),
            [("irix", ()), ("system", ()), ("perfctr", INTEL), ("cpc", INTEL), ("pctr", INTEL)],
        ))  # fmt: skip
    programs: list[subprocess.Popen] = []
    try:
        storm = start(irix_restart, irix.mount, IRIX_RESTART_STORM="1")
        quiet = start(irix_restart, irix.mount, nobody=True)
        holder = start(lib_restart, system.mount, "syssgi")
        vperfctrs = [start(x86_restart, perfctr.mount, "perfctr-a", nobody=True),
                     start(x86_restart, perfctr.mount, "perfctr-i", str(PERIOD))]  # fmt: skip
        lwps = [start(x86_restart, cpc.mount, "cpc", nobody=True),
                start(x86_restart, cpc.mount, "cpc-ovf", str(PERIOD))]  # fmt: skip
        pctr_before = busy_ns()
        set_pctr(pctr.mount, CYCLES_ALL)
        pctr_after = busy_ns()
        reader = start(x86_restart, pctr.mount, "pctr", nobody=True)
        programs = [storm, quiet, holder, *vperfctrs, *lwps, reader]
        generations = [line(p, "counting")[0] for p in (storm, quiet)]
        (system_generation,) = line(holder, "ready")
        for p in (*vperfctrs, *lwps, reader):
            line(p, "ready")
        holders = [reserved_by(d.mount) for d in daemons]
        assert holders[1:] == ["irix-system-mode", "perfctr-virtual", "-", "pctr"], holders

        rng = random.Random(28)
        began = time.monotonic()
        for how in [signal.SIGKILL] * KILLS + [signal.SIGTERM]:
            time.sleep(rng.uniform(0.05, 0.5))
            for d in daemons:
                d.mount.process.send_signal(how)
            for d in daemons:
                d.mount.process.wait(timeout=10)
            time.sleep(RESTART_SEC)
            with ThreadPoolExecutor(len(daemons)) as pool:
                mounts = list(pool.map(lambda d: d._start(), daemons))
            for d, mount in zip(daemons, mounts):
                d.mount = mount
        print(f"{KILLS + 1} restarts of {len(daemons)} daemons in {time.monotonic() - began:.1f} s")

        assert [reserved_by(d.mount) for d in daemons] == holders
        count, function = pctr_cpu0(pctr.mount)
        now = busy_ns()
        assert function == CYCLES_ALL
        assert (now - pctr_after) * 0.99 - 10_000_000 <= count <= (now - pctr_before) * 1.01 + 10_000_000
        for p, name in zip(programs, NAMES):
            assert p.poll() is None, f"{name} ended: {p.stdout.read() if p.stdout else ''}"
            go(p)
        for p, generation in zip((storm, quiet), generations):
            line(p, "ready")
            final_gen, cycles, user_ns, _, system_ns = line(p, "final")
            assert final_gen == generation
            assert_user_cycles(cycles, user_ns, system_ns)
        final_gen, cycles = line(holder, "final")
        assert final_gen == system_generation and int(cycles) > 0
        for p in (*vperfctrs, *lwps):
            words = check_final(line(p, "final"))
            assert words.get("overflows", 2) >= 2
        line(reader, "final")
        for p in programs:
            assert p.wait(timeout=TIMEOUT) == 0
        set_pctr(pctr.mount, 0)
    finally:
        for p in programs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for d in daemons:
            d.stop()
    for d in daemons:
        assert "refused:" not in d.logs(), d.logs()
