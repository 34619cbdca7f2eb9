"""The daemon's log, rate-limited per client user.

Whatever a client's request makes the daemon log (a refused command, an
internal error) is charged to the caller's uid, which the FUSE boundary sets
in ``client_uid`` for the time of the request.  Each uid may log a burst of
``BURST`` lines and then ``RATE`` lines a second; the rest are dropped and
counted, and one "suppressed K messages" line per uid says so once its quota
comes back (at the next line logged by anyone, or at shutdown).  A line is
cut at ``LONGEST`` characters, as it may quote what the client sent.  Lines
logged outside a request (start, stop, background tasks) are never limited.
"""

from __future__ import annotations

import contextvars
import logging
import time
from dataclasses import dataclass

#: The uid of the client whose request is being served, None outside a request.
client_uid: contextvars.ContextVar[int | None] = contextvars.ContextVar("client_uid", default=None)
#: Requests whose caller FUSE does not tell (readdir) share one quota under this.
UNKNOWN_UID = -1

RATE = 5.0  # lines a second each uid may keep logging
BURST = 20  # lines a uid may log at once
TRACKED = 1024  # uids remembered at most; the quietest are forgotten first
LONGEST = 300  # characters of a client-caused line kept (it may quote the client's input)


@dataclass
class _Bucket:
    tokens: float
    stamp: float
    suppressed: int = 0


class PerUserRateLimit(logging.Filter):
    """A handler filter: lets each client uid log ``burst`` lines, then
    ``rate`` a second, and reports what it dropped."""

    def __init__(self, handler: logging.Handler, rate: float = RATE, burst: int = BURST,
                 clock=time.monotonic) -> None:  # fmt: skip
        super().__init__()
        self._handler = handler
        self._rate = rate
        self._burst = burst
        self._clock = clock
        self._buckets: dict[int, _Bucket] = {}
        self._reporting = False

    def filter(self, record: logging.LogRecord) -> bool:
        if self._reporting:
            return True
        now = self._clock()
        self._report(now)
        uid = client_uid.get()
        if uid is None:
            return True
        bucket = self._buckets.get(uid)
        if bucket is None:
            if len(self._buckets) >= TRACKED:
                self._forget_one()
            bucket = self._buckets[uid] = _Bucket(float(self._burst), now)
        self._refill(bucket, now)
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            message = record.getMessage()
            if len(message) > LONGEST:
                record.msg, record.args = message[:LONGEST] + f"... ({len(message)} characters)", None
            return True
        bucket.suppressed += 1
        return False

    def flush(self) -> None:
        """Report every count of dropped lines now (at shutdown)."""
        self._report(None)

    def _refill(self, bucket: _Bucket, now: float) -> None:
        bucket.tokens = min(float(self._burst), bucket.tokens + (now - bucket.stamp) * self._rate)
        bucket.stamp = now

    def _report(self, now: float | None) -> None:
        """One line for each uid that dropped lines and may log again."""
        for uid, bucket in list(self._buckets.items()):
            if not bucket.suppressed:
                continue
            if now is not None:
                self._refill(bucket, now)
                if bucket.tokens < 1:
                    continue
                bucket.tokens -= 1
            count, bucket.suppressed = bucket.suppressed, 0
            who = "requests of unknown uid" if uid == UNKNOWN_UID else f"uid {uid}"
            self._emit(f"{who}: suppressed {count} messages (more than {self._rate:g} a second)")

    def _emit(self, message: str) -> None:
        record = logging.makeLogRecord(
            {"name": "hwperfd", "levelno": logging.INFO, "levelname": "INFO", "msg": message}
        )
        self._reporting = True
        try:
            self._handler.handle(record)
        finally:
            self._reporting = False

    def _forget_one(self) -> None:
        # Drop a uid with nothing to report, preferring the one idle longest.
        quiet = [uid for uid, b in self._buckets.items() if not b.suppressed] or list(self._buckets)
        del self._buckets[min(quiet, key=lambda uid: self._buckets[uid].stamp)]


def install(handler: logging.Handler) -> PerUserRateLimit:
    """Rate-limit what reaches ``handler``, per client uid."""
    limit = PerUserRateLimit(handler)
    handler.addFilter(limit)
    return limit
