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
  and every event code, name and flag OpenBSD's pctr(1) lists for Intel
  Core CPUs on amd64 (``usr.bin/pctr/pctrvar.h`` 1.3, ``corefn``), so that
  pctr(1) names and accepts what OpenBSD's does; and the Core 2's three
  fixed-function counters as perfctr 2.6 drives them (``drivers/perfctr/x86.c``:
  instructions retired, core cycles, reference cycles; one 4-bit field each
  in FIXED_CTR_CTRL), which pctr(4) does not know.
* ``amd``: pctr(4) (four 48-bit counters, read as 40 bits) and every code
  and name of pctr(1)'s AMD list (``amdfn``).
* ``ultrasparc``: the UltraSPARC I/II event names of illumos's
  ``us234_pcbe.c`` (two 32-bit PICs, PCR select fields S0/S1).

Descriptions are our own one-line summaries.  Which kinds an event maps to
is this project's modelling decision (docs/design.md, CPU models).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from types import MappingProxyType

from hwperfd.cpu.events import CPU_EVENTS, CpuEvents

ANY_COUNTER = -1

# Event flags (what pctr(1) prints beside an event; what the unit mask means).
MESI = "mesi"  # unit mask selects M/E/S/I cache-line states (flags as in pctr(1)'s tables)
ANY_INITIATOR = "a"  # unit mask takes the "any initiator" bit
EDGE = "edge"  # counted with edge detect
UNIT_MASK = "um"  # pctr(1) requires a unit mask
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
    # Unit-mask bits that each select a part of the event, with what that part
    # counts; a unit mask with none of them set counts the whole (``counts``).
    parts: tuple[tuple[int, Kinds], ...] = ()

    def on(self, counter: int) -> bool:
        return self.counters == ANY_COUNTER or bool(self.counters >> counter & 1)

    def part(self, unit_mask: int) -> ModelEvent:
        """The event as a unit mask selects it: the sum of the parts whose
        bits it sets (bits of no part count nothing), or the whole."""
        if not self.parts or not unit_mask & sum(bit for bit, _ in self.parts):
            return self
        counts = tuple(kind for bit, kinds in self.parts if unit_mask & bit for kind in kinds)
        return replace(self, counts=counts, parts=())

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
    # Fixed-function counters, each counting one event: registers
    # ``counters .. counters + len(fixed) - 1`` of a ``PmuCpu``, after the general ones.
    fixed: tuple[ModelEvent, ...] = ()
    cpuid: tuple[int, int, int] = (0, 0, 0)  # family, model, stepping (x86: what CPUID leaf 1 says)
    _by_code: Mapping[int, tuple[ModelEvent, ...]] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, repr=False
    )

    def __post_init__(self) -> None:
        index: dict[int, list[ModelEvent]] = {}
        for event in self.events:
            index.setdefault(event.code, []).append(event)
        object.__setattr__(self, "_by_code", MappingProxyType({k: tuple(v) for k, v in index.items()}))

    @property
    def registers(self) -> int:
        """General and fixed-function counters together."""
        return self.counters + len(self.fixed)

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


def _rows(text: str, counters: int = ANY_COUNTER) -> tuple[ModelEvent, ...]:
    """Rows ``code | name | flags | kinds | description``; kinds prefixed
    with ``-`` are subtracted."""
    events = []
    for line in text.strip().splitlines():
        code, name, flags, kinds, description = (part.strip() for part in line.split("|"))
        events.append(ModelEvent(int(code, 16), name, description, _k(*kinds.split()), counters,
                                 frozenset(flags.split())))  # fmt: skip
    return tuple(events)


# -- Intel: pctr(1)'s "corefn" table (pctrvar.h 1.3), all of its codes, names and flags

