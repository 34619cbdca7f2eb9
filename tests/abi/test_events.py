"""The R10000 / R12000 event tables."""

import pytest

from hwperfd.cpu.events import CPU_EVENTS, KINDS, R10000, R12000, CpuEvents, Event
from hwperfd.cpu.models import MODELS

TABLES = [R10000, R12000]


def test_registry():
    assert CPU_EVENTS == {"r10000": R10000, "r12000": R12000}
    assert R10000.name == "r10000" and R12000.name == "r12000"


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_32_events_numbered_in_order(table):
    assert len(table.events) == 32
    assert [e.number for e in table.events] == list(range(32))
    assert all(isinstance(e, Event) for e in table.events)


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_kinds_in_vocabulary(table):
    for event in table.events:
        assert event.kind in KINDS, event


def test_kinds_vocabulary_is_used_and_unique():
    """Every kind is counted by an IRIX event, or by an x86 one (branch outcomes)."""
    assert len(set(KINDS)) == len(KINDS)
    used = {e.kind for t in TABLES for e in t.events}
    x86 = {kind for name in ("intel", "amd") for e in MODELS[name].events
           for kinds in (e.counts, *(k for _, k in e.parts)) for kind, _ in kinds}  # fmt: skip
    assert used | x86 == set(KINDS)
    assert {k for k in KINDS if k not in used} == {"taken_branches", "mispredicted_taken_branches",
                                                   "conditional_branches", "mispredicted_conditional_branches"}


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_macros_unique_and_well_formed(table):
    macros = [e.macro for e in table.events]
    assert len(set(macros)) == 32
    for event in table.events:
        assert event.macro.isidentifier() and event.macro.isupper()
        assert event.name and event.description
        assert "\n" not in event.description


def test_macro_prefixes():
    for event in R10000.events[:16]:
        assert event.macro.startswith("HWPERF_C0PRFCNT0_")
    for event in R10000.events[16:]:
        assert event.macro.startswith("HWPERF_C0PRFCNT1_")
    for event in R12000.events:
        assert event.macro.startswith("HWPERF_PRFCNT_")


def test_macros_used_by_irix_programs():
    # Names that IRIX-era sources (PAPI, SGI daemons, Dyninst) use.
    assert R10000.by_name("HWPERF_C0PRFCNT0_CYCLES").number == 0
    assert R10000.by_name("HWPERF_C0PRFCNT0_SCDAECC").number == 8
    assert R10000.by_name("HWPERF_C0PRFCNT0_PICMISS").number == 9
    assert R10000.by_name("HWPERF_C0PRFCNT1_PDCMISS").number == 25
    assert R10000.by_name("HWPERF_C0PRFCNT1_SDCMISS").number == 26
    assert R10000.by_name("HWPERF_C0PRFCNT1_BRMISS").number == 24
    assert R12000.by_name("HWPERF_PRFCNT_PDCMISS").number == 25
    assert R12000.by_name("HWPERF_PRFCNT_BRMISS").number == 24


def test_shared_kinds_r10000():
    assert R10000.events[0].kind == R10000.events[16].kind == "cycles"
    assert R10000.events[15].kind == R10000.events[17].kind == "graduated_instructions"
    assert R10000.events[6].kind == "decoded_branches"
    assert R10000.events[14].kind == "fu_completion_cycles"
    assert R10000.events[30].kind == "store_exclusive_clean"


def test_r12000_specific_kinds():
    assert R12000.events[4].kind == "mht_occupancy"
    assert R12000.events[6].kind == "resolved_branches"
    assert R12000.events[14].kind == "fu_completion_cycles"
    assert R12000.events[16].kind == "prefetch_instructions"
    assert R12000.events[17].kind == "prefetch_dcache_misses"
    assert R12000.events[30].kind == "mht_memory_cycles"


def test_notes_differences():
    # r10k_counters(5) NOTES: events whose meaning differs between the CPUs.
    for n in (1, 2, 3, 4, 16, 17, 30):
        assert R10000.events[n].kind != R12000.events[n].kind, n
    for n in (0, 5, 7, 8, 9, 10, 11, 12, 13, 15, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 31):
        assert R10000.events[n].kind == R12000.events[n].kind, n


