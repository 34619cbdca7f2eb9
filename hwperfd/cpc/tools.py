"""cputrack(1) and cpustat(1M): Solaris's libcpc tools, on ``<mount>/cpc``.

Options, event specifications and output follow the Solaris pages (and
illumos's usr/src/cmd/cpc): ``-c`` takes ``[picN=]event[,attr[N][=val]]...``
with the ``nouser`` and ``sys`` tokens, each request counting user mode
unless told otherwise; rows are ``%7.3f`` seconds since start, the LWP or
CPU, the event ("tick", "exit", "fork", "exec", "total", ...), optionally
the virtual tick, and one ``%9d`` column per request under ``picN``
headings.  Both tools speak the same ioctls as libcpc.

Where Linux differs (docs/cpc.md): cputrack follows its processes by
looking at them every interval (Solaris's libpctx stopped them at each fork,
exec and exit), so a child that forks and exits within one interval is not
seen; execs it learns from the daemon, which keeps the values at each (a
sample with HWPERFD_CPC_SAMPLE_EXECS answers them first); LWP ids are 1
for a process's first thread and the Linux thread id for the others.
Counts at exit are exact: the daemon keeps an exited LWP's final values
for the tool that bound it.
"""

from __future__ import annotations

import errno
import fcntl
import getopt
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from structs import cpc as abi

TICK = "tick"  # CPC_TICKREG_NAME on x86 ("%tick" on SPARC)


