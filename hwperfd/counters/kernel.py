"""The IRIX kernel's counter virtualization (r10k_counters(5), Operation Modes).

User mode: each process has its own control block, saved and restored across
context switches, so any number of processes share the two hardware
counters.  System mode: root counting in kernel mode, on every CPU at once,
one block per CPU summed into a global block when read.  System mode
outranks user mode; taking it displaces user-mode processes, whose generation
number is bumped so their readers know the counts are no longer to be trusted.

Everything is synchronous and takes CPU time from a ``TimeSource``, so the
model runs the same under the host's real clock and under a manual clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

from hwperfd.counters.block import ControlBlock
from hwperfd.counters.errors import CounterError, CountersBusy, InvalidRequest, NotInUse, NotPermitted, NoSuchProcess
from hwperfd.counters.request import SLOTS, CounterRequest
from hwperfd.cpu.pmu import CpuSet
from hwperfd.cpu.profiles import WorkloadProfile

CpuTimes = tuple[int, int]  # cumulative (user_ns, system_ns)


class TimeSource(Protocol):
    def process_times(self, pid: int) -> CpuTimes | None: ...

    def cpu_times(self, cpu: int) -> CpuTimes: ...


class Task(Protocol):
    """What the kernel needs to know of a process (host ProcessInfo fits).
    Read-only members, so that frozen records and lazy properties fit too."""

    @property
    def pid(self) -> int: ...
    @property
    def uid(self) -> int: ...
    @property
    def pgid(self) -> int: ...
    @property
    def processor(self) -> int: ...


@dataclass(frozen=True)
class Caller:
    pid: int
    uid: int
    gid: int
    pgid: int

    @property
    def root(self) -> bool:
        return self.uid == 0


@dataclass(frozen=True)
class Restore:
    """Saved counters to continue from: PIOCENEVCTRSEX's hwperf_profevctraux_t,
    which IRIX's checkpoint/restart filled from PIOCGETEVCTRS."""

    generation: int  # 0: a new generation, as PIOCENEVCTRS
    counts: tuple[int, ...]

    @property
    def empty(self) -> bool:
        return not self.generation and not any(self.counts)

    def validate(self, request: CounterRequest) -> None:
        if self.generation < 0:
            raise InvalidRequest(f"negative generation {self.generation}")
        if len(self.counts) != SLOTS:
            raise InvalidRequest("saved counts have 32 slots")
        if not self.empty and request.kernel_mode:
            raise InvalidRequest("saved counts can be restored only into a process's user-mode counters")


class State(enum.Enum):
    ENABLED = "enabled"
    RELEASED = "released"
    LOST = "lost"  # displaced by system mode; counts frozen until re-enabled


@dataclass
class _ProcessRecord:
    pid: int
    block: ControlBlock
    generation: int
    state: State
    seen: CpuTimes
    cpu: int
    save_children: set[int] = field(default_factory=set)
    exited: bool = False
    parent: int = 0
    comm: str = ""
    folded: bool = False  # counts already added to the parent
    descendants: list[tuple[int, str, tuple[int, ...]]] = field(default_factory=list)

    def own_counts(self) -> tuple[int, ...]:
        """Counts less everything folded in from descendants (each listed with its own)."""
        folded = [sum(column) for column in zip(*(counts for _, _, counts in self.descendants))] or [0] * 32
        return tuple(c - f for c, f in zip(self.block.counts, folded))


@dataclass
class _SystemRecord:
    request: CounterRequest
    generation: int
    owner: int | None  # pid that acquired through /proc, None for syssgi
    per_cpu: list[ControlBlock]
    seen: list[CpuTimes]


@dataclass(frozen=True)
class CounterView:
    """A consistent snapshot of one context's counters, for readers."""

    state: State
    system: bool
    generation: int
    request: CounterRequest
    counts: tuple[int, ...]
    active_ns: tuple[int, ...]
    enabled_ns: int
    profile: str


def may_access(caller: Caller, target: Task) -> bool:
    """r10k_counters(5) THE COUNTERS: another process's counters are reachable
    when it "belongs to the same process group or is root"; hwperfd also
    requires the same user, so a shared process group never crosses users."""
    return caller.root or caller.pid == target.pid or (caller.uid == target.uid and caller.pgid == target.pgid)


