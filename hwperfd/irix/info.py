"""IRIX proc(4)'s informational ioctls, filled from what Linux reports.

Counter tools call them beside the counter ioctls: PAPI's init reads
PIOCPSINFO, a tool falls back to PIOCUSAGE, a runtime reads its CPU time
with PIOCGETPTIMER.  Who may ask follows Linux's /proc: what stat and status
show (PIOCPSINFO, PIOCCRED, PIOCGETPTIMER, PIOCUSAGE less its I/O counts)
anyone may read; the address-space map (PIOCNMAP, PIOCMAP) and I/O counts
need the ptrace-read access /proc/<pid>/maps and io need.
"""

from __future__ import annotations

import dataclasses
import errno
from collections.abc import Callable
from fractions import Fraction

import structs
from hwperfd.counters.kernel import CounterKernel
from hwperfd.host import processes
from hwperfd.irix import marshal
from hwperfd.irix.calls import IoctlCall

Reply = tuple[int, bytes]

# proc(4): "only the PIOCACINFO, PIOCPSINFO, PIOCUSAGE, PIOCGETPTIMER and
# PIOCCRED commands may be specified to ioctl(2) for /proc/pinfo files".
PINFO_COMMANDS = frozenset({structs.PIOCPSINFO, structs.PIOCUSAGE, structs.PIOCGETPTIMER, structs.PIOCCRED})

_PSINFO = structs.prpsinfo_t.compile()
_PRUSAGE = structs.prusage_t.compile()
_PRMAP = structs.prmap_t.compile()
_PRCRED = structs.prcred_t.compile()
_TIMERS = structs.prtimers_t

# Linux stat letter -> IRIX (pr_state, pr_sname)
_STATES = {
    "R": (structs.SRUN, "R"),
    "Z": (structs.SZOMB, "Z"),
    "X": (structs.SZOMB, "Z"),
    "T": (structs.SSTOP, "T"),
    "t": (structs.SSTOP, "T"),
}
_SLEEPING = (structs.SSLEEP, "S")  # S, D, I, and anything newer
_REALTIME = frozenset({1, 2, 6})  # SCHED_FIFO, SCHED_RR, SCHED_DEADLINE


def _gone(pid: int) -> OSError:
    return OSError(errno.ESRCH, f"pid {pid} is gone")


