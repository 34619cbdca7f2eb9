"""Event-counter profiling: syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, ...) through
libhwperf, from examples/evc_profile (an IRIX-style C program), on the manual
clock, as root and as uid 65534.

evc_profile profiles three functions: hot_a and hot_b each have a region of
their own, hot_c falls in the overflow bin.  At "spinning X N" it loops in
hot_X until N ticks are recorded; the test then moves the program's CPU time
by whole thresholds, so every tick is exact: the slot counts cycles with a
threshold of 200 000 (1 ms of the 200 MHz clock), so k ms are k ticks.
"""

from __future__ import annotations

import errno
import fcntl
import re
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

import structs
from hwperfd.client import ProcessCounters, pack_request, spec
from tests.conftest import NOBODY, run_as_nobody
from tests.waiting import wait_for

THRESHOLD = 200_000  # cycles: 1 ms at 200 MHz
USERS = {"root": [], "nobody": NOBODY}


def sent(mount) -> int:
    """Overflow signals the daemon has sent so far (its control page)."""
    return int(re.search(r"overflow signals sent (\d+)", (mount.path / "control").read_text()).group(1))


def profile(program, mount, steps, *, spins, waits=(), prefix=(), on_spin=None):
    """Run ``program STEPS``.  At "spinning X N" advance its user time by
    ``spins[X]`` ms (or call ``on_spin(proc, X)``); at the n-th "waiting" call
    ``waits[n](proc)``, then let it go on.  Returns the other lines."""
    proc = subprocess.Popen(
        [*prefix, str(program), *steps],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mount.env(),
    )  # fmt: skip
    lines = []
    try:
        wait_steps = iter(waits)
        for line in proc.stdout:
            line = line.rstrip("\n")
            if line.startswith("spinning "):
                which = line.split()[1]
                if on_spin is not None and which not in spins:
                    on_spin(proc, which)
                else:
                    mount.control(f"advance {proc.pid} {spins[which]}ms")
                continue
            if line == "waiting":
                next(wait_steps)(proc)
                proc.stdin.write("go\n")
                proc.stdin.flush()
                continue
            lines.append(line)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read()
    return lines


def counts_of(mount, pid):
    with ProcessCounters(pid, mount=mount.path) as pc:
        return pc.read()


@pytest.mark.parametrize("user", USERS)
def test_ticks_land_in_the_buckets_of_the_function_that_ran(manual_mount, examples, user):
    seen = {}

    def at_end(proc):
        seen["counts"] = counts_of(manual_mount, proc.pid)

    out = profile(
        examples / "evc_profile", manual_mount, ["enable:u", "a:3", "b:7", "c:9", "counts", "buckets", "wait"],
        spins={"a": 3, "b": 4, "c": 2}, waits=[at_end], prefix=USERS[user],
    )  # fmt: skip
    gen = int(out[0].split()[1])
    assert gen > 0
    assert out == [
        f"enable: {gen} -",
        "a: 3",
        "b: 7",
        "c: 9",
        # 3 ticks in hot_a's buckets, 4 in hot_b's, hot_c's 2 in the overflow
        # bin; hwp_ovflw_sig (SIGUSR1) is never sent to a profiling process.
        "counts: 3 4 2 0",
        "buckets: OK",
    ]
    # The counters themselves counted exactly the 9 ms, under the same generation.
    generation, counts = seen["counts"]
    assert generation == gen and counts[0] == 9 * THRESHOLD