class CounterKernel:
    def __init__(
        self,
        cpus: CpuSet,
        time: TimeSource,
        *,
        is_running: Callable[[int], bool] = lambda pid: False,
        signal: Callable[[int, int, int], None] = lambda pid, sig, count: None,
    ) -> None:
        self.cpus = cpus
        self.time = time
        self._is_running = is_running
        self._signal = signal
        self._procs: dict[int, _ProcessRecord] = {}
        self._exited: set[int] = set()  # zombies, looked at before every request
        self._profiles: dict[int, WorkloadProfile] = {}
        self._system: _SystemRecord | None = None
        self._system_generation = 0
        self.default_profile = WorkloadProfile()

    # -- user mode through /proc ------------------------------------------

    def enable(
        self, caller: Caller, target: Task, request: CounterRequest, restore: Restore | None = None
    ) -> int:
        """PIOCENEVCTRS: acquire the counters for ``target``; returns the generation.

        PIOCENEVCTRSEX passes ``restore``: counting starts from those counts
        and, if its generation is not 0, under that generation.
        """
        request.validate(self.cpus, root=caller.root)
        if restore is not None:
            restore.validate(request)
        self._check_access(caller, target)
        if self._system is not None:
            raise CountersBusy("the counters are in use in system mode")
        if request.kernel_mode:
            running = [r.pid for r in self._enabled() if self._is_running(r.pid)]
            if running:
                # This call "will not forcibly acquire the counters" (PIOCENEVCTRS).
                raise CountersBusy(f"user-mode counters are running (pid {running[0]})")
            return self._acquire_system(request, owner=target.pid)
        record = self._procs.get(target.pid)
        if record is not None and record.state is State.ENABLED:
            raise CountersBusy(f"pid {target.pid} is already using the counters")
        seen = self.time.process_times(target.pid)
        if seen is None:
            raise NoSuchProcess(f"pid {target.pid} is gone")
        generation = record.generation + 1 if record else 1
        block = ControlBlock(request)
        if restore is not None and not restore.empty:
            if restore.generation:
                if record is not None and restore.generation <= record.generation:
                    # A generation names one set of counts; readers compare them.
                    raise InvalidRequest(
                        f"generation {restore.generation} is not above this process's last ({record.generation})"
                    )
                generation = restore.generation
            block.start_from(restore.counts)
        self._procs[target.pid] = _ProcessRecord(
            target.pid, block, generation, State.ENABLED, seen, target.processor % len(self.cpus)
        )
        return generation

    def read(self, caller: Caller, target: Task) -> tuple[int, tuple[int, ...]]:
        """PIOCGETEVCTRS: the 64-bit virtual counters and the generation."""
        self._check_access(caller, target)
        if self._owns_system(target.pid):
            return self.read_system()
        record = self._record(target.pid)
        self._catch_up(record)
        return record.generation, tuple(record.block.counts)

    def control(self, caller: Caller, target: Task) -> tuple[int, CounterRequest]:
        """PIOCGETEVCTRL: fails when the counters are not in use (PAPI relies on it)."""
        self._check_access(caller, target)
        if self._owns_system(target.pid):
            return self.system_control()
        record = self._procs.get(target.pid)
        if record is None or record.state is not State.ENABLED:
            raise self._not_in_use(target.pid)
        return record.generation, record.block.request

    def set_control(self, caller: Caller, target: Task, request: CounterRequest) -> int:
        """PIOCSETEVCTRL: change events without releasing; bumps the generation."""
        request.validate(self.cpus, root=caller.root)
        self._check_access(caller, target)
        if self._owns_system(target.pid):
            return self.set_system_control(caller, request)
        record = self._procs.get(target.pid)
        if record is None or record.state is not State.ENABLED:
            raise self._not_in_use(target.pid)
        if request.kernel_mode:
            raise InvalidRequest("kernel mode needs system mode: release and acquire with PIOCENEVCTRS")
        self._catch_up(record)
        record.block.reprogram(request)
        record.generation += 1
        return record.generation

    def release(self, caller: Caller, target: Task) -> None:
        """PIOCRELEVCTRS: stop counting; the counts stay readable while the process lives."""
        self._check_access(caller, target)
        if self._owns_system(target.pid):
            self._release_system()
            return
        record = self._procs.get(target.pid)
        if record is None or record.state is State.RELEASED:
            raise self._not_in_use(target.pid)
        self._catch_up(record)
        record.state = State.RELEASED

    def lose(self, pid: int) -> int:
        """Take a process's counters away, as system mode would (for tests of
        clients that must notice); returns the new generation."""
        record = self._procs.get(pid)
        if record is None or record.state is not State.ENABLED:
            raise self._not_in_use(pid)
        self._displace(record)
        return record.generation

    def save_child_counts(self, caller: Caller, parent: Task, child_pid: int) -> None:
        """PIOCSAVECCNTRS: add ``child_pid``'s counts to ``parent`` when it exits."""
        self._check_access(caller, parent)
        self._parent_record(parent.pid).save_children.add(child_pid)

    def view(self, pid: int) -> CounterView | None:
        if self._owns_system(pid):
            generation, counts = self.read_system()
            system = self._system
            assert system is not None
            return CounterView(
                State.ENABLED,
                True,
                generation,
                system.request,
                counts,
                tuple(map(sum, zip(*(b.active_ns for b in system.per_cpu)))),
                sum(b.enabled_ns for b in system.per_cpu),
                self.default_profile.name,
            )
        record = self._procs.get(pid)
        if record is None:
            return None
        self._catch_up(record)
        block = record.block
        return CounterView(
            record.state,
            False,
            record.generation,
            block.request,
            tuple(block.counts),
            tuple(block.active_ns),
            block.enabled_ns,
            self.profile(pid).name,
        )

    # -- profiles ------------------------------------------------------------

    def profile(self, pid: int) -> WorkloadProfile:
        return self._profiles.get(pid, self.default_profile)

    def set_profile(self, pid: int, profile: WorkloadProfile) -> None:
        """Counting so far stays with the old profile; new time uses the new one."""
        record = self._procs.get(pid)
        if record is not None:
            self._catch_up(record)
        self._profiles[pid] = profile

    # -- process lifecycle ----------------------------------------------------

    def fork(self, parent_pid: int, child_pid: int, child_cpu: int = 0) -> None:
        """The child inherits the parent's control with zeroed counts (u-area copy)."""
        if parent_pid in self._profiles:
            self._profiles[child_pid] = self._profiles[parent_pid]
        parent = self._procs.get(parent_pid)
        if parent is None or parent.state is not State.ENABLED:
            return
        self._procs[child_pid] = _ProcessRecord(
            child_pid,
            ControlBlock(parent.block.request),
            parent.generation,
            State.ENABLED,
            (0, 0),
            child_cpu % len(self.cpus),
        )

    def exit(self, pid: int, parent_pid: int, parent_waiting: bool, comm: str = "") -> None:
        """A process exited; it stays readable as a zombie until reaped.

        r10k_counters(5): "if the kernel sees that the parent is waiting for
        it it will add the child's 64-bit counters to those of the parent";
        PIOCSAVECCNTRS asks for the same without waiting.
        """
        record = self._procs.get(pid)
        if record is None or record.exited:
            return
        self._catch_up(record)
        record.exited, record.parent = True, parent_pid
        self._exited.add(pid)
        record.comm = comm or record.comm
        parent = self._procs.get(parent_pid)
        if parent_waiting or (parent is not None and pid in parent.save_children):
            self._fold(record)

    def reaped(self, pid: int, parent_alive: bool) -> None:
        """The zombie is gone: a parent that reaped it through wait(2) gets
        its counts if it has not already; then the state is freed."""
        record = self._procs.get(pid)
        if record is not None and record.exited and not record.folded and parent_alive:
            self._fold(record)
        self.forget(pid)

    def forget(self, pid: int) -> None:
        """Free the state of a process that is gone.

        System mode taken through the process's /proc file goes with it:
        nobody could release it through /proc any more, and its overflow
        signals would go to a dead (or reused) pid.
        """
        if self._owns_system(pid):
            self._release_system()
        self._procs.pop(pid, None)
        self._profiles.pop(pid, None)
        self._exited.discard(pid)

    def _fold(self, child: _ProcessRecord) -> None:
        parent = self._parent_record(child.parent)
        parent.block.add(child.block)
        parent.descendants.append((child.pid, child.comm, child.own_counts()))
        parent.descendants.extend(child.descendants)
        parent.save_children.discard(child.pid)
        child.folded = True

    def descendants(self, pid: int) -> list[tuple[int, str, tuple[int, ...]]]:
        """Processes whose counts were folded into ``pid``, each with its own counts."""
        record = self._procs.get(pid)
        return list(record.descendants) if record else []

    def has_exited(self, pid: int) -> bool:
        record = self._procs.get(pid)
        return record is not None and record.exited

    def comm_of(self, pid: int) -> str:
        record = self._procs.get(pid)
        return record.comm if record else ""

    def note_comm(self, pid: int, comm: str) -> None:
        """Remember a process's name while it can still be read (for -mp reports)."""
        record = self._procs.get(pid)
        if record is not None:
            record.comm = comm

    def parent_of(self, pid: int) -> int:
        record = self._procs.get(pid)
        return record.parent if record else 0

    def exited(self) -> list[int]:
        return list(self._exited)

    def is_tracked(self, pid: int) -> bool:
        return pid in self._procs or self._owns_system(pid)

    def known(self) -> list[int]:
        """Every pid the kernel keeps anything for (counters or a profile)."""
        return list(set(self.tracked()) | set(self._profiles))

    def tracked(self) -> list[int]:
        """Pids with counter state, the owner of /proc system mode included."""
        pids = list(self._procs)
        owner = self._system.owner if self._system is not None else None
        if owner is not None and owner not in self._procs:
            pids.append(owner)
        return pids

    # -- system mode (syssgi) -----------------------------------------------

    def enable_system(self, caller: Caller, request: CounterRequest) -> int:
        """HWPERF_ENSYSCNTRS: forcibly acquire the counters in system mode."""
        if not caller.root:
            raise NotPermitted("system mode needs root")
        request.validate(self.cpus, root=True)
        if not request.kernel_mode:
            raise InvalidRequest("system mode needs at least one event counted in kernel mode")
        if self._system is not None:
            raise CountersBusy("the counters are already in use in system mode")
        return self._acquire_system(request, owner=None)

    def read_system(self) -> tuple[int, tuple[int, ...]]:
        system = self._require_system()
        self._catch_up_system(system)
        # Per-CPU blocks are coalesced into the global one on every read.
        return system.generation, tuple(map(sum, zip(*(b.counts for b in system.per_cpu))))

    def read_cpu(self, cpu: int) -> tuple[int, tuple[int, ...]] | None:
        """HWPERF_GET_CPUCNTRS: None for an invalid cpuid (the call returns 0)."""
        system = self._system
        if system is None or not 0 <= cpu < len(self.cpus):
            return None
        self._catch_up_system(system)
        return system.generation, tuple(system.per_cpu[cpu].counts)

    def system_control(self) -> tuple[int, CounterRequest]:
        system = self._require_system()
        return system.generation, system.request

    def set_system_control(self, caller: Caller, request: CounterRequest) -> int:
        if not caller.root:
            raise NotPermitted("HWPERF_SET_SYSEVCTRL needs root")
        request.validate(self.cpus, root=True)
        system = self._require_system()
        if not request.kernel_mode:
            raise InvalidRequest("system mode needs at least one event counted in kernel mode")
        self._catch_up_system(system)
        for block in system.per_cpu:
            block.reprogram(request)
        system.request = request
        self._system_generation += 1
        system.generation = self._system_generation
        return system.generation

    def release_system(self, caller: Caller) -> None:
        if not caller.root:
            raise NotPermitted("HWPERF_RELSYSCNTRS needs root")
        self._release_system()

    @property
    def system_mode(self) -> bool:
        return self._system is not None

    # -- time ----------------------------------------------------------------

    def catch_up(self, pids: Iterable[int] | None = None) -> None:
        """Bring blocks up to date (overflow signals are raised on the way)."""
        for pid in list(self._procs) if pids is None else pids:
            record = self._procs.get(pid)
            if record is not None:
                self._catch_up(record)
        if self._system is not None:
            self._catch_up_system(self._system)

    def signalling(self) -> list[int]:
        """Pids whose counters may raise overflow signals: they need timely catch-up."""
        return [
            r.pid
            for r in self._procs.values()
            if r.state is State.ENABLED and r.block.request.signal and any(r.block.request.thresholds)
        ]

    # -- internals -----------------------------------------------------------

    def _catch_up(self, record: _ProcessRecord) -> None:
        now = self.time.process_times(record.pid)
        if now is None:
            return
        user = max(0, now[0] - record.seen[0])
        system = max(0, now[1] - record.seen[1])
        record.seen = (max(now[0], record.seen[0]), max(now[1], record.seen[1]))
        if record.state is not State.ENABLED or record.exited or not (user or system):
            return
        cpu = self.cpus[record.cpu]
        overflows = record.block.advance(cpu, user, system, self.profile(record.pid))
        if overflows and record.block.request.signal:
            self._signal(record.pid, record.block.request.signal, overflows)

    def _catch_up_system(self, system: _SystemRecord) -> None:
        for i, block in enumerate(system.per_cpu):
            now = self.time.cpu_times(i)
            before = system.seen[i]
            user, sys_ = max(0, now[0] - before[0]), max(0, now[1] - before[1])
            system.seen[i] = (max(now[0], before[0]), max(now[1], before[1]))
            if user or sys_:
                overflows = block.advance(self.cpus[i], user, sys_, self.default_profile)
                if overflows and system.request.signal and system.owner is not None:
                    self._signal(system.owner, system.request.signal, overflows)

    def _acquire_system(self, request: CounterRequest, owner: int | None) -> int:
        for record in self._enabled():
            self._displace(record)
        self._system_generation += 1
        self._system = _SystemRecord(
            request,
            self._system_generation,
            owner,
            [ControlBlock(request) for _ in self.cpus.cpus],
            [self.time.cpu_times(i) for i in range(len(self.cpus))],
        )
        return self._system_generation

    def _displace(self, record: _ProcessRecord) -> None:
        """Displaced users will not count again until explicitly restarted;
        the new generation tells their readers."""
        self._catch_up(record)
        record.state = State.LOST
        record.generation += 1

    def _release_system(self) -> None:
        system = self._require_system()
        self._catch_up_system(system)
        if system.owner is not None:
            # "This same coalescing of the per-cpu counters happens when the
            # counters are released": the owner can still read the sum.
            total = ControlBlock(system.request)
            for block in system.per_cpu:
                total.add(block)
            seen = self.time.process_times(system.owner) or (0, 0)
            # A generation names one set of counts: the owner's earlier
            # user-mode generations are not reused for the coalesced ones.
            previous = self._procs.get(system.owner)
            generation = max(system.generation, previous.generation + 1) if previous else system.generation
            self._procs[system.owner] = _ProcessRecord(system.owner, total, generation, State.RELEASED, seen, 0)
        self._system = None

    def _require_system(self) -> _SystemRecord:
        if self._system is None:
            raise NotInUse("the counters are not in use in system mode")
        return self._system

    def _owns_system(self, pid: int) -> bool:
        return self._system is not None and self._system.owner == pid

    def _enabled(self) -> list[_ProcessRecord]:
        return [r for r in self._procs.values() if r.state is State.ENABLED]

    def _record(self, pid: int) -> _ProcessRecord:
        record = self._procs.get(pid)
        if record is None:
            raise self._not_in_use(pid)
        return record

    def _not_in_use(self, pid: int) -> CounterError:
        """EINVAL for a live process without counters; ESRCH for one that is
        gone (root's calls never look the target up before this)."""
        if self.time.process_times(pid) is None:
            return NoSuchProcess(f"pid {pid} is gone")
        return NotInUse(f"pid {pid} is not using the counters")

    def _parent_record(self, pid: int) -> _ProcessRecord:
        record = self._procs.get(pid)
        if record is None:
            seen = self.time.process_times(pid) or (0, 0)
            record = _ProcessRecord(pid, ControlBlock(CounterRequest.build([])), 1, State.RELEASED, seen, 0)
            self._procs[pid] = record
        return record

    @staticmethod
    def _check_access(caller: Caller, target: Task) -> None:
        if not may_access(caller, target):
            raise NotPermitted(f"pid {caller.pid} may not use the counters of pid {target.pid}")
