"""The /proc counter ioctls as bare numbers, for the client scripts
(hammer_client.py, stress_client.py) that tests start by the dozen.

Standard library only, so that those clients start quickly: they import this
as a sibling module (a script's own folder is first on sys.path), not through
hwperfd or structs (whose numbers these are: structs/procfs.py).
"""

import struct

_IOC_WRITE, _IOC_READ = 1, 2


def _ioc(direction, nr, size):
    return (direction << 30) | (size << 16) | (ord("q") << 8) | nr


PIOCENEVCTRS = _ioc(_IOC_WRITE, 233, 196)
PIOCRELEVCTRS = _ioc(0, 234, 0)
PIOCGETEVCTRS = _ioc(_IOC_READ, 235, 256)
PIOCGETPREVCTRS = _ioc(_IOC_READ, 236, 1104)
PIOCGETEVCTRL = _ioc(_IOC_READ, 237, 64)
PIOCSETEVCTRL = _ioc(_IOC_WRITE, 238, 196)


def request(specs: dict) -> bytearray:
    """A hwperf_profevctrarg_t: event specifiers by slot, no thresholds, no signal."""
    words = [specs.get(i, 0) for i in range(32)]
    return bytearray(struct.pack("<32h32ii", *words, *([0] * 32), 0))
