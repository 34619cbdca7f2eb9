"""The FUSE boundary: what any request may cost the daemon.

pyfuse3 answers only ``FUSEError``; any other exception escaping a handler
leaves the request unanswered and ends ``pyfuse3.main`` (the daemon stops),
and the ioctl bridge answers it with EIO and a traceback in the log.
``guarded`` wraps every request handler of a filesystem class so that:

- an ``OSError`` is answered with its errno, except that the daemon's own
  lack of resources (EMFILE, ENFILE, ENOMEM, ENOBUFS) is EAGAIN: the caller
  may retry, and the process it asked about is not "absent";
- anything else is a fault of the daemon: one log line (the traceback only
  with --debug) and EIO;
- what a request logs is charged to the caller's uid (``hwperfd.lograte``).
"""

from __future__ import annotations

import errno
import functools
import inspect
import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

import pyfuse3

import hwperfd.lograte as lograte  # noqa: PLR0402 - the layering test reads module names
from hwperfd.host import procread

log = logging.getLogger(__name__)

#: The daemon ran short of something: the request may succeed if retried.
EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})

# pyfuse3's request handlers that carry a RequestContext (its uid) ...
_WITH_CTX = ("lookup", "getattr", "setattr", "opendir", "open", "statfs")
# ... and those that name an open file instead: its opener is charged.
_WITH_FH = ("read", "write", "flush", "release")
# Directory handles are not ours to number (opendir answers the inode).
_OTHERS = ("readdir", "releasedir")

C = TypeVar("C", bound=type)


def answer(op: str, exc: Exception) -> int:
    """The errno a request that raised ``exc`` is answered with; logs why."""
    if isinstance(exc, OSError) and exc.errno:
        if exc.errno in EXHAUSTED:
            log.warning("%s: %s; answered EAGAIN", op, exc)
            return errno.EAGAIN
        if exc.errno != errno.ENOSYS:  # ENOSYS would turn the operation off for the mount
            return exc.errno
    log.error("%s failed: %s: %s", op, type(exc).__name__, exc, exc_info=log.isEnabledFor(logging.DEBUG))
    return errno.EIO


def _uid_of(op: str, self: Any, args: tuple, kwargs: dict) -> int:
    uid = None
    if op in _WITH_CTX:
        ctx = kwargs.get("ctx", args[-1] if args else None)
        uid = getattr(ctx, "uid", None)
    elif op in _WITH_FH and args:
        uid = _openers(self).get(args[0])
    return lograte.UNKNOWN_UID if uid is None else uid


def _caller_of(op: str, args: tuple, kwargs: dict) -> int:
    """The tid a request with a RequestContext was made by (0: not known)."""
    if op not in _WITH_CTX:
        return 0
    ctx = kwargs.get("ctx", args[-1] if args else None)
    return getattr(ctx, "pid", 0) or 0


def _openers(self: Any) -> dict[int, int]:
    """fh -> uid of the process that opened it, kept beside the handler's own state."""
    try:
        return self.__dict__["_boundary_openers"]
    except KeyError:
        return self.__dict__.setdefault("_boundary_openers", {})


def _wrap_async(op: str, method: Callable) -> Callable:
    @functools.wraps(method)
    async def handler(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = lograte.client_uid.set(_uid_of(op, self, args, kwargs))
        caller = procread.caller.set(_caller_of(op, args, kwargs))
        try:
            result = await method(self, *args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except Exception as exc:  # noqa: BLE001 - the point: no exception leaves a request
            raise pyfuse3.FUSEError(answer(op, exc)) from None
        finally:
            procread.caller.reset(caller)
            lograte.client_uid.reset(token)
        if op == "open":
            _openers(self)[result.fh] = _uid_of(op, self, args, kwargs)
        elif op == "release" and args:
            _openers(self).pop(args[0], None)
        return result

    return handler


def _wrap_ioctl(method: Callable) -> Callable:
    # The bridge's contract: raise OSError(errno) to fail the call.
    @functools.wraps(method)
    def handler(self: Any, ino: int, fh: int, cmd: int, arg: int, data: bytes, out_size: int,
                flags: int, pid: int, uid: int, gid: int) -> tuple[int, bytes]:  # fmt: skip
        token = lograte.client_uid.set(uid)
        caller = procread.caller.set(pid)
        reads = procread.request_reads.set({})
        try:
            return method(self, ino, fh, cmd, arg, data, out_size, flags, pid, uid, gid)
        except OSError as exc:
            if exc.errno not in EXHAUSTED:
                raise  # the call's own answer (the bridge turns ENOSYS into ENOTTY)
            raise OSError(answer(f"ioctl {cmd:#x}", exc), os.strerror(errno.EAGAIN)) from None
        except Exception as exc:  # noqa: BLE001 - the point: no exception leaves a request
            raise OSError(answer(f"ioctl {cmd:#x}", exc), os.strerror(errno.EIO)) from None
        finally:
            procread.request_reads.reset(reads)
            procread.caller.reset(caller)
            lograte.client_uid.reset(token)

    return handler


def guarded(cls: C) -> C:
    """Class decorator: every request handler ``cls`` defines answers an
    errno whatever happens inside, and logs against its caller's uid."""
    for op in (*_WITH_CTX, *_WITH_FH, *_OTHERS):
        method = cls.__dict__.get(op)
        if method is not None and inspect.iscoroutinefunction(method):
            setattr(cls, op, _wrap_async(op, method))
    if "ioctl" in cls.__dict__:
        cls.ioctl = _wrap_ioctl(cls.__dict__["ioctl"])  # type: ignore[attr-defined]
    return cls
