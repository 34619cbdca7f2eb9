"""libcpc's set-up in the set-up store (docs/restart.md): each LWP's bound
set (requests, presets, flags, frozen on an overflow, its thread's context
as of the last change) and the CPU bindings.

Values are not kept: a put-back set counts its thread's (or CPU's) time
since the record was written, downtime included, at its next look, so an
overflow passed meanwhile freezes the set and owes its SIGEMT then.  A CPU
binding was held by an open file: after a restart, the first call its
process makes through the node again holds it (``CpuBinding.holder``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from hwperfd.counters import codec
from hwperfd.counters.durable import Item
from hwperfd.counters.percpu import load_pmus, save_pmus
from hwperfd.counters.threads import ThreadContext
from hwperfd.cpc.device import SERVICE, CpcDevice, CpuBinding, LwpBinding
from hwperfd.cpc.sets import BoundSet, Request

codec.register(LwpBinding, BoundSet, Request)

KIND = "cpc"
CPUS = "cpus"


def _set_fingerprint(bset: BoundSet) -> tuple[Any, ...]:
    return (id(bset), bset.epoch, bset.frozen, bset.invalid, bset.enabled, bset.overflows,
            tuple(r.preset for r in bset.requests))  # fmt: skip


def setup(device: CpcDevice, tids: Collection[int] | None) -> dict[str, Item]:
    items: dict[str, Item] = {}
    threads = device.threads
    if threads is not None:
        for ctx in threads.contexts(SERVICE) if tids is None else threads.on_threads(SERVICE, tids):
            binding = ctx.data
            if isinstance(binding, LwpBinding):
                fp = (id(ctx), id(binding), ctx.cpu.version, ctx.running, binding.deferred, len(binding.execs),
                      *_set_fingerprint(binding.set))  # fmt: skip
                items[f"l{ctx.tid}"] = Item(ctx.pid, ctx.start, ctx.owner, fp,
                                            lambda ctx=ctx: _lwp_form(device, ctx), ctx.tid)  # type: ignore[misc]
    if device.cpu_bindings:
        fp = tuple((cpu, id(b), b.holder, *_set_fingerprint(b.set)) for cpu, b in sorted(device.cpu_bindings.items()))
        items[CPUS] = Item(0, 0, 0, fp, lambda: _cpus_form(device))
    return items


def _lwp_form(device: CpcDevice, ctx: ThreadContext) -> dict[str, Any]:
    assert device.threads is not None
    return {"ctx": device.threads.saved(ctx), "binding": codec.encode(ctx.data)}


def _cpus_form(device: CpcDevice) -> dict[str, Any]:
    bindings = []
    for cpu, b in sorted(device.cpu_bindings.items()):
        bindings.append([cpu, b.holder, device._process_start(b.holder) or 0 if b.holder else 0, codec.encode(b.set)])
    return {"bindings": bindings, "seen": [list(t) for t in device._cpu_seen], "pmus": save_pmus(device.cpus)}


def restore(device: CpcDevice, key: str, pid: int, start: int, body: Any) -> bool:
    if not isinstance(body, dict):
        raise codec.CodecError("not a cpc record")
    if key == CPUS:
        return _restore_cpus(device, body)
    if not key.startswith("l") or device.threads is None:
        raise codec.CodecError("not a cpc record")
    binding = codec.decode(body.get("binding"))
    if not isinstance(binding, LwpBinding) or not isinstance(binding.set, BoundSet):
        raise codec.CodecError("not a bound set")
    if len(binding.set.values) != len(binding.set.requests) or not all(isinstance(r, Request)
                                                                       for r in binding.set.requests):
        raise codec.CodecError("not a bound set")  # fmt: skip
    ctx = device.threads.restore(SERVICE, body.get("ctx"), binding)
    if ctx is None:
        return False
    if str(ctx.tid) != key[1:] or ctx.pid != pid:
        device.threads.detach(SERVICE, ctx.tid)
        raise codec.CodecError("a record of another thread")
    device.restored(ctx)
    return True


def _restore_cpus(device: CpcDevice, body: dict[str, Any]) -> bool:
    bindings = body.get("bindings")
    if not isinstance(bindings, list):
        raise codec.CodecError("not cpc's CPU bindings")
    found: dict[int, CpuBinding] = {}
    for entry in bindings:
        if not isinstance(entry, list) or len(entry) != 4:
            raise codec.CodecError("not a CPU binding")
        cpu, holder, holder_start, form = entry
        bset = codec.decode(form)
        if type(cpu) is not int or not 0 <= cpu < len(device.cpus) or not isinstance(bset, BoundSet):
            raise codec.CodecError("not a CPU binding")
        if type(holder) is not int or type(holder_start) is not int:
            raise codec.CodecError("not a CPU binding")
        if holder and device._process_start(holder) == holder_start:
            found[cpu] = CpuBinding(cpu, bset, -1, holder)  # its process lives: its file comes back
    seen = body.get("seen")
    if not isinstance(seen, list) or len(seen) != len(device.cpus):
        raise codec.CodecError("CPU times of another machine")
    if not all(isinstance(t, list) and len(t) == 2 and all(type(v) is int for v in t) for t in seen):
        raise codec.CodecError("not CPU times")
    if not found:
        return False
    if device.cpus.reservation.reserve(SERVICE) is not None:
        return False
    try:
        load_pmus(device.cpus, body.get("pmus"))
    except ValueError:
        device.cpus.reservation.release(SERVICE)
        raise
    device._cpu_seen = [(t[0], t[1]) for t in seen]
    device.cpu_bindings.update(found)
    return True
