"""perfex(1) and libperfex(3) for hwperfd.

``python3 -m hwperfd.perfex`` (installed as ``perfex``) runs a command and
reports its event counts; ``hwperfd.perfex.libperfex`` is the procedural
interface of libperfex(3) in Python (``lib/irix/libperfex.c`` is the C one).

Modules: ``plan`` (which events, which slots), ``machine`` (what hwperfd
emulates), ``runner`` (fork, count, wait, read, project), ``costs`` (the -y
cost table as data), ``stats`` (derived statistics), ``report`` (text,
JSON, CSV), ``cli`` (the command line).
"""

from __future__ import annotations

# The C module under ``signal``: the same calls, with plain ints for
# signals, and without ``enum`` (and ``re``), which would cost perfex's
# start-up more than the rest of its own modules (docs/speed.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
else:
    import _signal

#: The signal mask perfex started with, once ``hold_start_signals`` ran.
startup_mask: set[int] | None = None


def hold_start_signals() -> None:
    """Block SIGUSR1 and SIGUSR2 from perfex's first moment: perfex(1) -s
    starts counting at SIGUSR1, and one sent as perfex starts must neither
    kill it (their default action) nor be lost - it stays pending until
    perfex waits for it.  Without -s they stay blocked and do nothing.  The
    command gets the mask perfex started with."""
    global startup_mask
    if startup_mask is None:
        startup_mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGUSR1, _signal.SIGUSR2})
