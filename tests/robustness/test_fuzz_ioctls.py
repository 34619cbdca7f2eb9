"""Bad input: every ioctl with random, truncated and oversized payloads, random
command numbers, random orderings of calls from several processes.

FUSE copies exactly _IOC_SIZE(cmd) bytes in or out, so a "truncated" or
"oversized" payload is the same type letter and number with another size or
direction: hwperfd must answer ENOTTY (it knows the command by its whole
number), never EIO.  Payloads of the right size carry random bytes or random
but plausible requests: each call must end in a result or one of the errnos
r10k_counters(5) gives the command.  The daemon must stay up, log no
traceback, and counts must never go backwards within one generation.

Runs on a mount of its own, under the manual clock.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import subprocess
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import structs
from hwperfd.client import Control, pack_request
from tests.conftest import NOBODY
from tests.robustness.helpers import (
    BROKEN,
    Decoys,
    Figures,
    daemon_alive,
    errname,
    own_mount,
    publish,
)

PROC_COMMANDS = {
    name: getattr(structs, name)
    for name in ("PIOCENEVCTRS", "PIOCRELEVCTRS", "PIOCGETEVCTRS", "PIOCGETPREVCTRS", "PIOCGETEVCTRL",
                 "PIOCSETEVCTRL", "PIOCSAVECCNTRS", "HWPERFD_PIOCENEVCTRSEX", "HWPERFD_PIOCGETEVCTRLEX",
                 "PIOCENEVCTRSEX", "PIOCGETEVCTRLEX")
}  # fmt: skip
CONTROL_COMMANDS = {
    name: getattr(structs, name)
    for name in ("HWIOC_PROFENABLE", "HWIOC_ENSYSCNTRS", "HWIOC_GET_CPUCNTRS", "HWIOC_PROF_CTR_SUSP",
                 "HWIOC_PROF_CTR_CONT", "HWIOC_RELSYSCNTRS", "HWIOC_GET_SYSCNTRS", "HWIOC_GET_SYSEVCTRL",
                 "HWIOC_SET_SYSEVCTRL")
}  # fmt: skip
COMMANDS = {**PROC_COMMANDS, **CONTROL_COMMANDS}
KNOWN = set(COMMANDS.values())
E = errno
# What a root caller may get from each command on the right kind of file.
ALLOWED = {
    "PIOCENEVCTRS": {E.EINVAL, E.EBUSY, E.ESRCH},
    "PIOCRELEVCTRS": {E.EINVAL, E.ESRCH},
    "PIOCGETEVCTRS": {E.EINVAL, E.ESRCH},
    "PIOCGETPREVCTRS": {E.EINVAL, E.ESRCH},
    "PIOCGETEVCTRL": {E.EINVAL, E.ESRCH},
    "PIOCSETEVCTRL": {E.EINVAL, E.ESRCH},
    "PIOCSAVECCNTRS": {E.ESRCH, E.EINVAL},  # EINVAL: the pid named is not the target's child
    "HWPERFD_PIOCENEVCTRSEX": {E.EINVAL, E.EBUSY, E.ESRCH},
    "HWPERFD_PIOCGETEVCTRLEX": {E.EINVAL, E.ESRCH},
    # IRIX's pointer-carrying forms: a FUSE server cannot follow the pointers.
    "PIOCENEVCTRSEX": {E.EFAULT},
    "PIOCGETEVCTRLEX": {E.EFAULT},
    "HWIOC_PROFENABLE": {E.EFAULT},  # the buffers are the caller's: libhwperf's HWPERFD_PROFENABLE
    "HWIOC_ENSYSCNTRS": {E.EINVAL, E.EBUSY},
    "HWIOC_GET_CPUCNTRS": set(),
    "HWIOC_PROF_CTR_SUSP": set(),  # the caller's own counters: always 0
    "HWIOC_PROF_CTR_CONT": set(),
    "HWIOC_RELSYSCNTRS": {E.EINVAL},
    "HWIOC_GET_SYSCNTRS": {E.EINVAL},
    "HWIOC_GET_SYSEVCTRL": {E.EINVAL},
    "HWIOC_SET_SYSEVCTRL": {E.EINVAL},
}
# Smallest successful result: a generation is positive; releases return 0;
# GET_CPUCNTRS returns 0 for an invalid cpuid.
MIN_OK = {"PIOCRELEVCTRS": 0, "PIOCSAVECCNTRS": 0, "HWIOC_RELSYSCNTRS": 0, "HWIOC_GET_CPUCNTRS": 0,
          "HWIOC_PROF_CTR_SUSP": 0, "HWIOC_PROF_CTR_CONT": 0}  # fmt: skip
REQUEST_SIZE = structs.hwperf_profevctrarg_t.sizeof()
UNIGNORABLE = (signal.SIGKILL, signal.SIGSTOP)
SYSMODE = structs.HWPERF_CM_SYSMODE


def vfs_handled(cmd: int) -> bool:
    """Numbers the VFS answers itself before FUSE sees them (FIOCLEX, FIONBIO,
    FIFREEZE, FICLONE, FS_IOC_*, FIBMAP ...): not hwperfd's to answer."""
    return (cmd >> 8) & 0xFF in (0x00, 0x15, ord("T"), ord("X"), ord("f"), 0x94)