@pytest.mark.parametrize("user", USERS)
def test_suspend_stops_counting_and_ticks_until_continue(manual_mount, examples, user):
    seen = {}

    def suspended(proc):
        manual_mount.control(f"advance {proc.pid} 7ms")  # nothing counts, nothing ticks
        seen["suspended"] = counts_of(manual_mount, proc.pid)
        seen["page"] = (manual_mount.path / f"{proc.pid:05d}").read_text()
        with ProcessCounters(proc.pid, mount=manual_mount.path) as pc:
            seen["flags"] = pc.read_usage().fields.pu_cpu_mon.cm_flags

    def at_end(proc):
        seen["end"] = counts_of(manual_mount, proc.pid)
        with ProcessCounters(proc.pid, mount=manual_mount.path) as pc:
            seen["flags_end"] = pc.read_usage().fields.pu_cpu_mon.cm_flags

    out = profile(
        examples / "evc_profile", manual_mount,
        ["enable:u", "a:2", "susp", "wait", "counts", "susp", "cont", "cont", "b:5", "counts", "wait"],
        spins={"a": 2, "b": 3}, waits=[suspended, at_end], prefix=USERS[user],
    )  # fmt: skip
    gen = int(out[0].split()[1])
    assert out[1:] == [
        "a: 2",
        "susp: 0 -",
        "counts: 2 0 0 0",  # the 7 ms while suspended brought no tick ...
        "susp: 0 -",  # suspending twice, continuing twice: 0, nothing more
        "cont: 0 -",
        "cont: 0 -",
        "b: 5",
        "counts: 2 3 0 0",
    ]
    assert seen["suspended"] == (gen, (2 * THRESHOLD,) + (0,) * 31)  # ... and no count
    assert f"profiling: a PC tick on signal {signal.SIGRTMAX - 1} per overflow, suspended" in seen["page"]
    # PIOCGETPREVCTRS's cpu_mon_t says so too.
    profiling = structs.HWPERF_CM_ENABLED | structs.HWPERF_CM_VALID | structs.HWPERF_CM_PROFILING
    assert seen["flags"] == profiling | structs.HWPERF_CM_SUSPENDED
    assert seen["flags_end"] == profiling
    assert seen["end"] == (gen, (5 * THRESHOLD,) + (0,) * 31)


BAD_AS_ROOT = [
    "bad:profcnt0: -1 E2BIG",
    "bad:profcnt101: -1 E2BIG",  # more regions than nprofile (100)
    "bad:binfirst: -1 EINVAL",  # an overflow bin that is not the last region
    "bad:nullprof: -1 EFAULT",
    "bad:badprof: -1 EFAULT",
    "bad:nullargs: -1 EFAULT",
    "bad:badevent: -1 EINVAL",
    "bad:negthresh: -1 EINVAL",
    "bad:badsig: -1 EINVAL",  # hwp_ovflw_sig outside 0..32, though never sent
]


@pytest.mark.parametrize("user", USERS)
def test_refused_calls_change_nothing(manual_mount, examples, user):
    bad_steps = [line.rsplit(":", 1)[0] for line in BAD_AS_ROOT]
    # Kernel mode needs root (EPERM) before anything else is looked at; root
    # may profile in kernel mode, but not while it already profiles (EBUSY).
    kmode = "bad:kmode: -1 " + ("EPERM" if user == "nobody" else "EBUSY")
    first = ["bad:kmode"] if user == "nobody" else []
    steps = [*first, "enable:u", "a:2", *bad_steps, "bad:kmode", "enable:u", "a:4", "counts"]
    out = profile(examples / "evc_profile", manual_mount, steps, spins={"a": 2}, prefix=USERS[user])
    assert out[: len(first)] == [kmode] * len(first)
    out = out[len(first) :]
    gen = out[0].split()[1]
    assert out == [
        f"enable: {gen} -",
        "a: 2",
        *BAD_AS_ROOT,
        kmode,
        "enable: -1 EBUSY",  # already profiling
        "a: 4",  # the regions in force still take the ticks
        "counts: 4 0 0 0",
    ]


