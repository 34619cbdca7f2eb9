"""The statistics perfex -y derives from the counts (perfex(1), -y).

"A statistic is only printed if counts for the events which define it have
been gathered": every statistic below names its events, and is skipped
when one is missing or a denominator is zero.  Definitions follow the
page; the ones it calls self-evident (ratios per cycle, ratios of issued
to graduated) are the plain quotients of their events.  ``counts`` maps
event numbers to counts (projected counts with -a); time comes from the
cycle count at the emulated clock rate, as the page says ("multiplying
cycles by the time per cycle").
"""

from __future__ import annotations

from collections.abc import Mapping

from hwperfd.perfex.costs import LINE_BYTES, QUADWORD_BYTES, CostTable

TYPE_CHECKING = False  # typing stays off perfex's start-up (hwperfd/records.py)
if TYPE_CHECKING:
    from typing import Callable, NamedTuple
else:
    from hwperfd.records import NamedTuple

Counts = Mapping[int, float]

# Event numbers (identical on both CPU types unless noted).
DECODED_BRANCHES = 6  # R12000: resolved conditional branches
SCACHE_WRITEBACKS = 7
ICACHE_MISSES = 9
SCACHE_IMISSES = 10
IWAY_MISPREDICT = 11
ISSUED_LOADS = 2  # R12000: decoded loads
ISSUED_STORES = 3  # R12000: decoded stores
MHT_OCCUPANCY = 4  # R12000 only
GRAD_LOADS = 18
GRAD_STORES = 19
GRAD_FP = 21
DCACHE_WRITEBACKS = 22
TLB_MISSES = 23
MISPREDICTED = 24
DCACHE_MISSES = 25
SCACHE_DMISSES = 26
DWAY_MISPREDICT = 27
PREFETCHES = 16  # R12000 only
PREFETCH_MISSES = 17  # R12000 only


class Statistic(NamedTuple):
    name: str
    value: float


def cycles(counts: Counts, cpu_type: str) -> float | None:
    """Cycles: event 0, or on the R10000 event 16 (whichever was counted)."""
    found = [counts[e] for e in ((0, 16) if cpu_type == "r10000" else (0,)) if e in counts]
    return max(found) if found else None


def graduated_instructions(counts: Counts, cpu_type: str) -> float | None:
    found = [counts[e] for e in ((15, 17) if cpu_type == "r10000" else (15,)) if e in counts]
    return max(found) if found else None


