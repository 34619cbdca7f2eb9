"""The cost table as data: -t output, -c / /etc/perfex.costs parsing, statistics by hand."""

import math

import pytest

from hwperfd.perfex import costs, stats
from hwperfd.perfex.costs import CLKS, NSEC, Cost, CostFileError, EventCost


@pytest.mark.parametrize("cpu", ["r10000", "r12000"])
def test_the_table_covers_every_event_with_ordered_costs(cpu):
    table = costs.CostTable.builtin(cpu)
    assert len(table.costs) == 32
    mhz = 200.0
    for cost in table.costs:
        low, mid, high = (cost.column(c).clocks(mhz) for c in ("minimum", "typical", "maximum"))
        assert 0 <= low <= mid <= high
    # perfex(1): cycles cost a cycle; summary events 0/0/1; FP from 0.5 (two a cycle).
    assert table[0] == EventCost(Cost(1), Cost(1), Cost(1))
    assert table[15] == EventCost(Cost(0), Cost(0), Cost(1))
    assert table[21].minimum == Cost(0.5)
    assert table[26].typical.unit == NSEC


@pytest.mark.parametrize("cpu", ["r10000", "r12000"])
def test_what_t_prints_is_what_c_reads(cpu):
    table = costs.CostTable.builtin(cpu)
    assert costs.parse(table.format(), cpu) == dict(enumerate(table.costs))


def test_t_format_is_one_line_per_event_typical_minimum_maximum():
    lines = costs.CostTable.builtin("r10000").format().splitlines()
    rows = [line for line in lines if not line.startswith("#")]
    assert len(rows) == 32
    assert rows[26] == (
        "26 Secondary data cache misses................................."
        "     380.00 nsec     250.00 nsec     420.00 nsec"
    )


def test_a_subset_overrides_in_either_unit_with_or_without_names():
    text = """
    # my machine
    25 Primary data cache misses....  10 clks  3 clks  12 clks
    26  500 nsec 300 ns 600 NSEC
    TLB misses   70 clk 70 cycles 90 clocks
    """
    parsed = costs.parse(text, "r10000", "my.costs")
    assert parsed == {
        25: EventCost(Cost(3), Cost(10), Cost(12)),
        26: EventCost(Cost(300, NSEC), Cost(500, NSEC), Cost(600, NSEC)),
        23: EventCost(Cost(70), Cost(70), Cost(90)),
    }


@pytest.mark.parametrize(
    "line, message",
    [
        ("25 Primary data cache misses 10 clks 3 clks", "expected an event"),
        ("25 Primary data cache misses 10 clks 3 parsecs 12 clks", "unit 'parsecs'"),
        ("25 Primary data cache misses ten clks 3 clks 12 clks", "cost 'ten' is not a number"),
        ("25 Primary data cache misses -1 clks 3 clks 12 clks", "non-negative"),
        ("25 Primary data cache misses nan clks 3 clks 12 clks", "non-negative"),
        ("40 Primary data cache misses 1 clks 3 clks 12 clks", "outside 0..31"),
        ("25 Secondary data cache misses 1 clks 3 clks 12 clks", "event 25 is 'Primary data cache misses'"),
        ("Cycles 1 clks 1 clks 1 clks", "give the event number"),
        ("Executed prefetch instructions 1 clks 1 clks 1 clks", "not an event of the MIPS R10000"),
    ],
)
def test_bad_lines_name_file_and_line(line, message):
    with pytest.raises(CostFileError, match=f"^bad.costs:3: .*{message}"):
        costs.parse(f"# ok\n0 Cycles 1 clks 1 clks 1 clks\n{line}\n", "r10000", "bad.costs")


def test_c_file_overrides_the_system_file_which_overrides_the_builtin(tmp_path):
    system = tmp_path / "perfex.costs"
    system.write_text("25 20 clks 20 clks 20 clks\n26 1 nsec 1 nsec 1 nsec\n")
    user = tmp_path / "mine"
    user.write_text("26 2 clks 2 clks 2 clks\n")
    table = costs.load("r10000", user, system_file=system)
    assert table[25].typical == Cost(20) and table[26].typical == Cost(2)
    assert table[24] == costs.BUILTIN["r10000"][24]
    assert table.sources == (str(system), str(user))
    assert costs.load("r10000", system_file=tmp_path / "absent").sources == ()
    with pytest.raises(CostFileError, match="does not exist"):
        costs.load("r10000", tmp_path / "nope", system_file=system)