def safe_request(data: bytes) -> bytes:
    """Never ask for an overflow signal the decoys cannot ignore."""
    sig = int.from_bytes(data[-4:], "little", signed=True)
    return data[:-4] + b"\0\0\0\0" if sig in UNIGNORABLE else data


def saved_counts(arg: int) -> bytes:
    """A hwperf_profevctraux_t from one number: often nothing saved, else a
    generation (sometimes 0 or negative) and counts far from wrapping."""
    if arg % 2:
        return bytes(structs.hwperf_profevctraux_t.sizeof())
    generation = 0 if arg % 3 == 0 else arg % 200 - 5
    counts = [(arg >> (i % 16)) % 1_000_000 for i in range(32)]
    return structs.hwperf_profevctraux_t.build(dict(hwp_aux_gen=generation, hwp_aux_cntr=dict(hwp_evctr=counts)))


# -- strategies --------------------------------------------------------------

words = st.builds(
    structs.spec_word, st.integers(0, 20), st.integers(0, 15), st.booleans()
)
plausible_requests = st.builds(
    lambda specs, thresholds, sig: pack_request(specs, thresholds, sig),
    st.dictionaries(st.integers(0, 31), words, max_size=6),
    st.dictionaries(st.integers(0, 31), st.integers(-(2**31), 2**31 - 1), max_size=3),
    st.integers(-(2**31), 2**31 - 1).filter(lambda s: s not in UNIGNORABLE),
)
requests = st.one_of(st.binary(min_size=REQUEST_SIZE, max_size=REQUEST_SIZE).map(safe_request), plausible_requests)
targets = st.sampled_from(["decoy0", "decoy1", "control"])
exact_calls = st.tuples(st.just("exact"), targets, st.sampled_from(sorted(COMMANDS)), requests, st.integers(0, 2**31 - 1))
mangled_calls = st.builds(
    lambda target, name, direction, size, data: ("mangled", target, name, direction, size, data),
    targets, st.sampled_from(sorted(COMMANDS)), st.integers(0, 3),
    st.one_of(st.integers(0, 300), st.integers(0, 0x3FFF)), st.binary(max_size=64),
)  # fmt: skip
random_calls = st.tuples(
    st.just("random"), targets,
    st.integers(0, 2**32 - 1).filter(lambda c: c not in KNOWN and not vfs_handled(c)),
)  # fmt: skip
advances = st.tuples(st.just("advance"), st.sampled_from(["decoy0", "decoy1", "cpu0", "cpu1"]),
                     st.integers(0, 20_000), st.integers(0, 20_000))  # fmt: skip
reads = st.tuples(st.just("read"), targets, st.integers(0, 2))
writes = st.tuples(st.just("write"), targets, st.binary(min_size=1, max_size=80))
calls = st.one_of(exact_calls, mangled_calls, random_calls, advances, reads, writes)


# -- fixtures ----------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_mount(shared_tmp):
    with own_mount(shared_tmp, "fuzz") as mount:
        yield mount


@pytest.fixture(scope="module")
def decoys(fuzz_mount):
    d = Decoys(2)
    yield d
    d.close()