_INTEL = _rows("""
03 | LD_BLOCKS | | | Loads blocked by the store buffer.
04 | SD_DRAIN | | | Cycles spent draining the store buffer.
05 | MISALIGN_MEM_REF | | | Memory references that are not aligned.
06 | SEG_REG_LOADS | | | Loads of a segment register.
07 | SSE_PREF_RET | | prefetch_instructions | Software prefetches (SSE) retired.
08 | DTLB_MISSES | um | tlb_misses | Memory accesses that missed the data TLB.
09 | MEMORY_DISAMBIGUATION | um | | Cycles lost to memory disambiguation resets.
0c | PAGE_WALKS | um | tlb_misses | Page-table walks.
10 | FP_COMP_OPS_EXE | | graduated_fp_instructions | Floating-point computational micro-ops executed.
11 | FP_ASSIST | | | Floating-point cases finished by microcode.
12 | MUL | | | Multiplies.
13 | DIV | | | Divides.
14 | CYCLES_DIV_BUSY | | | Cycles the divider is busy.
18 | IDLE_DURING_DIV | | | Cycles the divider alone is busy.
19 | DELAYED_BYPASS | um | | Bypasses to floating point that were delayed.
21 | L2_ADS | um | | L2 address strobes.
22 | DBUS_BUSY | um | | Cycles the data bus is busy.
23 | DBUS_BUSY_RD | um | | Cycles the data bus carries data from L2 to the core.
24 | L2_LINES_IN | um | scache_dcache_misses scache_icache_misses | Lines brought into L2 (L2 misses).
25 | L2_M_LINES_IN | um | | Modified lines brought into L2.
26 | L2_LINES_OUT | um | scache_dcache_misses scache_icache_misses | Lines leaving L2, for any reason.
27 | L2_M_LINES_OUT | um | scache_writebacks | Modified lines leaving L2.
28 | L2_IFETCH | mesi | icache_misses | Instruction fetches reaching L2.
29 | L2_LD | mesi | dcache_misses | Data loads reaching L2.
2a | L2_ST | mesi | store_exclusive_clean store_exclusive_shared | Data stores reaching L2.
2e | L2_RQSTS | mesi | icache_misses dcache_misses | Requests to L2.
30 | L2_REJECT_CYCLES | mesi | | Cycles L2 turns requests away.
32 | L2_NO_REQUEST_CYCLES | mesi | | Cycles with no request to L2.
3a | EST_TRANS_ALL | | | SpeedStep transitions.
3b | THERMAL_TRIP | edge um | | Time spent in a thermal trip.
3c | CPU_CLK_UNHALTED | um | cycles | Cycles the core is not halted.
40 | DCACHE_LD | mesi | graduated_loads | Cacheable reads of the L1 data cache.
41 | DCACHE_ST | mesi | graduated_stores | Cacheable writes to the L1 data cache.
42 | DCACHE_LOCK | mesi | | Locked reads of the L1 data cache.
43 | DATA_MEM_REF | um | graduated_loads graduated_stores | Every reference to the L1 data cache.
44 | DATA_MEM_CACHE_REF | um | graduated_loads graduated_stores | Cacheable references to the L1 data cache.
45 | DCACHE_REPL | um | dcache_misses | Lines brought into the L1 data cache.
46 | DCACHE_M_REPL | | | Modified lines brought into the L1 data cache.
47 | DCACHE_M_EVICT | | dcache_writebacks | Modified lines evicted from the L1 data cache.
48 | DCACHE_PEND_MISS | | | L1 data misses outstanding, summed over cycles.
49 | DTLB_MISS | um | tlb_misses | Data references that missed the TLB.
4b | SSE_PRE_MISS | | | Cache misses of non-temporal prefetches.
4c | LOAD_HIT_PRE | | | Loads that collided with a software prefetch.
4e | L1D_PREFETCH | um | prefetch_instructions | Prefetch requests to the L1 data cache.
4f | L1_PREF_REQ | | prefetch_dcache_misses | L1 prefetch requests caused by misses.
60 | BUS_REQ_OUTSTANDING | a um | | Bus requests outstanding, summed over cycles.
61 | BUS_BNR_DRV | a | | Bus cycles this processor drives BNR.
62 | BUS_DRDY_CLOCKS | a | | Bus cycles with DRDY asserted.
63 | BUS_LOCK_CLOCKS | a um | | Bus cycles with LOCK asserted.
64 | BUS_DATA_RCV | um | | Bus cycles this processor receives data.
65 | BUS_TRAN_BRD | a um | scache_dcache_misses | Burst read bus transactions.
66 | BUS_TRAN_RFO | a um | | Read-for-ownership bus transactions.
67 | BUS_TRANS_WB | a um | scache_writebacks | Write-back bus transactions.
68 | BUS_TRAN_IFETCH | a um | scache_icache_misses | Instruction fetch bus transactions.
69 | BUS_TRAN_INVAL | a um | | Invalidate bus transactions.
6a | BUS_TRAN_PWR | a um | | Partial write bus transactions.
6b | BUS_TRANS_P | a um | | Partial bus transactions.
6c | BUS_TRANS_IO | a um | | I/O bus transactions.
6d | BUS_TRAN_DEF | a um | | Deferred bus transactions.
6e | BUS_TRAN_BURST | a um | | Burst bus transactions.
6f | BUS_TRAN_MEM | a um | scache_dcache_misses scache_icache_misses scache_writebacks | Memory bus transactions.
70 | BUS_TRAN_ANY | a um | scache_dcache_misses scache_icache_misses scache_writebacks | Bus transactions of every kind.
77 | BUS_SNOOPS | mesi | | Snoops on the external bus.
78 | DCU_SNOOP_TO_SHARE | um | | L1 data snoops to shared lines caused by misses.
7a | BUS_HIT_DRV | a | | Bus cycles this processor drives HIT.
7b | BUS_HITM_DRV | a | | Bus cycles this processor drives HITM.
7d | BUS_NOT_IN_USE | a | | Cycles the core has no bus transaction.
7e | BUS_SNOOP_STALL | | | Bus cycles stalled by snoops.
7f | BUS_IO_WAIT | um | | Cycles I/O requests wait in the bus queue.
80 | ICACHE_READS | | | Instruction fetches.
81 | ICACHE_MISSES | | icache_misses | Instruction fetches that missed.
82 | ITLB_MISS | um | | Instruction TLB misses.
83 | INSQ_QUEUE | um | | Cycles the instruction queue is full.
85 | ITLB_MISSES | um | | Instruction TLB misses.
86 | IFU_MEM_STALL | | | Cycles instruction fetch is stalled.
87 | ILD_STALL | | | Cycles the instruction length decoder is stalled.
88 | BR_INST_EXEC | | resolved_branches | Branches executed.
89 | BR_MISSP_EXEC | | mispredicted_branches | Mispredicted branches executed.
8a | BR_BAC_MISSP_EXEC | | | Branches mispredicted at decode.
8b | BR_CND_EXEC | | conditional_branches | Conditional branches executed.
8c | BR_CND_MISSP_EXEC | | mispredicted_conditional_branches | Mispredicted conditional branches executed.
8d | BR_IND_EXEC | | | Indirect branches executed.
8e | BR_IND_MISSP_EXEC | | | Mispredicted indirect branches executed.
8f | BR_RET_EXEC | | | Returns executed.
90 | BR_RET_MISSP_EXEC | | | Mispredicted returns executed.
91 | BR_RET_BAC_MISSP_EXEC | | | Returns mispredicted at decode.
92 | BR_CALL_EXEC | | | Calls executed.
93 | BR_CALL_MISSP_EXEC | | | Mispredicted calls executed.
94 | BR_IND_CALL_EXEC | | | Indirect calls executed.
97 | BR_TKN_BUBBLE_1 | | | Taken branches predicted with a one-cycle bubble.
98 | BR_TKN_BUBBLE_2 | | | Taken branches predicted with a two-cycle bubble.
a0 | RS_UOPS_DISPATCHED | | | Micro-ops dispatched.
a1 | RS_UOPS_DISPATCHED | um | | Cycles in which micro-ops were dispatched.
a2 | RESOURCE_STALL | | | Cycles with a resource-related stall.
aa | MACRO_INSTS | um | decoded_instructions | Instructions decoded, retired or not.
ab | ESP | um | | Stack pointer register operations.
b0 | SIMD_UOPS_EXEC | | | SIMD micro-ops executed, stores excluded.
b1 | SIMD_SAT_UOP_EXEC | | | Saturating SIMD micro-ops executed.
b3 | SIMD_INT | um | | SIMD integer instructions executed.
c0 | INST_RET | | graduated_instructions | Instructions retired.
c1 | FP_COMP_INSTR_RET | | graduated_fp_instructions | Floating-point computational operations retired.
c2 | UOPS_RET | | | Micro-ops retired.
c3 | SMC_DETECTED | | | Self-modifying code detected.
c4 | BR_INST_RET | | resolved_branches | Branches retired.
c5 | BR_MISPRED_RET | | mispredicted_branches | Mispredicted branches retired.
c6 | CYCLES_INT_MASKED | | | Cycles with interrupts disabled.
c7 | CYCLES_INT_PENDING_MASKED | | | Cycles with interrupts disabled and pending.
c8 | HW_INT_RX | | | Hardware interrupts received.
c9 | BR_TAKEN_RET | | taken_branches | Taken branches retired.
ca | BR_MISPRED_TAKEN_RET | | mispredicted_taken_branches | Taken mispredicted branches retired.
cb | MEM_LOAD_RETIRED | | dcache_misses | Retired loads that missed the L1 data cache.
cc | MMX_FP_TRANS | | | Switches between MMX and x87.
cd | MMX_ASSIST | | | EMMS instructions executed.
ce | MMX_INSTR_RET | | | MMX instructions retired.
cf | MMX_SAT_INSTR_RET | | | Saturating MMX instructions retired.
d0 | INSTR_DECODED | | decoded_instructions | Instructions decoded.
d2 | RAT_STALLS | um | | Partial register stalls.
d4 | SEG_RENAME_STALLS | um | | Stalls for want of segment renaming resources.
d5 | SEG_REG_RENAMES | um | | Segment register renames.
d7 | ESP_UOPS | | | Stack pointer folding instructions decoded.
d8 | SIMD_FD_RET | | | SSE and SSE2 instructions retired.
d9 | SIMD_FP_COM_RET | | | SSE and SSE2 computational instructions retired.
da | FUSED_UOPS_RET | | | Fused micro-ops retired.
db | UNFUSION | | | Unfusions in the reorder buffer.
dc | RESOURCE_STALLS | um | | Cycles the pipeline is full of instructions waiting to retire.
e0 | BR_INST_DECODED | | decoded_branches | Branches decoded.
e2 | BTB_MISSES | | | Branches the BTB gave no prediction for.
e4 | BOGUS_BR | | | Byte sequences wrongly taken for taken branches.
e6 | BACLEARS | | | Front-end resteers (BACLEAR).
f0 | PREF_RQSTS_UP | | | Upward hardware prefetches to L2.
f8 | PREF_RQSTS_DN | | | Downward hardware prefetches to L2.
""")

