"""CPU models as data: what each emulated processor's counter hardware is.

A model says how many counters a CPU has and how wide they are, how a
counter's control word (its event select) is laid out, which events each
counter takes, and what every event counts in terms of workload-profile
kinds (``hwperfd.cpu.events.KINDS``).  An event whose ``counts`` is empty
counts 0, as unknown event codes did on the real parts.

Sources, per model:

* ``r10000``, ``r12000``: r10k_counters(5) and perfex(1), through the IRIX
  tables in ``hwperfd.cpu.events`` (taken as they are).
* ``intel``: OpenBSD pctr(4) (two 40-bit counters, the event-select bits),
  and the event codes and names OpenBSD's pctr(1) lists for Intel Core CPUs
  on amd64 (``usr.bin/pctr/pctrvar.h``, ``corefn``); a subset.
* ``amd``: pctr(4) (four 48-bit counters, read as 40 bits) and pctr(1)'s AMD
  list (``amdfn``); a subset.
* ``ultrasparc``: the UltraSPARC I/II event names of illumos's
  ``us234_pcbe.c`` (two 32-bit PICs, PCR select fields S0/S1).

Descriptions are our own one-line summaries.  Which kinds an event maps to
is this project's modelling decision (README, CPU models).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Mapping

from hwperfd.cpu.events import CPU_EVENTS, CpuEvents

ANY_COUNTER = -1

# Event flags (what pctr(1) prints beside an event; what the unit mask means).
MESI = "mesi"  # unit mask selects M/E/S/I cache-line states
ANY_INITIATOR = "a"  # unit mask takes the "any initiator" bit
EDGE = "edge"  # counted with edge detect
COUNTER0 = "ctr0"
COUNTER1 = "ctr1"

Kinds = tuple[tuple[str, int], ...]  # (kind, +1 or -1): the event's rate is their sum


@dataclass(frozen=True)
class ModelEvent:
    code: int  # the value of the event-select field
    name: str
    description: str
    counts: Kinds = ()  # () counts 0
    counters: int = ANY_COUNTER  # bit mask of counters that take the event
    flags: frozenset[str] = frozenset()

    def on(self, counter: int) -> bool:
        return self.counters == ANY_COUNTER or bool(self.counters >> counter & 1)

    def rate(self, rates: Mapping[str, Fraction]) -> Fraction:
        """Events per cycle under a profile's rates (never below 0)."""
        total = sum((sign * rates.get(kind, Fraction(0)) for kind, sign in self.counts), Fraction(0))
        return max(total, Fraction(0))


@dataclass(frozen=True)
class CpuModel:
    name: str  # what --cpu-type takes
    description: str
    arch: str  # "mips", "amd64", "sparc64": which personalities run natively
    vendor: str  # what CPUID (or its equivalent) says
    default_mhz: int
    counters: int
    width: int  # bits of a hardware counter
    read_width: int  # bits a read returns (AMD's 48 read as 40, pctr(4))
    control: str  # layout of a control word: "mips", "x86", "sparc"
    events: tuple[ModelEvent, ...]
    overflow_interrupt: bool = True
    overflow_identified: bool = True  # the handler learns which counter overflowed
    _by_code: Mapping[int, tuple[ModelEvent, ...]] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, repr=False
    )

    def __post_init__(self) -> None:
        index: dict[int, list[ModelEvent]] = {}
        for event in self.events:
            index.setdefault(event.code, []).append(event)
        object.__setattr__(self, "_by_code", MappingProxyType({k: tuple(v) for k, v in index.items()}))

    @property
    def modulus(self) -> int:
        return 1 << self.width

    @property
    def read_mask(self) -> int:
        return (1 << self.read_width) - 1

    def event(self, code: int, counter: int) -> ModelEvent | None:
        """The event that ``code`` selects on ``counter``, or None."""
        for event in self._by_code.get(code, ()):
            if event.on(counter):
                return event
        return None

    def by_name(self, name: str) -> ModelEvent | None:
        key = name.casefold()
        return next((e for e in self.events if e.name.casefold() == key), None)


def _k(*kinds: str) -> Kinds:
    """``_k("a", "-b")``: kind a less kind b."""
    return tuple((k[1:], -1) if k.startswith("-") else (k, 1) for k in kinds)


# -- MIPS: derived from the IRIX tables, unchanged --------------------------