class Session:
    """Open files, the figures, and what reads have seen so far."""

    def __init__(self, mount, decoys, figures):
        self.mount = mount
        self.figures = figures
        self.pids = {"decoy0": decoys.pids[0], "decoy1": decoys.pids[1]}
        self.fds = {name: os.open(mount.path / f"{pid:05d}", os.O_RDWR) for name, pid in self.pids.items()}
        self.fds["control"] = os.open(mount.path / "control", os.O_RDWR)
        self.seen: dict[tuple, tuple[int, ...]] = {}
        self.violations: list[str] = []

    def close(self):
        for fd in self.fds.values():
            os.close(fd)

    def ioctl(self, fd: int, cmd: int, data: bytes | int):
        """(result, out bytes) or raise OSError; the buffer always covers _IOC_SIZE."""
        if isinstance(data, int):
            return fcntl.ioctl(fd, cmd, data), b""
        size = structs.ioc_size(cmd)
        buf = bytearray(max(size, 1))
        buf[: min(len(data), size)] = data[:size]
        return fcntl.ioctl(fd, cmd, buf, True), bytes(buf)

    def expect(self, what, outcome, allowed: set[int], min_ok: int | None):
        """``outcome`` is an int result or an OSError."""
        if isinstance(outcome, OSError):
            if outcome.errno in allowed:
                self.figures.answered(outcome.errno)  # EFAULT is right for IRIX's pointer forms
            else:
                self.figures.failed(outcome.errno)
            verdict = "broken" if outcome.errno in BROKEN else "unexpected"
            assert outcome.errno in allowed, f"{what}: {verdict} {errname(outcome.errno)}"
        else:
            self.figures.ok()
            assert min_ok is not None and outcome >= min_ok, f"{what}: result {outcome}"

    def call(self, fd, cmd, data):
        try:
            return self.ioctl(fd, cmd, data)
        except OSError as exc:
            return exc, b""

    def monotonic(self, key, gen, counts):
        key = key + (gen,)
        before = self.seen.get(key)
        if before is not None and any(a < b for a, b in zip(counts, before)):
            self.violations.append(f"{key}: {before} -> {counts}")
        self.seen[key] = counts

    def run(self, step):
        kind, target = step[0], step[1]
        node = "control" if target == "control" else "proc"
        if kind == "exact":
            _, _, name, request, arg = step
            cmd = COMMANDS[name]
            right = (name in CONTROL_COMMANDS) == (node == "control")
            direction = structs.ioc_dir(cmd)
            if direction == 0:
                data = arg
            elif name == "HWIOC_GET_CPUCNTRS":
                data = (arg % 5 - 1).to_bytes(4, "little", signed=True) + request[4:]
            elif name == "HWPERFD_PIOCENEVCTRSEX":
                data = request + bytes(4) + saved_counts(arg)
            else:
                data = request
            result, _ = self.call(self.fds[target], cmd, data)
            if right:
                self.expect(step[:3], result, ALLOWED[name], MIN_OK.get(name, 1))
            else:
                self.expect(step[:3], result, {errno.ENOTTY}, None)
        elif kind == "mangled":
            _, _, name, direction, size, data = step
            good = COMMANDS[name]
            cmd = (direction << 30) | (size << 16) | (good & 0xFFFF)
            if cmd in KNOWN:
                return
            result, _ = self.call(self.fds[target], cmd, 0 if direction == 0 else data)
            self.expect(("mangled", hex(cmd)), result, {errno.ENOTTY}, None)
        elif kind == "random":
            cmd = step[2]
            result, _ = self.call(self.fds[target], cmd, 0 if structs.ioc_dir(cmd) == 0 else b"")
            self.expect(("random", hex(cmd)), result, {errno.ENOTTY}, None)
        elif kind == "advance":
            _, which, user_us, system_us = step
            if which.startswith("cpu"):
                self.mount.control(f"advance-cpu {which[3:]} {user_us}us {system_us}us")
            else:
                self.mount.control(f"advance {self.pids[which]} {user_us}us {system_us}us")
        elif kind == "read":
            self.read(target, step[2])
        elif kind == "write":
            try:
                os.write(self.fds[target], step[2])
                self.figures.ok()
            except OSError as exc:
                self.figures.failed(exc.errno)
                assert exc.errno == errno.EINVAL, errname(exc.errno)

    def read(self, target, which):
        if target != "control":
            result, out = self.call(self.fds[target], structs.PIOCGETPREVCTRS, b"")
            self.expect(("read", target), result, {errno.EINVAL, errno.ESRCH}, 1)  # ESRCH: never used (piocgetevctrs)
            if not isinstance(result, OSError):
                mon = structs.hwperf_prusage_t.parse(out).pu_cpu_mon
                self.monotonic((target, mon.cm_flags & SYSMODE), result, tuple(mon.cm_evctr))
        elif which == 2:
            result, out = self.call(self.fds[target], structs.HWIOC_GET_SYSCNTRS, b"")
            self.expect(("read", "system"), result, {errno.EINVAL}, 1)
            if not isinstance(result, OSError):
                self.monotonic(("system",), result, tuple(structs.hwperf_cntr_t.parse(out).hwp_evctr))
        else:
            arg = structs.hwperf_cpucntrs_arg_t.build(dict(cpuid=which, cntr=dict(hwp_evctr=[0] * 32)))
            result, out = self.call(self.fds[target], structs.HWIOC_GET_CPUCNTRS, arg)
            self.expect(("read", "cpu"), result, set(), 0)
            if not isinstance(result, OSError) and result > 0:
                counts = structs.hwperf_cpucntrs_arg_t.parse(out).cntr.hwp_evctr
                self.monotonic(("cpu", which), result, tuple(counts))