def test_the_system_file_is_etc_perfex_costs_unless_perfex_costs_says():
    from pathlib import Path

    assert costs.system_costs_path({}) == Path("/etc/perfex.costs")
    assert costs.system_costs_path({"PERFEX_COSTS": "/x/y"}) == Path("/x/y")


def test_seconds_and_clocks_at_a_clock_rate():
    assert Cost(380, NSEC).clocks(200) == 76
    assert Cost(380, NSEC).seconds(200) == pytest.approx(380e-9)
    assert Cost(9, CLKS).seconds(200) == pytest.approx(45e-9)


def test_statistics_from_hand_computed_counts():
    """perfex(1)'s definitions, on counts chosen to give round answers."""
    table = costs.CostTable.builtin("r10000")
    c = {0: 1_000_000, 15: 800_000, 18: 200_000, 19: 100_000, 21: 50_000, 22: 10_000,
         23: 1_000, 25: 20_000, 26: 2_000, 7: 500, 24: 300, 6: 3_000, 2: 250_000, 3: 125_000,
         27: 900, 9: 1_000, 10: 200, 11: 40}  # fmt: skip
    got = {s.name: s.value for s in stats.derive(c, table, 200.0)}
    seconds = 1_000_000 / 200e6  # 5 ms
    expected = {
        "Graduated instructions/cycle": 0.8,
        "Graduated floating point instructions/cycle": 0.05,
        "Graduated loads & stores/cycle": 0.3,
        "Graduated loads & stores/floating point instruction": 6.0,
        "Mispredicted branches/Decoded branches": 0.1,
        "Graduated loads/Issued loads": 0.8,
        "Graduated stores/Issued stores": 0.8,
        "Data mispredict/Data scache hits": 900 / 2_000,  # the page: 27 / 26, not 27 / (25 - 26)
        "Instruction mispredict/Instruction scache hits": 40 / 200,  # 11 / 10
        "L1 Cache Line Reuse": (300_000 - 20_000) / 20_000,  # 14
        "L2 Cache Line Reuse": (20_000 - 2_000) / 2_000,  # 9
        "L1 Data Cache Hit Rate": 1 - 20_000 / 300_000,
        "L2 Data Cache Hit Rate": 0.9,
        # loads, stores 1 clk; L1 miss 9 clks; L2 miss 380 ns = 76 clks; TLB 60 clks
        "Time accessing memory/Total time": (200_000 + 100_000 + 20_000 * 9 + 2_000 * 76 + 1_000 * 60) / 1_000_000,
        "L1--L2 bandwidth used (MB/s, average per process)": (20_000 * 32 + 10_000 * 16) / seconds / 1e6,  # 160
        "Memory bandwidth used (MB/s, average per process)": (2_000 * 128 + 500 * 16) / seconds / 1e6,  # 52.8
        "MFLOPS (average per process)": 10.0,
    }
    assert list(got) == list(expected)  # the page's order
    for name, value in expected.items():
        assert math.isclose(got[name], value, rel_tol=1e-12), name
    assert got["Time accessing memory/Total time"] == pytest.approx(0.692)
    assert got["L1--L2 bandwidth used (MB/s, average per process)"] == pytest.approx(160.0)


def test_a_statistic_needs_all_its_events():
    table = costs.CostTable.builtin("r10000")
    assert [s.name for s in stats.derive({0: 100, 25: 10}, table, 200.0)] == []
    assert [s.name for s in stats.derive({16: 100, 17: 50}, table, 200.0)] == ["Graduated instructions/cycle"]
    assert stats.derive({0: 0, 15: 5}, table, 200.0) == []  # no cycles, no ratio


def test_load_quantum_gives_data_reuse():
    table = costs.CostTable.builtin("r10000")
    got = {s.name: s.value for s in stats.derive({18: 300, 19: 100, 25: 50, 26: 5}, table, 200.0, reuse_bytes=8)}
    assert got["L1 Data Reuse"] == pytest.approx(400 * 8 / (50 * 32) - 1)  # 1.0
    assert got["L2 Data Reuse"] == pytest.approx(50 * 32 / (5 * 128) - 1)  # 1.5
    assert "L1 Cache Line Reuse" not in got


def test_r12000_names_and_statistics():
    table = costs.CostTable.builtin("r12000")
    got = {s.name: s.value for s in stats.derive({0: 1000, 16: 400, 17: 100, 4: 250, 24: 5, 6: 50}, table, 300.0)}
    assert got == {
        "Mispredicted branches/Resolved conditional branches": 0.1,
        "Cache misses in flight per cycle (average)": 0.25,
        "Prefetch cache miss rate": 0.25,
    }
