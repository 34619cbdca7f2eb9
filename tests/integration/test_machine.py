"""The machine counter tools ask about besides the counters: sysmp, syssgi's
NVRAM clock and cycle counter, from libhwperf, consistent with the daemon's
--cpu-type, --cpus and --mhz, for root and unprivileged users alike."""

import errno
import fcntl
import os
import subprocess

import pytest

import structs
from tests.conftest import NOBODY, running_hwperfd


def machine_info(examples, mount, user=None):
    cmd = (NOBODY if user == "nobody" else []) + [str(examples / "machine_info")]
    result = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, "HWPERFD_MOUNT": str(mount.path)}, check=False
    )
    assert result.returncode == 0, result.stderr
    return dict(line.split(": ", 1) for line in result.stdout.splitlines())


@pytest.fixture(scope="module")
def r12000_3cpus(shared_tmp):
    with running_hwperfd(
        shared_tmp / "mnt-machine", shared_tmp / "hwperfd-machine.log",
        "--clock", "manual", "--cpus", "3", "--cpu-type", "r12000", "--mhz", "400",
    ) as mount:  # fmt: skip
        yield mount


@pytest.mark.parametrize("who", ["root", "nobody"])
@pytest.mark.parametrize("which", ["r10000", "r12000"])
def test_sysmp_and_syssgi_describe_the_emulated_machine(manual_mount, r12000_3cpus, examples, which, who):
    mount, cpus, mhz = (manual_mount, 2, 200) if which == "r10000" else (r12000_3cpus, 3, 400)
    out = machine_info(examples, mount, who)
    assert int(out["nprocs"]) == int(out["naprocs"]) == cpus
    assert int(out["cpufreq"]) == mhz
    assert int(out["nvram other"]) == errno.EINVAL
    assert int(out["cyclecntr size"]) == 64
    assert out["query cyclecntr"] == f"-1 {errno.ENODEV}"  # no /dev/mmem to map it from
    assert int(out["cycleval"]) == 1_000_000 // mhz  # picoseconds per cycle
    # the counter runs at the emulated clock: cycles = elapsed ns * MHz / 1000
    elapsed, cycles = int(out["elapsed ns"]), int(out["cycles"])
    assert 0 < cycles <= elapsed * mhz // 1000
    assert cycles >= 200_000_000 * mhz // 1000  # usleep(200 ms) between the reads
    assert int(out["unknown request"]) == int(out["unknown sysmp"]) == errno.EINVAL
    # <invent.h>: the board with the MHz, a CPU and an FPU chip per CPU, caches
    items = [tuple(int(v) for v in out[f"inv {i}"].split()) for i in range(int(out["getinvent items"]))]
    imp, rev = (0x09, 0x34) if which == "r10000" else (0x0E, 0x35)
    assert items[0] == (1, 1, mhz, cpus, 19)  # INV_PROCESSOR, INV_CPUBOARD, MHz, CPUs, INV_IP27BOARD
    chips = [(t, unit, state) for c, t, _, unit, state in items if c == 1 and t in (2, 3)]
    assert chips == [(t, cpu, imp << 8 | rev) for cpu in range(cpus) for t in (2, 3)]
    caches = {t: state for c, t, _, _, state in items if c == 3}
    assert caches == {4: 32768, 3: 32768, 8: (4 if which == "r10000" else 8) << 20}
    assert int(out["scaninvent"]) == 0 and len(items) == 1 + 2 * cpus + 3


def test_machine_ioctl_on_the_mount_root_for_any_user(r12000_3cpus):
    fd = os.open(r12000_3cpus.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        out = fcntl.ioctl(fd, structs.HWPERFD_GETMACHINE, bytes(structs.hwperfd_machine_t.sizeof()))
        m = structs.hwperfd_machine_t.parse(out)
        assert (m.hm_imp, m.hm_ncpus, m.hm_hz, m.hm_name) == (structs.C0_IMP_R12000, 3, 400_000_000, "r12000")
        with pytest.raises(OSError) as exc:
            fcntl.ioctl(fd, structs.PIOCPSINFO, bytes(structs.prpsinfo_t.sizeof()))
        assert exc.value.errno == errno.ENOTTY
    finally:
        os.close(fd)


def test_without_hwperfd_the_calls_fail_cleanly(examples, shared_tmp):
    out = machine_info(examples, type("M", (), {"path": shared_tmp / "nowhere"})())
    assert int(out["nprocs"]) == -1
    assert out["cpufreq errno"] == str(errno.ENOENT)
    assert int(out["cyclecntr size"]) == 64
    assert int(out["scaninvent"]) == -1 and int(out["getinvent items"]) == 0