# -- tests -------------------------------------------------------------------


def test_random_calls_in_random_order_get_a_result_or_an_errno(fuzz_mount, decoys):
    figures = Figures("fuzz: hypothesis, one process")
    session = Session(fuzz_mount, decoys, figures)
    sequences = 0

    @settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(calls, min_size=4, max_size=40))
    def random_sequence(steps):
        nonlocal sequences
        sequences += 1
        for step in steps:
            session.run(step)
        assert not session.violations, session.violations[:5]

    try:
        random_sequence()
    finally:
        session.close()
        figures.notes["sequences"] = sequences
        figures.notes["counts went backwards"] = len(session.violations)
        figures.crash("daemon died", 0 if daemon_alive(fuzz_mount) else 1)
        publish(figures)
    assert figures.total_crashes == 0
    assert not session.violations


def test_several_processes_fuzz_at_once_while_time_moves(fuzz_mount, decoys, raw_fuzz):
    """Three root fuzzers and an unprivileged one call in random orders on the
    decoys, on their own and each other's files and on the control node,
    while the test moves every clock.  Each fuzzer checks that what it reads
    never goes backwards within a generation."""
    figures = Figures("fuzz: raw bytes, 4 processes at once")
    seconds, iterations = 5, 60_000
    fuzzers = [
        subprocess.Popen(
            prefix + [str(raw_fuzz), str(seed), str(iterations), str(seconds)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        for seed, prefix in ((11, []), (12, []), (13, []), (14, NOBODY))
    ]
    pids = decoys.pids + [f.pid for f in fuzzers]
    paths = [fuzz_mount.path / "control"] + [fuzz_mount.path / f"{pid:05d}" for pid in pids]
    for f in fuzzers:  # the unprivileged one will open only its own file (the rest is root's, 0600)
        f.stdin.write("".join(f"{p}\n" for p in paths) + "\n")
        f.stdin.flush()
    advances = 0
    with Control(mount=fuzz_mount.path) as control:
        while any(f.poll() is None for f in fuzzers):
            for pid in pids:
                try:
                    control.advance(pid, 300_000, 200_000)
                    advances += 1
                except OSError as exc:
                    assert exc.errno == errno.EINVAL  # a fuzzer that has just exited
            for cpu in (0, 1):
                control.advance_cpu(cpu, 200_000, 500_000)
                advances += 1
            time.sleep(0.005)
    extras, complaints = {}, []
    for f in fuzzers:
        out, err = f.communicate(timeout=30)
        assert f.returncode == 0, err
        for key, value in figures.merge_raw(out).items():  # EIO & co. count as crashes
            extras[key] = extras.get(key, 0) + value
        complaints += err.splitlines()[:5]
    figures.crash("daemon died", 0 if daemon_alive(fuzz_mount) else 1)
    figures.notes.update(
        {
            "clock advances meanwhile": advances,
            "monitored reads": extras.get("reads", 0),
            "counts went backwards": extras.get("violations", 0),
            "unexpected answers": extras.get("unexpected", 0),
            "files refused at open (unprivileged fuzzer)": extras.get("open-EACCES", 0),
        }
    )
    publish(figures)
    assert not complaints, complaints
    assert extras.get("bad", 0) == 0 and figures.total_crashes == 0
    assert extras.get("violations", 0) == 0
    assert extras.get("unexpected", 0) == 0
    # the unprivileged fuzzer opens its own file and, read-only (0644), the control node
    assert extras.get("opened", 0) == 3 * len(paths) + 2
    assert figures.calls > 2_000


def test_the_daemon_survived_fuzzing_with_a_clean_log(fuzz_mount, decoys):
    assert daemon_alive(fuzz_mount)
    log = fuzz_mount.log_text()
    assert "Traceback" not in log and "Exception ignored" not in log, log
    # And it still counts exactly: a decoy, re-armed from scratch.
    from hwperfd.client import ProcessCounters, user

    with Control(mount=fuzz_mount.path) as control:
        try:
            control.release_system()
        except OSError:
            pass
    with ProcessCounters(decoys.pids[0], mount=fuzz_mount.path) as pc:
        try:
            pc.release()
        except OSError:
            pass
        gen = pc.enable({0: user(0)})
        fuzz_mount.control(f"advance {decoys.pids[0]} 1ms")
        assert pc.read() == (gen, (200_000,) + (0,) * 31)
