"""The recorder the daemon's layers call, and the null one they call when off.

Each hook is one call at the point where the daemon decides something
(docs/trace.md lists them): ``active`` is a ``NullRecorder`` whose hooks
return at once, so a daemon that does not record pays one method call at
those few points and nothing on a counter read.  ``install`` puts a
``Recorder`` in its place.

A ``Recorder`` keeps events in a ring of ``size`` entries: when it is full
the oldest go, and how many went is counted (``dropped``) and written with
the trace.  Each event carries two times: the emulated clock's (``emulated``:
on the manual clock the sum of every advance so far, so a scripted run gives
the same trace each time; on the real clock the host's monotonic time) and
the host's monotonic time, which measures what the daemon itself took (a
signal's lateness).

The hooks are handed the daemon's own objects (a control block, a thread
context, a CPU) and read what they need of them by name: this package
imports no layer of the daemon, so every layer may call it.
"""

from __future__ import annotations

import errno as errnos
import time
from collections import deque
from collections.abc import Callable
from typing import Any

#: The IRIX multiplexing tick (hwperfd.counters.block.TICK_NS): a block's
#: hardware counter moves to its next slot after this much of its context's
#: CPU time (r10k_counters(5), THE COUNTERS).
MUX_TICK_NS = 10_000_000
#: Segments one burst of CPU time is drawn as on a multiplexed counter; a
#: longer burst (a real-clock catch-up after seconds) is one segment whose
#: arguments give each slot's share.
MAX_SEGMENTS = 64
DEFAULT_SIZE = 100_000
#: Overflows still waiting for their signal, per target and in all: an
#: overflow whose signal never goes (dropped: ignored, cancelled, its target
#: gone) is not kept for ever.
MAX_PENDING_PER_TARGET = 64
MAX_PENDING_TARGETS = 4096

Event = tuple[int, int, str, dict[str, Any]]  # (emulated ns, monotonic ns, kind, fields)


class NullRecorder:
    """Recording off: every hook does nothing."""

    recording = False

    def reservation(self, service: str, holder: str | None, granted: bool) -> None:
        """``service`` asked for the hardware (seed 002's reservation), which
        ``holder`` held; ``granted`` or refused."""

    def unreserved(self, service: str) -> None:
        """``service`` let the hardware go."""

    def refused(self, personality: str, pid: int, uid: int, call: int, errno: int) -> None:
        """A call of ``personality`` by ``pid`` failed with ``errno`` (a trace keeps EBUSY and EAGAIN)."""

    def programmed(self, pid: int, cpu: int, generation: int, block: Any, cpu_type: Any) -> None:
        """IRIX counters of ``pid`` start counting under ``block`` (a
        ControlBlock) on emulated CPU ``cpu``."""

    def released(self, pid: int, why: str) -> None:
        """IRIX counters of ``pid`` stop counting (released, lost, exited...)."""

    def generation(self, pid: int, old: int, new: int, why: str) -> None:
        """The generation of ``pid``'s counters moved without a new request."""

    def system_mode(self, generation: int, on: bool) -> None:
        """IRIX system mode took (``on``) or let go of every CPU's counters."""

    def ran(self, pid: int, cpu: int, block: Any, cpu_type: Any, ns: int, overflows: int) -> None:
        """IRIX counters of ``pid`` (0: system mode's block of ``cpu``) counted
        ``ns`` of CPU time on ``cpu``; ``overflows``: the ones that interrupt."""

    def cpu_programmed(self, service: str, pmus: Any) -> None:
        """``service`` (pctr, a cpc CPU bind, perfctr's global mode) programmed
        or cleared the registers of these CPUs (``PmuCpu``s) themselves."""

    def attached(self, ctx: Any) -> None:
        """A per-thread context (hwperfd.counters.threads.ThreadContext) began."""

    def detached(self, ctx: Any) -> None:
        """A per-thread context ended."""

    def ran_thread(self, ctx: Any, ns: int, mask: int) -> None:
        """A per-thread context counted ``ns``; ``mask``: its counters that overflowed."""

    def signal_owed(self, pid: int, tid: int, signal: int, count: int) -> None:
        """Overflows owe ``count`` ``signal``s to ``pid`` (thread ``tid``, 0: the process)."""

    def signal_sent(self, pid: int, tid: int, signal: int) -> None:
        """One owed signal went to its target."""

    def signal_merged(self, pid: int, tid: int, signal: int, count: int) -> None:
        """``count`` owed standard signals merged with one pending and blocked at the target."""

    def forked(self, parent: int, child: int, inherited: bool, generation: int) -> None:
        """``child`` was forked; ``inherited``: it counts under the parent's control."""

    def execed(self, pid: int) -> None:
        """``pid`` called exec(2)."""

    def exited(self, pid: int, parent: int, folded: bool) -> None:
        """A counting process exited; ``folded``: its counts went to ``parent`` at once."""

    def folded(self, child: int, parent: int, counts: tuple[int, ...]) -> None:
        """A child's counts were added to its parent's."""

    def save_children(self, parent: int, child: int) -> None:
        """PIOCSAVECCNTRS: ``parent`` asked for ``child``'s counts at its exit."""

    def daemon(self, what: str, **details: Any) -> None:
        """The daemon started, restored an earlier daemon's set-up, or stopped."""