def _timespec(ns: int) -> dict:
    return dict(tv_sec=ns // 1_000_000_000, tv_nsec=ns % 1_000_000_000)


def _text(value: str, size: int) -> str:
    """At most size - 1 bytes of UTF-8 (the field keeps a NUL), whole characters only."""
    return value.encode()[: size - 1].decode("utf-8", "ignore")


def may_trace(call: IoctlCall, pid: int) -> bool:
    """Linux's PTRACE_MODE_READ_FSCREDS test, which /proc/<pid>/maps and io
    apply: root, or the caller's filesystem uid and gid equal the target's
    real, effective and saved ones.  (The target's dumpable flag, which Linux
    also checks, is not visible from /proc.)"""
    if call.uid == 0:
        return True
    creds = processes.read_credentials(pid)
    if creds is None:
        raise _gone(pid)
    return all(u == call.uid for u in creds.uids[:3]) and all(g == call.gid for g in creds.gids[:3])


class InfoIoctls:
    """Decode, check, read the host, encode.  Raises OSError(errno) only."""

    def __init__(self, kernel: CounterKernel) -> None:
        self.kernel = kernel
        self.commands: dict[int, Callable[[int, IoctlCall], Reply]] = {
            structs.PIOCPSINFO: self._psinfo,
            structs.PIOCUSAGE: self._usage,
            structs.PIOCGETPTIMER: self._timers,
            structs.PIOCCRED: self._cred,
            structs.PIOCNMAP: self._nmap,
            structs.PIOCMAP: self._map,
        }

    def _psinfo(self, pid: int, call: IoctlCall) -> Reply:
        ps = processes.read_psinfo(pid)
        if ps is None:
            raise _gone(pid)
        state, sname = _STATES.get(ps.state, _SLEEPING)
        running = ps.state == "R"
        return 0, _PSINFO.build(
            dict(
                pr_state=state,
                pr_sname=ord(sname),
                pr_zomb=int(state == structs.SZOMB),
                pr_nice=ps.nice + 20,  # IRIX: 0..39, 20 normal
                pr_flag=0,
                pr_uid=ps.uid,
                pr_gid=ps.gid,
                pr_pid=ps.pid,
                pr_ppid=ps.ppid,
                pr_pgrp=ps.pgid,
                pr_sid=ps.sid,
                pr_addr=0,
                pr_size=ps.size_pages,
                pr_rssize=ps.rss_pages,
                pr_wchan=0,
                pr_start=_timespec(ps.start_time_ns_epoch),
                pr_time=_timespec(ps.user_ns + ps.system_ns),
                pr_pri=ps.priority,
                pr_oldpri=ps.priority,
                pr_cpu=0,
                pr_ttydev=ps.tty_nr if ps.tty_nr else structs.PRNODEV,
                pr_clname="RT" if ps.policy in _REALTIME else "TS",
                # IRIX's u_comm: the exec'd file's basename up to PRCOMSIZ - 1
                # bytes, not Linux's 15 (PAPI sizes its tables by it).
                pr_fname=_text(ps.exec_name or ps.comm, structs.PRCOMSIZ),
                pr_psargs=_text(" ".join(ps.args) or ps.comm, structs.PRARGSZ),
                pr_spare1=0,
                pr_sonproc=ps.processor % len(self.kernel.cpus) if running else -1,
                pr_ctime=_timespec(ps.children_ns),
                pr_shareuid=0,
                pr_spid=0,
                pr_qtime=_timespec(0),
                pr_wname="",
                pr_thds=ps.threads,
                pr_fill=[0] * 10,
            )
        )

    def usage(self, pid: int) -> processes.Usage | None:
        """The host's usage of ``pid`` with the CPU times of the clock its
        counts come from (the manual clock's time under that clock), so that
        PIOCGETPREVCTRS's pu_utime and pu_stime agree with the counts beside
        them.  PIOCUSAGE and PIOCGETPTIMER report the host's, as ps(1) does."""
        usage = processes.read_usage(pid)
        times = self.kernel.time.process_times(pid) if usage is not None else None
        if usage is None or times is None:
            return usage
        return dataclasses.replace(usage, user_ns=times[0], system_ns=times[1])

    def _usage(self, pid: int, call: IoctlCall) -> Reply:
        usage = processes.read_usage(pid)
        if usage is None:
            raise _gone(pid)
        if not may_trace(call, pid):
            # /proc/<pid>/io is the caller's to read only with ptrace access.
            usage = dataclasses.replace(
                usage, read_bytes=0, write_bytes=0, syscr=0, syscw=0, inblock=0, oublock=0, syscalls=0
            )
        return 0, _PRUSAGE.build(marshal.prusage_fields(usage, self.tlb_misses(pid, usage)))

    def tlb_misses(self, pid: int, usage: processes.Usage | None) -> tuple[int, int]:
        """IRIX's pu_utlb/pu_ktlb have no Linux source: take them from the
        emulated CPU, at the process's profile rate over its CPU time."""
        if usage is None:
            return 0, 0
        rate = self.kernel.profile(pid).rate("tlb_misses") * self.kernel.cpus.mhz / 1000
        return int(Fraction(usage.user_ns) * rate), int(Fraction(usage.system_ns) * rate)

    def _timers(self, pid: int, call: IoctlCall) -> Reply:
        ticks = processes.read_cpu_ticks(pid)
        waits = processes.read_wait_times(pid)
        times = processes.cpu_times_from_ticks(pid, *ticks) if ticks else None
        if times is None or waits is None:
            raise _gone(pid)
        ns = [0] * structs.MAX_PROCTIMER
        ns[structs.AS_USR_RUN] = times.user_ns
        ns[structs.AS_SYS_RUN] = times.system_ns
        ns[structs.AS_RUNQ_WAIT], ns[structs.AS_BIO_WAIT] = waits
        return 0, _TIMERS.build([_timespec(v) for v in ns])

    def _cred(self, pid: int, call: IoctlCall) -> Reply:
        creds = processes.read_credentials(pid)
        if creds is None:
            raise _gone(pid)
        (ruid, euid, suid, _), (rgid, egid, sgid, _) = creds.uids, creds.gids
        return 0, _PRCRED.build(
            dict(
                pr_euid=euid, pr_ruid=ruid, pr_suid=suid, pr_egid=egid, pr_rgid=rgid, pr_sgid=sgid,
                pr_ngroups=creds.groups,
            )
        )  # fmt: skip

    def _maps(self, pid: int, call: IoctlCall) -> list[processes.Mapping]:
        if not may_trace(call, pid):
            raise OSError(errno.EACCES, f"pid {call.pid} may not read the address space of pid {pid}")
        maps = processes.read_maps(pid)
        if maps is None:
            raise _gone(pid)
        return maps

    def _nmap(self, pid: int, call: IoctlCall) -> Reply:
        return 0, len(self._maps(pid, call)).to_bytes(4, "little")

    def _map(self, pid: int, call: IoctlCall) -> Reply:
        # Only the entries written are copied to the caller: PIOCNMAP + 1
        # entries of buffer are enough, as on IRIX.
        maps = self._maps(pid, call)[: structs.PRMAPMAX - 1]
        out = bytearray()
        for m in maps:
            out += _PRMAP.build(
                dict(pr_vaddr=m.start, pr_size=m.end - m.start, pr_off=m.offset, pr_mflags=_mflags(m), pr_fill=[0] * 4)
            )
        out += bytes(structs.prmap_t.sizeof())
        return 0, bytes(out)


def _mflags(m: processes.Mapping) -> int:
    flags = 0
    letters = (("r", structs.MA_READ), ("w", structs.MA_WRITE), ("x", structs.MA_EXEC), ("s", structs.MA_SHARED))
    for letter, bit in letters:
        if letter in m.perms:
            flags |= bit
    if m.path == "[heap]":
        flags |= structs.MA_BREAK
    elif m.path == "[stack]":
        flags |= structs.MA_STACK
    return flags


__all__ = ["PINFO_COMMANDS", "InfoIoctls", "may_trace"]
