"""Python client for hwperfd: the /proc event-counter ioctls as plain calls.

Every call raises ``OSError`` with the errno r10k_counters(5) gives (EINVAL,
EPERM, EBUSY, ESRCH ...).  The mount is found at ``$HWPERFD_MOUNT`` or
``/run/hwperfd``.

    with ProcessCounters() as counters:                # this process
        gen = counters.enable({0: user(0), 16: user(9)})  # cycles, L1 D misses
        ...
        gen2, counts = counters.read()
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import time


import structs
from structs import (
    HWPERF_CNTEN_E,
    HWPERF_CNTEN_IE,
    HWPERF_CNTEN_K,
    HWPERF_CNTEN_U,
    HWPERF_EVENTMAX,
)

TYPE_CHECKING = False  # typing stays off perfex's start-up (hwperfd/records.py)
if TYPE_CHECKING:
    from typing import Any, NamedTuple, Self
else:
    from hwperfd.records import NamedTuple

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    SlotSpecs = Mapping[int, int] | Sequence[int]  # for type checkers only: collections.abc stays off perfex's start-up

DEFAULT_MOUNT = "/run/hwperfd"


def mount_dir() -> str:
    """The mount, as a string: what perfex uses (it does not import pathlib)."""
    return os.environ.get("HWPERFD_MOUNT") or DEFAULT_MOUNT


def mount_point() -> Path:
    from pathlib import Path  # imported when asked: perfex's start-up does without it

    return Path(mount_dir())


class NotMounted(FileNotFoundError):
    """hwperfd is not mounted where the client looked."""


def require_mount(mount: str | os.PathLike[str] | None = None) -> Path:
    from pathlib import Path

    mount = Path(mount) if mount else mount_point()
    if not (mount / "control").exists():
        raise NotMounted(
            f"hwperfd is not mounted at {mount} (start it with `hwperfd {mount}` as root, "
            "or set HWPERFD_MOUNT to where it is mounted)"
        )
    return mount


def spec(event: int, mode: int = HWPERF_CNTEN_U, interrupt: bool = False) -> int:
    """One ``hwperf_spec`` word: ``event`` is the number *on its counter*."""
    return structs.spec_word(event, mode, interrupt)


def user(event: int, interrupt: bool = False) -> int:
    return spec(event, HWPERF_CNTEN_U, interrupt)


def kernel(event: int) -> int:
    return spec(event, HWPERF_CNTEN_K)


def slots_for(*events: int, mode: int = HWPERF_CNTEN_U, counters_per_event: int = 16) -> dict[int, int]:
    """Slot specs for R10000-numbered events (0-31): event e goes to slot e.

    This is the r10k_counters(5) convention: slot i counts event i on counter
    i // 16 as its event i % 16.
    """
    return {e: spec(e % counters_per_event, mode) for e in events}


class Usage(NamedTuple):
    generation: int
    counts: tuple[int, ...]
    raw: bytes  # the hwperf_prusage_t as read

    @property
    def active_ns(self) -> tuple[int, ...]:
        """cm_active_ns: CPU time (ns) each slot was on its hardware counter."""
        return self._monitor("pu_cpu_mon.cm_active_ns")  # type: ignore[return-value]

    @property
    def enabled_ns(self) -> int:
        """cm_enabled_ns: CPU time (ns) the counters were enabled."""
        return self._monitor("pu_cpu_mon.cm_enabled_ns")  # type: ignore[return-value]

    def _monitor(self, name: str) -> int | tuple[int, ...]:
        return structs.fast.hwperf_prusage_t.unpack(self.raw)[name]  # type: ignore[return-value]

    @property
    def fields(self) -> Any:
        """Every hwperf_prusage_t field, decoded: an untyped construct Container
        (construct loads on first use; perfex needs only the properties above)."""
        return structs.hwperf_prusage_t.parse(self.raw)


def _slots(values: SlotSpecs | None, fill: int = 0) -> list[int]:
    out = [fill] * HWPERF_EVENTMAX
    if values is None:
        return out
    items = values.items() if hasattr(values, "items") else enumerate(values)  # a mapping, or a sequence
    for slot, value in items:
        if not 0 <= slot < HWPERF_EVENTMAX:
            raise ValueError(f"slot {slot} is outside 0..31")
        out[slot] = int(value)
    return out


def pack_request(specs: SlotSpecs, thresholds: SlotSpecs | None = None, signal: int = 0) -> bytes:
    # A spec word is stored as its low 16 bits (hwperf_ctrl_t), as construct's
    # hwperf_ctrl_t adapter encodes it; structs.fast packs without construct.
    return structs.fast.hwperf_profevctrarg_t.pack(
        hwp_evctrargs__hwp_evctrl=[s & 0xFFFF for s in _slots(specs)],
        hwp_ovflw_freq=_slots(thresholds),
        hwp_ovflw_sig=signal,
    )


def _spec_words(eventctrl: Any) -> tuple[int, ...]:  # a parsed hwperf_eventctrl_t
    return tuple(structs.spec_word(c.hwp_ev, c.hwp_mode, c.hwp_ie) for c in eventctrl.hwp_evctrl)


class _MountFile:
    """An open file of the mount, and the one way to call an ioctl on it."""

    def __init__(self, path: str | os.PathLike[str], flags: int) -> None:
        self._path = os.fspath(path)
        self._flags = flags
        self.fd = os.open(self._path, flags)

    @property
    def path(self) -> Path:
        from pathlib import Path

        return Path(self._path)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ioctl(self, cmd: int, arg: bytes | int = 0) -> tuple[int, bytes]:
        """``arg`` is a buffer the kernel copies in and out, or a raw integer.
        A daemon found gone is waited for, as the C libraries do (docs/restart.md)."""
        try:
            return self._ioctl_once(cmd, arg)
        except OSError as exc:
            if exc.errno not in _LOST_DAEMON or self.fd < 0:
                raise
            deadline = _reconnect_deadline()
            while True:
                if deadline is None or time.monotonic() >= deadline:
                    raise
                try:
                    self._reopen(deadline)
                except OSError as reopen:
                    if reopen.errno == errno.ENOENT or reopen.errno in _LOST_DAEMON:
                        raise exc from None  # still no daemon: the call's own answer stands (lib/reconnect.h)
                    raise
                try:
                    return self._ioctl_once(cmd, arg)
                except OSError as again:
                    if again.errno not in _LOST_DAEMON:
                        raise

    def _ioctl_once(self, cmd: int, arg: bytes | int) -> tuple[int, bytes]:
        if isinstance(arg, int):
            return fcntl.ioctl(self.fd, cmd, arg), b""
        buf = bytearray(arg)
        return fcntl.ioctl(self.fd, cmd, buf, True), bytes(buf)

    def _reopen(self, deadline: float) -> None:
        """Open the same path again onto the same descriptor, waiting while
        the mount is replaced (ENOTCONN, or ENOENT while it is no FUSE mount)."""
        while True:
            try:
                fd = os.open(self._path, self._flags)
            except OSError as exc:
                if time.monotonic() >= deadline or not (
                    exc.errno in _LOST_DAEMON or (exc.errno == errno.ENOENT and _remounting(self._path))
                ):
                    raise
                time.sleep(0.02)
                continue
            os.dup2(fd, self.fd, inheritable=os.get_inheritable(self.fd))
            os.close(fd)
            return

    def _read_text(self) -> str:
        return os.pread(self.fd, 1 << 20, 0).decode()

    def _read_counts(self, cmd: int) -> tuple[int, tuple[int, ...]]:
        gen, out = self._ioctl(cmd, bytes(structs.fast.hwperf_cntr_t.size))
        return gen, structs.fast.hwperf_cntr_t.struct.unpack(out)

    def _read_control(self, cmd: int) -> tuple[int, tuple[int, ...]]:
        gen, out = self._ioctl(cmd, bytes(structs.fast.hwperf_eventctrl_t.size))
        return gen, structs.fast.hwperf_eventctrl_t.struct.unpack(out)


_LOST_DAEMON = (errno.ENOTCONN, errno.ECONNABORTED)
_FUSE_SUPER_MAGIC = 0x65735546


def _reconnect_deadline() -> float | None:
    """When to stop waiting for a restarted daemon ($HWPERFD_RECONNECT_MS,
    default 30 000; 0: never wait)."""
    try:
        ms = int(os.environ.get("HWPERFD_RECONNECT_MS") or 30000)
    except ValueError:
        ms = 30000
    return None if ms == 0 else time.monotonic() + max(ms, 0) / 1000


def _remounting(path: str) -> bool:
    """Whether the folder of ``path`` is not (yet) a FUSE mount."""
    import ctypes

    class _Statfs(ctypes.Structure):
        _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_char * 112)]

    st = _Statfs()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.statfs(os.path.dirname(path).encode(), ctypes.byref(st)) != 0:
        return True
    return bool(st.f_type != _FUSE_SUPER_MAGIC)


_STATE_HEADER = struct.Struct("<IHHIIIiQQQQQiIQ")
_WRITING_SPINS = 100_000  # snapshots of a page found mid-write before asking the daemon (lib/state.c)
# The header and IRIX's 32 slots in one unpack: the fast read's cost is Python's.
_STATE_IRIX = struct.Struct("<IHHIIIiQQQQQiIQ48x160Q")
_CPU_CLOCKS = {
    structs.HWPERFD_STATE_CLOCK_PROCESS: time.CLOCK_PROCESS_CPUTIME_ID,
    structs.HWPERFD_STATE_CLOCK_THREAD: time.CLOCK_THREAD_CPUTIME_ID,
}


def _children_times() -> tuple[float, float]:
    import resource  # the state page's: perfex (fast=False) never loads it

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime, usage.ru_stime


class StatePage:
    """A process's own counters, read from the state page the daemon keeps
    for it (docs/state-pages.md): no FUSE round trip.

    ``read`` returns None when the page says to ask the daemon (``fallback``),
    or when a child has been reaped since the daemon last answered (its counts
    are folded in at the next request); ``dead`` once the daemon let it go.
    """

    def __init__(self, path: str) -> None:
        import mmap  # here: perfex reads no state page

        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            self._map = mmap.mmap(fd, structs.HWPERFD_STATE_SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        head = _STATE_HEADER.unpack_from(self._map, 0)
        if head[0] != structs.HWPERFD_STATE_MAGIC or head[1] != structs.HWPERFD_STATE_VERSION:
            self._map.close()
            raise OSError(errno.EPROTO, f"{path} is not a version {structs.HWPERFD_STATE_VERSION} state page")
        self.pid = os.getpid()
        self.dead = False
        self.children = _children_times()

    def close(self) -> None:
        self._map.close()

    def snapshot(self, cpu_ns: int | None = None) -> tuple[tuple[int, ...], int] | None:
        """(header fields and IRIX's 32 slots, CPU clock reading), consistent
        under the sequence counter (odd while the daemon writes); None if the
        page stays mid-write (a daemon stopped or killed while writing it)."""
        view = self._map
        unpack = _STATE_IRIX.unpack_from
        for _ in range(_WRITING_SPINS):
            seq = view[8:12]
            fields = unpack(view, 0)
            clock = _CPU_CLOCKS.get(fields[5])
            now = cpu_ns if cpu_ns is not None else time.clock_gettime_ns(clock) if clock is not None else 0
            if not seq[0] & 1 and view[8:12] == seq:
                return fields, now
        return None

    def read(self, cpu_ns: int | None = None) -> tuple[int, tuple[int, ...]] | None:
        """(generation, counts) as a read through the daemon would give now, or
        None.  ``cpu_ns``: the counted process's CPU time, if not this one's now."""
        taken = self.snapshot(cpu_ns)
        if taken is None:
            return None
        fields, now = taken
        flags = fields[4]
        if flags & structs.HWPERFD_STATE_DEAD:
            self.dead = True
            return None
        if flags & structs.HWPERFD_STATE_FALLBACK or _children_times() != self.children:
            return None
        counts = list(fields[15:175:5])
        if fields[5] == structs.HWPERFD_STATE_CLOCK_MANUAL:
            return fields[6], tuple(counts)
        user_ns, system_ns, split_user, split_system, room = fields[7:12]
        carry = fields[14]
        dt = max(0, now - user_ns - system_ns)
        parts = split_user + split_system
        ds = min((carry + dt * split_system) // parts, room, dt) if parts else 0
        du = dt - ds
        for i, den in enumerate(fields[19:175:5]):
            if den:
                base = 15 + 5 * i
                counts[i] += (fields[base + 1] + du * fields[base + 2] + ds * fields[base + 3]) // den
        return fields[6], tuple(counts)


class ProcessCounters(_MountFile):
    """An open hwperfd process file, ``<mount>/%05d``.

    ``writable=False`` opens read-only, as PAPI did; the ioctls still work.
    """

    def __init__(
        self,
        pid: int | None = None,
        *,
        mount: str | os.PathLike[str] | None = None,
        writable: bool = True,
        fast: bool = True,
    ):
        self.pid = os.getpid() if pid is None else pid
        root = os.fspath(mount) if mount else mount_dir()
        try:
            super().__init__(os.path.join(root, f"{self.pid:05d}"), os.O_RDWR if writable else os.O_RDONLY)
        except OSError:
            require_mount(root)  # checked only when the open fails: one FUSE look-up less per open
            raise
        # A process reading its own counters reads them from its state page.
        self.fast = fast
        self.page: StatePage | None = None

    def close(self) -> None:
        self._drop_page()
        super().close()

    def state_page_path(self) -> str:
        """HWPERFD_PIOCSTATEPAGE: where this process's state page is (its own file only)."""
        _, out = self._ioctl(structs.HWPERFD_PIOCSTATEPAGE, bytes(structs.HWPERFD_STATE_PATH_MAX))
        return out.split(b"\0", 1)[0].decode("ascii")  # hwperfd_statepage_t: one NUL-padded path

    def map_page(self) -> StatePage | None:
        """Map this process's state page; None if the daemon keeps none for it."""
        self._drop_page()
        if self.pid != os.getpid():
            return None
        try:
            self.page = StatePage(self.state_page_path())
        except OSError:
            self.page = None
        return self.page

    def _drop_page(self) -> None:
        if self.page is not None:
            self.page.close()
            self.page = None

    def _counting(self, generation: int) -> int:
        if self.fast:
            self.map_page()
        return generation

    def enable(self, specs: SlotSpecs, thresholds: SlotSpecs | None = None, signal: int = 0) -> int:
        """PIOCENEVCTRS: start counting; returns the generation number."""
        return self._counting(self._ioctl(structs.PIOCENEVCTRS, pack_request(specs, thresholds, signal))[0])

    def enable_ex(
        self,
        specs: SlotSpecs,
        thresholds: SlotSpecs | None = None,
        signal: int = 0,
        *,
        generation: int = 0,
        counts: SlotSpecs | None = None,
    ) -> int:
        """PIOCENEVCTRSEX: start counting from saved ``counts`` and, if not
        0, under a saved ``generation`` above any this process has had
        (restart from a checkpoint); returns the generation."""
        arg = structs.hwperfd_enevctrsex_t.build(
            dict(
                hwp_args=structs.hwperf_profevctrarg_t.parse(pack_request(specs, thresholds, signal)),
                hwp_aux=dict(hwp_aux_gen=generation, hwp_aux_cntr=dict(hwp_evctr=_slots(counts))),
            )
        )
        return self._counting(self._ioctl(structs.HWPERFD_PIOCENEVCTRSEX, arg)[0])

    def control_ex(self) -> tuple[int, tuple[int, ...], tuple[int, ...], int]:
        """PIOCGETEVCTRLEX: (generation, 32 spec words, 32 overflow thresholds,
        overflow signal); EINVAL when released, ESRCH when never used."""
        gen, out = self._ioctl(structs.HWPERFD_PIOCGETEVCTRLEX, bytes(structs.hwperfd_getevctrlex_t.sizeof()))
        got = structs.hwperfd_getevctrlex_t.parse(out)
        aux = got.hwp_evctrlaux
        return gen, _spec_words(got.hwp_evctrl), tuple(aux.hwp_aux_freq), aux.hwp_aux_sig

    def read(self) -> tuple[int, tuple[int, ...]]:
        """PIOCGETEVCTRS: (generation, 32 virtual 64-bit counts); from the
        state page when this process reads its own and the page serves."""
        page = self.page
        if page is not None and page.pid == os.getpid():
            got = page.read()
            if got is not None:
                return got
            if page.dead:
                self._drop_page()
            else:
                children = _children_times()
                got = self._read_counts(structs.PIOCGETEVCTRS)
                page.children = children  # what the daemon has folded in by now
                return got
        return self._read_counts(structs.PIOCGETEVCTRS)

    def read_ioctl(self) -> tuple[int, tuple[int, ...]]:
        """PIOCGETEVCTRS through the daemon, whatever the state page says."""
        return self._read_counts(structs.PIOCGETEVCTRS)

    def control(self) -> tuple[int, tuple[int, ...]]:
        """PIOCGETEVCTRL: (generation, 32 spec words); EINVAL when released,
        ESRCH when never used (IRIX 6.5's piocgetevctrl)."""
        return self._read_control(structs.PIOCGETEVCTRL)

    def set_control(self, specs: SlotSpecs, thresholds: SlotSpecs | None = None, signal: int = 0) -> int:
        """PIOCSETEVCTRL: change events without releasing; returns the new generation."""
        return self._counting(self._ioctl(structs.PIOCSETEVCTRL, pack_request(specs, thresholds, signal))[0])

    def release(self) -> None:
        """PIOCRELEVCTRS: stop counting (counts stay readable)."""
        self._drop_page()
        self._ioctl(structs.PIOCRELEVCTRS)

    def read_usage(self) -> Usage:
        """PIOCGETPREVCTRS: counts plus the process's prusage."""
        gen, out = self._ioctl(structs.PIOCGETPREVCTRS, bytes(structs.fast.hwperf_prusage_t.size))
        return Usage(gen, structs.fast.hwperf_prusage_t.unpack(out)["pu_cpu_mon.cm_evctr"], out)  # type: ignore[arg-type]

    def save_child_counts(self, child: int | None = None) -> None:
        """PIOCSAVECCNTRS: add a child's counts to its parent when it exits.

        On the parent's file pass the child's pid; on the child's file pass nothing.
        """
        self._ioctl(structs.PIOCSAVECCNTRS, child or 0)

    def set_profile(self, profile: str) -> None:
        """Model this process's workload: ``NAME [kind=rate ...]`` (see docs)."""
        os.write(self.fd, f"profile {profile}\n".encode())

    def summary(self) -> str:
        """The text view: counters, and one ``descendant`` line per folded child."""
        return self._read_text()


class Control(_MountFile):
    """The control node: syssgi(SGI_EVENTCTR) commands and the manual clock.

    Anyone may open it (read-only for a non-root user: the read commands
    work, commands that change state answer EPERM); text commands need root.
    """

    def __init__(self, *, mount: str | os.PathLike[str] | None = None) -> None:
        path = require_mount(mount) / "control"
        try:
            super().__init__(path, os.O_RDWR)
        except PermissionError:
            super().__init__(path, os.O_RDONLY)

    def command(self, text: str) -> None:
        os.write(self.fd, text.encode() + b"\n")

    def advance(self, pid: int, user_ns: int, system_ns: int = 0) -> None:
        """Manual clock: ``pid`` ran ``user_ns`` in user and ``system_ns`` in system mode."""
        self.command(f"advance {pid} {user_ns} {system_ns}")

    def advance_cpu(self, cpu: int, user_ns: int, system_ns: int = 0) -> None:
        self.command(f"advance-cpu {cpu} {user_ns} {system_ns}")

    def status(self) -> str:
        return self._read_text()

    def fail(self, target: int | str, call: str, errno_name: str, times: int | str = 1) -> None:
        """Make the next ``times`` calls (or ``"always"``) of ``call`` (an ioctl
        name such as ``"PIOCGETEVCTRS"``, or ``"*"``) on ``target`` (a pid,
        ``"control"`` or ``"*"``) fail with ``errno_name``; they change nothing."""
        self.command(f"fail {target} {call} {errno_name} {times}")

    def clear_faults(self) -> None:
        self.command("faults clear")

    def lose(self, pid: int) -> None:
        """Take ``pid``'s counters away, as system mode would: they stop and
        its generation goes up."""
        self.command(f"lose {pid}")

    def enable_system(self, specs: SlotSpecs, thresholds: SlotSpecs | None = None, signal: int = 0) -> int:
        """HWPERF_ENSYSCNTRS: forcibly acquire the counters in system mode."""
        return self._ioctl(structs.HWIOC_ENSYSCNTRS, pack_request(specs, thresholds, signal))[0]

    def read_system(self) -> tuple[int, tuple[int, ...]]:
        return self._read_counts(structs.HWIOC_GET_SYSCNTRS)

    def read_cpu(self, cpu: int) -> tuple[int, tuple[int, ...]]:
        """HWPERF_GET_CPUCNTRS: generation 0 means an invalid cpuid."""
        arg = structs.hwperf_cpucntrs_arg_t.build(dict(cpuid=cpu, cntr=dict(hwp_evctr=[0] * 32)))
        gen, out = self._ioctl(structs.HWIOC_GET_CPUCNTRS, arg)
        return gen, tuple(structs.hwperf_cpucntrs_arg_t.parse(out).cntr.hwp_evctr)

    def system_control(self) -> tuple[int, tuple[int, ...]]:
        return self._read_control(structs.HWIOC_GET_SYSEVCTRL)

    def set_system_control(self, specs: SlotSpecs, thresholds: SlotSpecs | None = None, signal: int = 0) -> int:
        return self._ioctl(structs.HWIOC_SET_SYSEVCTRL, pack_request(specs, thresholds, signal))[0]

    def release_system(self) -> None:
        self._ioctl(structs.HWIOC_RELSYSCNTRS)


__all__ = [
    "ProcessCounters", "Control", "Usage", "NotMounted", "mount_point", "mount_dir", "require_mount",
    "spec", "user", "kernel", "slots_for", "pack_request",
    "HWPERF_CNTEN_U", "HWPERF_CNTEN_K", "HWPERF_CNTEN_E", "HWPERF_CNTEN_IE",
]  # fmt: skip
