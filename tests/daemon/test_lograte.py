"""The per-uid log limit on its own, with a clock moved by hand."""

from __future__ import annotations

import logging

from hwperfd import lograte


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def limited(rate: float = 2, burst: int = 3):
    clock, handler = Clock(), Lines()
    handler.addFilter(lograte.PerUserRateLimit(handler, rate=rate, burst=burst, clock=clock))
    logger = logging.Logger("test-lograte")  # noqa: LOG001 - a private one, not in the registry
    logger.addHandler(handler)
    return clock, handler, logger


def log_as(logger: logging.Logger, uid: int | None, message: str) -> None:
    token = lograte.client_uid.set(uid)
    try:
        logger.warning(message)
    finally:
        lograte.client_uid.reset(token)


def test_each_uid_gets_a_burst_then_its_rate_and_a_count_of_the_rest():
    clock, handler, logger = limited()
    for i in range(10):
        log_as(logger, 1000, f"a{i}")
    assert handler.lines == ["a0", "a1", "a2"]
    log_as(logger, 2000, "b0")  # another user is not held back
    log_as(logger, None, "daemon")  # nor the daemon's own lines
    assert handler.lines[3:] == ["b0", "daemon"]
    clock.now += 1.0  # two lines' worth: the report, then one more line
    log_as(logger, 1000, "a10")
    assert handler.lines[5:] == ["uid 1000: suppressed 7 messages (more than 2 a second)", "a10"]


def test_a_report_waits_for_the_uid_quota_and_comes_at_flush():
    _, handler, logger = limited(rate=1, burst=1)
    log_as(logger, 7, "first")
    log_as(logger, 7, "dropped")
    log_as(logger, None, "daemon")  # the quota is not back: no report yet
    assert handler.lines == ["first", "daemon"]
    handler.filters[0].flush()
    assert handler.lines[-1] == "uid 7: suppressed 1 messages (more than 1 a second)"


def test_long_lines_from_a_client_are_cut():
    _, handler, logger = limited()
    log_as(logger, 5, "x" * 10_000)
    log_as(logger, None, "y" * 1_000)
    assert handler.lines[0] == "x" * lograte.LONGEST + "... (10000 characters)"
    assert handler.lines[1] == "y" * 1_000


def test_uids_remembered_are_bounded():
    clock, handler, logger = limited(burst=1)
    for uid in range(lograte.TRACKED * 3):
        clock.now += 0.001
        log_as(logger, uid, "x")
    assert len(handler.filters[0]._buckets) <= lograte.TRACKED
