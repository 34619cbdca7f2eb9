"""What reading a process file or the control node shows a person."""

from __future__ import annotations

from hwperfd.counters.kernel import CounterKernel, CounterView
from hwperfd.counters.request import SLOTS_PER_COUNTER, CounterRequest
from structs import mode_text


def process_summary(pid: int, comm: str, kernel: CounterKernel, start: int = 0) -> str:
    view = kernel.view(pid, start)
    lines = [f"pid {pid} ({comm})", f"profile {kernel.profile(pid).name}"]
    if view is None:
        lines.append("counters not in use")
        return "\n".join(lines) + "\n"
    lines += _counters(view, kernel)
    tick = kernel.profiling_signal(pid)
    if tick or kernel.is_suspended(pid):
        profiling = f"profiling: a PC tick on signal {tick} per overflow" if tick else "counting"
        lines.append(profiling + (", suspended (HWPERF_PROF_CTR_SUSP)" if kernel.is_suspended(pid) else ""))
    # Machine-readable: one line per process folded into this one (perfex -mp).
    for child, child_comm, counts in kernel.descendants(pid):
        lines.append(f"descendant {child} {child_comm.replace(' ', '_') or '?'} " + " ".join(map(str, counts)))
    # And one per thread, with its CPU time (perfex -mp's per-thread blocks).
    for tid, user_ns, system_ns in kernel.threads(pid):
        lines.append(f"thread {tid} {user_ns} {system_ns}")
    return "\n".join(lines) + "\n"


def _counters(view: CounterView, kernel: CounterKernel) -> list[str]:
    events = kernel.cpus.type.events
    lines = [
        f"counters {view.state.value}, user mode, generation {view.generation}, signal {view.request.signal}",
        f"cpu {kernel.cpus.type.name} x{len(kernel.cpus)} @ {float(kernel.cpus.mhz):g} MHz, "
        f"enabled {view.enabled_ns / 1e9:.6f} s",
        f"{'slot':>4} {'ctr':>3} {'ev':>3} {'mode':<4} {'event':<48} {'count':>20} {'active':>7} {'threshold':>10}",
    ]
    for slot in view.request.in_use:
        control = CounterRequest.control(view.request.specs[slot])
        counter = slot // SLOTS_PER_COUNTER
        described = events.on_counter(counter, control.event)
        active = 100.0 * view.active_ns[slot] / view.enabled_ns if view.enabled_ns else 0.0
        lines.append(
            f"{slot:>4} {counter:>3} {control.event:>3} {mode_text(control.mode):<4} "
            f"{(described.name if described else '?')[:48]:<48} {view.counts[slot]:>20} "
            f"{active:>6.1f}% {view.request.thresholds[slot]:>10}"
        )
    return lines


def control_summary(kernel: CounterKernel, clock_name: str, mount: str) -> str:
    system = "held" if kernel.system_mode else "free"
    return (
        f"hwperfd at {mount}\n"
        f"cpu {kernel.cpus.type.name} x{len(kernel.cpus)} @ {float(kernel.cpus.mhz):g} MHz\n"
        f"model {kernel.cpus.model.name}: {kernel.cpus.model.description}, {kernel.cpus.model.counters} counters "
        f"of {kernel.cpus.model.width} bits\n"
        f"hardware reserved by {kernel.cpus.reservation.holder or 'nobody'}\n"
        f"clock {clock_name}\n"
        f"default profile {kernel.default_profile.name}\n"
        f"system mode {system}\n"
        f"processes with counters {len(kernel.tracked())}\n"
    )