def test_buckets_outside_the_program_turn_their_region_off(manual_mount, examples):
    """IRIX's addupc: a bucket the process cannot write turns that region off
    (pr_scale 0) instead of faulting; the other regions go on."""
    def spin_a(proc, which):
        before = sent(manual_mount)
        manual_mount.control(f"advance {proc.pid} 3ms")
        assert wait_for(lambda: sent(manual_mount) >= before + 3)
        time.sleep(0.05)
        proc.send_signal(signal.SIGUSR2)  # stop waiting for ticks that count nowhere

    out = profile(
        examples / "evc_profile", manual_mount, ["badbase:u", "a:99", "b:2", "counts"],
        spins={"b": 2}, on_spin=spin_a,
    )  # fmt: skip
    assert out[1:] == ["a: 0", "b: 2", "counts: 0 2 0 0"]


def test_another_user_cannot_reach_a_profiling_process(manual_mount, examples, nobody_python):
    """HWPERF_PROFENABLE, _SUSP and _CONT act on the caller only: another
    user's calls change their own (absent) counters, not the profiler's, and
    the profiler's /proc file stays closed to them."""
    script = f"""
import errno, fcntl, os, sys
import structs
fd = os.open({str(manual_mount.path / "control")!r}, os.O_RDONLY)
assert fcntl.ioctl(fd, structs.HWIOC_PROF_CTR_SUSP, 0) == 0
off = structs.hwperfd_profenable_t.build(dict(hp_args=structs.hwperf_profevctrarg_t.parse(bytes(196)), hp_sig=0, hp_pad=0))
assert fcntl.ioctl(fd, structs.HWPERFD_PROFENABLE, bytearray(off)) == 0
try:
    os.open({str(manual_mount.path)!r} + "/%05d" % int(sys.argv[1]), os.O_RDONLY)
except PermissionError:
    print("EACCES")
"""

    def meddle(proc):
        result = run_as_nobody(nobody_python, "-c", script, str(proc.pid), mount=manual_mount)
        assert result.returncode == 0 and result.stdout == "EACCES\n", result.stderr

    out = profile(
        examples / "evc_profile", manual_mount, ["enable:u", "a:2", "wait", "b:5", "counts"],
        spins={"a": 2, "b": 3}, waits=[meddle],
    )  # fmt: skip
    assert out[1:] == ["a: 2", "b: 5", "counts: 2 3 0 0"]


def test_profiling_off_releases_the_counters(manual_mount, examples):
    seen = {}

    def after_off(proc):
        manual_mount.control(f"advance {proc.pid} 4ms")
        with ProcessCounters(proc.pid, mount=manual_mount.path) as pc:
            with pytest.raises(OSError) as info:
                pc.control()  # released: PIOCGETEVCTRL is EINVAL
            seen["errno"] = info.value.errno
            seen["counts"] = pc.read()

    out = profile(
        examples / "evc_profile", manual_mount, ["enable:u", "a:1", "off", "wait", "counts", "enable:u"],
        spins={"a": 1}, waits=[after_off],
    )  # fmt: skip
    gen = int(out[0].split()[1])
    assert out[1:] == ["a: 1", "off: 0 -", "counts: 1 0 0 0", f"enable: {gen + 1} -"]
    assert seen["errno"] == errno.EINVAL
    assert seen["counts"][1][0] == THRESHOLD  # counting stopped at the release


def test_raw_profenable_checks_its_tick_signal(manual_mount):
    """HWPERFD_PROFENABLE from a process that handles nothing: the tick signal
    must be a real-time one, hp_pad zero; the bare IRIX number is EFAULT."""
    args = structs.hwperf_profevctrarg_t.parse(pack_request({0: spec(0, structs.HWPERF_CNTEN_U)}, {0: 1000}))
    with open(manual_mount.path / "control", "rb") as f:
        for sig, pad in ((signal.SIGINT, 0), (65, 0), (40, 1)):
            data = structs.hwperfd_profenable_t.build(dict(hp_args=args, hp_sig=sig, hp_pad=pad))
            with pytest.raises(OSError) as info:
                fcntl.ioctl(f.fileno(), structs.HWPERFD_PROFENABLE, data)
            assert info.value.errno == errno.EINVAL


