"""lib/state.c, the state page reader the libraries share, under signals."""

from __future__ import annotations

import subprocess

from tests.conftest import ROOT

HERE = ROOT / "tests" / "procfs"


def test_a_dead_page_is_never_unmapped_under_a_read_a_signal_handler_interrupted(tmp_path):
    """A library's overflow handler samples its counters (cpc_set_sample from
    SIGEMT, PAPI's vperfctr read from SIGIO) while the thread it interrupted
    may be reading the same page; after a daemon restart that page is dead,
    and the handler's read must not unmap it under the interrupted one."""
    program = tmp_path / "state_reader_signals"
    subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'include'}", "-o", str(program),
                    str(HERE / "state_reader_signals.c"), str(ROOT / "lib" / "state.c"), "-pthread"],
                   check=True)  # fmt: skip
    done = subprocess.run([str(program), "3"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    trials, in_handler = (int(word) for word in done.stdout.split()[1::2])
    assert trials > 1000 and in_handler > 0, done.stdout  # the handler did meet dead pages
