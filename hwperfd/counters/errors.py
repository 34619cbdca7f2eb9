"""The closed set of ways a counter request can fail.

These are the IRIX kernel's refusals in domain terms; the IRIX personality (hwperfd.irix) maps
each to its errno in one table (``hwperfd.irix.errno_map``).
"""


class CounterError(Exception):
    """Base of every refusal; the message says why, for logs and clients."""


class InvalidRequest(CounterError):
    """Events specified improperly, a negative threshold, a bad signal (EINVAL)."""


class NotInUse(CounterError):
    """The counters of the target are not in use (EINVAL, r10k_counters(5) PIOCGETEVCTRL)."""


class NotPermitted(CounterError):
    """Kernel/supervisor mode without root, or another process's counters (EPERM)."""


class CountersBusy(CounterError):
    """System mode held, or user-mode counters running when system mode is asked (EBUSY)."""


class NoSuchProcess(CounterError):
    """The target process is gone (ESRCH)."""


class NotSupported(CounterError):
    """A command this emulation gives no meaning to (ENOTSUP)."""


class CountersLimit(CounterError):
    """A user holds as many counting contexts as one user may (EAGAIN)."""