def test_exec_ends_profiling_and_the_new_image_gets_no_tick(manual_mount, examples):
    """IRIX's exec disabled counters set up for profiling; the ticks' handler
    is gone with the old image, and an uncaught real-time signal would kill
    the new one."""
    proc = subprocess.Popen(
        [str(examples / "evc_profile"), "enable:u", "exec"], stdout=subprocess.PIPE, text=True, env=manual_mount.env()
    )
    try:
        assert proc.stdout.readline().startswith("enable: ")
        assert proc.stdout.readline() == "execing\n"
        # It prints before it calls execve: time moved before that owes a tick
        # to the old image, which may land after the exec and kill the new one.
        assert wait_for(lambda: Path(f"/proc/{proc.pid}/comm").read_text() == "sleep\n")
        for _ in range(5):
            manual_mount.control(f"advance {proc.pid} 2ms")
            time.sleep(0.02)

        def released() -> bool:
            with ProcessCounters(proc.pid, mount=manual_mount.path) as pc:
                try:
                    pc.control()
                except OSError as exc:
                    return exc.errno == errno.EINVAL
                return False

        assert wait_for(released)
        assert proc.wait(timeout=10) == 0  # sleep ran to its end
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


BUCKET_WIDTHS = r"""
#include <stdio.h>
#include <string.h>
#include <sys/hwperfmacros.h>
#include <sys/profil.h>
#include <sys/syssgi.h>

static unsigned short u16[2] = {0xFFFF, 0x1234};
static unsigned int u32[2] = {0xFFFF, 0x1234};

int main(void)
{
    hwperf_profevctrarg_t args;
    struct prof r16 = {u16, sizeof u16[0], 1, 2}, r32 = {u32, sizeof u32[0], 1, 2}, off = {u16, 0, 0, 0};

    memset(&args, 0, sizeof args);
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_mode = HWPERF_CNTEN_U;
    args.hwp_ovflw_freq[0] = 200000;
    /* pr_scale 2: every tick in the region's first bucket, whatever the PC. */
    if (syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, &args, &r16, 1) <= 0)
        return 1;
    printf("ready\n");
    fflush(stdout);
    while (((volatile unsigned short *)u16)[0] != 0)
        ;
    printf("u16: %u %u\n", u16[0], u16[1]);  /* wrapped; the next bucket untouched */
    if (syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, &args, &off, 1) != 0)
        return 2;
    if (hwperf_profenable(&args, &r32, 1, PROF_UINT) <= 0)
        return 3;
    printf("ready\n");
    fflush(stdout);
    while (((volatile unsigned int *)u32)[0] != 0x10002)
        ;
    printf("u32: %u %u\n", u32[0], u32[1]);
    return 0;
}
"""


def test_buckets_are_16_bit_through_syssgi_and_32_bit_with_prof_uint(manual_mount, shared_tmp):
    src = shared_tmp / "bucket_widths.c"
    src.write_text(BUCKET_WIDTHS)
    exe = shared_tmp / "bucket_widths"
    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        ["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-I", str(root / "include"), str(src),
         str(root / "lib" / "irix" / "syssgi.c"), "-o", str(exe)],
        check=True,
    )  # fmt: skip
    proc = subprocess.Popen([str(exe)], stdout=subprocess.PIPE, text=True, env=manual_mount.env())
    try:
        lines = []
        for ms in (1, 3):
            assert proc.stdout.readline() == "ready\n"
            manual_mount.control(f"advance {proc.pid} {ms}ms")
            lines.append(proc.stdout.readline().rstrip("\n"))
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert lines == ["u16: 0 4660", "u32: 65538 4660"]


