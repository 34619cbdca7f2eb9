"""perfctr's set-up in the set-up store (docs/restart.md): each linked
vperfctr (its control, i-mode state, pending overflow, signal, and its
thread's context as of the last change) and the global counters.

Counts are not kept: a put-back vperfctr counts its thread's CPU time since
the record was written (the downtime included) at its next look, through
the same registers, so an i-mode overflow passed meanwhile suspends it and
signals then.  Handles do not outlive the daemon: a file the program opens
again finds its vperfctr through ``PerfctrDevice.adopt``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from hwperfd.counters import codec
from hwperfd.counters.durable import Item
from hwperfd.counters.percpu import load_pmus, save_pmus
from hwperfd.counters.threads import ThreadContext
from hwperfd.cpu.core import CpuControl, CpuState, PmcState
from hwperfd.host import tasks
from hwperfd.perfctr import control as ctl
from hwperfd.perfctr.driver import GLOBAL_SERVICE, SERVICE, VIRTUAL_SERVICE, PerfctrDevice, Vperfctr
from structs import perfctr as abi

log = logging.getLogger(__name__)

codec.register(CpuState, CpuControl, PmcState, ctl.PerfctrControl, tasks.Task)

KIND = "perfctr"
GLOBAL = "global"
_FLAGS = ("si_signo", "flags", "iresume_cstatus", "signalled", "deferred", "quiet", "holds")


def _fingerprint(ctx: ThreadContext, perfctr: Vperfctr) -> tuple[Any, ...]:
    return (id(ctx), id(perfctr), ctx.cpu.version, ctx.running, perfctr.state.cstatus, id(perfctr.user),
            perfctr.si_signo, perfctr.flags, perfctr.iresume_cstatus, perfctr.signalled, perfctr.deferred,
            perfctr.quiet, perfctr.holds, len(perfctr.holders))  # fmt: skip


def _vperfctr_form(device: PerfctrDevice, ctx: ThreadContext, perfctr: Vperfctr) -> dict[str, Any]:
    perfctr.sync()
    form: dict[str, Any] = {name: int(getattr(perfctr, name)) for name in _FLAGS}
    form.update(
        ctx=device.virtual.threads.saved(ctx),
        state=codec.encode(perfctr.state),
        user=codec.encode(perfctr.user),
        owner=codec.encode(perfctr.owner),
        sums=list(perfctr.sums),
        holders=list(perfctr.holders),
    )
    return form


def setup(device: PerfctrDevice, tids: Collection[int] | None) -> dict[str, Item]:
    items: dict[str, Item] = {}
    threads = device.virtual.threads
    for ctx in threads.contexts(SERVICE) if tids is None else threads.on_threads(SERVICE, tids):
        perfctr = ctx.data
        if isinstance(perfctr, Vperfctr) and perfctr.ctx is ctx:
            items[f"v{ctx.tid}"] = Item(
                ctx.pid, ctx.start, ctx.owner, _fingerprint(ctx, perfctr),
                lambda ctx=ctx, perfctr=perfctr: _vperfctr_form(device, ctx, perfctr),  # type: ignore[misc]
                ctx.tid,
            )  # fmt: skip
    g = device.globl
    if g.nr_active or g.ours:
        fp = (g.ours, g.nr_active, tuple(id(u) for u in g.users), tuple(s.cstatus for s in g.states))
        items[GLOBAL] = Item(0, 0, 0, fp, lambda: _global_form(device))
    return items


def _global_form(device: PerfctrDevice) -> dict[str, Any]:
    g = device.globl
    return {
        "states": codec.encode(g.states), "users": codec.encode(g.users), "nr_active": g.nr_active,
        "ours": int(g.ours), "pmus": save_pmus(device.cpus) if g.ours else None, "seen": g._seen.saved(),
    }  # fmt: skip


def restore(device: PerfctrDevice, key: str, pid: int, start: int, body: Any) -> bool:
    if not isinstance(body, dict):
        raise codec.CodecError("not a perfctr record")
    if key == GLOBAL:
        return _restore_global(device, body)
    if not key.startswith("v"):
        raise codec.CodecError("not a perfctr record")
    state, user, owner = (codec.decode(body.get(name)) for name in ("state", "user", "owner"))
    sums, holders = body.get("sums"), body.get("holders")
    if not isinstance(state, CpuState) or not isinstance(user, ctl.PerfctrControl):
        raise codec.CodecError("not a vperfctr")
    if owner is not None and not isinstance(owner, tasks.Task):
        raise codec.CodecError("not a vperfctr's owner")
    if not isinstance(sums, list) or len(sums) != abi.NR_CTRS:
        raise codec.CodecError("not a vperfctr's sums")
    if not isinstance(holders, list) or not all(type(h) is int for h in holders):
        raise codec.CodecError("not a vperfctr's holders")
    flags = {name: body.get(name) for name in _FLAGS}
    if not all(type(v) is int for v in flags.values()) or not all(type(v) is int for v in sums):
        raise codec.CodecError("not a vperfctr")
    virtual = device.virtual
    if flags["holds"] and device.cpus.reservation.reserve(VIRTUAL_SERVICE) is not None:
        log.warning("vperfctr of thread %s not restored: the hardware is taken", key[1:])
        return False
    ctx = virtual.threads.restore(SERVICE, body.get("ctx"), None)
    if ctx is None or str(ctx.tid) != key[1:] or ctx.pid != pid:
        if ctx is not None:
            virtual.threads.detach(SERVICE, ctx.tid)
        if flags["holds"] and not virtual.live:
            device.cpus.reservation.release(VIRTUAL_SERVICE)
        return False
    perfctr = Vperfctr(ctx, ctx.cpu, owner, state, user, sums=sums, holders=holders[:16])
    for name in _FLAGS:
        setattr(perfctr, name, type(getattr(perfctr, name))(flags[name]))
    ctx.data = perfctr
    if perfctr.holds:
        virtual.live += 1
    for tgid in {ctx.pid, *perfctr.holders}:
        device.adoptable.setdefault(tgid, []).append(perfctr)
    return True


def _restore_global(device: PerfctrDevice, body: dict[str, Any]) -> bool:
    g = device.globl
    states, users = codec.decode(body.get("states")), codec.decode(body.get("users"))
    n = len(device.cpus)
    if not (isinstance(states, list) and len(states) == n and all(isinstance(s, CpuState) for s in states)):
        raise codec.CodecError("global states of another machine")
    if not (isinstance(users, list) and len(users) == n and all(isinstance(u, ctl.PerfctrControl) for u in users)):
        raise codec.CodecError("global controls of another machine")
    nr_active, ours = body.get("nr_active"), body.get("ours")
    if type(nr_active) is not int or type(ours) is not int:
        raise codec.CodecError("not perfctr's global counters")
    if ours:
        holder = device.cpus.reservation.reserve(GLOBAL_SERVICE)
        if holder is not None:
            log.warning("perfctr global counters not restored: the hardware is taken by %s", holder)
            return False
        try:
            load_pmus(device.cpus, body.get("pmus"))
            g._seen.load(body.get("seen"))
        except ValueError:
            device.cpus.reservation.release(GLOBAL_SERVICE)
            raise
    g.states, g.users, g.nr_active, g.ours = states, users, nr_active, bool(ours)
    return True