# Core 2's BR_INST_RETIRED (0xC4; Intel SDM vol. 3B, Core 2 events): a unit
# mask of 0 counts every retired branch, else the outcomes its bits select -
# predicted not taken, mispredicted not taken, predicted taken, mispredicted
# taken (0xC: taken).  pctr(1) lists the code only.
_INTEL = tuple(
    replace(event, parts=(
        (0x1, _k("resolved_branches", "-taken_branches", "-mispredicted_branches", "mispredicted_taken_branches")),
        (0x2, _k("mispredicted_branches", "-mispredicted_taken_branches")),
        (0x4, _k("taken_branches", "-mispredicted_taken_branches")),
        (0x8, _k("mispredicted_taken_branches")),
    )) if event.code == 0xC4 else event
    for event in _INTEL
)  # fmt: skip

# Core 2's fixed-function counters (Intel SDM vol. 3B 18.4.1; perfctr 2.6 x86.c
# maps FIXED_CTR n to pmc_map 0x40000000 + n).  The reference clock runs at
# the core clock: the emulated CPU never changes its frequency.
_INTEL_FIXED = (
    ModelEvent(0xC0, "INST_RETIRED.ANY", "Instructions retired (fixed-function counter 0).",
               _k("graduated_instructions")),
    ModelEvent(0x3C, "CPU_CLK_UNHALTED.CORE", "Core cycles not halted (fixed-function counter 1).", _k("cycles")),
    ModelEvent(0x13C, "CPU_CLK_UNHALTED.REF", "Reference cycles not halted (fixed-function counter 2).",
               _k("cycles")),
)  # fmt: skip