def _own_state(proc_fd: int) -> tuple:
    """This process's counters as /proc shows them: (generation, counts) and
    control words, or the errno each read gives."""
    out = []
    for cmd, size in ((structs.PIOCGETEVCTRS, structs.hwperf_cntr_t.sizeof()),
                      (structs.PIOCGETEVCTRL, structs.hwperf_eventctrl_t.sizeof())):  # fmt: skip
        buf = bytearray(size)
        try:
            out.append((fcntl.ioctl(proc_fd, cmd, buf, True), bytes(buf)))
        except OSError as exc:
            out.append(exc.errno)
    return tuple(out)


def test_random_profenable_susp_and_cont_get_an_errno_and_refusals_change_nothing(manual_mount):
    """Any hwperfd_profenable_t (odd events, modes, thresholds, signals, pad)
    and SUSP/CONT in any order: success or EINVAL/EBUSY, never EIO (an
    exception inside the daemon), and a refused call leaves the caller's
    counters as they were.  Ends with profiling off."""
    import os
    import random

    rng = random.Random(20261122)
    allowed = {errno.EINVAL, errno.EBUSY}
    size = structs.hwperfd_profenable_t.sizeof()
    request_size = structs.hwperf_profevctrarg_t.sizeof()
    signals = [-1, 0, 0, 1, 10, 33, 34, 40, 64, 65, 1 << 31 - 1, -(1 << 31)]
    refused = succeeded = 0
    log_from = len(manual_mount.log_text())
    with open(manual_mount.path / "control", "rb") as ctl, open(manual_mount.path / f"{os.getpid():05d}", "rb") as me:
        try:
            for _ in range(400):
                roll = rng.random()
                if roll < 0.15:
                    cmd, data = rng.choice((structs.HWIOC_PROF_CTR_SUSP, structs.HWIOC_PROF_CTR_CONT)), None
                elif roll < 0.25:
                    cmd, data = structs.HWPERFD_PROFENABLE, rng.randbytes(size)
                elif roll < 0.4:  # a sound request, so later calls meet profiling counters
                    good = pack_request({0: spec(0, structs.HWPERF_CNTEN_U)}, {0: THRESHOLD})
                    cmd, data = structs.HWPERFD_PROFENABLE, good + struct.pack("<ii", rng.choice((34, 40, 64)), 0)
                elif roll < 0.45:  # profiling off
                    cmd, data = structs.HWPERFD_PROFENABLE, bytes(request_size) + bytes(8)
                else:
                    args = struct.pack(
                        f"<{structs.HWPERF_EVENTMAX}H{structs.HWPERF_EVENTMAX}ll",
                        *[rng.choice((0, rng.getrandbits(16), spec(rng.randrange(40), rng.randrange(16))))
                          for _ in range(structs.HWPERF_EVENTMAX)],
                        *[rng.choice((0, 0, 1, 1000, THRESHOLD, -1, -(1 << 31), (1 << 31) - 1))
                          for _ in range(structs.HWPERF_EVENTMAX)],
                        rng.choice(signals),
                    )  # fmt: skip
                    assert len(args) == request_size
                    tail = struct.pack("<ii", rng.choice(signals), 0 if rng.random() < 0.9 else rng.choice((1, -1)))
                    cmd, data = structs.HWPERFD_PROFENABLE, args + tail
                before = _own_state(me.fileno())
                try:
                    if data is None:
                        fcntl.ioctl(ctl.fileno(), cmd)
                    else:
                        fcntl.ioctl(ctl.fileno(), cmd, data)
                    succeeded += 1
                except OSError as exc:
                    assert exc.errno in allowed, (cmd, data, exc)
                    assert _own_state(me.fileno()) == before
                    refused += 1
        finally:
            off = bytes(request_size) + struct.pack("<ii", 0, 0)
            fcntl.ioctl(ctl.fileno(), structs.HWPERFD_PROFENABLE, off)
    assert refused and succeeded
    assert "Traceback" not in manual_mount.log_text()[log_from:]