NULL = NullRecorder()
active: NullRecorder = NULL


def install(recorder: NullRecorder) -> NullRecorder:
    """Make ``recorder`` the one every hook reaches; returns the one it replaces."""
    global active
    old, active = active, recorder
    return old


def uninstall() -> NullRecorder:
    """Recording off; returns the recorder that was on."""
    return install(NULL)


class Recorder(NullRecorder):
    """Recording on: events into a bounded ring."""

    recording = True

    def __init__(
        self,
        size: int = DEFAULT_SIZE,
        emulated: Callable[[], int] = time.monotonic_ns,
        clock: str = "real",
        monotonic: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if size < 1:
            raise ValueError("a trace holds at least one event")
        self.size = size
        self.emulated = emulated
        self.monotonic = monotonic
        self.clock = clock
        self.events: deque[Event] = deque(maxlen=size)
        self.recorded = 0
        self.started = (emulated(), monotonic())
        self._flow = 0
        # (pid, tid, signal) -> [flow id, emulated, monotonic, overflows not yet signalled]
        self._pending: dict[tuple[int, int, int], deque[list[int]]] = {}
        # (context, counter) -> (the fields of its last stretch, its number):
        # a stretch that goes on where the last ended, with the same slot,
        # lengthens it (a context read a thousand times a second is one slice).
        self._last: dict[tuple[str, int], tuple[dict[str, Any], int]] = {}
        self._labels: dict[tuple[int, int], str] = {}  # (counter, hwp_ev) -> the event's name: 64 at most

    @property
    def dropped(self) -> int:
        return self.recorded - len(self.events)

    def record(self, kind: str, emulated: int | None = None, monotonic: int | None = None, **fields: Any) -> None:
        self.recorded += 1
        when = self.emulated() if emulated is None else emulated
        self.events.append((when, self.monotonic() if monotonic is None else monotonic, kind, fields))

    # -- the hardware's reservation and the refusals --------------------------

    def reservation(self, service: str, holder: str | None, granted: bool) -> None:
        if granted and holder == service:
            return  # the holder asking again: nothing moves
        self.record("reserve" if granted else "refuse", service=service, holder=holder)

    def unreserved(self, service: str) -> None:
        self.record("unreserve", service=service)

    def refused(self, personality: str, pid: int, uid: int, call: int, errno: int) -> None:
        if errno not in (errnos.EBUSY, errnos.EAGAIN):
            return  # only the answers that say someone else has the counters
        self.record("refused", personality=personality, pid=pid, uid=uid, call=call, errno=errno)

    # -- IRIX control blocks ----------------------------------------------------

    def programmed(self, pid: int, cpu: int, generation: int, block: Any, cpu_type: Any) -> None:
        ctx = f"irix {pid}"
        events = {}
        for counter in range(2):
            for slot in block.request.on_counter(counter):
                events[slot] = self._label(slot, counter, block, cpu_type)
        threshold = {slot: t for slot, t in enumerate(block.request.thresholds) if t}
        self.record(
            "program", ctx=ctx, pid=pid, cpu=cpu, generation=generation, slots=events,
            thresholds=threshold, signal=block.request.signal,
        )  # fmt: skip

    def released(self, pid: int, why: str) -> None:
        self.record("release", ctx=f"irix {pid}", pid=pid, why=why)

    def generation(self, pid: int, old: int, new: int, why: str) -> None:
        self.record("generation", ctx=f"irix {pid}", pid=pid, old=old, new=new, why=why)

    def system_mode(self, generation: int, on: bool) -> None:
        self.record("system-mode", generation=generation, on=on)

    def ran(self, pid: int, cpu: int, block: Any, cpu_type: Any, ns: int, overflows: int) -> None:
        ctx = f"irix {pid}" if pid else f"irix-system cpu{cpu}"
        end = self.emulated()
        begin = end - ns
        counts = {}
        for counter in range(2):
            slots = block.request.on_counter(counter)
            for slot in slots:
                counts[f"{slot} {self._label(slot, counter, block, cpu_type)}"] = block.counts[slot]
            for slot, start, length, shares in self._segments(block, counter, slots, ns) if slots else ():
                event = self._label(slot, counter, block, cpu_type)
                self._occupy(begin + start, ctx, cpu, counter, slot, event, length, shares)
        self.record("counts", end, ctx=ctx, counts=counts)
        if overflows:
            self.record("overflow", end, ctx=ctx, count=overflows)

    def _occupy(
        self, ts: int, ctx: str, cpu: int, counter: int, slot: int, event: str, dur: int, shares: dict[int, int] | None
    ) -> None:
        """A stretch of ``dur`` ns from ``ts`` during which ``event`` (slot
        ``slot``) sat on ``counter`` for ``ctx``."""
        last = self._last.get((ctx, counter))
        if last is not None and shares is None and last[1] > self.recorded - len(self.events):
            fields = last[0]  # still in the ring
            if fields["slot"] == slot and fields["shares"] is None and fields["end"] == ts and fields["cpu"] == cpu:
                fields["dur"] += dur
                fields["end"] += dur
                return
        fields = dict(ctx=ctx, cpu=cpu, counter=counter, slot=slot, event=event, dur=dur, shares=shares, end=ts + dur)
        self.recorded += 1
        self.events.append((ts, self.monotonic(), "occupy", fields))  # the very dict a later stretch lengthens
        self._last[(ctx, counter)] = (fields, self.recorded)
        if len(self._last) > self.size:
            self._last.clear()  # only joins stretches: none is lost

    def _label(self, slot: int, counter: int, block: Any, cpu_type: Any) -> str:
        ev = block.request.controls[slot].event
        label = self._labels.get((counter, ev))
        if label is None:
            event = cpu_type.events.on_counter(counter, ev)
            label = self._labels[(counter, ev)] = event.name if event is not None else f"event {ev}"
        return label

    @staticmethod
    def _segments(
        block: Any, counter: int, slots: tuple[int, ...], ns: int
    ) -> list[tuple[int, int, int, dict[int, int] | None]]:
        """(slot, start, length, shares) of each stretch of a burst of ``ns``
        that ended where the block's rotation now is: the rotation moves one
        slot per MUX_TICK_NS of CPU time, so where it was at the burst's start
        is where it is now, ``ns`` earlier in its cycle."""
        m = len(slots)
        if m == 1:
            return [(slots[0], 0, ns, None)]
        mux = block._mux[counter]
        cycle = m * MUX_TICK_NS
        phase = ((mux.position % m) * MUX_TICK_NS + mux.into_tick_ns - ns) % cycle
        steps: list[tuple[int, int, int, dict[int, int] | None]] = []
        done = 0
        whole = 0 if ns <= MAX_SEGMENTS * MUX_TICK_NS else ns // cycle  # whole cycles: an equal share each
        rest = ns - whole * cycle
        while done < rest:
            step = min(MUX_TICK_NS - phase % MUX_TICK_NS, rest - done)
            steps.append((slots[phase // MUX_TICK_NS], done, step, None))
            done += step
            phase = (phase + step) % cycle
        if not whole:
            return steps
        shares = {slot: whole * MUX_TICK_NS for slot in slots}
        for slot, _, step, _ in steps:
            shares[slot] += step
        return [(slots[0], 0, ns, shares)]

    # -- the CPUs' own registers (pctr, cpc CPU binds, perfctr global mode) ----

    def cpu_programmed(self, service: str, pmus: Any) -> None:
        for pmu in pmus:
            events = {}
            for counter in range(pmu.model.registers):
                selection = pmu.selection(counter)
                if selection.counts:
                    events[counter] = selection.event.name
            self.record("cpu-program", service=service, cpu=pmu.index, events=events)

    # -- per-thread contexts (libcpc, perfctr) ---------------------------------

    @staticmethod
    def _thread_ctx(ctx: Any) -> str:
        return f"{ctx.service} {ctx.pid}/{ctx.tid}"

    def attached(self, ctx: Any) -> None:
        self.record("attach", ctx=self._thread_ctx(ctx), pid=ctx.pid, tid=ctx.tid, service=ctx.service)

    def detached(self, ctx: Any) -> None:
        self.record("detach", ctx=self._thread_ctx(ctx), pid=ctx.pid, tid=ctx.tid, service=ctx.service)

    def ran_thread(self, ctx: Any, ns: int, mask: int) -> None:
        name = self._thread_ctx(ctx)
        end = self.emulated()
        pmu = ctx.cpu
        counts = {}
        for counter in range(pmu.model.registers):
            selection = pmu.selection(counter)
            if not selection.counts:
                continue
            event = selection.event.name
            self._occupy(end - ns, name, -1, counter, counter, event, ns, None)
            counts[f"pmc{counter} {event}"] = pmu.total(counter)
        if counts:
            self.record("counts", end, ctx=name, counts=counts)
        if mask:
            self.record("overflow", end, ctx=name, count=mask.bit_count(), mask=mask)

    # -- overflow signals: owed, then sent (a flow from one to the other) -------

    def signal_owed(self, pid: int, tid: int, signal: int, count: int) -> None:
        self._flow += 1
        key = (pid, tid, signal)
        queue = self._pending.get(key)
        if queue is None:
            if len(self._pending) >= MAX_PENDING_TARGETS:
                self._pending.clear()
            queue = self._pending[key] = deque(maxlen=MAX_PENDING_PER_TARGET)
        emulated, monotonic = self.emulated(), self.monotonic()
        queue.append([self._flow, emulated, monotonic, count])
        self.record("owe", emulated, monotonic, pid=pid, tid=tid, signal=signal, count=count, flow=self._flow)

    def signal_sent(self, pid: int, tid: int, signal: int) -> None:
        """One send answers the oldest owed overflow: each overflow owes a
        signal of its own (hwperfd.signals)."""
        flows, owed_at = self._answer((pid, tid, signal), 1)
        now = self.monotonic()
        lateness = None if owed_at is None else now - owed_at
        self.record("signal", monotonic=now, pid=pid, tid=tid, signal=signal, flows=flows, lateness_ns=lateness)

    def signal_merged(self, pid: int, tid: int, signal: int, count: int) -> None:
        self.record("merge", pid=pid, tid=tid, signal=signal, count=count,
                    flows=self._answer((pid, tid, signal), count)[0])  # fmt: skip

    def _answer(self, key: tuple[int, int, int], count: int) -> tuple[list[int], int | None]:
        """The flows of the ``count`` oldest overflows owed at ``key``, taken
        off its queue, and when the first was owed (monotonic ns)."""
        queue = self._pending.get(key)
        flows: list[int] = []
        owed_at = None
        while queue and count > 0:
            entry = queue[0]
            if owed_at is None:
                owed_at = entry[2]
            flows.append(entry[0])
            taken = min(count, entry[3])
            count -= taken
            entry[3] -= taken
            if not entry[3]:
                queue.popleft()
        if queue is not None and not queue:
            del self._pending[key]
        return flows, owed_at

    # -- process life ------------------------------------------------------------

    def forked(self, parent: int, child: int, inherited: bool, generation: int) -> None:
        self.record("fork", parent=parent, child=child, inherited=inherited, generation=generation)

    def execed(self, pid: int) -> None:
        self.record("exec", pid=pid)

    def exited(self, pid: int, parent: int, folded: bool) -> None:
        self.record("exit", pid=pid, parent=parent, folded=folded)

    def folded(self, child: int, parent: int, counts: tuple[int, ...]) -> None:
        self.record("fold", child=child, parent=parent, counts={i: c for i, c in enumerate(counts) if c})

    def save_children(self, parent: int, child: int) -> None:
        self.record("save-children", parent=parent, child=child)

    def daemon(self, what: str, **details: Any) -> None:
        self.record("daemon", what=what, **details)
