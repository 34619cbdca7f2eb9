"""Under the real clock: counts follow the host's CPU time, children included."""

import json
import subprocess
import sys

import pytest

from tests.conftest import start_hwperfd, stop_hwperfd

MHZ = 100
# User-mode work: the clock is read only every 100 000 iterations.
BURN = "import time\nwhile time.process_time() < 0.3:\n    sum(range(100000))"


@pytest.fixture(scope="module")
def real_mount(shared_tmp):
    mount = start_hwperfd(shared_tmp / "mp-real", shared_tmp / "real.log", "--clock", "real", "--mhz", str(MHZ))
    yield mount
    assert stop_hwperfd(mount) == 0
    assert "Traceback" not in mount.log_text()


def perfex_cycles(mount, *command):
    result = subprocess.run(
        [sys.executable, "-m", "hwperfd.perfex", "--json", "-e", "0", *command],
        capture_output=True, text=True, env=mount.env(), timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stderr)
    return next(e["count"] for e in report["events"] if e["event"] == 0)


def test_a_child_reaped_at_once_keeps_its_last_cpu_time(real_mount):
    # sh reaps python within microseconds of its exit; the kernel's exit
    # accounting still gives its CPU time, so the cycles reach perfex.
    cycles = perfex_cycles(real_mount, "sh", "-c", f"{sys.executable} -c '{BURN}'; true")
    # process_time() counts system time too, so user time is a little under 0.3 s
    assert 0.25 * MHZ * 1e6 <= cycles <= 3.0 * MHZ * 1e6


def test_r10k_example_counts_real_work(real_mount, examples):
    result = subprocess.run(
        [examples / "r10k_counters"], capture_output=True, text=True, env=real_mount.env(), timeout=60
    )
    assert result.returncode == 0, result.stderr
    out = dict(line.split(": ") for line in result.stdout.splitlines())
    assert int(out["data cache misses"]) > 0
    assert int(out["instruction cache misses"]) > 0