def derive(counts: Counts, costs: CostTable, mhz: float, reuse_bytes: int = 0) -> list[Statistic]:
    """The statistics these counts support, in perfex's order.

    ``reuse_bytes`` is ``-l N``: report L1/L2 reuse of N-byte data elements
    instead of cache lines.
    """
    cpu = costs.cpu_type
    r12k = cpu == "r12000"
    l1_line, l2_line = LINE_BYTES[cpu]
    out: list[Statistic] = []
    c = counts
    cyc = cycles(c, cpu) or 0.0  # 0: not counted; every use below checks bool(cyc)
    seconds = cyc / (mhz * 1e6)

    def have(*events: int) -> bool:
        return all(e in c for e in events)

    def add(name: str, ok: bool, value: Callable[[], float]) -> None:
        if ok:
            out.append(Statistic(name, value()))

    grad = graduated_instructions(c, cpu)
    add("Graduated instructions/cycle", grad is not None and bool(cyc), lambda: (grad or 0.0) / cyc)
    add("Graduated floating point instructions/cycle", have(GRAD_FP) and bool(cyc), lambda: c[GRAD_FP] / cyc)
    ls = c.get(GRAD_LOADS, 0) + c.get(GRAD_STORES, 0)
    add("Graduated loads & stores/cycle", have(GRAD_LOADS, GRAD_STORES) and bool(cyc), lambda: ls / cyc)
    add(
        "Graduated loads & stores/floating point instruction",
        have(GRAD_LOADS, GRAD_STORES, GRAD_FP) and c.get(GRAD_FP, 0) > 0,
        lambda: ls / c[GRAD_FP],
    )
    add(
        "Mispredicted branches/" + ("Resolved conditional branches" if r12k else "Decoded branches"),
        have(MISPREDICTED, DECODED_BRANCHES) and c.get(DECODED_BRANCHES, 0) > 0,
        lambda: c[MISPREDICTED] / c[DECODED_BRANCHES],
    )
    add(
        "Graduated loads/" + ("Decoded loads" if r12k else "Issued loads"),
        have(GRAD_LOADS, ISSUED_LOADS) and c.get(ISSUED_LOADS, 0) > 0,
        lambda: c[GRAD_LOADS] / c[ISSUED_LOADS],
    )
    add(
        "Graduated stores/" + ("Decoded stores" if r12k else "Issued stores"),
        have(GRAD_STORES, ISSUED_STORES) and c.get(ISSUED_STORES, 0) > 0,
        lambda: c[GRAD_STORES] / c[ISSUED_STORES],
    )
    # perfex(1) defines both by its formula, whatever the names suggest: "the
    # ratio of the counts for 'Data misprediction from scache way prediction
    # table' and 'Secondary data cache misses'" (27/26; instructions 11/10).
    add(
        "Data mispredict/Data scache hits",
        have(DWAY_MISPREDICT, SCACHE_DMISSES) and c.get(SCACHE_DMISSES, 0) > 0,
        lambda: c[DWAY_MISPREDICT] / c[SCACHE_DMISSES],
    )
    add(
        "Instruction mispredict/Instruction scache hits",
        have(IWAY_MISPREDICT, SCACHE_IMISSES) and c.get(SCACHE_IMISSES, 0) > 0,
        lambda: c[IWAY_MISPREDICT] / c[SCACHE_IMISSES],
    )
    if reuse_bytes:
        add(
            "L1 Data Reuse",
            have(GRAD_LOADS, GRAD_STORES, DCACHE_MISSES) and c.get(DCACHE_MISSES, 0) > 0,
            lambda: ls * reuse_bytes / (c[DCACHE_MISSES] * l1_line) - 1.0,
        )
        add(
            "L2 Data Reuse",
            have(DCACHE_MISSES, SCACHE_DMISSES) and c.get(SCACHE_DMISSES, 0) > 0,
            lambda: c[DCACHE_MISSES] * l1_line / (c[SCACHE_DMISSES] * l2_line) - 1.0,
        )
    else:
        add(
            "L1 Cache Line Reuse",
            have(GRAD_LOADS, GRAD_STORES, DCACHE_MISSES) and c.get(DCACHE_MISSES, 0) > 0,
            lambda: (ls - c[DCACHE_MISSES]) / c[DCACHE_MISSES],
        )
        add(
            "L2 Cache Line Reuse",
            have(DCACHE_MISSES, SCACHE_DMISSES) and c.get(SCACHE_DMISSES, 0) > 0,
            lambda: (c[DCACHE_MISSES] - c[SCACHE_DMISSES]) / c[SCACHE_DMISSES],
        )
    add(
        "L1 Data Cache Hit Rate",
        have(GRAD_LOADS, GRAD_STORES, DCACHE_MISSES) and ls > 0,
        lambda: 1.0 - c[DCACHE_MISSES] / ls,
    )
    add(
        "L2 Data Cache Hit Rate",
        have(DCACHE_MISSES, SCACHE_DMISSES) and c.get(DCACHE_MISSES, 0) > 0,
        lambda: 1.0 - c[SCACHE_DMISSES] / c[DCACHE_MISSES],
    )

    def typical_clocks(event: int) -> float:
        return c[event] * costs[event].typical.clocks(mhz)

    memory_events = (GRAD_LOADS, GRAD_STORES, DCACHE_MISSES, SCACHE_DMISSES, TLB_MISSES)
    add(
        "Time accessing memory/Total time",
        have(*memory_events) and bool(cyc),
        lambda: sum(typical_clocks(e) for e in memory_events) / cyc,
    )
    add(
        "L1--L2 bandwidth used (MB/s, average per process)",
        have(DCACHE_MISSES, DCACHE_WRITEBACKS) and bool(seconds),
        lambda: (c[DCACHE_MISSES] * l1_line + c[DCACHE_WRITEBACKS] * QUADWORD_BYTES) / seconds / 1e6,
    )
    add(
        "Memory bandwidth used (MB/s, average per process)",
        have(SCACHE_DMISSES, SCACHE_WRITEBACKS) and bool(seconds),
        lambda: (c[SCACHE_DMISSES] * l2_line + c[SCACHE_WRITEBACKS] * QUADWORD_BYTES) / seconds / 1e6,
    )
    add("MFLOPS (average per process)", have(GRAD_FP) and bool(seconds), lambda: c[GRAD_FP] / seconds / 1e6)
    if r12k:
        add(
            "Cache misses in flight per cycle (average)",
            have(MHT_OCCUPANCY) and bool(cyc),
            lambda: c[MHT_OCCUPANCY] / cyc,
        )
        add(
            "Prefetch cache miss rate",
            have(PREFETCHES, PREFETCH_MISSES) and c.get(PREFETCHES, 0) > 0,
            lambda: c[PREFETCH_MISSES] / c[PREFETCHES],
        )
    return out
