"""What a recorder holds, as a Chrome JSON trace (the Perfetto UI and
chrome://tracing open it; docs/trace.md shows what each track is).

Tracks: the emulated PMU is one process whose threads are each CPU's
hardware counters (``cpu0 counter0``...), the reservation and the refusals;
every process that counts is its own process, with a track for its IRIX
counters, one per thread context (libcpc, perfctr) and per counter of it, and
counter tracks of its counts.  Times are the emulated clock's, in
microseconds; the host's monotonic time of each event is in its arguments.
"""

from __future__ import annotations

import errno as errno_names
import json
import os
from typing import Any

from hwperfd.trace.recorder import Event, Recorder

PMU_PID = 4_194_305  # above Linux's largest pid (PID_MAX_LIMIT): never a real process
CPU_TRACK, RESERVATION_TRACK, REFUSAL_TRACK, DAEMON_TRACK = 100, 1, 2, 3
COUNTER_TRACK_BASE = 10_000_000  # a thread context's counter i: tid + (i + 1) * this
SIGNAL_NS = 1  # overflow and signal slices last 1 ns: flows bind to a slice


def _us(ns: int) -> float:
    return ns / 1000


class _Builder:
    def __init__(self, recorder: Recorder) -> None:
        self.out: list[dict[str, Any]] = []
        self.recorder = recorder
        self.named: set[tuple[int, int]] = set()
        self.open: dict[str, tuple[int, str, dict[str, Any]]] = {}  # IRIX context -> (start, name, args)
        self.holder: tuple[int, str] | None = None  # (since, service) of the reservation
        # A CPU's own registers: (service, cpu, counter) -> (since, event)
        self.programmed: dict[tuple[str, int, int], tuple[int, str]] = {}
        self.services: dict[str, int] = {}  # each its own tracks, numbered as they come
        # Stretches on the CPUs' counters, laid out once all are known: (start, length, cpu, counter, name, args)
        self.on_cpus: list[tuple[int, int, int, int, str, dict[str, Any]]] = []

    def track(self, pid: int, tid: int, process: str, thread: str) -> tuple[int, int]:
        if (pid, 0) not in self.named:
            self.named.add((pid, 0))
            self.out.append(dict(ph="M", name="process_name", pid=pid, tid=0, args=dict(name=process)))
        if (pid, tid) not in self.named:
            self.named.add((pid, tid))
            self.out.append(dict(ph="M", name="thread_name", pid=pid, tid=tid, args=dict(name=thread)))
        return pid, tid

    def pmu(self, tid: int, name: str) -> tuple[int, int]:
        return self.track(PMU_PID, tid, "emulated PMU", name)

    def context_track(self, ctx: str) -> tuple[int, int]:
        """The track of an IRIX context ("irix 42", "irix-system cpu0") or of a
        thread context ("cpc 42/43")."""
        service, _, ident = ctx.partition(" ")
        if service == "irix-system":
            return self.pmu(DAEMON_TRACK + 1, "IRIX system mode")
        if "/" in ident:
            pid, tid = (int(x) for x in ident.split("/"))
            return self.track(pid, tid, f"pid {pid}", f"{service} tid {tid}")
        pid = int(ident)
        return self.track(pid, pid, f"pid {pid}", "IRIX counters")

    def slice(self, where: tuple[int, int], name: str, ts: int, dur: int, cat: str, **args: Any) -> None:
        self.out.append(dict(ph="X", name=name, cat=cat, pid=where[0], tid=where[1], ts=_us(ts), dur=_us(dur),
                             args=args))  # fmt: skip

    def instant(self, where: tuple[int, int], name: str, ts: int, cat: str, **args: Any) -> None:
        self.out.append(dict(ph="i", s="t", name=name, cat=cat, pid=where[0], tid=where[1], ts=_us(ts), args=args))

    def end_counting(self, ctx: str, ts: int, why: str) -> None:
        opened = self.open.pop(ctx, None)
        if opened is not None:
            start, name, args = opened
            self.slice(self.context_track(ctx), name, start, ts - start, "counting", ended=why, **args)

    def event(self, ts: int, mono: int, kind: str, f: dict[str, Any]) -> None:
        getattr(self, "on_" + kind.replace("-", "_"))(ts, mono, f)

    # -- one method per kind of event ---------------------------------------------

    def on_reserve(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        self.on_unreserve(ts, mono, dict(service=None))
        self.holder = (ts, f["service"])

    def on_unreserve(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        if self.holder is not None:
            since, service = self.holder
            self.slice(self.pmu(RESERVATION_TRACK, "reservation"), service, since, ts - since, "reservation",
                       service=service)  # fmt: skip
            self.holder = None

    def on_refuse(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        self.instant(self.pmu(RESERVATION_TRACK, "reservation"), f"refused {f['service']}", ts, "refusal",
                     asker=f["service"], holder=f["holder"], mono_ns=mono)  # fmt: skip

    def on_refused(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        name = errno_names.errorcode.get(f["errno"], str(f["errno"]))
        self.instant(self.pmu(REFUSAL_TRACK, "refusals"), f"{name} {f['personality']}", ts, "refusal",
                     errno=name, mono_ns=mono, **{k: f[k] for k in ("personality", "pid", "uid", "call")})  # fmt: skip

    def on_program(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        ctx = f["ctx"]
        self.end_counting(ctx, ts, "reprogrammed")
        slots = {str(k): v for k, v in f["slots"].items()}
        args = dict(generation=f["generation"], cpu=f["cpu"], slots=slots, signal=f["signal"],
                    thresholds={str(k): v for k, v in f["thresholds"].items()})  # fmt: skip
        self.open[ctx] = (ts, f"generation {f['generation']}", args)

    def on_release(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        self.end_counting(f["ctx"], ts, f["why"])

    def on_generation(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        ctx = f["ctx"]
        if f["why"] == "lost":
            self.end_counting(ctx, ts, "lost")
        self.instant(self.context_track(ctx), f"generation {f['old']} -> {f['new']}", ts, "generation",
                     why=f["why"], mono_ns=mono)  # fmt: skip

    def on_system_mode(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        name = f"system mode {'on' if f['on'] else 'off'}, generation {f['generation']}"
        self.instant(self.pmu(DAEMON_TRACK + 1, "IRIX system mode"), name, ts, "generation", mono_ns=mono)

    def on_occupy(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        args = dict(context=f["ctx"], counter=f["counter"], slot=f["slot"])
        if f["shares"]:
            args["shares"] = {str(k): v for k, v in f["shares"].items()}
        name = f["event"] if not f["shares"] else "multiplexed"
        if f["cpu"] >= 0:
            self.on_cpus.append((ts, f["dur"], f["cpu"], f["counter"], name, args))
            return
        service, _, ident = f["ctx"].partition(" ")
        pid, tid = (int(x) for x in ident.split("/"))
        where = self.track(pid, tid + (f["counter"] + 1) * COUNTER_TRACK_BASE, f"pid {pid}",
                           f"{service} tid {tid} pmc{f['counter']}")  # fmt: skip
        self.slice(where, name, ts, f["dur"], "occupancy", **args)

    def lay_out_cpus(self) -> None:
        """Each CPU counter's stretches on its track; those that overlap one
        already there (on the real clock, two processes given one emulated
        CPU run at once) on a second lane, and so on."""
        lanes: dict[tuple[int, int], list[int]] = {}  # (cpu, counter) -> where each lane is free from
        for ts, dur, cpu, counter, name, args in sorted(self.on_cpus, key=lambda s: (s[0], -s[1])):
            free = lanes.setdefault((cpu, counter), [])
            lane = next((i for i, end in enumerate(free) if end <= ts), len(free))
            if lane == len(free):
                free.append(0)
            free[lane] = ts + dur
            label = f"cpu{cpu} counter{counter}" + (f" #{lane + 1}" if lane else "")
            self.slice(self.pmu(CPU_TRACK + (lane * 64 + cpu) * 16 + counter, label), name, ts, dur, "occupancy",
                       **args)  # fmt: skip

    def on_cpu_program(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        service, cpu = f["service"], f["cpu"]
        events = {int(k): v for k, v in f["events"].items()}
        for key in [k for k in self.programmed if k[:2] == (service, cpu)]:
            if events.get(key[2]) != self.programmed[key][1]:
                self.end_programmed(key, ts)
        for counter, event in events.items():
            self.programmed.setdefault((service, cpu, counter), (ts, event))

    def end_programmed(self, key: tuple[str, int, int], ts: int) -> None:
        since, event = self.programmed.pop(key)
        service, cpu, counter = key
        number = self.services.setdefault(service, len(self.services) + 1)
        where = self.pmu(CPU_TRACK + number * 1000 + cpu * 16 + counter, f"cpu{cpu} counter{counter} ({service})")
        self.slice(where, event, since, ts - since, "occupancy", context=service, counter=counter, slot=counter)

    def on_counts(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        pid, tid = self.context_track(f["ctx"])
        self.out.append(dict(ph="C", name=f"{f['ctx']} counts", pid=pid, tid=tid, ts=_us(ts), args=f["counts"]))

    def on_overflow(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        args = {k: v for k, v in f.items() if k != "ctx"}
        self.slice(self.context_track(f["ctx"]), "overflow", ts, SIGNAL_NS, "overflow", mono_ns=mono, **args)

    def target(self, pid: int, tid: int) -> tuple[int, int]:
        return self.track(pid, tid or pid, f"pid {pid}", f"tid {tid}" if tid else "IRIX counters")

    def on_owe(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        where = self.target(f["pid"], f["tid"])
        self.slice(where, f"signal {f['signal']} owed", ts, SIGNAL_NS, "signal", count=f["count"], flow=f["flow"],
                   mono_ns=mono)  # fmt: skip
        self.out.append(dict(ph="s", name="overflow signal", cat="signal", id=f["flow"], pid=where[0], tid=where[1],
                             ts=_us(ts)))  # fmt: skip

    def on_signal(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        where = self.target(f["pid"], f["tid"])
        self.slice(where, f"signal {f['signal']} sent", ts, SIGNAL_NS, "signal", flows=f["flows"],
                   lateness_ns=f["lateness_ns"], mono_ns=mono, tid_reached=f["tid"] or f["pid"])  # fmt: skip
        for flow in f["flows"]:
            self.out.append(dict(ph="f", bp="e", name="overflow signal", cat="signal", id=flow, pid=where[0],
                                 tid=where[1], ts=_us(ts)))  # fmt: skip

    def on_merge(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        where = self.target(f["pid"], f["tid"])
        self.slice(where, f"signal {f['signal']} merged", ts, SIGNAL_NS, "signal", flows=f["flows"], merged=f["count"],
                   mono_ns=mono)  # fmt: skip
        for flow in f["flows"]:
            self.out.append(dict(ph="f", bp="e", name="overflow signal", cat="signal", id=flow, pid=where[0],
                                 tid=where[1], ts=_us(ts)))  # fmt: skip

    def on_attach(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        self.open[f["ctx"]] = (ts, f"{f['service']} context", dict(service=f["service"]))

    def on_detach(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        self.end_counting(f["ctx"], ts, "ended")

    def process(self, pid: int) -> tuple[int, int]:
        return self.track(pid, pid, f"pid {pid}", "IRIX counters")

    def on_fork(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        if f["inherited"]:  # the child counts under its parent's control from its fork
            name = f"generation {f['generation']} (inherited)"
            self.open[f"irix {f['child']}"] = (ts, name, dict(generation=f["generation"], parent=f["parent"]))
        self.instant(self.process(f["parent"]), f"fork {f['child']}", ts, "process", mono_ns=mono, **f)
        self.instant(self.process(f["child"]), f"forked from {f['parent']}", ts, "process", mono_ns=mono, **f)

    def on_exec(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        self.instant(self.process(f["pid"]), "exec", ts, "process", mono_ns=mono)

    def on_exit(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        self.end_counting(f"irix {f['pid']}", ts, "exited")
        self.instant(self.process(f["pid"]), "exit", ts, "process", mono_ns=mono, **f)

    def on_fold(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        counts = {str(k): v for k, v in f["counts"].items()}
        self.instant(self.process(f["parent"]), f"fold {f['child']}", ts, "process", child=f["child"], counts=counts,
                     mono_ns=mono)  # fmt: skip

    def on_save_children(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        self.instant(self.process(f["parent"]), f"save child {f['child']}", ts, "process", mono_ns=mono, **f)

    def on_daemon(self, ts: int, mono: int, f: dict[str, Any]) -> None:
        self.instant(self.pmu(DAEMON_TRACK, "daemon"), f["what"], ts, "daemon", mono_ns=mono, **f)

    def finish(self, ts: int) -> None:
        for ctx in list(self.open):
            self.end_counting(ctx, ts, "trace ended")
        for key in list(self.programmed):
            self.end_programmed(key, ts)
        self.lay_out_cpus()
        self.on_unreserve(ts, 0, {})


def chrome_trace(recorder: Recorder) -> dict[str, Any]:
    """The recorder's events as a Chrome JSON trace object."""
    builder = _Builder(recorder)
    events: list[Event] = list(recorder.events)
    end = max((e[0] for e in events), default=recorder.started[0])
    end = max(end, recorder.emulated())
    if recorder.dropped:
        first = events[0][0] if events else end
        builder.instant(builder.pmu(DAEMON_TRACK, "daemon"), f"{recorder.dropped} events dropped", first, "daemon",
                        dropped=recorder.dropped)  # fmt: skip
    for ts, mono, kind, fields in events:
        builder.event(ts, mono, kind, fields)
    builder.finish(end)
    return dict(
        traceEvents=builder.out,
        displayTimeUnit="ns",
        metadata=dict(
            producer="hwperfd", clock=recorder.clock, events=len(events), recorded=recorder.recorded,
            dropped=recorder.dropped, size=recorder.size,
        ),
    )  # fmt: skip


def write(recorder: Recorder, path: str) -> None:
    """Write the trace to ``path`` whole (a reader never sees half of it)."""
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as f:
        json.dump(chrome_trace(recorder), f, separators=(",", ":"))
    os.replace(temporary, path)