def test_perfex_names():
    assert R10000.events[0].name == "Cycles"
    assert R10000.events[9].name == "Primary instruction cache misses"
    assert R10000.events[25].name == "Primary data cache misses"
    assert R10000.events[26].name == "Secondary data cache misses"
    assert R10000.events[31].name == "Store/prefetch exclusive to shared block in scache"


def test_r10000_on_counter():
    for ev in range(16):
        assert R10000.on_counter(0, ev) is R10000.events[ev]
        assert R10000.on_counter(1, ev) is R10000.events[16 + ev]
    assert R10000.on_counter(1, 0).name == "Cycles"
    assert R10000.on_counter(1, 0).number == 16
    assert R10000.on_counter(0, 9).number == 9
    assert R10000.on_counter(1, 9).number == 25
    for counter, ev in [(0, 16), (1, 16), (0, 31), (0, -1), (2, 0), (-1, 0)]:
        assert R10000.on_counter(counter, ev) is None


def test_r12000_on_counter():
    """Counter 0 takes R12000 event numbers as they are; counter 1 adds 16
    (mod 32), as IRIX loaded it, so every event is reachable on both."""
    for ev in range(32):
        assert R12000.on_counter(0, ev) is R12000.events[ev]
        assert R12000.on_counter(1, ev) is R12000.events[(ev + 16) % 32]
    assert R12000.on_counter(1, 1).number == 17
    assert R12000.on_counter(1, 17).number == 1
    assert R12000.on_counter(0, 9).number == 9
    for counter, ev in [(0, 32), (1, 32), (1, -1), (2, 5)]:
        assert R12000.on_counter(counter, ev) is None


def test_counters_for():
    for n in range(32):
        assert R10000.counters_for(n) == (n // 16,)
        assert R12000.counters_for(n) == (0, 1)
    assert R10000.counters_for(32) == ()
    assert R12000.counters_for(-1) == ()


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_counters_for_consistent_with_on_counter(table):
    for event in table.events:
        for counter in (0, 1):
            reachable = any(table.on_counter(counter, ev) == event for ev in range(32))
            assert reachable == (counter in table.counters_for(event.number))


def test_by_name():
    assert R10000.by_name("cycles").number == 0  # first of 0 and 16
    assert R10000.by_name("PRIMARY DATA CACHE MISSES").number == 25
    assert R10000.by_name("hwperf_c0prfcnt1_cycles").number == 16
    assert R10000.by_name("Graduated instructions").number == 15
    assert R10000.by_name("HWPERF_C0PRFCNT1_GINSTR").number == 17
    assert R12000.by_name("Prefetch primary data cache misses").number == 17
    assert R12000.by_name("HWPERF_PRFCNT_SPEX").number == 31
    assert R10000.by_name("no such event") is None
    assert R10000.by_name("HWPERF_PRFCNT_CYCLES") is None


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_by_name_finds_every_macro(table):
    for event in table.events:
        assert table.by_name(event.macro) is event
        assert table.by_name(event.name).name == event.name


def test_frozen():
    with pytest.raises(AttributeError):
        R10000.events[0].name = "x"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        R10000.name = "x"  # type: ignore[misc]
    assert isinstance(R10000, CpuEvents)


@pytest.mark.parametrize("table", [R10000, R12000], ids=["r10000", "r12000"])
def test_slot_i_with_hwp_ev_i_mod_16_counts_event_i(table):
    """PAPI and the r10k_counters(5) example write slot i with hwp_ev = i mod 16
    and read event i from hwp_evctr[i], on every CPU type."""
    for slot in range(32):
        assert table.on_counter(slot // 16, slot % 16) is table.events[slot]
    assert R12000.on_counter(1, 5).name == "Graduated floating point instructions"
    assert R12000.on_counter(1, 9).name == "Primary data cache misses"


@pytest.mark.parametrize("table", [R10000, R12000], ids=["r10000", "r12000"])
def test_hwp_ev_inverts_on_counter(table):
    for number in range(32):
        for counter in (0, 1):
            ev = table.hwp_ev(counter, number)
            if counter in table.counters_for(number):
                assert table.on_counter(counter, ev) is table.events[number]
            else:
                assert ev is None
