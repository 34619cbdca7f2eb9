"""``<mount>/cpc``: the kernel side of Solaris libcpc (illumos cpc.c, kcpc).

libcpc keeps sets, requests and buffers in the client (as Solaris's
library did) and sends a packed set here to bind it; the daemon checks it in
the kernel's order, assigns counters and counts.  Every call answers one
``hwperfd_cpc_io`` with ``ci_error`` (0 or an errno) and ``ci_subcode``
(libcpc's error subcode, -1 for none); the library hands the subcode to the
error handler and sets errno.

Targets:

* the calling thread (cpc_bind_curlwp): FUSE passes the calling task's id,
  which on Linux is the thread's; the context lives in the shared thread
  table under the service "cpc";
* a thread of another process (cpc_bind_pctx): the same, bound by another
  process under the rules of the process files (root, or a caller that may
  read the target: every uid and gid the caller's, the target dumpable);
* a CPU (cpc_bind_cpu): root only (the cpc_cpu privilege), one set per CPU,
  held by the open file that bound it (a process that dies frees it).  While
  any CPU is bound the hardware is reserved for "cpc" (the reservation every
  personality shares): per-LWP sets are invalid (samples EAGAIN) and new
  per-LWP binds answer EAGAIN.  Another personality holding the hardware
  makes cpc_bind_cpu and per-LWP binds EAGAIN alike, and invalidates bound
  per-LWP sets at their next sample.
"""

from __future__ import annotations

import errno
import itertools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from construct import ConstructError

from hwperfd.cpc.events import ATTR_LIMITS, EventNames, Resolved, control_word, describe
from hwperfd.cpc.sets import BoundSet, Request
from hwperfd.counters.errors import CountersLimit
from hwperfd.counters.kernel import Signal
from hwperfd.counters.threads import ThreadContext, ThreadTable
from hwperfd.cpu.pmu import CpuSet
from hwperfd.cpu.profiles import WorkloadProfile
from hwperfd.trace import recorder as trace
from structs import cpc as abi

SERVICE = "cpc"  # the reservation's and the thread table's name for libcpc
MAX_EXITED = 4096  # exited LWPs' final values kept for their binders (the oldest go first)
MAX_EXECS = 8  # an LWP's exec values kept until its binder samples (the oldest go first)
# Calls of an LWP on its own set that catch it up: HWPERFD_CPC_TIMED asks them for its next overflow's instant.
_SIGEMT = 16  # libcpc's SIGEMT: SIGSTKFLT, which Linux never sends (include/libcpc.h)
_TIMED_CALLS = frozenset({abi.HWPERFD_CPCIO_BIND, abi.HWPERFD_CPCIO_RESTART, abi.HWPERFD_CPCIO_SAMPLE})

Told = tuple[list[int], int]  # a set's values and virtual tick, as a sample answers them


class CpcError(Exception):
    """A refusal, with libcpc's subcode (-1: none)."""

    def __init__(self, message: str, subcode: int = -1) -> None:
        super().__init__(message)
        self.subcode = subcode


class Invalid(CpcError):
    """EINVAL: a bad set, request, attribute, CPU, or nothing bound."""


class Unavailable(CpcError):
    """EAGAIN: the counters are held (a CPU bind, another personality), or taken away."""


class NoAccess(CpcError):
    """EACCES: cpc_bind_cpu without privilege, pctx on a process the caller may not read."""


class NotSupported(CpcError):
    """ENOTSUP: CPC_OVF_NOTIFY_EMT on a model without overflow interrupts."""


class NoLwp(CpcError):
    """ESRCH: cpc_bind_pctx on an LWP that does not exist."""


class UnknownCall(CpcError):
    """ENOTTY: not one of the node's ioctls."""


# One table: __call__ maps a refusal to the errno the reply carries.
ERRNO: dict[type[CpcError], int] = {
    Invalid: errno.EINVAL,
    Unavailable: errno.EAGAIN,
    NoAccess: errno.EACCES,
    NotSupported: errno.ENOTSUP,
    NoLwp: errno.ESRCH,
    UnknownCall: errno.ENOTTY,
}


class CpuClock(Protocol):
    def cpu_times(self, cpu: int) -> tuple[int, int]: ...

    def tsc_ns(self, cpu: int) -> int: ...


