"""IRIX's counter set-up in the set-up store, and back after a restart.

Each process's record (its control block as of its last change, the CPU
time it was counted to then, generation, owner, thresholds, saved exit
values) is one store record; system mode is another.  ``sync`` writes the
records of the processes a call or an event may have changed, when what
they hold other than the moving counts did change; ``restore`` puts them
back into a new kernel, and the kernel's catch-up then counts the CPU time
spent since (downtime included) through the same model, so nothing is
counted twice or missed.  What the lifecycle needs afterwards (processes
that ended or were reaped meanwhile, children forked meanwhile) it learns
as after lost process events (``Lifecycle.restored``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterable, NamedTuple, Protocol

from hwperfd.counters import codec
from hwperfd.counters.block import ControlBlock, _Multiplex
from hwperfd.counters.kernel import (
    SYSTEM_MODE_SERVICE,
    CounterKernel,
    State,
    _Credit,
    _ProcessRecord,
    _SystemRecord,
)
from hwperfd.counters.request import CounterRequest
from hwperfd.counters.store import Live, SetupRecord, SetupStore
from hwperfd.cpu.pmu import CounterState
from hwperfd.cpu.profiles import WorkloadProfile

log = logging.getLogger("hwperfd")

PROCESS = "irix-process"
SYSTEM = "irix-system"
CLOCK = "manual-clock"

codec.register(ControlBlock, _Multiplex, CounterState, State, _Credit, _ProcessRecord, _SystemRecord, WorkloadProfile)
codec.register(CounterRequest, maker=CounterRequest.shared)

_BAD = (codec.CodecError, ValueError, TypeError, KeyError, ZeroDivisionError, AttributeError)


class Item(NamedTuple):
    """One record of a personality's set-up as it stands: whose it is
    (``pid`` and ``start``, 0 for the machine's), ``fingerprint`` (what it
    holds besides counts that move with CPU time: a change is worth a
    write), ``encode()`` (its stored form, made only when written) and
    ``tid``, the thread whose context it is (0: the machine's)."""

    pid: int
    start: int
    uid: int
    fingerprint: Any
    encode: Callable[[], Any]
    tid: int = 0


class SetupSource(Protocol):
    """A personality's set-up, kept in the store as records of ``kind``."""

    kind: str

    def setup(self, tids: Collection[int] | None) -> dict[str, Item]:
        """Its records now: those of the contexts on the threads ``tids`` and
        the machine's; every one if None.  A context's record changes only
        through its thread's calls, calls that name it, and the thread
        table's own events (``ThreadTable.touched``), so a call costs what it
        changed, not what its process holds (PAPI's pthrtough2: 2 000
        threads, each with its vperfctr)."""
        ...

    def restore_setup(self, key: str, pid: int, start: int, body: Any) -> bool:
        """Put back one record; False if its owner is gone or not the one
        that set it up.  Raises ValueError (or CodecError) for a corrupt one."""
        ...


@dataclass
class Restored:
    """What a start found: records put back, and records refused (corrupt or not ours)."""

    processes: int = 0
    system: bool = False
    refused: int = 0
    later: int = 0  # process records left to put back a family at a time (``take``)


def _fingerprint(record: _ProcessRecord | None, profile: WorkloadProfile | None) -> tuple[Any, ...] | None:
    """What a record holds besides counts that move with CPU time: a change
    here is a change of set-up (or an exit value), worth a write."""
    if record is None:
        return None if profile is None else (id(profile),)
    return (
        id(record),
        id(record.block),
        record.block.request,
        record.state,
        record.generation,
        record.save_children,
        record.start,
        record.owner,
        record.children_ns,
        # not record.lossy: every record put back is lossy, whatever it says
        id(record.credit),
        record.exited,
        record.parent,
        record.folded,
        len(record.descendants),
        record.profiling,
        record.suspended,
        record.cpu,
        record.made_by_pid,
        id(profile),
    )


class DurableSetup:
    """Keeps ``kernel``'s set-up in ``store``.  ``read_start(pid)``: the start
    time of the process at ``pid`` now (None: no such process); ``host_time``:
    the kernel's time source reads the host's processes by pid."""

    def __init__(
        self,
        store: SetupStore,
        kernel: CounterKernel,
        read_start: Callable[[int], int | None],
        *,
        host_time: bool = True,
    ) -> None:
        self.store = store
        self._host_time = host_time
        self.kernel = kernel
        self._read_start = read_start
        self._written: dict[int, tuple[Any, ...]] = {}  # pid -> fingerprint last written
        self._system_written: tuple[Any, ...] | None = None
        self._clock_written: Any = None
        self.writes = 0
        self.records = 0  # records written (put or dropped)
        self.looked = 0  # the sources' records compared with what was last written
        self.sources: list[SetupSource] = []
        # kind -> key -> (tid, fingerprint) last written for each source's
        # record, and kind -> tid -> its keys (what a sync of some threads may drop)
        self._source_written: dict[str, dict[str, tuple[int, Any]]] = {}
        self._source_keys: dict[str, dict[int, set[str]]] = {}
        self._loaded: list[SetupRecord] | None = None
        # Process records not put back yet (pid -> parent), and by parent.
        self.pending: dict[int, int] = {}
        self._pending_children: dict[int, set[int]] = {}
        self.found = Restored()
        self._refused = 0  # records that checked out but did not decode

    def add_source(self, source: SetupSource) -> None:
        self.sources.append(source)

    def sync_sources(self, tids: Collection[int] | None) -> None:
        """Write what changed of the sources' records of the contexts on the
        threads ``tids`` (and the machine's), and drop the records gone; all
        of them if None.  ``looked`` counts the records compared.  What was
        written is noted once the store has it: a failed write is made again."""
        put: list[SetupRecord] = []
        drop: list[tuple[str, str]] = []
        noted: list[tuple[str, str, tuple[int, Any] | None]] = []  # kind, key, (tid, fingerprint) or gone
        for source in self.sources:
            kind = source.kind
            written = self._source_written.get(kind, {})
            by_tid = self._source_keys.get(kind, {})
            items = source.setup(tids)
            if not items and not written:
                continue
            self.looked += len(items)
            for key, item in items.items():
                old = written.get(key)
                if old is not None and old[1] == item.fingerprint:
                    continue
                put.append(SetupRecord(kind, key, item.pid, item.start, item.uid, item.encode()))
                noted.append((kind, key, (item.tid, item.fingerprint)))
            if tids is None:
                gone = [key for key in written if key not in items]
            else:
                gone = [key for tid in {0, *tids} for key in by_tid.get(tid, ()) if key not in items]
            for key in gone:
                drop.append((kind, key))
                noted.append((kind, key, None))
        if put or drop:
            self.store.write(put, drop)
            self.writes += 1
            self.records += len(put) + len(drop)
        for kind, key, now in noted:
            written = self._source_written.setdefault(kind, {})
            by_tid = self._source_keys.setdefault(kind, {})
            old = written.pop(key, None)
            if old is not None:
                self._unindex(by_tid, old[0], key)
            if now is not None:
                written[key] = now
                by_tid.setdefault(now[0], set()).add(key)

    @staticmethod
    def _unindex(by_tid: dict[int, set[str]], tid: int, key: str) -> None:
        keys = by_tid.get(tid)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del by_tid[tid]

    def restore_sources(self) -> None:
        """Put back the sources' records (after ``restore``, which read them).
        A refused record is logged, deleted and counted in ``found``."""
        by_kind = {source.kind: source for source in self.sources}
        stale: list[tuple[str, str]] = []
        for rec in self._loaded or ():
            source = by_kind.get(rec.kind)
            if source is None:
                continue
            try:
                if not source.restore_setup(rec.key, rec.pid, rec.start, rec.body):
                    stale.append((rec.kind, rec.key))
            except _BAD as exc:
                log.warning("set-up record %s/%s refused: %s", rec.kind, rec.key, exc)
                self._refused += 1
                stale.append((rec.kind, rec.key))
        self._loaded = None
        self.store.write((), stale)
        self.found.refused = self._refused + self.store.refused

    # -- writing -------------------------------------------------------------

    def sync(self, pids: Iterable[int], overflowed: Iterable[int] = ()) -> set[int]:
        """Write what changed of ``pids``' records, and of system mode.
        ``overflowed``: processes owed overflow signals since their last
        write; their counts are written too, before the signals go, so a
        restart neither loses those signals nor sends them again.

        Returns the pids left unwritten: those whose start could not be read
        now (``BlockingIOError`` from ``read_start``: the process is stuck
        where its /proc files wait).  The others are written all the same, and
        what was last written is noted only once the store has it, so a write
        that failed is made again by the next sync, not taken as done."""
        kernel = self.kernel
        put: list[SetupRecord] = []
        drop: list[tuple[str, str]] = []
        noted: dict[int, tuple[Any, ...] | None] = {}
        left: set[int] = set()
        forced = set(overflowed)
        for pid in forced.union(pids):
            record = kernel._procs.get(pid)
            profile = kernel._profiles.get(pid)
            fp = _fingerprint(record, profile)
            if fp == self._written.get(pid) and (pid not in forced or record is None):
                continue
            if fp is None:
                noted[pid] = None
                drop.append((PROCESS, str(pid)))
                continue
            try:
                put.append(self._process_record(pid, record, profile))
            except BlockingIOError:
                left.add(pid)
                continue
            noted[pid] = fp
        system = kernel._system
        sfp = (
            (id(system), system.generation, system.request, system.signal_to) if system else None,
            kernel._system_generation,
        )
        system_changed = sfp != self._system_written or (system is not None and system.signal_to in forced)
        if system_changed:
            put.append(
                SetupRecord(
                    SYSTEM,
                    "",
                    0,  # system mode is syssgi's: no process owns it
                    0,
                    0,
                    Live(system=system, generation=kernel._system_generation),
                )
            )
        if put or drop:
            self.store.write(put, drop)
            self.writes += 1
            self.records += len(put) + len(drop)
        for pid, fp in noted.items():
            if fp is None:
                self._written.pop(pid, None)
            else:
                self._written[pid] = fp
        if system_changed:
            self._system_written = sfp
        return left

    def sync_all(self) -> set[int]:
        """Every record the kernel holds, and those it let go (``sync``'s pids left)."""
        return self.sync(set(self.kernel._procs) | set(self.kernel._profiles) | set(self._written))

    def sync_clock(self, clock: object) -> None:
        """The manual clock's times (its processes', threads' and CPUs'), which
        only writes to the control node move."""
        state = {
            "processes": getattr(clock, "_processes", {}),
            "threads": getattr(clock, "_threads", {}),
            "cpus": getattr(clock, "_cpus", []),
        }
        form = codec.encode(state)
        if form != self._clock_written:
            self._clock_written = form
            self.store.write([SetupRecord(CLOCK, "", 0, 0, 0, form)])

    def _process_record(self, pid: int, record: _ProcessRecord | None, profile: WorkloadProfile | None) -> SetupRecord:
        start = record.start if record is not None else 0
        if not start:
            start = self._read_start(pid) or 0
        owner = record.owner if record is not None else None
        body = Live(record=record, profile=profile)
        parent = record.parent if record is not None else 0
        return SetupRecord(PROCESS, str(pid), pid, start, owner[0] if owner else 0, body, parent)

    # -- reading -------------------------------------------------------------

    def restore(self, clock: object | None = None, *, at_once: int | None = None) -> Restored:
        """Put the stored set-up back into the (new, empty) kernel: system
        mode and the manual clock now, and the process records now too if
        there are at most ``at_once`` of them (None: any number); else they
        wait in ``pending``, each family put back by ``take`` when one of
        it is first asked about, or by the service once it serves."""
        found = self.found
        records = self.store.load(without=PROCESS)
        self._loaded = [r for r in records if r.kind not in (SYSTEM, CLOCK)]
        for rec in records:
            try:
                if rec.kind == SYSTEM:
                    found.system = self._restore_system(rec)
                elif rec.kind == CLOCK and clock is not None and getattr(clock, "name", "") == "manual":
                    self._restore_clock(rec, clock)
            except _BAD as exc:
                log.warning("set-up record %s/%s refused: %s", rec.kind, rec.key, exc)
                self._refused += 1
                self.store.write((), [(rec.kind, rec.key)])
        for key, parent in self.store.index(PROCESS):
            if not key.isdigit() or str(int(key)) != key or int(key) <= 0:
                log.warning("set-up record %s/%s refused: not a process record", PROCESS, key[:20])
                self._refused += 1
                self.store.write((), [(PROCESS, key)])
                continue
            self.pending[int(key)] = parent
            self._pending_children.setdefault(parent, set()).add(int(key))
        if at_once is None or len(self.pending) <= at_once:
            self.take(list(self.pending))
        found.later = len(self.pending)
        found.refused = self._refused + self.store.refused
        return found

    def take(self, pids: Iterable[int], children: Callable[[int], Iterable[int]] = lambda pid: ()) -> set[int]:
        """Put back the pending records of ``pids`` and of their families
        (parents and children as the records name them, and ``children(pid)``,
        the live children of a process put back counting: a child must not
        inherit its parent's counters over a record of its own).  Returns the
        pids put back, for ``Lifecycle.restored``."""
        pending = self.pending
        todo = [pid for pid in pids if pid in pending]
        if not todo:
            return set()
        kernel = self.kernel
        put: set[int] = set()
        while todo:
            family: set[int] = set()
            while todo:
                pid = todo.pop()
                if pid in family or pid not in pending:
                    continue
                family.add(pid)
                todo += self._pending_children.get(pid, ())
                if pending[pid] in pending:
                    todo.append(pending[pid])
            for pid in family:
                parent = pending.pop(pid)
                kin = self._pending_children.get(parent)
                if kin is not None:
                    kin.discard(pid)
                    if not kin:
                        del self._pending_children[parent]
            stale: list[tuple[str, str]] = []
            for rec in self.store.read(PROCESS, [str(pid) for pid in family]):
                try:
                    self._restore_process(rec)
                    if rec.pid in kernel._procs or rec.pid in kernel._profiles:
                        self.found.processes += 1
                        put.add(rec.pid)
                        record = kernel._procs.get(rec.pid)
                        if record is not None and record.parent in pending:
                            todo.append(record.parent)  # a parent the hint did not name
                        if record is not None and record.state is State.ENABLED and not record.exited:
                            todo += [child for child in children(rec.pid) if child in pending]
                    else:
                        stale.append((PROCESS, rec.key))  # not put back: as written no more
                except _BAD as exc:
                    log.warning("set-up record %s/%s refused: %s", rec.kind, rec.key, exc)
                    self._refused += 1
                    stale.append((PROCESS, rec.key))
            self.store.write((), stale)
        for pid in put:
            self._written[pid] = _fingerprint(kernel._procs.get(pid), kernel._profiles.get(pid))  # type: ignore[assignment]
        self.found.refused = self._refused + self.store.refused
        return put

    def _restore_process(self, rec: SetupRecord) -> int:
        body = rec.body
        if not isinstance(body, dict) or str(rec.pid) != rec.key or rec.pid <= 0:
            raise codec.CodecError("not a process record")
        record = codec.decode(body.get("record"))
        profile = codec.decode(body.get("profile"))
        if record is not None and not isinstance(record, _ProcessRecord):
            raise codec.CodecError("not a process record")
        if profile is not None and not isinstance(profile, WorkloadProfile):
            raise codec.CodecError("not a profile")
        if record is not None and (record.pid != rec.pid or not isinstance(record.block, ControlBlock)):
            raise codec.CodecError("record names another pid")
        now = self._read_start(rec.pid)
        same = now is not None and (not rec.start or now == rec.start)
        if record is not None and not same and not (record.parent and not record.folded):
            return 0  # gone, and nobody to give its counts to (a reused pid gets nothing)
        if record is not None:
            if not same:
                if now is None or not self._host_time:
                    # Its last CPU time, if the time source has it: the manual
                    # clock's table does; the host's, only while the pid is free.
                    self.kernel._catch_up(record)
                record.exited = True  # its end came while no daemon listened
            elif not record.start:
                record.start = now or 0
            if same and not record.exited:
                self.kernel.time.resume_line(rec.pid, record.seen)
            self.kernel.put_back(record)
        if profile is not None and same:
            self.kernel._profiles[rec.pid] = profile
        return 1

    def _restore_system(self, rec: SetupRecord) -> bool:
        body = rec.body
        if not isinstance(body, dict) or not isinstance(body.get("generation"), int):
            raise codec.CodecError("not a system record")
        kernel = self.kernel
        kernel._system_generation = max(kernel._system_generation, body["generation"])
        system = codec.decode(body.get("system"))
        if system is None:
            return False
        if not isinstance(system, _SystemRecord) or len(system.per_cpu) != len(kernel.cpus):
            raise codec.CodecError("system mode of another machine")
        holder = kernel.cpus.reservation.reserve(SYSTEM_MODE_SERVICE)
        if holder is not None:
            log.warning("system mode not restored: the hardware is taken by %s", holder)
            return False
        kernel.put_back_system(system)
        return True

    @staticmethod
    def _restore_clock(rec: SetupRecord, clock: Any) -> None:
        state = codec.decode(rec.body)
        if not isinstance(state, dict):
            raise codec.CodecError("not a clock")
        for name in ("processes", "threads"):
            table = {int(k): tuple(v) for k, v in state.get(name, {}).items()}
            getattr(clock, "_" + name).update(table)
        cpus = [tuple(v) for v in state.get("cpus", [])]
        mine = clock._cpus
        for i, times in enumerate(cpus[: len(mine)]):
            mine[i] = times
