"""The errno contract, in one place (abi.md, errno contract)."""

import errno
from typing import Callable, ParamSpec, TypeVar

from hwperfd.counters import errors

P = ParamSpec("P")
R = TypeVar("R")

ERRNO: dict[type[errors.CounterError], int] = {
    errors.InvalidRequest: errno.EINVAL,
    errors.NotInUse: errno.EINVAL,
    errors.NotPermitted: errno.EPERM,
    errors.CountersBusy: errno.EBUSY,
    errors.NoSuchProcess: errno.ESRCH,
    errors.NotSupported: errno.ENOTSUP,
    errors.CountersLimit: errno.EAGAIN,
}


def errno_of(exc: errors.CounterError) -> int:
    return ERRNO[type(exc)]


def to_oserror(exc: errors.CounterError) -> OSError:
    return OSError(errno_of(exc), str(exc))


def in_errnos(handler: Callable[P, R]) -> Callable[P, R]:
    """``handler`` with the counters' refusals answered in IRIX's errnos."""

    def answer(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return handler(*args, **kwargs)
        except errors.CounterError as exc:
            raise to_oserror(exc) from None

    return answer


class UnknownCommand(OSError):
    """An ioctl the node does not know: ENOTTY, never ENOSYS, which FUSE
    would take as "this filesystem has no ioctl at all"."""

    def __init__(self, cmd: int) -> None:
        super().__init__(errno.ENOTTY, f"unknown ioctl 0x{cmd:08x}")


class BadArgument(OSError):
    def __init__(self, why: str) -> None:
        super().__init__(errno.EINVAL, why)


class PointerArgument(OSError):
    """IRIX's pointer-carrying form of a call: a FUSE server is handed only
    the argument's bytes, so the structs they point to are out of reach."""

    def __init__(self, name: str) -> None:
        super().__init__(
            errno.EFAULT,
            f"{name} carries pointers, which hwperfd cannot follow: run the program under "
            f"hwperfd-run, or use HWPERFD_{name} with the structs inline",
        )


class ProfilingBuffers(OSError):
    """HWPERF_PROFENABLE's histogram buffers are in the caller's memory, which
    a FUSE server cannot write: the caller's library (libhwperf's syssgi)
    keeps them and sends HWPERFD_PROFENABLE."""

    def __init__(self) -> None:
        super().__init__(
            errno.EFAULT,
            "HWPERF_PROFENABLE fills buffers in the caller's memory, which hwperfd cannot reach: "
            "call syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, ...) from libhwperf",
        )
