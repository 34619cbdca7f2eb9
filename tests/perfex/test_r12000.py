"""perfex and libperfex on an emulated R12000: any event on either counter.

The mount runs at 300 MHz, so 1 ms of user time is 300 000 cycles.
"""

import json

from tests.perfex.conftest import counts_of, drive, run_perfex, run_waiting

MS = 300_000


def test_two_events_of_the_same_r10000_counter_count_together(perfex, r12000_mount, programs):
    code, report, _ = drive(perfex, ["-e", "25", "-e", "26"], [programs.waiter], mount=r12000_mount)
    assert code == 0, report
    assert counts_of(report) == {25: 10 * MS // 100, 26: 10 * MS // 1000}


def test_r12000_events_by_their_own_names(perfex, r12000_mount, programs):
    code, report, _ = drive(perfex, ["-e", "Executed prefetch instructions"], [programs.waiter], mount=r12000_mount)
    assert counts_of(report) == {0: 10 * MS, 16: 10 * MS * 2 // 1000}
    assert "16 Executed prefetch instructions" in report


def test_all_events_and_r12000_statistics(perfex, r12000_mount, programs):
    code, report, _ = drive(perfex, ["-a", "-y", "--json"], [programs.waiter], user="160ms", mount=r12000_mount)
    data = json.loads(report)
    counts = {e["event"]: e["count"] for e in data["events"]}
    cycles = 160 * MS
    assert data["cpu"]["type"] == "r12000" and data["cpu"]["mhz"] == 300.0
    assert counts[0] == cycles and counts[4] == cycles * 5 // 100  # MHT occupancy
    assert counts[16] == cycles * 2 // 1000 and counts[17] == cycles * 5 // 10_000
    stats = {s["name"]: s["value"] for s in data["statistics"]}
    assert stats["Graduated instructions/cycle"] == 0.8
    assert stats["Cache misses in flight per cycle (average)"] == 0.05
    assert stats["Prefetch cache miss rate"] == 0.25
    assert stats["Mispredicted branches/Resolved conditional branches"] == (cycles * 6 // 1000) / (cycles * 11 // 100)
    assert stats["MFLOPS (average per process)"] == 15.0  # 0.05 FP per cycle at 300 MHz


def test_list_and_cost_table_follow_the_mounted_cpu(r12000_mount):
    listing = run_perfex(r12000_mount, "--list")
    assert "Events of the MIPS R12000 CPU" in listing.stdout and "0,1" in listing.stdout
    table = run_perfex(r12000_mount, "-t")
    assert "cost table for the MIPS R12000 CPU" in table.stdout


def test_libperfex_counts_25_and_26_together(r12000_mount, programs):
    code, values, err = run_waiting([programs.libperfex_client, 25, 26], r12000_mount, "10ms")
    assert code == 0, err
    assert int(values["c0"]) == 10 * MS // 100 and int(values["c1"]) == 10 * MS // 1000
    assert "Based on 300 MHz MIPS R12000 CPU" in err
    assert "L2 Cache Line Reuse" in err and "L2 Data Cache Hit Rate" in err


def test_scache_mispredict_statistics_follow_the_page_on_the_r12000(perfex, r12000_mount, programs):
    """perfex(1): "Data mispredict/Data scache hits" is "the ratio of the counts"
    of events 27 and 26, printed when those were gathered (the R12000 counts
    them together); likewise 11 and 10 for instructions."""
    for pair, name in (((26, 27), "Data"), ((10, 11), "Instruction")):
        args = ["-y", "--json", "-e", str(pair[0]), "-e", str(pair[1])]
        code, report, _ = drive(perfex, args, [programs.waiter], user="160ms", mount=r12000_mount)
        assert code == 0
        data = json.loads(report)
        counts = {e["event"]: e["count"] for e in data["events"]}
        stats = {s["name"]: s["value"] for s in data["statistics"]}
        assert counts[pair[0]] > 0
        assert stats[f"{name} mispredict/{name} scache hits"] == counts[pair[1]] / counts[pair[0]]
