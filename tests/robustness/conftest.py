"""Robustness fixtures: dedicated mounts (destructive tests never touch the
session's mount), the C fuzzer, and the figures printed at the end."""

from __future__ import annotations

import pytest

from tests.conftest import build_c
from tests.robustness.helpers import HERE, REPORTS


@pytest.fixture(scope="session")
def raw_fuzz(shared_tmp):
    """tests/robustness/raw_fuzz.c, built where an unprivileged user can run it."""
    return build_c(HERE / "raw_fuzz.c", shared_tmp / "raw_fuzz")


def pytest_terminal_summary(terminalreporter):
    if REPORTS:
        terminalreporter.section("hwperfd robustness figures")
        for figures in REPORTS:
            terminalreporter.write_line(figures.report())
