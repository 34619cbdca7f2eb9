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


def test_pipeline_totals_are_the_sum_of_every_process(real_mount, shared_tmp):
    """The connector's exit event comes after the parent may have reaped the
    child (do_exit: exit_notify, then proc_exit_connector); exits are taken
    from taskstats, queued before, so no child's counts go missing."""
    for _ in range(5):
        result = subprocess.run(
            [sys.executable, "-m", "hwperfd.perfex", "--json", "-mp", "-e", "0", "-o", str(shared_tmp / "mp.json"),
             "sh", "-c", f"seq 200000 | sort -n | {sys.executable} -c '{BURN}'"],
            capture_output=True, text=True, env=real_mount.env(), timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        report = json.loads((shared_tmp / "mp.json").read_text())
        total = next(e["count"] for e in report["events"] if e["event"] == 0)
        per_process = {p["comm"]: p["counts"]["0"] for p in report["processes"]}
        assert {"seq", "sort", "python3", "sh"} <= set(per_process)
        assert total == sum(per_process.values())
        assert per_process["python3"] >= 0.25 * MHZ * 1e6