class Exit(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


class SpecError(ValueError):
    """A -c specification cpc_strtoset refuses (its message)."""


class CallError(OSError):
    def __init__(self, err: int, subcode: int) -> None:
        super().__init__(err, os.strerror(err))
        self.subcode = subcode


SUBCODE_TEXT = {
    abi.CPC_INVALID_EVENT: "Unknown event",
    abi.CPC_INVALID_PICNUM: "Invalid counter number",
    abi.CPC_INVALID_ATTRIBUTE: "Unknown attribute",
    abi.CPC_ATTRIBUTE_OUT_OF_RANGE: "Attribute out of range",
    abi.CPC_RESOURCE_UNAVAIL: "Hardware resource unavailable",
    abi.CPC_PIC_NOT_CAPABLE: "Counter cannot count requested event",
    abi.CPC_REQ_INVALID_FLAGS: "Invalid flags in a request",
    abi.CPC_CONFLICTING_REQS: "Requests conflict with each other",
    abi.CPC_ATTR_REQUIRES_PRIVILEGE: "Attribute requires the cpc_cpu privilege",
    abi.CPC_PBIND_FAILED: "Couldn't bind LWP to requested processor",
    abi.CPC_HV_NO_ACCESS: "Hypervisor event access denied",
}


def node_path() -> str:
    return os.path.join(os.environ.get("HWPERFD_MOUNT") or "/run/hwperfd", abi.CPC_NODE)


def strtol0(text: str, whole: bool = False) -> int:
    """strtol(text, NULL, 0): the longest numeric prefix, 0 if none; with
    ``whole``, 0 unless the number runs to the end (a raw event code)."""
    s = text.lstrip() if whole else text.strip()
    sign = -1 if s.startswith("-") else 1
    s = s.lstrip("+-")
    base, digits = 10, "0123456789"
    if s[:2].lower() == "0x":
        base, digits, s = 16, "0123456789abcdefABCDEF", s[2:]
    elif s.startswith("0"):
        base, digits = 8, "01234567"
    n = 0
    while n < len(s) and s[n] in digits:
        n += 1
    if whole and n != len(s):
        return 0
    return sign * int(s[:n], base) if n else 0


@dataclass
class Request:
    event: str
    flags: int = abi.CPC_COUNT_USER
    attrs: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class EventSet:
    spec: str
    requests: list[Request]

    @property
    def header(self) -> str:
        # setgrp.c: "%8s%-2d " of "pic" and the picnum, cut to 10 characters
        return "".join(f"{'pic':>8}{pic:<2d} "[:10] for pic in self.picnums)

    @property
    def picnums(self) -> list[int]:
        return [next(v for n, v in r.attrs if n == "picnum") for r in self.requests]


class Cpc:
    """The model's description and the calls, as libcpc has them."""

    def __init__(self) -> None:
        self.path = node_path()
        with open(self.path) as f:
            text = f.read()
        self.npic = 0
        self.caps = 0
        self.ncpus = 1
        self.cciname = self.cpuref = ""
        self.attrs: list[str] = []
        self.events: dict[int, list[str]] = {}
        self.generic: dict[int, list[str]] = {}
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key in ("npic", "caps", "ncpus"):
                setattr(self, key, int(value))
            elif key in ("cciname", "cpuref"):
                setattr(self, key, value)
            elif key == "attrs":
                self.attrs = [a for a in value.split(",") if a]
            elif key.startswith("pic") and key[3:].isdigit():
                self.events[int(key[3:])] = [e for e in value.split(",") if e]
            elif key.startswith("generic") and key[7:].isdigit():
                self.generic[int(key[7:])] = [e for e in value.split(",") if e]
        self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)

    def valid_event(self, pic: int, event: str) -> bool:
        listed = event in self.events.get(pic, ()) or event in self.generic.get(pic, ())
        return listed or strtol0(event, whole=True) != 0

    def call(self, cmd: int, fd: int | None = None, **fields: object) -> Any:
        """One call: the header built from ``fields``, the requests packed
        after it, the header of the reply parsed (results are all there)."""
        reqs = fields.pop("requests", None)
        io: dict[str, object] = {sub.name: 0 for sub in abi.cpc_io_head.subcons}
        io.update(ci_subcode=-1, ci_data=[0] * abi.HWPERFD_CPC_MAXREQS, **fields)
        tail = bytearray(abi.CPC_IO_SIZE - abi.CPC_IO_HEAD_SIZE)
        if isinstance(reqs, list):
            io["ci_nreqs"] = len(reqs)
            for i, r in enumerate(reqs):
                attrs = [{"ka_name": name, "ka_val": value} for name, value in r.attrs]
                attrs += [{"ka_name": "", "ka_val": 0}] * (abi.HWPERFD_CPC_MAXATTRS - len(attrs))
                packed = abi.cpc_req.build({"cr_event": r.event, "cr_preset": 0, "cr_flags": r.flags,
                                            "cr_nattrs": len(r.attrs), "cr_attr": attrs})  # fmt: skip
                tail[i * abi.CPC_REQ_SIZE : (i + 1) * abi.CPC_REQ_SIZE] = packed
        buf = bytearray(abi.cpc_io_head.build(io) + tail)
        fcntl.ioctl(self.fd if fd is None else fd, cmd, buf)
        out = abi.cpc_io_head.parse(bytes(buf[: abi.CPC_IO_HEAD_SIZE]))
        if out.ci_error:
            raise CallError(out.ci_error, out.ci_subcode)
        return out

    def strtoset(self, spec: str) -> EventSet:
        """cpc_strtoset: tokens picN=event, event (next free PIC in order),
        nouser[N], sys[N], attr[N][=value]; every request counts user mode by
        default and carries its picnum."""
        events: dict[int, str] = {}
        flags = {pic: abi.CPC_COUNT_USER for pic in range(self.npic)}
        attrs: dict[int, list[tuple[str, int]]] = {pic: [] for pic in range(self.npic)}
        names = [a for a in self.attrs if a != "picnum"]
        for token in (t for t in spec.split(",") if t):
            key, eq, value = token.partition("=")
            pic = None
            base = key.rstrip("0123456789")
            if base != key:
                pic = int(key[len(base):])
                if pic >= self.npic:
                    base = key  # "pic9" on two counters: an unknown token
            if base == "pic" and pic is not None and base != key:
                if pic in events:
                    raise SpecError(f"repeated 'pic{pic}' token")
                if not value:
                    raise SpecError(f"missing 'pic{pic}' value")
                if not self.valid_event(pic, value):
                    raise SpecError(f"pic{pic} cannot measure event '{value}' on this cpu")
                events[pic] = value
            elif base in ("nouser", "sys") and (pic is not None or base == key):
                for p in [pic] if pic is not None else range(self.npic):
                    if base == "nouser":
                        flags[p] &= ~abi.CPC_COUNT_USER
                    else:
                        flags[p] |= abi.CPC_COUNT_SYSTEM
            elif base in names and (pic is not None or base == key):
                if eq:
                    number = value.strip()
                    if not number or not (number.lstrip("+-")[:1].isdigit()):
                        raise SpecError(f"invalid value '{value}' for attribute '{base}'")
                    val = strtol0(number)
                else:
                    val = 1
                for p in [pic] if pic is not None else range(self.npic):
                    attrs[p].append((base, val))
            else:
                if eq:
                    raise SpecError(f"bad token '{token}'")
                last = max(events, default=-1)
                for p in range(last + 1, self.npic):
                    if self.valid_event(p, token):
                        events[p] = token
                        break
                else:
                    raise SpecError(f"bad token '{token}'")
        requests = [Request(events[p], flags[p], [("picnum", p), *attrs[p]]) for p in sorted(events)]
        if not requests:
            raise SpecError("no events")
        return EventSet(spec, requests)

    def capabilities(self) -> str:
        """What -h prints after the usage (caps.c)."""
        out = [f"\tCPU performance counter interface: {self.cciname or 'No information available'}\n\n",
               "\tevent specification syntax:\n",
               "\t[picn=]<eventn>[,attr[n][=<val>]][,[picn=]<eventn>[,attr[n][=<val>]],...]\n",
               "\n\tGeneric Events:\n"]  # fmt: skip
        out += self._lists(self.generic)
        out.append("\n\tSee generic_events(3CPC) for descriptions of these events\n\n")
        out.append("\tPlatform Specific Events:\n")
        out += self._lists(self.events)
        out.append("\n\tattributes: " + _wrap([a for a in self.attrs if a != "picnum"] + ["nouser", "sys"], 20))
        out.append("\n\n\t" + _wrap(self.cpuref.split(), 8, "\n\t") + "\n")
        return "".join(out)

    def _lists(self, lists: dict[int, list[str]]) -> list[str]:
        same = all(lists.get(p) == lists.get(0) for p in range(self.npic))
        if same:
            return [f"\n\tevent[0-{self.npic - 1}]: " + _wrap(lists.get(0, []), 17) + "\n"]
        return [f"\n\tevent{p}: " + (" " if p < 10 else "") + _wrap(lists.get(p, []), 17) + "\n"
                for p in range(self.npic)]  # fmt: skip