@dataclass
class LwpBinding:
    """What a thread's context carries for libcpc."""

    set: BoundSet
    binder: int  # tid of the thread that bound it (itself for curlwp)
    pctx: bool  # bound by another process (cpc_bind_pctx)
    seen0: int  # the thread's CPU ns at bind, for the virtual tick
    gid: int = 0  # the binder's gid: with ctx.owner, who must still be allowed after an exec
    deferred: int = 0  # the call answered EINTR for an overflow: its retry takes effect
    execs: list[Told] = field(default_factory=list)  # values at each exec not yet told (pctx)


@dataclass
class CpuBinding:
    cpu: int
    set: BoundSet
    handle: int  # the open file that holds it (-1: put back after a restart, not yet called on again)
    serial: int = 0  # which binding, for its state page
    holder: int = 0  # the process that bound it: after a restart, its reopened file holds it


@dataclass(frozen=True)
class Caller:
    tid: int
    uid: int
    gid: int
    handle: int


class CpcDevice:
    def __init__(
        self,
        cpus: CpuSet,
        clock: CpuClock,
        threads: ThreadTable | None,
        *,
        profile: Callable[[], WorkloadProfile] = WorkloadProfile,
        tgid_of: Callable[[int], int | None],
        thread_start: Callable[[int, int], int | None],
        process_start: Callable[[int], int | None],
        may_control: Callable[[int, int, int, int], bool],
        signal: Callable[[Signal], None] = lambda owed: None,
        deliver: Callable[[int, int], bool] = lambda pid, tid: False,
        pending: Callable[[int, int, int], bool] = lambda pid, tid, sig: False,
        held: Callable[[int, int, int], bool] = lambda pid, tid, sig: False,
    ) -> None:
        """``deliver(pid, tid)`` sends what is owed to that thread now; True if a signal went.
        ``pending(pid, tid, sig)``: whether ``sig`` is pending for that thread;
        ``held``: pending, or blocked by it."""
        self.cpus = cpus
        self._deliver = deliver
        self._pending = pending
        self._held = held
        self.model = cpus.model
        self.clock = clock
        self.threads = threads
        self.names = EventNames(self.model)
        self._profile = profile
        self._tgid_of = tgid_of  # a thread's process, None if gone
        self._thread_start = thread_start  # (pid, tid) -> start, None if no such thread
        self._process_start = process_start
        self._may_control = may_control  # (uid, gid, caller tid, target pid)
        self._signal = signal
        self.cpu_bindings: dict[int, CpuBinding] = {}
        self.cpu_hold_ns = 0  # > 0: a CPU's values, once taken, stand this long (their state page shows them)
        self.cpu_taken = [0] * len(cpus)  # when each CPU's were last taken (monotonic ns)
        self._serials = itertools.count(1)
        self._cpu_seen = [clock.cpu_times(i) for i in range(len(cpus))]
        # Final values of exited LWPs that another process bound (cputrack
        # reads them once after the exit): (pid, tid) -> (binder uid, values,
        # tick, values at the execs before the exit not yet told).
        self._exited: dict[tuple[int, int], tuple[int, list[int], int, list[Told]]] = {}
        self.signals_owed = 0
        if threads is not None:
            threads.register(SERVICE, inherit=self._inherit, on_inherited=self._start_inherited,
                             on_exec=self._on_exec, on_exit=self._on_exit,
                             on_overflow=lambda ctx, mask: self.on_counted(ctx))  # fmt: skip

    # -- what the node shows --------------------------------------------------

    @property
    def caps(self) -> int:
        caps = abi.CPC_CAP_OVERFLOW_INTERRUPT if self.model.overflow_interrupt else 0
        if self.model.overflow_interrupt and self.model.overflow_identified:
            caps |= abi.CPC_CAP_OVERFLOW_PRECISE
        return caps

    @property
    def cciname(self) -> str:
        return self.model.description

    @property
    def cpuref(self) -> str:
        return (f"See hwperfd's docs/design.md (CPU models) and the {self.model.description} manuals "
                f"for descriptions of these events.")  # fmt: skip

    def describe(self) -> str:
        text = describe(self.names, self.cciname, self.cpuref, self.caps, len(self.cpus))
        held = self.cpus.reservation.holder or "-"
        lines = [f"reserved-by {held}"]
        for cpu, binding in sorted(self.cpu_bindings.items()):
            lines.append(f"cpu {cpu} bound " + " ".join(f"{r.event}={v}" for r, v in
                                                       zip(binding.set.requests, binding.set.values)))  # fmt: skip
        return text + "".join(line + "\n" for line in lines)

    # -- ioctl ------------------------------------------------------------------

    def __call__(self, cmd: int, data: bytes, caller: Caller) -> tuple[int, bytes]:
        if cmd not in self._calls:
            raise OSError(errno.ENOTTY, f"unknown ioctl {cmd:#010x} on cpc")
        if len(data) < (abi.CPC_IO_SIZE if cmd == abi.HWPERFD_CPCIO_BIND else abi.CPC_IO_HEAD_SIZE):
            raise OSError(errno.EINVAL, "short hwperfd_cpc_io")
        head = abi.CPC_IO_HEAD_SIZE
        io = abi.parse_head(data)
        io.ci_req = []
        if cmd == abi.HWPERFD_CPCIO_BIND and 0 < io.ci_nreqs <= abi.HWPERFD_CPC_MAXREQS:
            try:  # only the requests the set has (_requests refuses other counts)
                io.ci_req = abi.cpc_req[io.ci_nreqs].parse(data[head : head + io.ci_nreqs * abi.CPC_REQ_SIZE])
            except (ConstructError, UnicodeDecodeError):
                raise OSError(errno.EINVAL, "names in hwperfd_cpc_io must be ASCII") from None
        io.ci_error, io.ci_subcode = 0, -1
        if self._overflow_first(cmd, io, caller):
            raise OSError(errno.EINTR, "an overflow signal comes first")
        timed = (
            cmd in _TIMED_CALLS
            and io.ci_target == abi.HWPERFD_CPC_LWP
            and io.ci_preset in (abi.HWPERFD_CPC_TIMED, abi.HWPERFD_CPC_LOOK)
        )
        try:
            self._calls[cmd](self, io, caller)
        except CpcError as exc:
            io.ci_error, io.ci_subcode = ERRNO[type(exc)], exc.subcode
            trace.active.refused("cpc", caller.tid, caller.uid, cmd, io.ci_error)
        except OverflowError:
            io.ci_error = errno.EINVAL
        if timed:
            io.ci_preset = self._left_ns(caller)
        # The head alone: FUSE copies back only what the answer holds, so a
        # bind's requests stay as the caller sent them.
        return 0, abi.build_head(io)

    def _overflow_first(self, cmd: int, io: Any, caller: Caller) -> bool:
        """Before a call of an LWP on its own set takes effect: True when an
        overflow froze the set and its SIGEMT has not gone yet (it goes now;
        the call answers EINTR, and libcpc makes it again once the handler
        ran).  The same when the SIGEMT went before the call reached the
        daemon but the LWP has not taken it (its carrier still pending: it
        came while the call was on its way).  The retry takes effect whatever
        happened since, so a period shorter than the round trip cannot hold
        the LWP in a loop."""
        if self.threads is None or io.ci_target in (abi.HWPERFD_CPC_CPU, abi.HWPERFD_CPC_PCTX):
            return False
        ctx = self.threads.get(SERVICE, caller.tid)
        if ctx is None or not isinstance(ctx.data, LwpBinding) or ctx.data.pctx:
            return False
        binding = ctx.data
        # The timer's look is never made again: it neither takes nor leaves
        # the retry's pass (left, the program's last sample took it and
        # read a set frozen at an overflow whose SIGEMT had not come).
        look = cmd == abi.HWPERFD_CPCIO_SAMPLE and io.ci_preset == abi.HWPERFD_CPC_LOOK
        if binding.deferred == cmd and not look:
            binding.deferred = 0
            return False
        self.catch_up(ctx, _stood_until(cmd, io))
        if not self._deliver(ctx.pid, ctx.tid) and not (
            binding.set.frozen and self._pending(ctx.pid, ctx.tid, abi.HWPERFD_CPC_SIGCARRIER)
        ):
            return False
        if not look:
            binding.deferred = cmd
        return True

    def _left_ns(self, caller: Caller) -> int:
        """The CPU ns the calling LWP may run before its own set's nearest
        overflow interrupt, after a call that caught it up (HWPERFD_CPC_TIMED:
        libcpc arms a timer on it, docs/overflow.md)."""
        ctx = self.threads.get(SERVICE, caller.tid) if self.threads is not None else None
        if ctx is None or not isinstance(ctx.data, LwpBinding) or ctx.data.pctx or ctx.data.set.invalid:
            return abi.HWPERFD_CPC_NO_OVERFLOW
        # An overflow the call found goes now, before its answer, not at the
        # sender's next round: this call is the timer's look at the instant.
        self._deliver(ctx.pid, ctx.tid)
        left = self.threads.left_ns(ctx) if self.threads is not None else None
        return abi.HWPERFD_CPC_NO_OVERFLOW if left is None else left

    # -- binding ------------------------------------------------------------------

    def _requests(self, io: Any, sparc_flags: bool = True) -> list[Request]:
        """Check the packed requests in the kernel's order and assign counters."""
        n = io.ci_nreqs
        if not 0 < n <= abi.HWPERFD_CPC_MAXREQS:
            raise Invalid(f"a set of {n} requests")
        if n > self.names.npic:
            raise Invalid(f"{n} requests, the {self.model.name} has {self.names.npic} counters",
                          abi.CPC_RESOURCE_UNAVAIL)  # fmt: skip
        wanted: list[tuple[Any, dict[str, int], list[tuple[int, Resolved]]]] = []
        for req in io.ci_req[:n]:
            if req.cr_flags & ~abi.KCPC_REQ_ALL_FLAGS:
                raise Invalid(f"flags {req.cr_flags:#x}", abi.CPC_REQ_INVALID_FLAGS)
            if req.cr_flags & abi.CPC_COUNT_HV:
                raise NoAccess("no hypervisor on this machine", abi.CPC_HV_NO_ACCESS)
            if req.cr_nattrs > abi.HWPERFD_CPC_MAXATTRS:
                raise Invalid(f"{req.cr_nattrs} attributes", abi.CPC_INVALID_ATTRIBUTE)
            attrs: dict[str, int] = {}
            for attr in req.cr_attr[: req.cr_nattrs]:
                if attr.ka_name not in self.names.attrs:
                    raise Invalid(f"attribute {attr.ka_name!r}", abi.CPC_INVALID_ATTRIBUTE)
                attrs[attr.ka_name] = attr.ka_val
            pics = range(self.names.npic)
            if "picnum" in attrs:
                if attrs["picnum"] >= self.names.npic:
                    raise Invalid(f"picnum {attrs['picnum']}", abi.CPC_INVALID_PICNUM)
                pics = range(attrs["picnum"], attrs["picnum"] + 1)
            for name, value in attrs.items():
                if name in ATTR_LIMITS and value > ATTR_LIMITS[name]:
                    raise Invalid(f"{name}={value:#x}", abi.CPC_ATTRIBUTE_OUT_OF_RANGE)
            options = [(pic, r) for pic in pics if (r := self.names.resolve(req.cr_event, pic)) is not None]
            if not options:
                subcode = abi.CPC_PIC_NOT_CAPABLE if "picnum" in attrs and self.names.known(req.cr_event) \
                    else abi.CPC_INVALID_EVENT
                raise Invalid(f"event {req.cr_event!r}", subcode)
            if req.cr_flags & abi.CPC_OVF_NOTIFY_EMT and not self.model.overflow_interrupt:
                raise NotSupported(f"the {self.model.name} raises no overflow interrupt")
            wanted.append((req, attrs, options))
        if self.model.control == "sparc" and sparc_flags:
            # us234_pcbe.c: one PCR holds both PICs' user/system bits.
            modes = {req.cr_flags & (abi.CPC_COUNT_USER | abi.CPC_COUNT_SYSTEM) for req, _, _ in wanted}
            if len(modes) > 1:
                raise Invalid("the PICs share one user/system setting", abi.CPC_CONFLICTING_REQS)
        for choice in itertools.product(*(options for _, _, options in wanted)):
            if len({pic for pic, _ in choice}) == len(choice):
                break
        else:
            raise Invalid("no counter for every request", abi.CPC_RESOURCE_UNAVAIL)
        out = []
        for index, ((req, attrs, _), (pic, resolved)) in enumerate(zip(wanted, choice)):
            word = control_word(self.model, resolved, bool(req.cr_flags & abi.CPC_COUNT_USER),
                                bool(req.cr_flags & abi.CPC_COUNT_SYSTEM),
                                bool(req.cr_flags & abi.CPC_OVF_NOTIFY_EMT), attrs)  # fmt: skip
            out.append(Request(index, req.cr_event, pic, word, req.cr_preset, req.cr_flags))
        return out

    def _new_set(self, io: Any) -> BoundSet:
        if io.ci_flags & ~abi.CPC_SET_ALL_FLAGS:
            raise Invalid(f"set flags {io.ci_flags:#x}")
        return BoundSet(self._requests(io), self.caps & abi.CPC_CAP_OVERFLOW_PRECISE != 0, io.ci_flags)

    def _bind(self, io: Any, caller: Caller) -> None:
        if io.ci_target == abi.HWPERFD_CPC_CPU:
            self._bind_cpu(io, caller)
            return
        if io.ci_target == abi.HWPERFD_CPC_PCTX and io.ci_flags:
            raise Invalid("cpc_bind_pctx takes no flags")
        bset = self._new_set(io)
        pid, tid, pctx = self._lwp_target(io, caller)
        if self.cpus.reservation.holder is not None:
            raise Unavailable(f"the counters are held by {self.cpus.reservation.holder!r}")
        threads = self._threads()
        # A new bind replaces whatever set the LWP had (libcpc: binding a set
        # invalidates the others), its own or another process's: attach
        # replaces it, and only once the new one is allowed.
        try:
            ctx = threads.attach(SERVICE, pid, tid, caller.uid)
        except LookupError:
            raise NoLwp(f"no LWP {tid}") from None
        except CountersLimit as exc:
            raise Unavailable(str(exc)) from None
        self._exited.pop((pid, tid), None)
        ctx.data = LwpBinding(bset, caller.tid, pctx, ctx.ran_ns, caller.gid)
        bset.start(ctx.cpu)

    def _lwp_target(self, io: Any, caller: Caller) -> tuple[int, int, bool]:
        if io.ci_target == abi.HWPERFD_CPC_LWP:
            pid = self._tgid_of(caller.tid)
            if pid is None:
                raise NoLwp("the calling thread is gone")
            return pid, caller.tid, False
        if io.ci_target != abi.HWPERFD_CPC_PCTX:
            raise Invalid(f"target {io.ci_target}")
        pid = int(io.ci_pid)
        if pid <= 0 or self._tgid_of(pid) != pid:
            raise NoLwp(f"no process {pid}")
        if not self._may_control(caller.uid, caller.gid, caller.tid, pid):
            raise NoAccess(f"process {pid} is not the caller's")
        tid = self.lwp_tid(pid, int(io.ci_id))
        if self._thread_start(pid, tid) is None:
            raise NoLwp(f"no LWP {io.ci_id} in process {pid}")
        return pid, tid, True

    @staticmethod
    def lwp_tid(pid: int, lwp: int) -> int:
        """An LWP id of a process as a Linux thread id: Solaris numbers a
        process's LWPs from 1, so 1 is the first thread (tid == pid); any
        other id is a thread id."""
        return pid if lwp == 1 else lwp

    def _bind_cpu(self, io: Any, caller: Caller) -> None:
        if io.ci_flags:
            raise Invalid("cpc_bind_cpu takes no flags")
        bset = self._new_set(io)
        cpu = int(io.ci_id)
        if not 0 <= cpu < len(self.cpus):
            raise Invalid(f"no CPU {cpu}")
        if caller.uid != 0:
            raise NoAccess("binding a CPU needs the cpc_cpu privilege (root)")
        if cpu in self.cpu_bindings:
            raise Unavailable(f"CPU {cpu} is bound already")
        holder = self.cpus.reservation.reserve(SERVICE)
        if holder is not None:
            raise Unavailable(f"the counters are held by {holder!r}")
        if not self.cpu_bindings:
            self._invalidate_lwps()
        self.catch_up_cpu(cpu)
        pmu = self.cpus.pmus[cpu]
        bset.tick_base = pmu.tsc.at(self.clock.tsc_ns(cpu))
        self.cpu_bindings[cpu] = CpuBinding(
            cpu, bset, caller.handle, next(self._serials) & 0x7FFFFFFF, self._tgid_of(caller.tid) or 0
        )
        bset.start(pmu)
        trace.active.cpu_programmed(SERVICE, (pmu,))

    def _invalidate_lwps(self) -> None:
        """cpc_bind_cpu: "The first invocation ... invalidates all currently
        bound per-LWP counter sets"."""
        if self.threads is None:
            return
        for ctx in list(self.threads.contexts(SERVICE)):
            self.threads.catch_up(ctx)
            ctx.data.set.invalidate(ctx.cpu)

    # -- the other calls ---------------------------------------------------------

    def _sample(self, io: Any, caller: Caller) -> None:
        execs = io.ci_flags == abi.HWPERFD_CPC_SAMPLE_EXECS
        if io.ci_flags and not (execs and io.ci_target == abi.HWPERFD_CPC_PCTX):
            raise Invalid(f"sample flags {io.ci_flags:#x}")
        io.ci_flags = 0
        if io.ci_target == abi.HWPERFD_CPC_CPU:
            binding = self._cpu_binding(io, caller)
            self.catch_up_cpu(binding.cpu, force=False)
            bset = binding.set
            tick = self.cpus.pmus[binding.cpu].tsc.at(self.clock.tsc_ns(binding.cpu)) - bset.tick_base
        else:
            final = self._exited_values(io, caller, execs)
            if final is not None:
                (values, tick), io.ci_flags = final
                self._answer(io, values, tick)
                return
            ctx = self._lwp_context(io, caller)
            self._still_valid(ctx)
            told = ctx.data.execs
            if told and execs:
                io.ci_flags = abi.HWPERFD_CPC_SAMPLE_EXECS
                self._answer(io, *told.pop(0))
                return
            told.clear()  # a plain sample: its caller does not follow execs
            bset = ctx.data.set
            self.catch_up(ctx)
            tick = self._tick(ctx.ran_ns - ctx.data.seen0)
        io.ci_data = list(bset.values) + [0] * (abi.HWPERFD_CPC_MAXREQS - len(bset.values))
        io.ci_nreqs = len(bset.values)
        io.ci_hrtime = time.monotonic_ns()
        io.ci_tick = tick

    @staticmethod
    def _answer(io: Any, values: list[int], tick: int) -> None:
        io.ci_data = values + [0] * (abi.HWPERFD_CPC_MAXREQS - len(values))
        io.ci_nreqs, io.ci_hrtime, io.ci_tick = len(values), time.monotonic_ns(), tick

    def _tick(self, ns: int) -> int:
        mhz = self.cpus.mhz
        return ns * mhz.numerator // (1000 * mhz.denominator)

    def _exited_values(self, io: Any, caller: Caller, execs: bool = False) -> tuple[Told, int] | None:
        """cpc_set_sample through a pctx on an LWP that has exited since:
        its final values, once, to the user that bound it (with ``execs``,
        first the values at each exec before the exit not yet told); and
        the answer's flags."""
        if io.ci_target != abi.HWPERFD_CPC_PCTX:
            return None
        key = (int(io.ci_pid), self.lwp_tid(int(io.ci_pid), int(io.ci_id)))
        kept = self._exited.get(key)
        if kept is None or (kept[0] != caller.uid and caller.uid != 0):
            return None
        if execs and kept[3]:
            return kept[3].pop(0), abi.HWPERFD_CPC_SAMPLE_EXECS
        del self._exited[key]
        return (kept[1], kept[2]), 0

    def _rele(self, io: Any, caller: Caller) -> None:
        if io.ci_target == abi.HWPERFD_CPC_CPU:
            binding = self._cpu_binding(io, caller)
            self._release_cpu(binding)
            return
        if self._exited_values(io, caller) is not None:
            return
        ctx = self._lwp_context(io, caller)
        self._threads().detach(SERVICE, ctx.tid)

    def _preset(self, io: Any, caller: Caller) -> None:
        ctx = self._own_context(caller)
        bset = ctx.data.set
        if not 0 <= io.ci_index < len(bset.requests):
            raise Invalid(f"no request {io.ci_index}")
        bset.set_preset(io.ci_index, io.ci_preset)

    def _restart(self, io: Any, caller: Caller) -> None:
        ctx = self._own_context(caller)
        self.catch_up(ctx, _stood_until(abi.HWPERFD_CPCIO_RESTART, io))
        ctx.data.set.restart(ctx.cpu)
        # The call's time from the restart on counts, unless an overflow could fall in it.
        self._threads().catch_up_within(ctx)
        self.on_counted(ctx)

    def _enable(self, io: Any, caller: Caller, enabled: bool = True) -> None:
        """cpc_enable(3CPC): an LWP switches counting on and off in the set
        another process bound on it (cputrack); without one, EINVAL."""
        ctx = self._own_context(caller)
        if not ctx.data.pctx:
            raise Invalid("no set bound by another process")
        self.catch_up(ctx)
        ctx.data.set.set_enabled(ctx.cpu, enabled)

    def _disable(self, io: Any, caller: Caller) -> None:
        self._enable(io, caller, enabled=False)

    _calls: Mapping[int, Callable[[CpcDevice, Any, Caller], None]] = {
        abi.HWPERFD_CPCIO_BIND: _bind,
        abi.HWPERFD_CPCIO_SAMPLE: _sample,
        abi.HWPERFD_CPCIO_RELE: _rele,
        abi.HWPERFD_CPCIO_PRESET: _preset,
        abi.HWPERFD_CPCIO_RESTART: _restart,
        abi.HWPERFD_CPCIO_ENABLE: _enable,
        abi.HWPERFD_CPCIO_DISABLE: _disable,
    }

    # -- contexts ---------------------------------------------------------------------

    def _threads(self) -> ThreadTable:
        if self.threads is None:
            raise Unavailable("per-LWP counters are not available")
        return self.threads

    def _own_context(self, caller: Caller) -> ThreadContext:
        ctx = self._threads().get(SERVICE, caller.tid)
        if ctx is None or not isinstance(ctx.data, LwpBinding):
            raise Invalid("the calling LWP has no bound set")
        self._still_valid(ctx)
        return ctx

    def _still_valid(self, ctx: ThreadContext) -> None:
        """EAGAIN for a set whose counters were taken: by a CPU bind
        (invalidated then), or by another personality, noticed here at the
        set's next call."""
        bset = ctx.data.set
        if self.cpus.reservation.holder is not None and not bset.invalid:
            bset.invalidate(ctx.cpu)
        if bset.invalid:
            raise Unavailable("the set was invalidated (the counters were taken)")

    def _lwp_context(self, io: Any, caller: Caller) -> ThreadContext:
        if io.ci_target == abi.HWPERFD_CPC_LWP:
            tid = caller.tid
        else:
            _, tid, _ = self._lwp_target(io, caller)
        ctx = self._threads().get(SERVICE, tid)
        if ctx is None or not isinstance(ctx.data, LwpBinding):
            raise Invalid("the set is not bound")
        return ctx

    def _cpu_binding(self, io: Any, caller: Caller) -> CpuBinding:
        binding = self.cpu_bindings.get(int(io.ci_id))
        if binding is not None and binding.handle < 0 and binding.holder == self._tgid_of(caller.tid):
            binding.handle = caller.handle  # put back after a restart: the file its process opened again
        if binding is None or binding.handle != caller.handle:
            raise Invalid(f"no set bound to CPU {io.ci_id} through this file")
        return binding

    def _release_cpu(self, binding: CpuBinding) -> None:
        self.catch_up_cpu(binding.cpu)
        binding.set.stop(self.cpus.pmus[binding.cpu])
        trace.active.cpu_programmed(SERVICE, (self.cpus.pmus[binding.cpu],))
        del self.cpu_bindings[binding.cpu]
        if not self.cpu_bindings:
            self.cpus.reservation.release(SERVICE)

    def release_handle(self, handle: int) -> None:
        """The file that bound CPUs was closed (the process unbound or died)."""
        for binding in [b for b in self.cpu_bindings.values() if b.handle == handle]:
            self._release_cpu(binding)

    # -- time ---------------------------------------------------------------------

    def catch_up(self, ctx: ThreadContext, upto: int | None = None) -> None:
        """Bring a thread's set up to date (``upto``: as far as its CPU clock
        read that); an overflow owes its LWP a SIGEMT."""
        self._threads().catch_up(ctx, upto)
        self.on_counted(ctx)

    def on_counted(self, ctx: ThreadContext) -> None:
        binding = ctx.data
        if isinstance(binding, LwpBinding) and binding.set.sync(ctx.cpu):
            self._owe_emt(ctx)

    def restored(self, ctx: ThreadContext) -> None:
        """A set put back frozen on an overflow: its SIGEMT goes again unless
        the LWP has it already - its carrier or SIGEMT pending, or SIGEMT
        blocked while libcpc's handler and the program's run (which end by
        restarting the set).  The overflow's write comes before its signal
        is sent, so a daemon killed between the two left this state, and the
        set would have stayed frozen for good (cpc_bind_curlwp(3CPC): only
        cpc_set_restart starts it again)."""
        binding = ctx.data
        if not isinstance(binding, LwpBinding) or not binding.set.frozen:
            return
        if not (self._pending(ctx.pid, ctx.tid, abi.HWPERFD_CPC_SIGCARRIER) or self._held(ctx.pid, ctx.tid, _SIGEMT)):
            self._owe_emt(ctx)

    def _owe_emt(self, ctx: ThreadContext) -> None:
        """SIGEMT for the LWP, carried by HWPERFD_CPC_SIGCARRIER (libcpc
        raises SIGEMT in the thread with si_code EMT_CPCOVF)."""
        start = self._process_start(ctx.pid)
        if start is None:
            return
        owner = None if ctx.owner == 0 else (ctx.owner, ctx.owner)
        self.signals_owed += 1
        self._signal(Signal(ctx.pid, start, owner, abi.HWPERFD_CPC_SIGCARRIER, 1, ctx.tid, ctx.start))

    # -- the thread table's hooks ------------------------------------------------------

    def _inherit(self, parent: ThreadContext) -> LwpBinding | None:
        """A new LWP of a process whose set was bound with
        CPC_BIND_LWP_INHERIT gets a copy (programmed by _start_inherited)."""
        binding = parent.data
        if not isinstance(binding, LwpBinding) or not binding.set.flags & abi.CPC_BIND_LWP_INHERIT:
            return None
        if binding.set.invalid or binding.pctx:
            return None
        requests = [Request(r.index, r.event, r.pic, r.evntsel, r.preset, r.flags) for r in binding.set.requests]
        return LwpBinding(BoundSet(requests, binding.set.precise, binding.set.flags), binding.binder, False, 0)

    def _start_inherited(self, ctx: ThreadContext) -> None:
        """cpc_bind_curlwp(3CPC): the new LWP counts from the presets; with a
        CPC_OVF_NOTIFY_EMT request its counters read UINT64_MAX and it gets a
        SIGEMT at once, to preset them itself."""
        binding = ctx.data
        emt = any(r.notify for r in binding.set.requests)
        binding.set = binding.set.inherited(ctx.cpu, emt)
        binding.seen0 = ctx.ran_ns
        if emt:
            self._owe_emt(ctx)

    def _on_exec(self, ctx: ThreadContext) -> bool:
        """exec(2) ends the counters the LWP bound for itself (the new image
        never bound them); another process's binding (cputrack -e) stays,
        while its binder may still control the process: a setuid image ends
        it, so what the privileged image ran never reaches the binder."""
        binding = ctx.data
        if not isinstance(binding, LwpBinding) or not binding.pctx:
            return False
        if not self._may_control(ctx.owner, binding.gid, binding.binder, ctx.pid):
            return False
        # The binder learns of the exec at its next sample, with the values
        # at it: libpctx stopped the process there, cputrack only looks.
        binding.execs[: max(0, len(binding.execs) - MAX_EXECS + 1)] = []
        binding.execs.append(self._values_now(ctx))
        return True

    def _on_exit(self, ctx: ThreadContext) -> None:
        binding = ctx.data
        if not isinstance(binding, LwpBinding) or not binding.pctx:
            return
        values, tick = self._values_now(ctx)
        if len(self._exited) >= MAX_EXITED:
            # The binder's own oldest goes first: one user's short-lived LWPs
            # never push out another's values.
            mine = next((key for key, (owner, *_) in self._exited.items() if owner == ctx.owner), None)
            self._exited.pop(mine if mine is not None else next(iter(self._exited)))
        self._exited[(ctx.pid, ctx.tid)] = (ctx.owner, values, tick, binding.execs)

    def _values_now(self, ctx: ThreadContext) -> Told:
        """An LWP's set's values and virtual tick as of the thread's CPU time now."""
        binding = ctx.data
        if self.threads is not None:
            self.threads.catch_up(ctx)
        binding.set.sync(ctx.cpu)
        return list(binding.set.values), self._tick(ctx.ran_ns - binding.seen0)

    def catch_up_cpu(self, cpu: int, force: bool = True) -> None:
        """Run the CPU's new busy time through its counters.  A sample
        (``force`` False) under a hold (``cpu_hold_ns``: the binding's state
        page shows the values as taken) takes them anew only once they have
        stood that long, so the page and the sample agree until then."""
        if self.cpu_hold_ns:
            wall = time.monotonic_ns()
            if not force and wall < self.cpu_taken[cpu] + self.cpu_hold_ns:
                return
            self.cpu_taken[cpu] = wall
        now = self.clock.cpu_times(cpu)
        before = self._cpu_seen[cpu]
        user, system = max(0, now[0] - before[0]), max(0, now[1] - before[1])
        self._cpu_seen[cpu] = (max(now[0], before[0]), max(now[1], before[1]))
        binding = self.cpu_bindings.get(cpu)
        if binding is None or not (user or system):
            return
        profile = self._profile()
        pmu = self.cpus.pmus[cpu]
        pmu.run(user, system, profile.rates, profile.exl_share)
        binding.set.sync(pmu)


def _stood_until(cmd: int, io: Any) -> int | None:
    """A restart's ``ci_hrtime``: the LWP's CPU clock as it called (libcpc
    tells it), where its frozen set starts again; 0, or another call: where
    the daemon's look finds the LWP (``ThreadTable.catch_up``)."""
    return io.ci_hrtime if cmd == abi.HWPERFD_CPCIO_RESTART and io.ci_hrtime > 0 else None
