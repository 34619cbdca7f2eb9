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
from hwperfd.counters.store import SetupRecord, SetupStore
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
    write) and ``encode()`` (its stored form, made only when written)."""

    pid: int
    start: int
    uid: int
    fingerprint: Any
    encode: Callable[[], Any]


class SetupSource(Protocol):
    """A personality's set-up, kept in the store as records of ``kind``."""

    kind: str

    def setup(self, pids: Collection[int] | None) -> dict[str, Item]:
        """Its records now: those of ``pids`` (processes, or threads) and the
        machine's; every one if None."""
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
        record.lossy,
        id(record.credit),
        record.exited,
        record.parent,
        record.folded,
        len(record.descendants),
        record.profiling,
        record.suspended,
        record.cpu,
        id(profile),
    )


class DurableSetup:
    """Keeps ``kernel``'s set-up in ``store``.  ``read_start(pid)``: the start
    time of the process at ``pid`` now (None: no such process)."""

    def __init__(self, store: SetupStore, kernel: CounterKernel, read_start: Callable[[int], int | None]) -> None:
        self.store = store
        self.kernel = kernel
        self._read_start = read_start
        self._written: dict[int, tuple[Any, ...]] = {}  # pid -> fingerprint last written
        self._system_written: tuple[Any, ...] | None = None
        self._clock_written: Any = None
        self.writes = 0
        self.sources: list[SetupSource] = []
        # (kind, key) -> (pid, fingerprint) last written for each source's record
        self._source_written: dict[tuple[str, str], tuple[int, Any]] = {}
        # pid -> the (kind, key)s of its records there: a sync of a few pids
        # costs what they hold, not a pass over every record written.
        self._source_keys: dict[int, set[tuple[str, str]]] = {}
        self._loaded: list[SetupRecord] | None = None

    def add_source(self, source: SetupSource) -> None:
        self.sources.append(source)

    def sync_sources(self, pids: Collection[int] | None) -> None:
        """Write what changed of the sources' records of ``pids`` (and the
        machine's), and drop the records gone; all of them if None."""
        put: list[SetupRecord] = []
        drop: list[tuple[str, str]] = []
        written, by_pid = self._source_written, self._source_keys
        for source in self.sources:
            kind = source.kind
            items = source.setup(pids)
            for key, item in items.items():
                old = written.get((kind, key))
                if old is not None and old[1] == item.fingerprint:
                    continue
                if old is not None and old[0] != item.pid:
                    by_pid[old[0]].discard((kind, key))
                written[(kind, key)] = (item.pid, item.fingerprint)
                by_pid.setdefault(item.pid, set()).add((kind, key))
                put.append(SetupRecord(kind, key, item.pid, item.start, item.uid, item.encode()))
            scope = list(written) if pids is None else [w for pid in {0, *pids} for w in by_pid.get(pid, ())]
            for k, key in scope:
                if k == kind and key not in items:
                    pid = written.pop((k, key))[0]
                    by_pid[pid].discard((k, key))
                    if not by_pid[pid]:
                        del by_pid[pid]
                    drop.append((k, key))
        if put or drop:
            self.store.write(put, drop)
            self.writes += 1

    def restore_sources(self) -> int:
        """Put back the sources' records (after ``restore``, which read them);
        returns how many were refused.  A refused record is logged and deleted."""
        refused = 0
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
                refused += 1
                stale.append((rec.kind, rec.key))
        self._loaded = None
        self.store.write((), stale)
        return refused

    # -- writing -------------------------------------------------------------

    def sync(self, pids: Iterable[int], overflowed: Iterable[int] = ()) -> None:
        """Write what changed of ``pids``' records, and of system mode.
        ``overflowed``: processes owed overflow signals since their last
        write; their counts are written too, before the signals go, so a
        restart neither loses those signals nor sends them again."""
        kernel = self.kernel
        put: list[SetupRecord] = []
        drop: list[tuple[str, str]] = []
        forced = set(overflowed)
        for pid in forced.union(pids):
            record = kernel._procs.get(pid)
            profile = kernel._profiles.get(pid)
            fp = _fingerprint(record, profile)
            if fp == self._written.get(pid) and (pid not in forced or record is None):
                continue
            if fp is None:
                self._written.pop(pid, None)
                drop.append((PROCESS, str(pid)))
            else:
                self._written[pid] = fp
                put.append(self._process_record(pid, record, profile))
        system = kernel._system
        sfp = (
            (id(system), system.generation, system.request, system.signal_to) if system else None,
            kernel._system_generation,
        )
        if sfp != self._system_written or (system is not None and system.signal_to in forced):
            self._system_written = sfp
            put.append(
                SetupRecord(
                    SYSTEM,
                    "",
                    0,  # system mode is syssgi's: no process owns it
                    0,
                    0,
                    {"system": codec.encode(system), "generation": kernel._system_generation},
                )
            )
        if put or drop:
            self.store.write(put, drop)
            self.writes += 1

    def sync_all(self) -> None:
        """Every record the kernel holds, and those it let go."""
        self.sync(set(self.kernel._procs) | set(self.kernel._profiles) | set(self._written))

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
        body = {"record": codec.encode(record), "profile": codec.encode(profile)}
        return SetupRecord(PROCESS, str(pid), pid, start, owner[0] if owner else 0, body)

    # -- reading -------------------------------------------------------------

    def restore(self, clock: object | None = None) -> Restored:
        """Put the stored set-up back into the (new, empty) kernel.  A record
        whose process is not the one that set it up (gone, or its pid taken
        again) is put back only if it holds counts owed to a parent: the
        lifecycle then folds it and lets it go, as for an exit it missed."""
        kernel = self.kernel
        found = Restored(refused=self.store.refused)
        records = self.store.load()
        self._loaded = [r for r in records if r.kind not in (PROCESS, SYSTEM, CLOCK)]
        found.refused = self.store.refused
        for rec in records:
            try:
                if rec.kind == PROCESS:
                    found.processes += self._restore_process(rec)
                elif rec.kind == SYSTEM:
                    found.system = self._restore_system(rec)
                elif rec.kind == CLOCK and clock is not None and getattr(clock, "name", "") == "manual":
                    self._restore_clock(rec, clock)
            except _BAD as exc:
                log.warning("set-up record %s/%s refused: %s", rec.kind, rec.key, exc)
                found.refused += 1
                self.store.write((), [(rec.kind, rec.key)])
        # What was not put back goes from the store; what was is as written.
        stale = [(PROCESS, r.key) for r in records if r.kind == PROCESS and r.pid not in kernel._procs
                 and r.pid not in kernel._profiles]  # fmt: skip
        self.store.write((), stale)
        for pid in set(kernel._procs) | set(kernel._profiles):
            self._written[pid] = _fingerprint(kernel._procs.get(pid), kernel._profiles.get(pid))  # type: ignore[assignment]
        return found

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
                record.exited = True  # its end came while no daemon listened
            elif not record.start:
                record.start = now or 0
            self.kernel._procs[rec.pid] = record
            self.kernel._note_armed(rec.pid, record.block.request, record.profiling)
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
        kernel._system = system
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
