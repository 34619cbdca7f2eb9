"""hwperfd.host.procevents: parsing always, the live connector when allowed."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import threading
from collections import deque

import pytest
import trio

from hwperfd.host import procevents as pe
from hwperfd.host.procevents import (
    ExecEvent,
    ExitEvent,
    ForkEvent,
    Overrun,
    ProcessEvents,
    available,
)

live = pytest.mark.skipif(
    not available(),
    reason="process-events connector unavailable here (needs root with "
    "CAP_NET_ADMIN in the initial user and pid namespace)",
)


# --- wire format, no kernel needed -----------------------------------------


def _message(what: int, data: bytes, *, cpu: int = 1, ts: int = 123) -> bytes:
    event = struct.pack("=IIQ", what, cpu, ts) + data
    event += b"\0" * (40 - len(event))  # sizeof(struct proc_event)
    cn = struct.pack("=IIIIHH", 1, 1, 0, 0, len(event), 0) + event
    return struct.pack("=IHHII", 16 + len(cn), 3, 0, 0, 0) + cn


def _parse(data: bytes) -> list[object]:
    out: deque[object] = deque()
    pe._parse(data, out)  # type: ignore[arg-type]
    return list(out)


def test_layout_sizes() -> None:
    assert pe._HDR_LEN == 36 and pe._DATA_AT == 52
    assert len(_message(pe.PROC_EVENT_FORK, b"")) == 76


def test_parse_several_messages_in_one_datagram() -> None:
    data = (
        _message(pe.PROC_EVENT_FORK, struct.pack("=iiii", 10, 10, 11, 11))
        + _message(pe.PROC_EVENT_EXEC, struct.pack("=ii", 11, 11))
        + _message(pe.PROC_EVENT_EXIT, struct.pack("=iiIIii", 11, 11, 7 << 8, 17, 10, 10))
        + _message(0x200, struct.pack("=ii", 11, 11) + b"comm\0")  # comm: dropped
    )
    events = _parse(data)
    assert events == [
        ForkEvent(10, 10, 11, 11),
        ExecEvent(11, 11),
        ExitEvent(11, 11, 7 << 8, 17, 10, 10),
    ]
    assert events[0].cpu == 1 and events[0].timestamp_ns == 123  # type: ignore[attr-defined]
    assert events[2].returncode == 7  # type: ignore[attr-defined]


def test_parse_old_exit_event_and_signals() -> None:
    # pre-4.18 exit_proc_event: no parent fields (cn_msg.len covers only 4 u32)
    event = struct.pack("=IIQ", pe.PROC_EVENT_EXIT, 0, 0) + struct.pack("=iiII", 5, 5, 9, 17)
    cn = struct.pack("=IIIIHH", 1, 1, 0, 0, len(event), 0) + event
    data = struct.pack("=IHHII", 16 + len(cn), 3, 0, 0, 0) + cn
    [ev] = _parse(data)
    assert ev == ExitEvent(5, 5, 9, 17, 0, 0)
    assert ev.returncode == -9  # type: ignore[attr-defined]


def test_parse_overrun_other_groups_and_garbage() -> None:
    overrun = struct.pack("=IHHII", 16, pe.NLMSG_OVERRUN, 0, 0, 0)
    other = bytearray(_message(pe.PROC_EVENT_FORK, struct.pack("=iiii", 1, 1, 2, 2)))
    other[16:20] = struct.pack("=I", 7)  # another connector index
    assert _parse(overrun + bytes(other)) == [Overrun()]
    assert _parse(b"") == [] and _parse(b"\xff" * 10) == []
    assert _parse(struct.pack("=IHHII", 1000, 3, 0, 0, 0)) == []  # claims more than sent
    truncated = _message(pe.PROC_EVENT_FORK, struct.pack("=iiii", 1, 1, 2, 2))[:40]
    assert _parse(truncated) == []


def test_control_message() -> None:
    msg = pe._control_message(pe.PROC_CN_MCAST_LISTEN)
    length, kind = struct.unpack_from("=IH", msg)
    assert length == len(msg) == 40 and kind == pe.NLMSG_DONE
    assert struct.unpack_from("=IIIIHHI", msg, 16) == (1, 1, 0, 0, 4, 0, 1)


# --- the live connector -----------------------------------------------------


async def _collect_until(events: ProcessEvents, done) -> list[object]:  # type: ignore[no-untyped-def]
    seen: list[object] = []
    async for ev in events:
        seen.append(ev)
        if done(ev):
            return seen
    raise AssertionError("event stream ended early")


@live
def test_fork_and_exit_of_a_child() -> None:
    async def main() -> None:
        with trio.fail_after(10):
            async with ProcessEvents() as events:
                child = os.fork()
                if child == 0:
                    os._exit(7)
                try:
                    seen = await _collect_until(
                        events,
                        lambda ev: isinstance(ev, ExitEvent) and ev.pid == child,
                    )
                finally:
                    _, status = os.waitpid(child, 0)
        me = os.getpid()
        assert ForkEvent(me, me, child, child) in seen
        [exit_ev] = [e for e in seen if isinstance(e, ExitEvent) and e.pid == child]
        assert exit_ev.tgid == child
        assert exit_ev.exit_code == status == 7 << 8
        assert exit_ev.returncode == 7
        assert exit_ev.parent_tgid in (me, 0)  # 0 before Linux 4.18
        assert seen.index(ForkEvent(me, me, child, child)) < seen.index(exit_ev)

    trio.run(main)


@live
def test_exec_and_threads() -> None:
    async def main() -> None:
        with trio.fail_after(10):
            async with ProcessEvents() as events:
                t = threading.Thread(target=lambda: None)
                t.start()
                t.join()
                p = subprocess.Popen(["true"])
                me = os.getpid()
                # join() returns before the OS thread is gone: its exit event may
                # come after the child's, so wait for both.
                waiting = {"child", "thread"}

                def both_exited(ev) -> bool:
                    if isinstance(ev, ExitEvent) and ev.pid == p.pid:
                        waiting.discard("child")
                    if isinstance(ev, ExitEvent) and ev.tgid == me and ev.pid != me:
                        waiting.discard("thread")
                    return not waiting

                try:
                    seen = await _collect_until(events, both_exited)
                finally:
                    p.wait()
        assert ExecEvent(p.pid, p.pid) in seen
        thread_forks = [
            e for e in seen if isinstance(e, ForkEvent) and e.child_tgid == me
        ]
        assert thread_forks and all(e.child_pid != me for e in thread_forks)
        thread_exits = [
            e for e in seen if isinstance(e, ExitEvent) and e.tgid == me and e.pid != me
        ]
        assert thread_exits

    trio.run(main)


@live
def test_overrun_is_reported() -> None:
    async def main() -> None:
        with trio.fail_after(20):
            async with ProcessEvents(rcvbuf=1) as events:  # kernel minimum
                pids = []
                for _ in range(200):
                    pid = os.fork()
                    if pid == 0:
                        os._exit(0)
                    pids.append(pid)
                for pid in pids:
                    os.waitpid(pid, 0)
                seen = await _collect_until(events, lambda ev: isinstance(ev, Overrun))
                assert isinstance(seen[-1], Overrun)
                # the stream goes on after an overrun: make room, then empty
                # the queue.  An overrun leaves the socket congested, and the
                # kernel drops every event for it (with no second ENOBUFS)
                # until a read finds the queue empty (netlink_rcv_wake): with
                # other processes forking, the old one-datagram buffer refills
                # at once, so only a drain after the buffer grew ends it.
                events._raw.setsockopt(  # type: ignore[union-attr]
                    socket.SOL_SOCKET, pe.SO_RCVBUFFORCE, 1 << 20
                )
                events.drain_nowait()
                child = os.fork()
                if child == 0:
                    os._exit(0)
                os.waitpid(child, 0)
                await _collect_until(
                    events, lambda ev: isinstance(ev, ExitEvent) and ev.pid == child
                )

    trio.run(main)


@live
def test_iteration_ends_when_closed() -> None:
    async def main() -> None:
        with trio.fail_after(10):
            events = ProcessEvents()
            async with events:
                pass
            assert [ev async for ev in events] == []

            async with ProcessEvents() as events:
                got: list[object] = []

                async def reader() -> None:
                    async for ev in events:
                        got.append(ev)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(reader)
                    await trio.sleep(0.05)
                    events.close()  # wakes the blocked reader, which then stops

    trio.run(main)


def test_unavailable_without_connector(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: object, **_k: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(pe, "_open_socket", refuse)
    assert available() is False


@live
def test_a_bounded_drain_takes_a_slice_and_says_more_is_queued() -> None:
    """A storm's backlog is taken a slice at a time: ``drain_nowait(limit)``
    reads at most ``limit`` datagrams (one event each) and sets ``backlog``;
    the rest come, in order, with the next drains."""

    async def main() -> None:
        with trio.fail_after(10):
            async with ProcessEvents() as events:
                events.drain_nowait()
                pids = []
                for _ in range(10):
                    pid = os.fork()
                    if pid == 0:
                        os._exit(0)
                    pids.append(pid)
                for pid in pids:
                    os.waitpid(pid, 0)
                first = events.drain_nowait(3)
                assert len(first) == 3 and events.backlog
                rest = events.drain_nowait()
                assert not events.backlog
                me = os.getpid()
                mine = [e for e in first + rest if isinstance(e, pe.ForkEvent) and e.parent_tgid == me]
                forks = [e.child_pid for e in mine if e.child_pid == e.child_tgid]
                assert forks == pids  # none lost, in order

    trio.run(main)


def test_a_descriptor_past_selects_limit_is_waited_on():
    """A daemon counting a thousand IRIX processes holds more than 1024
    descriptors (a pidfd for each signalled one): the connector reopened
    after a stuck process got fd 1031, and select() refused it, which ended
    the daemon (ValueError: filedescriptor out of range in select())."""
    import os
    import resource

    from hwperfd.host.netlink import readable

    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] <= 1500:
        pytest.skip("RLIMIT_NOFILE too low for descriptor 1500")
    read_end, write_end = os.pipe()
    try:
        os.dup2(read_end, 1500)
        assert not readable([1500], 0)
        os.write(write_end, b"x")
        assert readable([1500], 0.1)
    finally:
        for fd in (read_end, write_end, 1500):
            os.close(fd)
