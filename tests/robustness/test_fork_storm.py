"""Fork storms lose no child's counts: with the process-event streams' buffers
cut to the minimum, events are lost for sure, and the rescan that follows
must still bring every child's CPU time into its parent's totals."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import build_c, running_hwperfd
from tests.robustness.helpers import HERE

MHZ = 200


@pytest.fixture(scope="module")
def storm(shared_tmp):
    return build_c(HERE / "fork_storm.c", shared_tmp / "fork_storm")


@pytest.mark.parametrize("buffer", [4096, 32 << 20], ids=["tiny-buffers", "default-buffers"])
def test_a_counted_fork_storm_loses_no_childs_counts(storm, shared_tmp, buffer):
    base = shared_tmp / f"storm-{buffer}"
    args = ("--clock", "real", "--cpus", "2", "--mhz", str(MHZ), "--event-buffer", str(buffer))
    with running_hwperfd(base / "mnt", shared_tmp / f"storm-{buffer}.log", *args) as mount:
        run = subprocess.run([str(storm), str(mount.path), "4", "150"], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        cycles, user_us = map(int, run.stdout.split())
        status = (mount.path / "control").read_text()
    counted_us = cycles / MHZ
    lost = int(re.search(r"process events lost (\d+) times", status)[1])
    print(f"\nbuffer {buffer}: counted {counted_us / 1e3:.1f} ms, getrusage {user_us / 1e3:.1f} ms, losses {lost}")
    if buffer == 4096:
        assert lost > 0, "the tiny buffers were meant to lose events"
    # 600 children of ~1 ms: losing even a tenth of them, or counting a tenth
    # twice, would show.  The bound's 5% is the children's exit paths after
    # their exit records, which Linux's split gives to user time (docs/irix.md).
    assert abs(counted_us - user_us) <= 0.05 * user_us + 20_000, (counted_us, user_us, status)
