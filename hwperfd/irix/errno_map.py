"""The errno contract, in one place (abi.md, errno contract)."""

import errno

from hwperfd.counters import errors

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
