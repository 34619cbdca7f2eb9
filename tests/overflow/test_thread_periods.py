"""Per-thread overflow signals in a multi-threaded process on the real clock:
four threads, each sampling its own cycles at its own period (perfctr i-mode,
libcpc CPC_OVF_NOTIFY_EMT), alone and beside a CPU-bound process on every CPU.

Counted identities: each thread's sum is its own signals x its own period plus
the partial period, exactly (its counters stop at its overflowing event; late
is allowed, lost or extra counts are not), and no signal reaches a thread that
did not overflow - neither the worker whose period is longer than its run nor
the main thread, which counts nothing."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.conftest import NOBODY
from tests.overflow.conftest import MHZ

MS = MHZ * 1000
PERIODS = (2 * MS, 3 * MS, 5 * MS, 1000 * MS)  # the last never overflows in CPU_MS
CPU_MS = 100


@contextmanager
def cpu_bound_on_every_cpu() -> Iterator[None]:
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def run(mount, program, personality: str, nobody: bool = False) -> tuple[list[dict[str, int]], int]:
    prefix = NOBODY if nobody else []
    done = subprocess.run([*prefix, str(program), personality, str(CPU_MS), *map(str, PERIODS)], capture_output=True,
                          text=True, env=mount.env(), timeout=300)  # fmt: skip
    assert done.returncode == 0, (done.stdout, done.stderr)
    rows = [{k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)} for line in done.stdout.splitlines()]
    return rows[:-1], rows[-1]["stray"]


def check(rows: list[dict[str, int]], stray: int) -> None:
    assert stray == 0, rows
    for row, period in zip(rows, PERIODS):
        assert row["period"] == period and row["foreign"] == 0, rows
        assert 0 <= row["sum"] - row["signals"] * period < period, rows
    assert all(row["signals"] >= 1 for row in rows[:3]), rows
    assert rows[3]["signals"] == 0 and rows[3]["sum"] > 0, rows


@pytest.mark.parametrize("personality,nobody", [("perfctr", False), ("cpc", False), ("perfctr", True), ("cpc", True)])
def test_four_threads_each_signal_at_their_own_period_and_only_their_own(intel_real, four_threads, personality, nobody):
    check(*run(intel_real, four_threads, personality, nobody))


@pytest.mark.parametrize("personality", ["perfctr", "cpc"])
def test_four_threads_beside_a_cpu_bound_process_on_every_cpu_keep_their_identities(
    intel_real, four_threads, personality
):
    with cpu_bound_on_every_cpu():
        check(*run(intel_real, four_threads, personality))
