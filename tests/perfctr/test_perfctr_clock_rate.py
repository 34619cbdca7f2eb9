"""An amd64 model on the real clock counts at the host's clock rate: its
programs read the host's TSC with rdtsc themselves, and on a Core 2 or a K8
the TSC and the cycle counter tick together.  PAPI's zero ctest compares
PAPI_TOT_CYC with the TSC's cycles over the same stretch (within 30%); at the
model's own 2200 MHz on a faster host a K8 mount lost 15% there before any
other cost.  The manual clock keeps the model's rate, so its counts are the
same on every host, and --mhz still says what it says."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hwperfd.cpu.models import MODELS
from hwperfd.host.clockrate import host_mhz
from tests.conftest import ROOT, running_hwperfd

HERE = Path(__file__).resolve().parent
EN, USR, OS_ = 1 << 22, 1 << 16, 1 << 17
CYCLES = {"intel": 0x3C, "amd": 0x76}  # UNHALTED_CORE_CYCLES, CPU_CLK_UNHALTED


@pytest.fixture(scope="module")
def tsc_rate(shared_tmp) -> Path:
    subprocess.run(["make", "-s", "-C", str(ROOT / "lib"), "libperfctr"], check=True)
    target = shared_tmp / "perfctr-tsc-rate"
    subprocess.run(
        ["cc", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'include'}", "-o", str(target),
         str(HERE / "tsc_rate.c"), str(ROOT / "lib" / "libperfctr.a")],
        check=True,
    )  # fmt: skip
    return target


@pytest.mark.skipif(host_mhz() is None, reason="/proc/cpuinfo gives no cpu MHz")
@pytest.mark.parametrize("model", ["intel", "amd"])
def test_an_amd64_model_on_the_real_clock_counts_at_the_rate_the_hosts_tsc_runs(shared_tmp, tsc_rate, model):
    with running_hwperfd(shared_tmp / f"mnt-rate-{model}", shared_tmp / f"hwperfd-rate-{model}.log",
                         "--cpus", "1", "--cpu-type", model) as mount:  # fmt: skip
        assert f"at {float(host_mhz()):g} MHz, real clock" in mount.log_text()
        out = subprocess.run([str(tsc_rate), f"{CYCLES[model] | USR | OS_ | EN:x}"], env=mount.env(),
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    host, vperfctr = (line.split()[1:] for line in out.stdout.splitlines())
    ticks, wall_ns = map(int, host)
    tsc, cycles, cpu_ns = map(int, vperfctr)
    host_rate = ticks / wall_ns  # the TSC per ns: the host's clock rate in GHz
    assert cpu_ns >= 50_000_000, out.stdout
    # Each count over its own clock, to within what the reads around the
    # loop add (microseconds of CPU in 50 ms).
    assert tsc / cpu_ns == pytest.approx(host_rate, rel=0.02), out.stdout
    assert cycles / cpu_ns == pytest.approx(host_rate, rel=0.02), out.stdout


@pytest.mark.parametrize(("args", "mhz"), [(("--clock", "manual"), None), (("--mhz", "1234.5"), 1234.5)],
                         ids=["manual clock", "--mhz"])  # fmt: skip
def test_the_manual_clock_and_mhz_keep_their_rates(shared_tmp, args, mhz):
    with running_hwperfd(shared_tmp / f"mnt-rate-{args[0][2:]}", shared_tmp / f"hwperfd-rate-{args[0][2:]}.log",
                         "--cpus", "1", "--cpu-type", "amd", *args) as mount:  # fmt: skip
        expected = mhz if mhz is not None else MODELS["amd"].default_mhz
        assert f"amd x1 at {expected:g} MHz" in mount.log_text()
