"""Event selection: numbers and names, counters, conflicts, slots (no mount needed)."""

import pytest

import structs
from hwperfd.perfex import plan
from hwperfd.perfex.cli import UsageError, parse_args

U = structs.HWPERF_CNTEN_U


def placed(p):
    return [(e.number, e.slot, e.hwp_ev) for e in p.events]


def test_default_is_cycles_alone():
    assert placed(plan.choose([], "r10000")) == [(0, 0, 0)]
    assert placed(plan.choose([], "r12000")) == [(0, 0, 0)]


def test_r10000_events_sit_in_their_own_slot_and_a_free_counter_counts_cycles():
    assert placed(plan.choose([25], "r10000")) == [(0, 0, 0), (25, 25, 9)]
    assert placed(plan.choose([9], "r10000")) == [(9, 9, 9), (16, 16, 0)]
    assert placed(plan.choose([26, 10], "r10000")) == [(10, 10, 10), (26, 26, 10)]


def test_r10000_same_counter_is_a_conflicting_counters_error():
    with pytest.raises(plan.ConflictingCounters, match="conflicting counters: events 9 .* and 10 .*counter 0"):
        plan.choose([9, 10], "r10000")
    with pytest.raises(plan.ConflictingCounters, match="counter 1"):
        plan.choose([25, 26], "r10000")


def test_r10000_cycles_and_graduated_instructions_move_to_the_other_counter():
    # IRIX perfex's remapping: 0 <-> 16 and 15 <-> 17 exist on both counters.
    assert placed(plan.choose([0, 9], "r10000")) == [(9, 9, 9), (16, 16, 0)]
    assert placed(plan.choose([25, 17], "r10000")) == [(15, 15, 15), (25, 25, 9)]
    assert placed(plan.choose([0, 15], "r10000")) == [(15, 15, 15), (16, 16, 0)]


def test_r12000_counts_any_event_on_either_counter():
    # Counter 1 (slots 16-31) counts event (hwp_ev + 16) mod 32.
    assert placed(plan.choose([9, 10], "r12000")) == [(9, 9, 9), (10, 26, 26)]
    assert placed(plan.choose([25, 26], "r12000")) == [(25, 9, 25), (26, 26, 10)]
    assert placed(plan.choose([21], "r12000")) == [(0, 16, 16), (21, 5, 21)]


def test_more_than_two_events_is_refused_and_duplicates_count_once():
    with pytest.raises(plan.EventError, match="at most two"):
        plan.choose([0, 25, 26], "r10000")
    assert placed(plan.choose([25, 25], "r10000")) == [(0, 0, 0), (25, 25, 9)]


def test_names_as_in_the_page_in_any_spelling_and_macros():
    assert plan.parse_event("26", "r10000") == 26
    assert plan.parse_event("Secondary data cache misses", "r10000") == 26
    assert plan.parse_event("secondary-data-cache-misses", "r10000") == 26
    assert plan.parse_event("SECONDARY_DATA_CACHE_MISSES", "r10000") == 26
    assert plan.parse_event("HWPERF_C0PRFCNT1_SDCMISS", "r10000") == 26
    assert plan.parse_event("cycles", "r10000") == 0
    assert plan.parse_event("Executed prefetch instructions", "r12000") == 16
    with pytest.raises(plan.EventError, match="outside 0..31"):
        plan.parse_event("32", "r10000")
    with pytest.raises(plan.EventError, match="unknown event"):
        plan.parse_event("Executed prefetch instructions", "r10000")


def test_environment_events_t5_event0_and_t5_event1():
    assert plan.environment_events({"T5_EVENT0": "25", "T5_EVENT1": "9"}) == ["25", "9"]
    assert plan.environment_events({"T5EVENT1": "21"}) == ["21"]  # the page's typeset spelling
    assert plan.environment_events({}) == []


def test_all_events_multiplex_sixteen_per_counter():
    r10k = plan.all_events("r10000")
    assert [(e.slot, e.hwp_ev) for e in r10k.events] == [(i, i % 16) for i in range(32)]
    assert r10k.multiplexed and r10k.slots_on_counter(0) == r10k.slots_on_counter(1) == 16
    r12k = plan.all_events("r12000")
    assert [(e.slot, e.hwp_ev) for e in r12k.events] == [(i, i % 16) for i in range(32)]


def test_exception_level_mode_is_in_every_slot():
    p = plan.choose([25], "r10000", U | structs.HWPERF_CNTEN_E)
    assert p.specs() == {0: structs.spec_word(0, 0x9), 25: structs.spec_word(9, 0x9)}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["-s", "-mp", "x"], "-s and -mp cannot be combined"),
        (["-mp", "-s", "x"], "-s and -mp cannot be combined"),
        (["--json", "--csv", "x"], "--json and --csv"),
        (["-c", "f", "x"], "give -y"),
        (["-l", "8", "x"], "give -y"),
        (["-y", "-l", "-1", "x"], "0 or a positive"),
        (["-r", "0", "x"], "at least 1"),
        (["-e"], "needs an argument"),
        (["-q", "x"], "unknown option"),
        ([], "no command"),
    ],
)
def test_usage_errors(argv, message):
    with pytest.raises(UsageError, match=message):
        parse_args(argv)


def test_options_stop_at_the_command():
    opts = parse_args(["-e", "25", "-x", "-o", "out", "cmd", "-e", "9", "--json"])
    assert opts.events == ["25"] and opts.exception_level and opts.output == "out"
    assert opts.command == ["cmd", "-e", "9", "--json"]
    assert parse_args(["-e26", "--", "-weird"]).command == ["-weird"]
    assert parse_args(["--repeat=3", "--event=cycles", "c"]).repeat == 3


# perfex(1)'s event table, as the page prints it.
PAGE_NAMES = [
    "Cycles", "Issued instructions", "Issued loads", "Issued stores", "Issued store conditionals",
    "Failed store conditionals", "Decoded branches", "Quadwords written back from scache",
    "Correctable scache data array ECC errors", "Primary instruction cache misses",
    "Secondary instruction cache misses", "Instruction misprediction from scache way prediction table",
    "External interventions", "External invalidations", "Virtual coherency conditions",
    "Graduated instructions", "Cycles", "Graduated instructions", "Graduated loads", "Graduated stores",
    "Graduated store conditionals", "Graduated floating point instructions",
    "Quadwords written back from primary data cache", "TLB misses", "Mispredicted branches",
    "Primary data cache misses", "Secondary data cache misses",
    "Data misprediction from scache way prediction table", "External intervention hits in scache",
    "External invalidation hits in scache", "Store/prefetch exclusive to clean block in scache",
    "Store/prefetch exclusive to shared block in scache",
]  # fmt: skip


def test_every_event_name_perfex_1_prints_is_accepted_by_e():
    from hwperfd.perfex.plan import parse_event

    twins = {16: 0, 17: 15}  # the page names both counters' cycles and graduated instructions alike
    for number, name in enumerate(PAGE_NAMES):
        assert parse_event(name, "r10000") == twins.get(number, number), name
        assert parse_event(name.upper().replace(" ", "_"), "r10000") == twins.get(number, number)