# -- AMD: pctr(1)'s "amdfn" table, all of its codes and names -----------------------

_AMD = _rows("""
00 | Dispatched FPU operations | | graduated_fp_instructions | Floating-point operations dispatched.
01 | Cycles with no FPU ops retired | | | Cycles in which no floating-point operation retired.
02 | Dispatched fast flag FPU operations | | | Fast-flag floating-point operations dispatched.
20 | Segment register loads | | | Loads of a segment register.
21 | Pipeline restart due to self-modifying code | | | Restarts for self-modifying code.
22 | Pipeline restart due to probe hit | | | Restarts for a probe hit.
23 | LS2 buffer is full | | | Cycles the LS2 buffer is full.
24 | Locked operations | | | Locked operations.
26 | Retired CFLUSH instructions | | | CLFLUSH instructions retired.
27 | Retired CPUID instructions | | | CPUID instructions retired.
40 | Data cache accesses | | graduated_loads graduated_stores | Data cache accesses.
41 | Data cache misses | | dcache_misses | Data cache misses.
42 | Data cache refills from L2 or system | | dcache_misses | Data cache refills.
43 | Data cache refills from system | | scache_dcache_misses | Data cache refills from memory.
44 | Data cache lines evicted | | dcache_writebacks | Data cache lines evicted.
45 | L1 DTLB miss and L2 DTLB hit | | | First-level data TLB misses that hit the second level.
46 | L1 DTLB miss and L2 DTLB miss | | tlb_misses | Data TLB misses in both levels.
47 | Misaligned access | | | Misaligned data accesses.
48 | Microarchitectural late cancel of an access | | | Accesses cancelled late.
49 | Microarchitectural early cancel of an access | | | Accesses cancelled early.
4a | Single bit ECC errors recorded by scrubber | | | Single-bit ECC errors the scrubber found.
4b | Prefetch instructions dispatched | | prefetch_instructions | Prefetch instructions dispatched.
4c | DCACHE misses by locked instructions | | | Data cache misses of locked instructions.
65 | Memory requests by type | | | Memory requests, by type.
67 | Data prefetcher | | prefetch_dcache_misses | Hardware data prefetches.
6c | System read responses by coherency state | | | Read responses from the system, by state.
6d | Quadwords written to system | | scache_writebacks | Quadwords written to the system.
76 | CPU clocks not halted | | cycles | Cycles the processor is not halted.
7d | Requests to L2 cache | | dcache_misses icache_misses | Requests to the L2 cache.
7e | L2 cache misses | | scache_dcache_misses scache_icache_misses | L2 cache misses.
7f | L2 cache fill/writeback | | scache_writebacks | L2 cache fills and writebacks.
80 | ICACHE fetches | | | Instruction cache fetches.
81 | ICACHE misses | | icache_misses | Instruction cache misses.
82 | ICACHE refills from L2 | | icache_misses -scache_icache_misses | Instruction cache refills from L2.
83 | ICACHE refills from system | | scache_icache_misses | Instruction cache refills from memory.
84 | L1 ITLB miss and L2 ITLB hit | | | First-level instruction TLB misses that hit the second level.
85 | L1 ITLB miss and L2 ITLB miss | | | Instruction TLB misses in both levels.
86 | Pipeline restart due to instruction stream probe | | | Restarts for an instruction-stream probe.
87 | Instruction fetch stall | | | Cycles instruction fetch is stalled.
88 | Return stack hits | | | Return stack hits.
89 | Return stack overflows | | | Return stack overflows.
c0 | Retired instructions | | graduated_instructions | Instructions retired.
c1 | Retired microops | | | Micro-ops retired.
c2 | Retired branch instructions | | resolved_branches | Branches retired.
c3 | Retired mispredicted branch instructions | | mispredicted_branches | Mispredicted branches retired.
c4 | Retired taken branch instructions | | taken_branches | Taken branches retired.
c5 | Retired mispredicted taken branch instructions | | mispredicted_taken_branches | Mispredicted taken branches.
c6 | Retired far control transfers | | | Far control transfers retired.
c7 | Retired branch resyncs | | | Branch resyncs retired.
c8 | Retired near returns | | | Near returns retired.
c9 | Retired mispredicted near returns | | | Mispredicted near returns retired.
ca | Retired mispredicted indirect brnaches | | | Mispredicted indirect branches retired.
cb | Retired MMX/FP instructions | | graduated_fp_instructions | MMX and floating-point instructions retired.
cc | Retired fastpath double op instructions | | | Fast-path double-op instructions retired.
cd | Interrupts-masked cycles | | | Cycles with interrupts masked.
ce | Interrupts-masked cycles with interrupts pending | | | Cycles with interrupts masked and pending.
cf | Interrupts taken | | | Interrupts taken.
d0 | Decoder empty | | | Cycles the decoder is empty.
d1 | Dispatch stalls | | | Dispatch stall cycles.
d2 | Dispatch stalls for branch abort retire | | | Dispatch stalls while a branch abort retires.
d3 | Dispatch stalls for serialisation | | | Dispatch stalls for serialisation.
d4 | Dispatch stalls for segment load | | | Dispatch stalls for a segment load.
d5 | Dispatch stalls for reoder buffer full | | | Dispatch stalls with the reorder buffer full.
d6 | Dispatch stalls for reservation station full | | | Dispatch stalls with the reservation stations full.
d7 | Dispatch stalls for FPU full | | | Dispatch stalls with the FPU full.
d8 | Dispatch stalls for LS full | | | Dispatch stalls with the load/store unit full.
d9 | Dispatch stalls waiting for all quite | | | Dispatch stalls waiting for all to go quiet.
da | Dispatch stalls for far transfer or resync to retire | | | Dispatch stalls while a far transfer or resync retires.
db | FPU exceptions | | | Floating-point exceptions.
dc | DR0 breakpoint matches | | | Matches of debug register 0.
dd | DR1 breakpoint matches | | | Matches of debug register 1.
de | DR2 breakpoint matches | | | Matches of debug register 2.
df | DR3 breakpoint matches | | | Matches of debug register 3.
e0 | DRAM accesses | | scache_dcache_misses scache_icache_misses | DRAM accesses.
e1 | Memory controller page tables overflow | | | Memory controller page table overflows.
e3 | Memory controller turnarounds | | | Memory controller turnarounds.
e4 | Memory controller bypass counter saturation | | | Memory controller bypass counter saturations.
e5 | Sized blocks | | | Sized blocks.
e8 | ECC errors | | | ECC errors.
e9 | CPU/IO requests to memory/IO | | | CPU and I/O requests to memory and I/O.
ea | Cache blocks commands | | | Cache block commands.
eb | Sized commands | | | Sized commands.
ec | Probe responses and upstream requests | | | Probe responses and upstream requests.
ee | GART events | | | GART events.
f6 | HT link 0 transmit bandwidth | | | HyperTransport link 0 transmit bandwidth.
f7 | HT link 1 transmit bandwidth | | | HyperTransport link 1 transmit bandwidth.
f8 | HT link 2 transmit bandwidth | | | HyperTransport link 2 transmit bandwidth.
""")

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
        # pctr(4): "Intel processors have two 40-bit performance counters";
        # a Core 2 (family 6 model 15, Merom/Conroe) adds three 40-bit
        # fixed-function ones.
        "intel": CpuModel("intel", "Intel Core 2 (2 general, 3 fixed-function counters)", "amd64",
                          "GenuineIntel", 2400, 2, 40, 40, "x86", _INTEL, fixed=_INTEL_FIXED, cpuid=(6, 15, 6)),
        # pctr(4): "AMD processors have four 48-bit counters, their precision
        # is decreased to 40 bits".  Family 15 model 5 stepping 1 (an Opteron
        # of revision B): perfctr 2.6 calls it PERFCTR_X86_AMD_K8, not K8C.
        "amd": CpuModel("amd", "AMD Athlon 64 / Opteron (K8)", "amd64", "AuthenticAMD", 2200,
                        4, 48, 40, "x86", _AMD, cpuid=(15, 5, 1)),
        # us234_pcbe.c: UltraSPARC I&II raise no overflow interrupt (the PCBE
        # clears CPC_CAP_OVERFLOW_INTERRUPT) and cannot tell which PIC overflowed.
        "ultrasparc": CpuModel("ultrasparc", "Sun UltraSPARC II (2 PICs)", "sparc64", "Sun", 400,
                               2, 32, 32, "sparc", _SPARC, overflow_interrupt=False,
                               overflow_identified=False),
    }
)

__all__ = ["ANY_COUNTER", "ANY_INITIATOR", "EDGE", "MESI", "MODELS", "UNIT_MASK", "CpuModel", "ModelEvent"]