def _wrap(words: list[str], margin: int, newline: str = "") -> str:
    """caps.c's list_cap: words and a space, wrapped at column 76."""
    out, col = "", margin
    for word in words:
        if col + len(word) + 1 > 76:
            out += newline or ("\n" + " " * margin)
            col = margin if not newline else 8
        out += word + " "
        col += len(word) + 1
    return out


# -- cputrack -------------------------------------------------------------------------


@dataclass
class Lwp:
    tid: int
    lwpid: int
    current: int = 0  # which set is bound
    totals: list[list[int]] = field(default_factory=list)
    last: list[int] = field(default_factory=list)
    last_tick: int = 0
    hrtime: int = 0


@dataclass
class Tracked:
    pid: int
    exe: str
    lwps: dict[int, Lwp] = field(default_factory=dict)
    child: bool = False  # ours to wait for
    done: bool = False
    starting: bool = False  # bound before the exec that starts the command, which is no event


class CpuTrack:
    USAGE = (
        "Usage:\n\t{0} [-T secs] [-N count] [-Defhnv] [-o file]\n"
        "\t\t-c events [command [args] | -p pid]\n\n"
        "\t-T secs\t  seconds between samples, default 1\n"
        "\t-N count  number of samples, default unlimited\n"
        "\t-D\t  enable debug mode\n"
        "\t-e\t  follow exec(2), and execve(2)\n"
        "\t-f\t  follow fork(2), fork1(2), and vfork(2)\n"
        "\t-h\t  print extended usage information\n"
        "\t-n\t  suppress titles\n"
        "\t-t\t  include virtualized {1} register\n"
        "\t-v\t  verbose mode\n"
        "\t-o file\t  write cpu statistics to this file\n"
        "\t-c events specify processor events to be monitored\n"
        "\t-p pid\t  pid of existing process to capture\n\n"
        "\tUse cpustat(1M) to monitor system-wide statistics.\n"
    )

    def __init__(self, argv: list[str]) -> None:
        self.prog = os.path.basename(argv[0]) if argv else "cputrack"
        self.argv = argv[1:]
        self.interval = 1.0
        self.nsamples = 0
        self.debug = self.follow_exec = self.follow_fork = self.dotick = self.verbose = False
        self.titles = True
        self.log = sys.stdout
        self.specs: list[str] = []
        self.pid = 0
        self.cpc: Cpc
        self.sets: list[EventSet] = []
        self.procs: dict[int, Tracked] = {}
        self.zero = time.monotonic_ns()

    def errx(self, message: str, status: int = 1) -> NoReturn:
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise Exit(status)

    def run(self) -> int:
        try:
            self.cpc = Cpc()
        except OSError as exc:
            self.errx(f"cannot access performance counter library - {os.strerror(exc.errno or errno.EIO)}")
        try:
            opts, args = getopt.getopt(self.argv, "T:N:Defhntvo:c:p:")
        except getopt.GetoptError:
            return self.usage(False)
        help_ = False
        errors = 0
        for opt, val in opts:
            if opt == "-T":
                self.interval = float(val)
            elif opt == "-N":
                self.nsamples = int(val)
                errors += self.nsamples < 0
            elif opt == "-D":
                self.debug = True
            elif opt == "-e":
                self.follow_exec = True
            elif opt == "-f":
                self.follow_fork = True
            elif opt == "-n":
                self.titles = False
            elif opt == "-t":
                self.dotick = True
            elif opt == "-v":
                self.verbose = True
            elif opt == "-h":
                help_ = True
            elif opt == "-o":
                try:
                    self.log = open(val, "w", buffering=1)
                except OSError:
                    self.errx(f"cannot open '{val}' for writing")
            elif opt == "-c":
                try:
                    self.sets.append(self.cpc.strtoset(val))
                except SpecError as exc:
                    print(f"{self.prog}: {exc}", file=sys.stderr)
                    errors += 1
            elif opt == "-p":
                self.pid = int(val) if val.isdigit() else 0
                errors += self.pid <= 0
        if errors or help_ or (not args and not self.pid) or (args and self.pid) or not self.sets:
            return self.usage(help_)
        self.zero = time.monotonic_ns()
        # The counters are bound before the title shows (and before the
        # command runs): what follows the title is counted.
        if args:
            self.start_command(args, self.title if self.titles else lambda: None)
        else:
            self.capture(self.pid)
            if self.titles:
                self.title()
        return self.loop()

    def usage(self, help_: bool) -> int:
        out = sys.stdout if help_ else sys.stderr
        out.write(self.USAGE.format(self.prog, TICK))
        if help_:
            out.write("\n" + self.cpc.capabilities())
            return 0
        return 2

    def title(self) -> None:
        line = f"{'time':>7} " + (f"{'pid':>6} " if self.follow_fork else "") + f"{'lwp':>3} {'event':>10} "
        if self.dotick:
            line += f"{TICK:>9} "
        self.log.write(line + self.sets[0].header + "\n")
        self.log.flush()

    def now(self, hrtime: int | None = None) -> float:
        return ((hrtime if hrtime is not None else time.monotonic_ns()) - self.zero) / 1e9

    def row(self, pid: int, lwpid: int, event: str, values: list[int], tick: int | None, hrtime: int,
            name: str) -> None:  # fmt: skip
        line = f"{self.now(hrtime):7.3f} " + (f"{pid:6d} " if self.follow_fork else "") + f"{lwpid:3d} {event:>10} "
        if self.dotick:
            line += f"{tick or 0:9d} "
        line += "".join(f"{v:9d} " for v in values)
        line += f" # {name}\n" if len(self.sets) > 1 else "\n"
        self.log.write(line)
        self.log.flush()

    def note(self, pid: int, lwpid: int, event: str, comment: str) -> None:
        line = f"{self.now():7.3f} " + (f"{pid:6d} " if self.follow_fork else "") + f"{lwpid:3d} {event:>10} "
        if self.dotick:
            line += f"{'':9s} "
        self.log.write(line + f"{'':9s} {'':9s} # {comment}\n")
        self.log.flush()

    # -- processes --

    def start_command(self, args: list[str], bound: Callable[[], None]) -> None:
        """Start the command held before exec, bind its LWP, let it go, and
        wait for the exec (the end of a close-on-exec pipe), so that exec is
        not taken for a later one."""
        gate_r, gate_w = os.pipe()
        done_r, done_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(gate_w)
            os.close(done_r)
            os.set_inheritable(done_w, False)
            if os.read(gate_r, 1) != b"g":
                os._exit(127)
            os.close(gate_r)
            try:
                os.execvp(args[0], args)
            except OSError as exc:
                print(f"{self.prog}: failed to exec {args[0]}: {exc.strerror}", file=sys.stderr)
            os._exit(127)
        os.close(gate_r)
        os.close(done_w)
        proc = Tracked(pid, args[0], child=True, starting=True)
        self.procs[pid] = proc
        self.bind_lwp(proc, pid)
        if not proc.lwps:
            os.close(gate_w)  # the command never runs
            os.close(done_r)
            os.waitpid(pid, 0)
            raise Exit(1)
        bound()
        os.write(gate_w, b"g")
        os.close(gate_w)
        os.read(done_r, 1)
        os.close(done_r)
        proc.exe = _exe(pid) or proc.exe

    def capture(self, pid: int) -> None:
        if _exe(pid) is None and not os.path.exists(f"/proc/{pid}"):
            self.errx(f"pid {pid}: No such process")
        proc = Tracked(pid, _exe(pid) or "")
        self.procs[pid] = proc
        for tid in _tids(pid):
            self.bind_lwp(proc, tid)
        if not proc.lwps:
            raise Exit(1)

    def bind_lwp(self, proc: Tracked, tid: int) -> None:
        lwpid = 1 if tid == proc.pid else tid
        lwp = Lwp(tid, lwpid, totals=[[0] * len(s.requests) for s in self.sets])
        try:
            self.cpc.call(abi.HWPERFD_CPCIO_BIND, ci_target=abi.HWPERFD_CPC_PCTX, ci_pid=proc.pid, ci_id=lwpid,
                          requests=self.sets[0].requests)  # fmt: skip
        except CallError as exc:
            if exc.subcode in SUBCODE_TEXT:
                print(f"{self.prog}: {SUBCODE_TEXT[exc.subcode]}", file=sys.stderr)
            print(f"{proc.pid:6d}: init_lwp: can't bind perf counters to lwp{lwpid} - {exc.strerror}",
                  file=sys.stderr)  # fmt: skip
            return
        lwp.last = [0] * len(self.sets[0].requests)
        proc.lwps[tid] = lwp
        if self.verbose:
            self.row(proc.pid, lwpid, "init_lwp", lwp.last, 0, time.monotonic_ns(), self.sets[0].spec)

    def sample(self, proc: Tracked, lwp: Lwp) -> tuple[list[int], int, int] | None:
        """The LWP's values, virtual tick and time - after first reporting
        every exec the daemon saw it make since the last look (so an exec
        and an exit within one look are both reported, in order).  None if
        they cannot be read, or the process is no longer followed."""
        while not proc.done:
            got = self._sample(proc, lwp, abi.HWPERFD_CPC_SAMPLE_EXECS if lwp.tid == proc.pid else 0)
            if got is None or not got[3]:
                return got[:3] if got is not None else None
            self.execed(proc, lwp, got[:3])
        return None

    def _sample(self, proc: Tracked, lwp: Lwp, flags: int) -> tuple[list[int], int, int, bool] | None:
        try:
            out = self.cpc.call(abi.HWPERFD_CPCIO_SAMPLE, ci_target=abi.HWPERFD_CPC_PCTX, ci_pid=proc.pid,
                                ci_id=lwp.lwpid, ci_flags=flags)  # fmt: skip
        except CallError as exc:
            if exc.errno == errno.EAGAIN:
                print(f"{proc.pid:6d}: tick: lwp{lwp.lwpid}: perf counter contents invalidated", file=sys.stderr)
            elif exc.errno not in (errno.ESRCH, errno.EINVAL):
                print(f"{proc.pid:6d}: tick: lwp{lwp.lwpid}: can't access perf counter - {exc.strerror}",
                      file=sys.stderr)  # fmt: skip
            return None
        n = len(self.sets[lwp.current].requests)
        return list(out.ci_data[:n]), out.ci_tick, out.ci_hrtime, bool(out.ci_flags & abi.HWPERFD_CPC_SAMPLE_EXECS)

    def execed(self, proc: Tracked, lwp: Lwp, at_exec: tuple[list[int], int, int]) -> None:
        """The process exec'd (the daemon saw it; ``at_exec`` is the LWP's
        sample at that moment): its counts so far, and with -e counting on
        from zero under the new image, else the end of following it."""
        if proc.starting:  # counted on, as before the exec
            proc.starting = False
            return
        self.account(lwp, at_exec[0], at_exec[2])
        self.finish(proc, "exec", sampled=frozenset({lwp.tid}))
        self.note(proc.pid, 1, "exec", f"'{_image_name(proc.pid)}'")
        proc.exe = _exe(proc.pid) or proc.exe
        for each in proc.lwps.values():
            each.totals = [[0] * len(s.requests) for s in self.sets]
        if not self.follow_exec:
            self.release(proc)
            proc.done = True

    def account(self, lwp: Lwp, values: list[int], hrtime: int) -> list[int]:
        """Add what the LWP counted since the last sample to its totals; the period."""
        period = [(v - last) % (1 << 64) for v, last in zip(values, lwp.last)]
        lwp.totals[lwp.current] = [t + p for t, p in zip(lwp.totals[lwp.current], period)]
        lwp.last, lwp.hrtime = values, hrtime
        return period

    def tick(self, proc: Tracked) -> None:
        for tid in _tids(proc.pid):
            if tid not in proc.lwps:
                self.bind_lwp(proc, tid)
                if tid in proc.lwps and tid != proc.pid:
                    lwp = proc.lwps[tid]
                    self.row(proc.pid, lwp.lwpid, "lwp_create", [0] * len(self.sets[0].requests), 0,
                             time.monotonic_ns(), self.sets[0].spec)  # fmt: skip
        for lwp in list(proc.lwps.values()):
            got = self.sample(proc, lwp)
            if got is None:
                continue
            values, tick, hrtime = got
            current = lwp.current
            period = self.account(lwp, values, hrtime)
            tick, lwp.last_tick = tick - lwp.last_tick, tick  # cpc_buf_sub: the period's ticks too
            self.row(proc.pid, lwp.lwpid, "tick", period, tick, hrtime, self.sets[current].spec)
            if len(self.sets) > 1:
                lwp.current = (current + 1) % len(self.sets)
                nxt = self.sets[lwp.current]
                try:
                    self.cpc.call(abi.HWPERFD_CPCIO_BIND, ci_target=abi.HWPERFD_CPC_PCTX, ci_pid=proc.pid,
                                  ci_id=lwp.lwpid, requests=nxt.requests)  # fmt: skip
                    lwp.last, lwp.last_tick = [0] * len(nxt.requests), 0
                except CallError:
                    del proc.lwps[lwp.tid]

    def finish(self, proc: Tracked, event: str, sampled: frozenset[int] = frozenset()) -> None:
        """The process exited (or exec'd): its accumulated counts (the LWPs
        in ``sampled`` were sampled already)."""
        for lwp in list(proc.lwps.values()):
            got = self.sample(proc, lwp) if lwp.tid not in sampled else None
            if got is not None:
                self.account(lwp, got[0], got[2])
        if proc.done:
            return  # an exec before the exit ended following the process
        for index, eset in enumerate(self.sets):
            totals = [sum(lwp.totals[index][i] for lwp in proc.lwps.values()) for i in range(len(eset.requests))]
            stamp = max((lwp.hrtime for lwp in proc.lwps.values()), default=time.monotonic_ns())
            self.row(proc.pid, 1, event, totals, None, stamp, eset.spec)

    def release(self, proc: Tracked) -> None:
        for lwp in proc.lwps.values():
            try:
                self.cpc.call(abi.HWPERFD_CPCIO_RELE, ci_target=abi.HWPERFD_CPC_PCTX, ci_pid=proc.pid,
                              ci_id=lwp.lwpid)  # fmt: skip
            except OSError:
                pass
        proc.lwps.clear()

    def check(self, proc: Tracked) -> None:
        """Exit, exec and fork, as far as looking can tell."""
        if proc.child:
            try:  # reaped after the last look: an exec still pending names the zombie's image
                gone = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
            except ChildProcessError:
                gone = True
        else:
            gone = not os.path.exists(f"/proc/{proc.pid}") or _state(proc.pid) in ("Z", "X", None)
        if gone:
            self.finish(proc, "exit")
            self.release(proc)
            proc.done = True
            if proc.child:
                try:
                    os.waitpid(proc.pid, 0)
                except ChildProcessError:
                    pass
            return
        exe = _exe(proc.pid)
        if exe is not None and exe != proc.exe and proc.pid in proc.lwps:
            # Looks like an exec: the daemon says whether it was one (a
            # sample reports it); what it answers past the execs is left
            # for the next tick's period.
            proc.exe = exe
            self.sample(proc, proc.lwps[proc.pid])
            if proc.done:
                return
        for child in _children(proc.pid):
            if child in self.procs:
                continue
            self.note(proc.pid, 1, "fork", str(child))
            if self.follow_fork:
                new = Tracked(child, _exe(child) or "")
                self.procs[child] = new
                for tid in _tids(child):
                    self.bind_lwp(new, tid)
            else:
                self.procs[child] = Tracked(child, "", done=True)

    def loop(self) -> int:
        samples = 0
        stop = []
        signal.signal(signal.SIGINT, lambda *_: stop.append(1))
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        deadline = time.monotonic()
        while not stop:
            live = [p for p in self.procs.values() if not p.done]
            if not live:
                break
            deadline += self.interval
            while time.monotonic() < deadline and not stop:
                for proc in live:
                    if not proc.done:
                        self.check(proc)
                if all(p.done for p in live):
                    break
                time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))
            for proc in [p for p in self.procs.values() if not p.done]:
                self.tick(proc)
            samples += 1
            if self.nsamples and samples >= self.nsamples:
                break
        for proc in self.procs.values():
            if not proc.done:
                self.release(proc)
        return 0


