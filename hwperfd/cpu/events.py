"""The R10000 and R12000 event tables, as data.

Sources: r10k_counters(5) (event lists and NOTES) and perfex(1) (event
names).  ``number`` is the perfex / r10k_counters numbering, which is also
the slot index in ``hwperf_eventctrl_t``.

What ``hwp_ev`` means in a slot:

* R10000: each hardware counter has its own 16 events.  ``hwp_ev`` is the
  event's number *on that counter* (0..15): on counter 0 it counts event
  ``hwp_ev``, on counter 1 event ``16 + hwp_ev``.
* R12000: both counters can count all 32 events.  Slots 0-15 are counter 0,
  which takes ``hwp_ev`` (0..31) as the event number; slots 16-31 are counter
  1, which counts event ``(hwp_ev + 16) mod 32``.  IRIX's kernel added 16 to
  ``hwp_ev`` when it loaded counter 1 of an R12000 ("emulate R10K") so that
  programs written for the R10000 - the r10k_counters(5) example, PAPI, which
  write slot i with ``hwp_ev = i mod 16`` - count event i on both CPU types;
  the other values reach the remaining events (counter 1 with ``hwp_ev``
  16..31 counts events 0..15).  ``hwp_ev`` 32 and above is EINVAL.

``macro`` is the name used in IRIX's ``<sys/hwperfmacros.h>``, whose value is
the ``hwp_ev`` to write on counter 0 (R10000: 0..15 per counter, R12000:
0..31; on R12000 counter 1 write ``macro - 16`` modulo 32).  The
names are IRIX's own, so that IRIX-era sources (PAPI, SGI daemons, Dyninst)
compile unchanged against ``include/sys/hwperfmacros.h``.

``kind`` says what is measured, so that workload profiles can give one rate
per kind and several events (R10000 0 and 16, 15 and 17) share it.

The R10000 is modelled as a revision 3.x part: event 6 counts resolved
branches ("Decoded branches" in perfex) and event 14 ALU/FPU completion
cycles.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing stays off perfex's start-up (hwperfd/records.py)
if TYPE_CHECKING:
    from typing import NamedTuple
else:
    from hwperfd.records import NamedTuple

KINDS: tuple[str, ...] = (
    "cycles",
    "issued_instructions",
    "issued_loads",
    "issued_stores",
    "issued_store_conditionals",
    "failed_store_conditionals",
    "decoded_instructions",
    "decoded_loads",
    "decoded_stores",
    "decoded_branches",
    "resolved_branches",
    "scache_writebacks",
    "scache_ecc_errors",
    "icache_misses",
    "scache_icache_misses",
    "scache_iway_mispredictions",
    "external_interventions",
    "external_invalidations",
    "fu_completion_cycles",
    "graduated_instructions",
    "graduated_loads",
    "graduated_stores",
    "graduated_store_conditionals",
    "graduated_fp_instructions",
    "dcache_writebacks",
    "tlb_misses",
    "mispredicted_branches",
    "dcache_misses",
    "scache_dcache_misses",
    "scache_dway_mispredictions",
    "external_intervention_hits",
    "external_invalidation_hits",
    "store_exclusive_clean",
    "store_exclusive_shared",
    "mht_occupancy",
    "prefetch_instructions",
    "prefetch_dcache_misses",
    "mht_memory_cycles",
    # x86 only (the IRIX tables have no such events): branches by outcome,
    # what Core 2's BR_INST_RETIRED unit mask and the K8's taken-branch
    # events (0xC4, 0xC5) select, and conditional branches (Core 2 BR_CND_*).
    "taken_branches",
    "mispredicted_taken_branches",
    "conditional_branches",
    "mispredicted_conditional_branches",
)


# Named tuples, not dataclasses: perfex imports these tables at start, and
# `dataclasses` (through `inspect`) would cost it more than the tables do.
class Event(NamedTuple):
    number: int  # 0..31: perfex/r10k_counters numbering
    name: str  # perfex(1)-style name
    macro: str  # C macro in include/sys/hwperfmacros.h
    kind: str  # one of KINDS
    description: str  # one line, from r10k_counters(5)


class CpuEvents(NamedTuple):
    name: str  # "r10000" / "r12000"
    events: tuple[Event, ...]  # 32 events, index == number
    # True (R10000): counter c with hwp_ev e (0..15) counts event 16*c + e.
    # False (R12000): counter c with hwp_ev e (0..31) counts event (e + 16*c) mod 32.
    # Either way slot i with hwp_ev = i mod 16 counts event i.
    per_counter: bool = False

    def on_counter(self, counter: int, ev: int) -> Event | None:
        """The event that ``hwp_ev == ev`` counts on hardware counter 0/1."""
        if counter not in (0, 1) or ev < 0:
            return None
        if self.per_counter:
            if ev >= 16:
                return None
            return self.events[counter * 16 + ev]
        if ev >= len(self.events):
            return None
        return self.events[(ev + 16 * counter) % len(self.events)]

    def hwp_ev(self, counter: int, number: int) -> int | None:
        """The ``hwp_ev`` that makes hardware counter 0/1 count event ``number``
        (None if that counter cannot count it)."""
        if counter not in self.counters_for(number):
            return None
        if self.per_counter:
            return number % 16
        return (number - 16 * counter) % len(self.events)

    def counters_for(self, number: int) -> tuple[int, ...]:
        """Hardware counters that can count event ``number``."""
        if not 0 <= number < len(self.events):
            return ()
        if self.per_counter:
            return (number // 16,)
        return (0, 1)

    def by_name(self, name: str) -> Event | None:
        """Case-insensitive match on the perfex name or the macro.

        R10000 names "Cycles" and "Graduated instructions" occur twice
        (0/16 and 15/17); the lower number is returned.
        """
        key = name.strip().casefold()
        for event in self.events:
            if event.name.casefold() == key or event.macro.casefold() == key:
                return event
        return None


def _table(rows: list[tuple[str, str, str, str]], first: int = 0) -> list[Event]:
    return [Event(first + i, *row) for i, row in enumerate(rows)]


_C0 = "HWPERF_C0PRFCNT0_"
_C1 = "HWPERF_C0PRFCNT1_"
_R12 = "HWPERF_PRFCNT_"

# (name, macro, kind, description)
_R10000_COUNTER0 = [
    ("Cycles", _C0 + "CYCLES", "cycles",
     "Incremented on each clock cycle."),
    ("Issued instructions", _C0 + "IINSTR", "issued_instructions",
     "Incremented each time an instruction is issued to the ALU, FPU or load/store units."),
    ("Issued loads", _C0 + "ILD", "issued_loads",
     "Incremented when a load, prefetch or synchronization instruction is issued."),
    ("Issued stores", _C0 + "IST", "issued_stores",
     "Incremented when a store instruction is issued."),
    ("Issued store conditionals", _C0 + "ISC", "issued_store_conditionals",
     "Incremented when a store-conditional instruction is issued."),
    ("Failed store conditionals", _C0 + "FAILSC", "failed_store_conditionals",
     "Incremented when a store-conditional instruction fails (a subset of event 20)."),
    ("Decoded branches", _C0 + "DECBR", "decoded_branches",
     "Incremented when a branch is decoded (revision 2.x) or resolved (revision 3.x)."),
    ("Quadwords written back from scache", _C0 + "QWWSC", "scache_writebacks",
     "Incremented when data is written back from secondary cache to the system interface."),
    ("Correctable scache data array ECC errors", _C0 + "SCDAECC", "scache_ecc_errors",
     "Incremented when a single-bit ECC error is detected on data read from secondary cache."),
    ("Primary instruction cache misses", _C0 + "PICMISS", "icache_misses",
     "Incremented when the next instruction is not in the primary instruction cache."),
    ("Secondary instruction cache misses", _C0 + "SICMISS", "scache_icache_misses",
     "Incremented when the next instruction is not in the secondary cache."),
    ("Instruction misprediction from scache way prediction table", _C0 + "IMISPRED",
     "scache_iway_mispredictions",
     "Incremented when the secondary cache way prediction mispredicted an instruction."),
    ("External interventions", _C0 + "EXTINT", "external_interventions",
     "Incremented when an external intervention that is not an invalidate enters the Miss Handling Table."),
    ("External invalidations", _C0 + "EXTINV", "external_invalidations",
     "Incremented when an invalidate-type intervention enters the Miss Handling Table."),
    # perfex(1)'s table names it by revision 2.x's meaning only; scripts parse that name.
    ("Virtual coherency conditions", _C0 + "VCOH",
     "fu_completion_cycles",
     "Virtual coherency conditions (revision 2.x) or ALU/FPU functional unit completion cycles (revision 3.x)."),
    ("Graduated instructions", _C0 + "GINSTR", "graduated_instructions",
     "Incremented when an instruction graduates."),
]

_R10000_COUNTER1 = [
    ("Cycles", _C1 + "CYCLES", "cycles",
     "Incremented on each clock cycle."),
    ("Graduated instructions", _C1 + "GINSTR", "graduated_instructions",
     "Incremented when an instruction graduates."),
    ("Graduated loads", _C1 + "GLD", "graduated_loads",
     "Incremented on a graduated load, prefetch or synchronization instruction."),
    ("Graduated stores", _C1 + "GST", "graduated_stores",
     "Incremented on a graduated store instruction."),
    ("Graduated store conditionals", _C1 + "GSC", "graduated_store_conditionals",
     "Incremented on a graduated store-conditional instruction."),
    ("Graduated floating point instructions", _C1 + "GFINSTR", "graduated_fp_instructions",
     "Incremented on a graduated floating-point instruction."),
    ("Quadwords written back from primary data cache", _C1 + "QWWPC", "dcache_writebacks",
     "Incremented when data is written back from primary data cache to secondary cache."),
    ("TLB misses", _C1 + "TLBMISS", "tlb_misses",
     "Incremented when a translation lookaside buffer (TLB) refill exception occurs."),
    ("Mispredicted branches", _C1 + "BRMISS", "mispredicted_branches",
     "Incremented when a branch is mispredicted."),
    ("Primary data cache misses", _C1 + "PDCMISS", "dcache_misses",
     "Incremented when the next data item is not in the primary data cache."),
    ("Secondary data cache misses", _C1 + "SDCMISS", "scache_dcache_misses",
     "Incremented when the next data item is not in the secondary cache."),
    ("Data misprediction from scache way prediction table", _C1 + "DMISPRED",
     "scache_dway_mispredictions",
     "Incremented when the secondary cache way prediction mispredicted a data item."),
    ("External intervention hits in scache", _C1 + "EXTINTHIT", "external_intervention_hits",
     "Set when an external intervention hits in the secondary cache."),
    ("External invalidation hits in scache", _C1 + "EXTINVHIT", "external_invalidation_hits",
     "Set when an external invalidate request hits in the secondary cache."),
    ("Store/prefetch exclusive to clean block in scache", _C1 + "SPEXCLEAN",
     "store_exclusive_clean",
     "Incremented when an update request is issued for a clean line in the secondary cache."),
    ("Store/prefetch exclusive to shared block in scache", _C1 + "SPEXSHR",
     "store_exclusive_shared",
     "Incremented when an update request is issued for a shared line in the secondary cache."),
]

_R12000_ROWS = [
    ("Cycles", _R12 + "CYCLES", "cycles",
     "Incremented on each clock cycle."),
    ("Decoded instructions", _R12 + "DINSTR", "decoded_instructions",
     "Incremented by the number of instructions decoded on the previous cycle."),
    ("Decoded loads", _R12 + "DLD", "decoded_loads",
     "Incremented when a load instruction was decoded on the previous cycle."),
    ("Decoded stores", _R12 + "DST", "decoded_stores",
     "Incremented when a store instruction (including store conditionals) was decoded on the previous cycle."),
    ("Miss handling table occupancy", _R12 + "MTHO", "mht_occupancy",
     "Incremented each cycle by the number of valid entries in the Miss Handling Table."),
    ("Failed store conditionals", _R12 + "FAILSC", "failed_store_conditionals",
     "Incremented when a store-conditional instruction fails (a subset of event 20)."),
    ("Resolved conditional branches", _R12 + "RESCB", "resolved_branches",
     "Incremented when a branch is resolved, whether it was predicted correctly or not."),
    ("Quadwords written back from scache", _R12 + "QWWSC", "scache_writebacks",
     "Incremented each cycle a quadword is written back from secondary cache to the system interface."),
    ("Correctable scache data array ECC errors", _R12 + "SCDAECC", "scache_ecc_errors",
     "Incremented after a single-bit error is corrected in a quadword read from secondary cache."),
    ("Primary instruction cache misses", _R12 + "PICMISS", "icache_misses",
     "Incremented after an instruction fetch request enters the Miss Handling Table."),
    ("Secondary instruction cache misses", _R12 + "SICMISS", "scache_icache_misses",
     "Incremented after an instruction refill request is sent to the system interface."),
    ("Instruction misprediction from scache way prediction table", _R12 + "IMISPRED",
     "scache_iway_mispredictions",
     "Incremented when an instruction fetch hits in the unpredicted secondary cache way."),
    ("External interventions", _R12 + "EXTINT", "external_interventions",
     "Incremented after a non-invalidate intervention enters the Miss Handling Table."),
    ("External invalidations", _R12 + "EXTINV", "external_invalidations",
     "Incremented after an invalidate-type intervention enters the Miss Handling Table."),
    ("ALU/FPU progress cycles", _R12 + "ALUFPUFP", "fu_completion_cycles",
     "Incremented on the cycle after ALU1, ALU2, FPU1 or FPU2 marks an instruction done."),
    ("Graduated instructions", _R12 + "GINSTR", "graduated_instructions",
     "Incremented by the number of instructions graduated on the previous cycle."),
    ("Executed prefetch instructions", _R12 + "EXPREI", "prefetch_instructions",
     "Incremented after a prefetch instruction does its tag check."),
    ("Prefetch primary data cache misses", _R12 + "PDCMISSPI", "prefetch_dcache_misses",
     "Incremented after a prefetch instruction's tag check initiates a data cache refill."),
    ("Graduated loads", _R12 + "GLD", "graduated_loads",
     "Incremented by the number of loads (including prefetches) graduated on the previous cycle."),
    ("Graduated stores", _R12 + "GST", "graduated_stores",
     "Incremented on the cycle after a store (including store conditionals) graduates."),
    ("Graduated store conditionals", _R12 + "GSC", "graduated_store_conditionals",
     "Incremented on the cycle after a store-conditional instruction graduates."),
    ("Graduated floating point instructions", _R12 + "GFINSTR", "graduated_fp_instructions",
     "Incremented by the number of floating-point instructions graduated on the previous cycle."),
    ("Quadwords written back from primary data cache", _R12 + "QWWPC", "dcache_writebacks",
     "Incremented each cycle a quadword is written from primary data cache to secondary cache."),
    ("TLB misses", _R12 + "TLBMISS", "tlb_misses",
     "Incremented on the cycle after the TLB miss handler is invoked."),
    ("Mispredicted branches", _R12 + "BRMISS", "mispredicted_branches",
     "Incremented on the cycle after a branch is restored because it was mispredicted."),
    ("Primary data cache misses", _R12 + "PDCMISS", "dcache_misses",
     "Incremented after a request targeted at the primary data cache enters the secondary cache logic."),
    ("Secondary data cache misses", _R12 + "SDCMISS", "scache_dcache_misses",
     "Incremented after a data refill request is sent to the system interface."),
    ("Data misprediction from scache way prediction table", _R12 + "DMISPRED",
     "scache_dway_mispredictions",
     "Incremented when a data access hits in the unpredicted secondary cache way."),
    ("State of external intervention hits in scache", _R12 + "EXTINTHIT",
     "external_intervention_hits",
     "Set after an external intervention hits in the secondary cache, to the state of the line hit."),
    ("State of external invalidation hits in scache", _R12 + "EXTINVHIT",
     "external_invalidation_hits",
     "Set after an external invalidate request hits in the secondary cache, to the state of the line hit."),
    ("Miss handling table entries accessing memory", _R12 + "NHTAM", "mht_memory_cycles",
     "Incremented each cycle by the number of Miss Handling Table entries waiting for memory."),
    ("Store/prefetch exclusive to shared block in scache", _R12 + "SPEX",
     "store_exclusive_shared",
     "Incremented after an update request for a secondary cache line: by one if clean, two if shared."),
]

R10000 = CpuEvents(
    name="r10000",
    events=tuple(_table(_R10000_COUNTER0) + _table(_R10000_COUNTER1, 16)),
    per_counter=True,
)

R12000 = CpuEvents(
    name="r12000",
    events=tuple(_table(_R12000_ROWS)),
    per_counter=False,
)

CPU_EVENTS: dict[str, CpuEvents] = {"r10000": R10000, "r12000": R12000}

# The IRIX CPU types as plain data: their default clock (MHz) and how many
# hwp_ev values each counter's control register takes.  hwperfd.cpu.pmu
# builds its CpuType from these; perfex needs only these and the tables
# above, not the PMU (whose import costs a short-lived tool its start-up).
CPU_TYPE_DATA: dict[str, tuple[int, int]] = {"r10000": (195, 16), "r12000": (300, 32)}

__all__ = ["Event", "CpuEvents", "R10000", "R12000", "CPU_EVENTS", "CPU_TYPE_DATA", "KINDS"]
