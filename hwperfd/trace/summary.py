"""hwperfd-trace: what a trace file says, without a UI.

``hwperfd-trace summary FILE`` prints each event's time on its counter and
its share of a multiplexed counter, the overflow signals' lateness
percentiles and the refusals per personality; ``--png OUT`` also draws the
counters' occupancy (needs matplotlib).  FILE is what ``hwperfd --trace`` or
the control node's ``trace stop`` wrote.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Summary:
    clock: str = ""
    events: int = 0
    dropped: int = 0
    span_ns: int = 0
    # (context, counter) -> event label -> ns on the counter
    occupancy: dict[tuple[str, str], dict[str, int]] = field(default_factory=lambda: defaultdict(Counter))
    lateness_ns: list[int] = field(default_factory=list)
    owed: int = 0
    sent: int = 0
    merged: int = 0  # with a standard signal pending and blocked at the target
    overflows: int = 0
    refusals: Counter[tuple[str, str]] = field(default_factory=Counter)  # (personality, errno or holder)
    # Occupancy slices for the picture: (track name, start ns, length ns, event, context)
    slices: list[tuple[str, int, int, str, str]] = field(default_factory=list)


def load(path: str) -> dict[str, Any]:
    with open(path) as f:
        trace = json.load(f)
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError(f"{path}: not a Chrome JSON trace (no traceEvents)")
    return trace


def summarize(trace: dict[str, Any]) -> Summary:
    meta = trace.get("metadata", {})
    out = Summary(clock=str(meta.get("clock", "?")), events=int(meta.get("events", 0)),
                  dropped=int(meta.get("dropped", 0)))  # fmt: skip
    names: dict[tuple[int, int], str] = {}
    first, last = None, 0
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    for e in trace["traceEvents"]:
        ph, cat, args = e.get("ph"), e.get("cat"), e.get("args", {})
        if ph in ("X", "i", "C"):
            ts = round(e["ts"] * 1000)
            first = ts if first is None else min(first, ts)
            last = max(last, ts + round(e.get("dur", 0) * 1000))
        if ph == "X" and cat == "occupancy":
            dur = round(e["dur"] * 1000)
            track = names.get((e["pid"], e["tid"]), "?")
            key = (args["context"], track)
            if "shares" in args:
                for slot, ns in args["shares"].items():
                    out.occupancy[key][f"slot {slot}"] += ns
            else:
                out.occupancy[key][f"{args['slot']} {e['name']}"] += dur
            out.slices.append((track, round(e["ts"] * 1000), dur, e["name"], args["context"]))
        elif ph == "X" and cat == "reservation":
            out.slices.append(("reservation", round(e["ts"] * 1000), round(e["dur"] * 1000), e["name"], ""))
        elif ph == "X" and cat == "signal":
            if "lateness_ns" in args:
                out.sent += 1
                if args["lateness_ns"] is not None:
                    out.lateness_ns.append(int(args["lateness_ns"]))
            elif "merged" in args:
                out.merged += args["merged"]
            else:
                out.owed += args.get("count", 1)
        elif ph == "X" and cat == "overflow":
            out.overflows += args.get("count", 1)
        elif ph == "i" and cat == "refusal":
            if "errno" in args:
                out.refusals[(args["personality"], args["errno"])] += 1
            else:
                out.refusals[(args["asker"], f"reservation held by {args['holder']}")] += 1
    out.span_ns = last - (first or 0)
    return out


def percentile(values: list[int], p: float) -> int:
    """The nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def render(s: Summary, path: str) -> str:
    lines = [f"{path}: {s.clock} clock, {s.events} events ({s.dropped} dropped), {s.span_ns / 1e6:.3f} ms emulated", ""]
    lines.append("time on counter")
    lines.append(f"  {'context':<20} {'counter':<22} {'event':<34} {'ms':>10} {'share':>7}")
    for (ctx, track), events in sorted(s.occupancy.items()):
        total = sum(events.values())
        for label, ns in sorted(events.items(), key=lambda kv: (-kv[1], kv[0])):
            share = f"{100 * ns / total:6.1f}%" if len(events) > 1 and total else ""
            lines.append(f"  {ctx:<20} {track:<22} {label:<34} {ns / 1e6:>10.3f} {share:>7}")
    lines.append("  (share: of the context's time on a multiplexed counter)")
    lines.append("")
    lines.append(f"overflows {s.overflows}; signals owed {s.owed}, sent {s.sent}, merged {s.merged}")
    if s.lateness_ns:
        marks = ", ".join(f"p{p} {percentile(s.lateness_ns, p) / 1000:.1f}" for p in (50, 90, 99))
        worst = max(s.lateness_ns) / 1000
        lines.append(f"  lateness (host time from overflow to signal, us): {marks}, max {worst:.1f}")
    lines.append("")
    lines.append("refusals per personality")
    if not s.refusals:
        lines.append("  none")
    for (who, why), n in sorted(s.refusals.items()):
        lines.append(f"  {who:<20} {why:<40} {n:>6}")
    return "\n".join(lines) + "\n"


def draw(s: Summary, out: str) -> None:
    """The counters' occupancy, one row per counter track, one colour per event."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("hwperfd-trace: --png needs matplotlib (pip install matplotlib)") from None
    tracks = sorted({t for t, *_ in s.slices})
    labels = sorted({label for _, _, _, label, _ in s.slices})
    span = max((start + length for _, start, length, _, _ in s.slices), default=0) or 1
    colours = {label: plt.get_cmap("tab20")(i % 20) for i, label in enumerate(labels)}
    fig, ax = plt.subplots(figsize=(10, 1 + 0.5 * len(tracks)))
    for row, track in enumerate(tracks):
        for label in labels:
            bars = [(start, length, ctx) for t, start, length, lab, ctx in s.slices if t == track and lab == label]
            if bars:
                ax.broken_barh([(a / 1e6, n / 1e6) for a, n, _ in bars], (row - 0.4, 0.8), color=colours[label],
                               label=label)  # fmt: skip
            for start, length, ctx in bars:
                if ctx and length > span / 12:  # name whose counter it is, where there is room
                    ax.text((start + length / 2) / 1e6, row, ctx, ha="center", va="center", fontsize="x-small")
    handles, names = ax.get_legend_handles_labels()
    unique = dict(zip(names, handles))
    ax.legend(unique.values(), unique.keys(), loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    ax.set_yticks(range(len(tracks)), tracks)
    ax.set_xlabel(f"emulated time (ms, {s.clock} clock)")
    ax.set_title("counter occupancy")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hwperfd-trace", description="Read a trace that hwperfd --trace wrote.")
    commands = parser.add_subparsers(dest="command", required=True)
    summary = commands.add_parser("summary", help="counter time, multiplex shares, lateness, refusals")
    summary.add_argument("file")
    summary.add_argument("--png", metavar="OUT", help="also draw the counters' occupancy into OUT (matplotlib)")
    args = parser.parse_args(argv)
    try:
        s = summarize(load(args.file))
    except (OSError, ValueError, KeyError) as exc:
        print(f"hwperfd-trace: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(render(s, args.file))
    if args.png:
        draw(s, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
