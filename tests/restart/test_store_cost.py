"""What the set-up store does for a call grows with what the call changed,
not with what its process holds (docs/restart.md, "When"): a process whose
threads each hold a vperfctr (PAPI's pthrtough2 has 2 000) changes two of
them, and each call writes one record and compares the few it may have
changed, whether the process has 2 threads or 300."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import Mount
from tests.restart.test_personalities import INTEL
from tests.restart.test_restart import TIMEOUT, build_with_libraries, daemon, go, line, start_program  # noqa: F401

CALLS = 40  # control changes by each of two threads


@pytest.fixture(scope="session")
def vperfctr_threads(shared_tmp) -> Path:
    return build_with_libraries(shared_tmp, "vperfctr_threads", "libperfctr")


def store_figures(mount: Mount) -> tuple[int, int]:
    """(records written, thread records compared) since the daemon started."""
    text = (mount.path / "control").read_text()
    found = re.search(r"set-up store: \d+ writes of (\d+) records, (\d+) thread records compared", text)
    assert found, text
    return int(found[1]), int(found[2])


@pytest.mark.parametrize("threads", [2, 300])
def test_a_call_writes_its_own_record_and_compares_a_few_however_many_threads_count(
    daemon, vperfctr_threads, threads  # noqa: F811
):
    d = daemon(*INTEL)
    began = store_figures(d.mount)
    program = start_program(vperfctr_threads, d.mount, str(threads), str(CALLS))
    try:
        line(program, "ready", timeout=TIMEOUT * 2)
        before = store_figures(d.mount)
        go(program)
        line(program, "done")
        after = store_figures(d.mount)
        go(program)
        assert program.wait(timeout=TIMEOUT) == 0
    finally:
        if program.poll() is None:
            program.kill()
            program.wait()
    written, compared = after[0] - before[0], after[1] - before[1]
    opened = before[1] - began[1]
    print(f"\n{threads} threads: opening compared {opened}; {2 * CALLS} calls wrote {written} records, compared {compared}")
    assert opened <= 8 * (threads + 1)  # each thread's opening calls look at its own record, not all so far
    assert written == 2 * CALLS  # each call changed its vperfctr's control: one record, written once
    assert compared <= 3 * 2 * CALLS  # its own, and what else a call may touch; never every thread's
