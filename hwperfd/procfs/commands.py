"""Text commands written to the files of the mount.

A process file takes ``profile NAME [kind=rate ...]`` from anyone who may
open it for writing.  The root-only control node also takes::

    advance PID USER [SYSTEM]       manual clock: PID ran this long
    advance-cpu CPU USER [SYSTEM]   manual clock: an emulated CPU was busy
    advance-thread TID USER [SYSTEM]
                                    manual clock: thread TID (and so its process) ran this long
    profile PID NAME [kind=rate ...]
    default-profile NAME [kind=rate ...]
    fail PID|control|* CALL|* ERRNO [TIMES|always]
                                    the next TIMES calls (default 1) answer ERRNO
    faults clear                    disarm every fault
    lose PID                        take PID's counters away, as system mode would
    trace start FILE [EVENTS]       record a trace into FILE (docs/trace.md)
    trace stop                      stop recording and write the file

Durations are nanoseconds, or a number with ns, us, ms or s.

Commands arrive whole in one write(2) of at most ``MAX_WRITE`` bytes (FUSE
hands the daemon a longer write in pieces cut anywhere, so lines are never
joined across writes); a longer write is refused with EFBIG.
"""

from __future__ import annotations

import errno
import re
from fractions import Fraction

from hwperfd.counters import errors

#: Longest write(2) a file of the mount takes (below FUSE's 128 KiB pieces).
MAX_WRITE = 64 * 1024

_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


_PLAIN_NUMBER = re.compile(r"\d{1,15}(\.\d{1,9})?")


class CommandError(ValueError):
    pass


#: The errno a write(2) of commands answers for a counter refusal: the
#: mount's own mapping, at its boundary (no personality's dialect).  ``lose``
#: meets the first two; any other refusal is a command the state refuses.
REFUSALS: dict[type[errors.CounterError], int] = {
    errors.NotInUse: errno.EINVAL,
    errors.NoSuchProcess: errno.ESRCH,
    errors.NotPermitted: errno.EPERM,
    errors.CountersBusy: errno.EBUSY,
}


def refusal(exc: errors.CounterError) -> int:
    return REFUSALS.get(type(exc), errno.EINVAL)


def duration_ns(text: str) -> int:
    for unit in ("ns", "us", "ms", "s"):
        if text.endswith(unit):
            number, scale = text[: -len(unit)], _UNITS[unit]
            break
    else:
        number, scale = text, 1
    # Plain digits only: Fraction would also take "1e999999" and build a huge integer.
    if not _PLAIN_NUMBER.fullmatch(number):
        raise CommandError(f"not a duration: {text[:40]!r}")
    value = Fraction(number) * scale
    if value < 0 or value.denominator != 1:
        raise CommandError(f"duration must be a whole, non-negative number of ns: {text!r}")
    return int(value)


def parse_lines(data: bytes) -> list[list[str]]:
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise CommandError("commands are ASCII text") from None
    return [line.split() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def integer(text: str, what: str) -> int:
    if not text.isdigit():
        raise CommandError(f"{what} must be a non-negative integer, got {text!r}")
    return int(text)
