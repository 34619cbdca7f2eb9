"""One user's fuzzer of every personality (tests/security/test_fuzz_all.py
starts 8 of them, each as its own uid).

    personality_fuzz.py MIPS_MOUNT INTEL_MOUNT SEED CALLS [SECONDS]

Makes CALLS calls (or as many as SECONDS allow), each drawn at random: IRIX PIOC* ioctls on the files of
itself, its children and pids near its own (the daemon may have given the
pid to another process since), on the R10000 mount; libcpc's transport
(bind, sample, preset, restart, enable, disable, release; LWP, pctx and CPU
targets) on both mounts; perfctr's vperfctr and gperfctr ioctls, some from
short-lived threads that leave their vperfctr behind; pctr's read and sets.
Payloads are random bytes or plausible requests.  Between calls it forks
children that make a few calls and exit (reaped at once or left as zombies
a while), and now and then one that execs this script again .
Signals a random request may ask for are ignored.

Each process (children too) prints one "key value" line per figure of its
own: calls, ok, errno NAME N, and
"unexpected PERSONALITY COMMAND ERRNO N" for an errno the personality's
documentation does not give that command (the test wants none).
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import signal
import struct
import sys
import threading
import time
from collections import Counter

import structs
from structs import cpc as cpc_abi
from structs import perfctr as pc_abi
from structs import pctr as pctr_abi

E = errno
# What each personality's documentation lets a call answer, past success
# (docs/irix.md and r10k_counters(5); docs/cpc.md; docs/perfctr.md;
# docs/pctr.md), plus what every call may answer: ENOTTY for a command the
# node does not know, EAGAIN when the daemon lacks resources or a per-user
# cap is reached (docs/trust.md), EINTR for a call an owed signal interrupts.
EVERY = {E.ENOTTY, E.EAGAIN, E.EINTR}
IRIX = EVERY | {E.EINVAL, E.EPERM, E.EBUSY, E.ESRCH, E.EFAULT, E.ENOENT}
CPC = EVERY | {E.EINVAL, E.EACCES, E.ESRCH, E.ENOTSUP}
PERFCTR = EVERY | {E.EINVAL, E.EPERM, E.EBUSY, E.ESRCH, E.EEXIST}
PCTR = EVERY | {E.EINVAL, E.EPERM, E.EBUSY, E.ENODEV}
OPEN = {E.ENOENT, E.EACCES, E.EPERM, E.ESRCH, E.EAGAIN, E.EMFILE}

PIOC = [getattr(structs, n) for n in ("PIOCENEVCTRS", "PIOCRELEVCTRS", "PIOCGETEVCTRS", "PIOCGETPREVCTRS",
                                      "PIOCGETEVCTRL", "PIOCSETEVCTRL", "PIOCSAVECCNTRS")]  # fmt: skip
CPCIO = [getattr(cpc_abi, f"HWPERFD_CPCIO_{n}") for n in ("BIND", "SAMPLE", "RELE", "PRESET", "RESTART", "ENABLE",
                                                          "DISABLE")]  # fmt: skip
PERFCTR_CMDS = [getattr(pc_abi, n) for n in (
    "PERFCTR_ABI", "PERFCTR_INFO", "PERFCTR_CPUS", "PERFCTR_CPUS_FORBIDDEN", "VPERFCTR_READ_SUM", "VPERFCTR_UNLINK",
    "VPERFCTR_CONTROL", "VPERFCTR_IRESUME", "VPERFCTR_READ_CONTROL", "VPERFCTR_READ_STATE", "VPERFCTR_ATTACH",
    "VPERFCTR_STATEPAGE", "GPERFCTR_CONTROL", "GPERFCTR_READ", "GPERFCTR_STOP", "GPERFCTR_START")]  # fmt: skip
PCTR_CMDS = [pctr_abi.PCIOCRD, *pctr_abi.PCIOCS]
CPC_EVENTS = ["PAPI_tot_cyc", "PAPI_tot_ins", "Cycles", "INST_RETIRED", "0x3c", "bogus", ""]
X86_SELS = [0x3C | 1 << 16 | 1 << 22, 0xC0 | 1 << 16 | 1 << 17 | 1 << 22, 0x3C | 1 << 22 | 1 << 20, 0x280000, 0]

stats: Counter[str] = Counter()
rng = random.Random()
files: dict[str, int] = {}  # what this process keeps open, by a name of its own
children: list[int] = []


def size_of(cmd: int) -> int:
    return (cmd >> 16) & 0x3FFF


def call(personality: str, allowed: set[int], fd: int, cmd: int, arg: bytes | int = 0) -> bytes | None:
    stats["calls"] += 1
    stats[f"calls {personality}"] += 1
    buf = bytearray(arg) if isinstance(arg, bytes) else arg  # libcpc's 3 KB: past fcntl's 1 KB for bytes
    try:
        result = fcntl.ioctl(fd, cmd, buf)
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        stats[f"errno {name}"] += 1
        if exc.errno not in allowed:
            stats[f"unexpected {personality} {cmd:#x} {name}"] += 1
        return None
    stats["ok"] += 1
    return bytes(buf) if isinstance(buf, bytearray) and result >= 0 else b""


def opened(key: str, path: str, flags: int) -> int | None:
    fd = files.get(key)
    if fd is not None:
        return fd
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        stats[f"open {errno.errorcode.get(exc.errno or 0)}"] += 1
        if exc.errno not in OPEN:
            stats[f"unexpected open {path.rsplit('/', 1)[-1]} {errno.errorcode.get(exc.errno or 0)}"] += 1
        return None
    files[key] = fd
    return fd


def close_some() -> None:
    for key in rng.sample(sorted(files), k=min(len(files), rng.randint(0, 3))):
        os.close(files.pop(key))


def payload(cmd: int, plausible: bytes | None = None) -> bytes | int:
    size = size_of(cmd)
    if not size:
        return rng.choice([0, os.getpid(), rng.randrange(1 << 31)])
    if plausible is not None and rng.random() < 0.7:
        return plausible[:size].ljust(size, b"\0")
    return rng.randbytes(size)


def irix(mips: str) -> None:
    pid = rng.choice([os.getpid()] * 3 + children[-3:] + [os.getpid() + rng.randint(-20, 20)])
    fd = opened(f"proc {pid}", f"{mips}/{pid:05d}", rng.choice([os.O_RDWR, os.O_RDONLY]))
    if fd is None:
        return
    cmd = rng.choice(PIOC)
    specs = {rng.randrange(32): structs.spec_word(rng.randrange(20), rng.choice([8, 8, 2, 0xA]), rng.random() < 0.2)
             for _ in range(rng.randint(0, 3))}  # fmt: skip
    plausible = struct.pack("<32h32ii", *[specs.get(i, 0) for i in range(32)], *([0] * 32), 0)
    arg = payload(cmd, plausible) if cmd != structs.PIOCSAVECCNTRS else rng.choice(children or [0])
    call("irix", IRIX, fd, cmd, arg)


def cpc(mount: str) -> None:
    fd = opened(f"cpc {mount}", f"{mount}/cpc", os.O_RDONLY)  # as libcpc opens it (0644)
    if fd is None:
        return
    cmd = rng.choice(CPCIO)
    target = rng.choice([cpc_abi.HWPERFD_CPC_LWP] * 4 + [cpc_abi.HWPERFD_CPC_PCTX, cpc_abi.HWPERFD_CPC_CPU, 7])
    head = {
        "ci_error": 0, "ci_subcode": 0, "ci_target": target, "ci_flags": rng.choice([0, 0, 1, 3]),
        "ci_pid": rng.choice([0, os.getpid(), *children[-2:], os.getpid() + rng.randint(-5, 5)]),
        "ci_id": rng.choice([0, threading.get_native_id(), 1, -1]), "ci_index": rng.randint(-1, 2),
        "ci_nreqs": rng.randint(0, 2), "ci_preset": rng.choice([0, 1 << 63]), "ci_hrtime": 0, "ci_tick": 0,
        "ci_data": [0] * cpc_abi.HWPERFD_CPC_MAXREQS,
    }  # fmt: skip
    out = call("cpc", CPC, fd, cmd, payload(cmd, cpc_abi.build_head(head) + rng.choice(cpc_requests())))
    if out is not None and len(out) >= cpc_abi.CPC_IO_HEAD_SIZE:
        err = cpc_abi.parse_head(out).ci_error
        stats[f"cpc error {errno.errorcode.get(err, err)}"] += 1
        if err and err not in CPC:
            stats[f"unexpected cpc-reply {cmd:#x} {errno.errorcode.get(err, err)}"] += 1


_requests: list[bytes] = []


def cpc_requests() -> list[bytes]:
    """A few sets of requests, built once (construct takes milliseconds)."""
    while len(_requests) < 16:
        reqs = [{"cr_event": rng.choice(CPC_EVENTS), "cr_preset": rng.choice([0, 2**64 - 100]),
                 "cr_flags": rng.choice([2, 2, 3, 6, 0x10]), "cr_nattrs": rng.choice([0, 0, 1]),
                 "cr_attr": [{"ka_name": rng.choice(["picnum", "umask", "x"]), "ka_val": rng.randint(0, 2)}] * 8}
                for _ in range(cpc_abi.HWPERFD_CPC_MAXREQS)]  # fmt: skip
        _requests.append(b"".join(cpc_abi.cpc_req.build(r) for r in reqs))
    return _requests


def vcontrol() -> bytes:
    n = rng.randint(0, 2)
    ctl = {
        "tsc_on": rng.randint(0, 1), "nractrs": n, "nrictrs": 0, "pmc_map": list(range(n)) + [0] * (18 - n),
        "evntsel": [rng.choice(X86_SELS) for _ in range(n)] + [0] * (18 - n), "evntsel_high": [0] * 20,
        "ireset": [0] * 18, "_reserved": [0] * 4,
    }  # fmt: skip
    return pc_abi.vperfctr_control.build({"si_signo": 0, "cpu_control": ctl, "preserve": 0,
                                          "flags": rng.choice([0, 0, 1]), "_reserved": [0] * 3})  # fmt: skip


def perfctr(intel: str) -> None:
    key = f"perfctr {rng.randrange(3)}"
    fd = opened(key, f"{intel}/perfctr", os.O_RDONLY)
    if fd is None:
        return
    if rng.random() < 0.1:
        # A thread makes a vperfctr and exits: its fd keeps it, orphaned.
        def orphan() -> None:
            if call("perfctr", PERFCTR, fd, pc_abi.VPERFCTR_ATTACH, pc_abi.vperfctr_attach.build(
                    {"tid": 0, "creat": 1})) is not None:  # fmt: skip
                call("perfctr", PERFCTR, fd, pc_abi.VPERFCTR_CONTROL, vcontrol())

        t = threading.Thread(target=orphan)
        t.start()
        t.join()
        return
    cmd = rng.choice(PERFCTR_CMDS)
    plausible = None
    if cmd == pc_abi.VPERFCTR_ATTACH:
        tid = rng.choice([0, threading.get_native_id(), *children[-2:], os.getpid() + rng.randint(-5, 5)])
        plausible = pc_abi.vperfctr_attach.build({"tid": tid, "creat": rng.randint(0, 1)})
    elif cmd == pc_abi.VPERFCTR_CONTROL:
        plausible = vcontrol()
    call("perfctr", PERFCTR, fd, cmd, payload(cmd, plausible))


def pctr(intel: str, mips: str) -> None:
    mount = intel if rng.random() < 0.8 else mips
    fd = opened(f"pctr {mount}", f"{mount}/pctr", os.O_RDONLY)
    if fd is not None:
        cmd = rng.choice(PCTR_CMDS)
        call("pctr", PCTR, fd, cmd, payload(cmd, struct.pack("I", rng.choice(X86_SELS))))


def reap(block: bool) -> None:
    for pid in list(children):
        try:
            done, _ = os.waitpid(pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            children.remove(pid)


def fork(mips: str, intel: str, script: str) -> None:
    if len(children) >= 4:
        reap(block=True)
    stats["forks"] += 1
    pid = os.fork()
    if pid == 0:
        try:
            files.clear()  # the parent's descriptors stay open here, unused
            children.clear()
            stats.clear()  # the parent's figures are the parent's to print
            if rng.random() < 0.05:
                os.execv(sys.executable, [sys.executable, script, mips, intel, str(rng.randrange(1 << 30)), "5"])
            for _ in range(rng.randint(1, 6)):
                step(mips, intel, script, nested=True)
            report()
        finally:
            os._exit(0)
    children.append(pid)
    if rng.random() < 0.7:
        reap(block=False)


def step(mips: str, intel: str, script: str, nested: bool = False) -> None:
    roll = rng.random()
    if roll < 0.3:
        irix(mips)
    elif roll < 0.5:
        cpc(rng.choice([mips, intel]))
    elif roll < 0.8:
        perfctr(intel)
    elif roll < 0.93:
        pctr(intel, mips)
    elif roll < 0.98 or nested:
        close_some()
    else:
        fork(mips, intel, script)


def main() -> int:
    mips, intel, seed, calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    deadline = time.monotonic() + float(sys.argv[5]) if len(sys.argv) > 5 else float("inf")
    rng.seed(seed)
    for sig in range(1, signal.NSIG):
        if sig not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            try:
                signal.signal(sig, signal.SIG_IGN)
            except (OSError, ValueError):
                pass
    script = os.path.abspath(__file__)
    while stats["calls"] < calls and (stats["calls"] % 64 or time.monotonic() < deadline):
        step(mips, intel, script)
    reap(block=True)
    report()
    return 0


def report() -> None:
    """Every process prints its own figures (the test adds them up)."""
    sys.stdout.write("".join(f"{key} {value}\n" for key, value in sorted(stats.items())))
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