def _mips(events: CpuEvents, description: str, mhz: int) -> CpuModel:
    rows = []
    for event in events.events:
        if events.per_counter:
            code, counters = event.number % 16, 1 << (event.number // 16)
        else:
            code, counters = event.number, ANY_COUNTER
        rows.append(ModelEvent(code, event.name, event.description, ((event.kind, 1),), counters))
    return CpuModel(events.name, description, "mips", "MIPS", mhz, 2, 32, 32, "mips", tuple(rows))


# -- Intel (pctr(1)'s "corefn" codes) -----------------------------------------

_INTEL = (
    ModelEvent(0x03, "LD_BLOCKS", "Loads blocked by the store buffer."),
    ModelEvent(0x04, "SB_DRAINS", "Cycles spent draining the store buffer."),
    ModelEvent(0x06, "SEGMENT_REG_LOADS", "Segment register loads."),
    ModelEvent(0x08, "DTLB_MISSES", "Memory accesses that missed the data TLB.", _k("tlb_misses")),
    ModelEvent(0x0c, "PAGE_WALKS", "Page walks executed.", _k("tlb_misses")),
    ModelEvent(0x10, "FP_COMP_OPS_EXE", "Floating-point computational micro-ops executed.",
               _k("graduated_fp_instructions")),
    ModelEvent(0x12, "MUL", "Multiplies."),
    ModelEvent(0x13, "DIV", "Divides."),
    ModelEvent(0x14, "CYCLES_DIV_BUSY", "Cycles the divider is busy."),
    ModelEvent(0x24, "L2_LINES_IN", "Lines allocated in the L2 cache (L2 misses).",
               _k("scache_dcache_misses", "scache_icache_misses")),
    ModelEvent(0x26, "L2_LINES_OUT", "Lines removed from the L2 cache.", _k("scache_writebacks")),
    ModelEvent(0x28, "L2_IFETCH", "L2 cache instruction fetches.", _k("icache_misses"), flags=frozenset({MESI})),
    ModelEvent(0x29, "L2_LD", "L2 cache data loads.", _k("dcache_misses"), flags=frozenset({MESI})),
    ModelEvent(0x2a, "L2_ST", "L2 cache data stores.", _k("store_exclusive_clean", "store_exclusive_shared"),
               flags=frozenset({MESI})),
    ModelEvent(0x2e, "L2_RQSTS", "L2 cache requests.", _k("icache_misses", "dcache_misses"), flags=frozenset({MESI})),
    ModelEvent(0x3b, "THERMAL_TRIP", "Cycles in a thermal trip.", flags=frozenset({EDGE})),
    ModelEvent(0x3c, "NONHLT_REF_CYCLES", "Cycles the core is not halted.", _k("cycles")),
    ModelEvent(0x40, "L1D_CACHE_LD", "L1 data cache reads.", _k("graduated_loads"), flags=frozenset({MESI})),
    ModelEvent(0x41, "L1D_CACHE_ST", "L1 data cache writes.", _k("graduated_stores"), flags=frozenset({MESI})),
    ModelEvent(0x43, "L1D_ALL_REF", "All references to the L1 data cache.", _k("graduated_loads", "graduated_stores")),
    ModelEvent(0x45, "L1D_REPL", "Lines allocated in the L1 data cache.", _k("dcache_misses")),
    ModelEvent(0x47, "L1D_M_EVICT", "Modified lines evicted from the L1 data cache.", _k("dcache_writebacks")),
    ModelEvent(0x49, "DTLB_MISS", "Data references that missed the TLB.", _k("tlb_misses")),
    ModelEvent(0x65, "BUS_TRAN_BRD", "Burst read bus transactions.", _k("scache_dcache_misses"),
               flags=frozenset({ANY_INITIATOR})),
    ModelEvent(0x70, "BUS_TRAN_ANY", "All bus transactions.",
               _k("scache_dcache_misses", "scache_icache_misses", "scache_writebacks"),
               flags=frozenset({ANY_INITIATOR})),
    ModelEvent(0x80, "L1I_READS", "Instruction fetches."),
    ModelEvent(0x81, "L1I_MISSES", "Instruction fetch misses.", _k("icache_misses")),
    ModelEvent(0x85, "ITLB_MISSES", "Instruction TLB misses."),
    ModelEvent(0x88, "BR_INST_EXEC", "Branch instructions executed.", _k("resolved_branches")),
    ModelEvent(0x89, "BR_MISSP_EXEC", "Mispredicted branch instructions executed.", _k("mispredicted_branches")),
    ModelEvent(0xa2, "RESOURCE_STALL", "Cycles with a resource-related stall."),
    ModelEvent(0xc0, "INST_RETIRED", "Instructions retired.", _k("graduated_instructions")),
    ModelEvent(0xc1, "X87_OPS_RETIRED", "Floating-point operations retired.", _k("graduated_fp_instructions")),
    ModelEvent(0xc2, "UOPS_RETIRED", "Micro-ops retired."),
    ModelEvent(0xc4, "BR_INST_RETIRED", "Branch instructions retired.", _k("resolved_branches")),
    ModelEvent(0xc5, "BR_MISS_PRED_RETIRED", "Mispredicted branches retired.", _k("mispredicted_branches")),
    ModelEvent(0xc8, "HW_INT_RCV", "Hardware interrupts received."),
    ModelEvent(0xcb, "MEM_LOAD_RETIRED", "Retired loads that missed the L1 data cache.", _k("dcache_misses")),
    ModelEvent(0xd0, "INSTR_DECODED", "Instructions decoded.", _k("decoded_instructions")),
    ModelEvent(0xe0, "BR_INST_DECODED", "Branch instructions decoded.", _k("decoded_branches")),
    ModelEvent(0xe6, "BACLEARS", "Times the front end was resteered (BACLEAR)."),
)

# -- AMD (pctr(1)'s "amdfn" codes) ----------------------------------------------

_AMD = (
    ModelEvent(0x00, "Dispatched FPU operations", "Floating-point operations dispatched.",
               _k("graduated_fp_instructions")),
    ModelEvent(0x01, "Cycles with no FPU ops retired", "Cycles in which no floating-point operation retired."),
    ModelEvent(0x20, "Segment register loads", "Segment register loads."),
    ModelEvent(0x24, "Locked operations", "Locked operations."),
    ModelEvent(0x40, "Data cache accesses", "Data cache accesses.", _k("graduated_loads", "graduated_stores")),
    ModelEvent(0x41, "Data cache misses", "Data cache misses.", _k("dcache_misses")),
    ModelEvent(0x42, "Data cache refills from L2 or system", "Data cache refills.", _k("dcache_misses")),
    ModelEvent(0x43, "Data cache refills from system", "Data cache refills from memory.", _k("scache_dcache_misses")),
    ModelEvent(0x44, "Data cache lines evicted", "Data cache lines evicted.", _k("dcache_writebacks")),
    ModelEvent(0x45, "L1 DTLB miss and L2 DTLB hit", "First-level data TLB misses that hit the second level."),
    ModelEvent(0x46, "L1 DTLB miss and L2 DTLB miss", "Data TLB misses in both levels.", _k("tlb_misses")),
    ModelEvent(0x47, "Misaligned access", "Misaligned data accesses."),
    ModelEvent(0x4b, "Prefetch instructions dispatched", "Prefetch instructions dispatched.",
               _k("prefetch_instructions")),
    ModelEvent(0x76, "CPU clocks not halted", "Cycles the processor is not halted.", _k("cycles")),
    ModelEvent(0x7d, "Requests to L2 cache", "Requests to the L2 cache.", _k("dcache_misses", "icache_misses")),
    ModelEvent(0x7e, "L2 cache misses", "L2 cache misses.", _k("scache_dcache_misses", "scache_icache_misses")),
    ModelEvent(0x7f, "L2 cache fill/writeback", "L2 cache fills and writebacks.", _k("scache_writebacks")),
    ModelEvent(0x80, "ICACHE fetches", "Instruction cache fetches."),
    ModelEvent(0x81, "ICACHE misses", "Instruction cache misses.", _k("icache_misses")),
    ModelEvent(0x83, "ICACHE refills from system", "Instruction cache refills from memory.",
               _k("scache_icache_misses")),
    ModelEvent(0x85, "L1 ITLB miss and L2 ITLB miss", "Instruction TLB misses in both levels."),
    ModelEvent(0xc0, "Retired instructions", "Instructions retired.", _k("graduated_instructions")),
    ModelEvent(0xc1, "Retired microops", "Micro-ops retired."),
    ModelEvent(0xc2, "Retired branch instructions", "Branch instructions retired.", _k("resolved_branches")),
    ModelEvent(0xc3, "Retired mispredicted branch instructions", "Mispredicted branches retired.",
               _k("mispredicted_branches")),
    ModelEvent(0xc4, "Retired taken branch instructions", "Taken branches retired."),
    ModelEvent(0xcb, "Retired MMX/FP instructions", "MMX and floating-point instructions retired.",
               _k("graduated_fp_instructions")),
    ModelEvent(0xcd, "Interrupts-masked cycles", "Cycles with interrupts masked."),
    ModelEvent(0xcf, "Interrupts taken", "Interrupts taken."),
    ModelEvent(0xd0, "Decoder empty", "Cycles the decoder is empty."),
    ModelEvent(0xd1, "Dispatch stalls", "Dispatch stall cycles."),
    ModelEvent(0xe0, "DRAM accesses", "DRAM accesses.", _k("scache_dcache_misses", "scache_icache_misses")),
)

# -- UltraSPARC I/II (us234_pcbe.c names; PIC0 and PIC1 selects) ------------------

_P0, _P1 = 0b01, 0b10
_SPARC = (
    ModelEvent(0x0, "Cycle_cnt", "Accumulated cycles.", _k("cycles")),
    ModelEvent(0x1, "Instr_cnt", "Instructions completed.", _k("graduated_instructions")),
    ModelEvent(0x2, "Dispatch0_IC_miss", "Cycles the dispatch stalls on an I-cache miss.", counters=_P0),
    ModelEvent(0x3, "Dispatch0_storeBuf", "Cycles the dispatch stalls on a full store buffer.", counters=_P0),
    ModelEvent(0x8, "IC_ref", "I-cache references.", counters=_P0),
    ModelEvent(0x9, "DC_rd", "D-cache read references.", _k("graduated_loads"), _P0),
    ModelEvent(0xa, "DC_wr", "D-cache write references.", _k("graduated_stores"), _P0),
    ModelEvent(0xb, "Load_use", "Cycles stalled on a load use.", counters=_P0),
    ModelEvent(0xc, "EC_ref", "E-cache references.", _k("dcache_misses", "icache_misses"), _P0),
    ModelEvent(0xd, "EC_write_hit_RDO", "E-cache hits needing a read-to-own.", counters=_P0),
    ModelEvent(0xe, "EC_snoop_inv", "E-cache invalidations by snoops.", _k("external_invalidations"), _P0),
    ModelEvent(0xf, "EC_rd_hit", "E-cache read hits from D-cache misses.",
               _k("dcache_misses", "-scache_dcache_misses"), _P0),
    ModelEvent(0x2, "Dispatch0_mispred", "Cycles the dispatch stalls on a mispredicted branch.",
               _k("mispredicted_branches"), _P1),
    ModelEvent(0x3, "Dispatch0_FP_use", "Cycles stalled on a floating-point result.", counters=_P1),
    ModelEvent(0x8, "IC_hit", "I-cache hits.", counters=_P1),
    ModelEvent(0x9, "DC_rd_hit", "D-cache read hits.", _k("graduated_loads", "-dcache_misses"), _P1),
    ModelEvent(0xa, "DC_wr_hit", "D-cache write hits.", counters=_P1),
    ModelEvent(0xb, "Load_use_RAW", "Load-use stalls with a read-after-write hazard.", counters=_P1),
    ModelEvent(0xc, "EC_hit", "E-cache hits.",
               _k("dcache_misses", "icache_misses", "-scache_dcache_misses", "-scache_icache_misses"), _P1),
    ModelEvent(0xd, "EC_wb", "E-cache misses that write back.", _k("scache_writebacks"), _P1),
    ModelEvent(0xe, "EC_snoop_cb", "E-cache snoop copy-backs.", _k("external_intervention_hits"), _P1),
    ModelEvent(0xf, "EC_ic_hit", "E-cache read hits from I-cache misses.",
               _k("icache_misses", "-scache_icache_misses"), _P1),
)

MODELS: Mapping[str, CpuModel] = MappingProxyType(
    {
        "r10000": _mips(CPU_EVENTS["r10000"], "MIPS R10000 (revision 3.x)", 195),
        "r12000": _mips(CPU_EVENTS["r12000"], "MIPS R12000", 300),
        # pctr(4): "Intel processors have two 40-bit performance counters".
        "intel": CpuModel("intel", "Intel Core 2 (2 general counters)", "amd64", "GenuineIntel", 2400,
                          2, 40, 40, "x86", _INTEL),
        # pctr(4): "AMD processors have four 48-bit counters, their precision
        # is decreased to 40 bits".
        "amd": CpuModel("amd", "AMD Athlon 64 / Opteron (K8)", "amd64", "AuthenticAMD", 2200,
                        4, 48, 40, "x86", _AMD),
        "ultrasparc": CpuModel("ultrasparc", "Sun UltraSPARC II (2 PICs)", "sparc64", "Sun", 400,
                               2, 32, 32, "sparc", _SPARC),
    }
)

__all__ = ["ANY_COUNTER", "MESI", "ANY_INITIATOR", "EDGE", "CpuModel", "ModelEvent", "MODELS"]
