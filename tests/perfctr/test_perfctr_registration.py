"""What a thread's registration costs the daemon (PAPI registers every
thread it meets: vperfctr_open, a TSC-only control, vperfctr_unlink,
vperfctr_close, at each OpenMP parallel region of PAPI's omptough): no
state page until the thread reads its counters, and no new thread-event
filter each time a process's threads come and go."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.perfctr.test_perfctr_pages import finish, step
from tests.perfctr.test_perfctr_programs import start, until


def filter_sets(mount) -> int:
    text = (mount.path / "control").read_text()
    found = re.search(r"thread events let through for \d+ processes, the filter set (\d+) times", text)
    assert found, text
    return int(found[1])


def files(folder: Path) -> set[str]:
    return {entry.name for entry in os.scandir(folder) if entry.is_file()}


def test_a_thread_gets_its_page_at_its_first_read_not_at_vperfctr_open(intel, perfctr_programs):
    first = start(intel, perfctr_programs["register"])
    until(first, "ready")
    assert step(first, "open", "open") == "opened\n"
    path = Path(step(first, "read", "read").split("path=", 1)[1].strip())
    assert path.exists()
    folder = path.parent  # the mount's pages
    second = start(intel, perfctr_programs["register"])
    try:
        until(second, "ready")
        before = files(folder)
        assert step(second, "open", "open") == "opened\n"
        made = files(folder) - before
        assert not made, f"vperfctr_open and a control made pages {made} for a thread that has not read"
        read = step(second, "read", "read")
        assert "path=" in read, read
        own = Path(read.split("path=", 1)[1].strip())
        assert own.parent == folder and own.name not in before and own.exists()
        assert int(re.search(r"tsc=(\d+)", read)[1]) >= 0
    finally:
        second.stdin.close()
        finish(second)
        first.stdin.close()
        finish(first)


@pytest.mark.parametrize("how", ["loop 200", "threads 60"])
def test_threads_registering_one_after_another_do_not_reset_the_thread_filter_each_time(
    intel, perfctr_programs, how
):
    proc = start(intel, perfctr_programs["register"])
    until(proc, "ready")
    before = filter_sets(intel)
    n = int(how.split()[1])
    answer = step(proc, how, "looped" if how.startswith("loop") else "threaded")
    assert answer.split()[1] == str(n), answer
    assert "error=" not in answer or "error=0" in answer, answer
    set_times = filter_sets(intel) - before
    # Each registration took the process into the filter and its unlink took
    # it out: twice a registration, until processes left the filter lazily.
    assert set_times <= 3, f"{n} registrations set the thread filter {set_times} times"
    proc.stdin.close()
    finish(proc)