def _tids(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except (OSError, ValueError):
        return []


def _image_name(pid: int) -> str:
    """What the process runs now: its executable's name, else (a zombie's
    executable is unreadable) its command name."""
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _exe(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
        return f"{os.readlink(f'/proc/{pid}/exe')}:{comm}"
    except OSError:
        return None


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for tid in _tids(pid):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return found


# -- cpustat ---------------------------------------------------------------------------


class CpuStat:
    USAGE = (
        "Usage:\n\t{0} [-c events] [-p period] [-nstD] [interval [count]]\n\n"
        "\t-c events specify processor events to be monitored\n"
        "\t-n\t  suppress titles\n"
        "\t-p period cycle through event list periodically\n"
        "\t-s\t  run user soaker thread for system-only events\n"
        "\t-t\t  include {1} register\n"
        "\t-D\t  enable debug mode\n"
        "\t-h\t  print extended usage information\n\n"
        "\tUse cputrack(1) to monitor per-process statistics.\n"
    )

    def __init__(self, argv: list[str]) -> None:
        self.prog = os.path.basename(argv[0]) if argv else "cpustat"
        self.argv = argv[1:]
        self.titles = True
        self.dotick = False
        self.sets: list[EventSet] = []
        self.zero = time.monotonic_ns()

    def run(self) -> int:
        try:
            cpc = Cpc()
        except OSError as exc:
            print(f"{self.prog}: cannot access performance counter library - "
                  f"{os.strerror(exc.errno or errno.EIO)}", file=sys.stderr)  # fmt: skip
            return 1
        try:
            opts, args = getopt.getopt(self.argv, "Dc:hntsp:")
        except getopt.GetoptError:
            sys.stderr.write(self.USAGE.format(self.prog, TICK))
            return 2
        errors, help_ = 0, False
        for opt, val in opts:
            if opt == "-c":
                try:
                    self.sets.append(cpc.strtoset(val))
                except SpecError as exc:
                    print(f"{self.prog}: {exc}", file=sys.stderr)
                    errors += 1
            elif opt == "-n":
                self.titles = False
            elif opt == "-t":
                self.dotick = True
            elif opt == "-h":
                help_ = True
        interval, count = 5.0, 0
        try:
            if args:
                interval = float(args[0])
            if len(args) > 1:
                count = int(args[1])
        except ValueError:
            errors += 1
        if errors or help_ or not self.sets or len(args) > 2 or interval <= 0:
            out = sys.stdout if help_ else sys.stderr
            out.write(self.USAGE.format(self.prog, TICK))
            if help_:
                out.write("\n" + cpc.capabilities())
                return 0
            return 2
        eset = self.sets[0]
        fds: dict[int, int] = {}
        try:
            for cpu in range(cpc.ncpus):
                fd = os.open(cpc.path, os.O_RDONLY | os.O_CLOEXEC)
                fds[cpu] = fd
                try:
                    cpc.call(abi.HWPERFD_CPCIO_BIND, fd, ci_target=abi.HWPERFD_CPC_CPU, ci_id=cpu,
                             requests=eset.requests)  # fmt: skip
                except CallError as exc:
                    if exc.subcode in SUBCODE_TEXT:
                        print(f"{self.prog}: {SUBCODE_TEXT[exc.subcode]}", file=sys.stderr)
                    if exc.errno == errno.EACCES:
                        print(f"{self.prog}: cannot access performance counters - {exc.strerror}", file=sys.stderr)
                    else:
                        print(f"{self.prog}: cannot bind to cpu{cpu} - {exc.strerror}", file=sys.stderr)
                    return 1
            return self.sample(cpc, eset, fds, interval, count)
        finally:
            for fd in fds.values():
                os.close(fd)

    def sample(self, cpc: Cpc, eset: EventSet, fds: dict[int, int], interval: float, count: int) -> int:
        """Rows every interval; with several -c sets, each interval counts the
        next set (every CPU is bound to it anew), and each row and total
        names its set."""
        # Interruptible from the title on: whoever saw it may stop us at once.
        stop: list[int] = []
        signal.signal(signal.SIGINT, lambda *_: stop.append(1))
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        if self.titles:
            line = f"{'time':>7} {'cpu':>3} {'event':>5} " + (f"{TICK:>9} " if self.dotick else "")
            print(line + eset.header, flush=True)
        current = 0
        last = {cpu: [0] * len(eset.requests) for cpu in fds}
        last_tick: dict[int, int] = {}
        totals = [[0] * len(s.requests) for s in self.sets]
        suffix = (lambda spec: f" # {spec}\n") if len(self.sets) > 1 else (lambda spec: "\n")
        n = 0
        hrtime = time.monotonic_ns()
        deadline = time.monotonic()
        while not stop and (not count or n < count):
            deadline += interval
            while time.monotonic() < deadline and not stop:
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            eset = self.sets[current]
            for cpu, fd in fds.items():
                out = cpc.call(abi.HWPERFD_CPCIO_SAMPLE, fd, ci_target=abi.HWPERFD_CPC_CPU, ci_id=cpu)
                values = list(out.ci_data[: len(eset.requests)])
                period = [(v - p) % (1 << 64) for v, p in zip(values, last[cpu])]
                last[cpu] = values
                totals[current] = [t + p for t, p in zip(totals[current], period)]
                hrtime = out.ci_hrtime
                line = f"{(hrtime - self.zero) / 1e9:7.3f} {cpu:3d} {'tick':>5} "
                if self.dotick:
                    line += f"{out.ci_tick - last_tick.get(cpu, 0):9d} "
                last_tick[cpu] = out.ci_tick
                sys.stdout.write(line + "".join(f"{v:9d} " for v in period) + suffix(eset.spec))
            sys.stdout.flush()
            n += 1
            if len(self.sets) > 1:
                current = (current + 1) % len(self.sets)
                nxt = self.sets[current]
                for cpu, fd in fds.items():
                    cpc.call(abi.HWPERFD_CPCIO_RELE, fd, ci_target=abi.HWPERFD_CPC_CPU, ci_id=cpu)
                    cpc.call(abi.HWPERFD_CPCIO_BIND, fd, ci_target=abi.HWPERFD_CPC_CPU, ci_id=cpu,
                             requests=nxt.requests)  # fmt: skip
                    last[cpu], last_tick[cpu] = [0] * len(nxt.requests), 0
        for index, each in enumerate(self.sets):
            if len(self.sets) > 1 and index >= n:
                break  # a set that never counted
            line = f"{(hrtime - self.zero) / 1e9:7.3f} {len(fds):3d} {'total':>5} "
            line += f"{'':9s} " if self.dotick else ""
            sys.stdout.write(line + "".join(f"{v:9d} " for v in totals[index]) + suffix(each.spec))
        sys.stdout.flush()
        return 0


def cputrack_main(argv: list[str] | None = None) -> int:
    try:
        return CpuTrack(sys.argv if argv is None else argv).run()
    except Exit as exc:
        return exc.status


def cpustat_main(argv: list[str] | None = None) -> int:
    try:
        return CpuStat(sys.argv if argv is None else argv).run()
    except Exit as exc:
        return exc.status


def main() -> None:
    """``python -m hwperfd.cpc.tools cputrack|cpustat ARGS``."""
    if len(sys.argv) < 2 or sys.argv[1] not in ("cputrack", "cpustat"):
        print("usage: python -m hwperfd.cpc.tools cputrack|cpustat [ARGS]", file=sys.stderr)
        sys.exit(2)
    argv = sys.argv[1:]
    sys.exit(cpustat_main(argv) if argv[0] == "cpustat" else cputrack_main(argv))


if __name__ == "__main__":
    main()
