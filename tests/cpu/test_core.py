"""The PMU core: models as data, the counter hardware, seed 002's state machine, the reservation."""

from __future__ import annotations

from fractions import Fraction

import pytest

from hwperfd.cpu import core
from hwperfd.cpu.core import (
    X86_EN,
    X86_INT,
    X86_INV,
    X86_OS,
    X86_USR,
    CpuControl,
    CpuState,
    PmuCpu,
)
from hwperfd.cpu.events import KINDS
from hwperfd.cpu.models import MODELS
from hwperfd.cpu.pmu import CpuSet
from hwperfd.cpu.profiles import WorkloadProfile
from hwperfd.cpu.reservation import Reservation

UNIT = WorkloadProfile.named("unit").rates
BALANCED = WorkloadProfile().rates
MS = 1_000_000  # ns


def intel(mhz: int = 1000) -> PmuCpu:
    return PmuCpu(0, MODELS["intel"], Fraction(mhz))


def test_every_model_maps_events_only_to_known_kinds():
    for model in MODELS.values():
        assert model.counters >= 2 and model.read_width <= model.width
        for event in model.events:
            assert all(kind in KINDS for kind, _ in event.counts), (model.name, event.name)


def test_the_models_have_the_shapes_their_sources_give():
    assert (MODELS["intel"].counters, MODELS["intel"].width, MODELS["intel"].vendor) == (2, 40, "GenuineIntel")
    assert (MODELS["amd"].counters, MODELS["amd"].width, MODELS["amd"].read_width) == (4, 48, 40)
    sparc = MODELS["ultrasparc"]
    assert sparc.event(0xC, 0).name == "EC_ref" and sparc.event(0xC, 1).name == "EC_hit"
    # The IRIX tables, as they are: R10000 event 16 + e is hwp_ev e on counter 1.
    assert MODELS["r10000"].event(0, 1).name == "Cycles" and MODELS["r10000"].event(9, 1).name == "Primary data cache misses"
    assert MODELS["r12000"].event(25, 0).name == MODELS["r12000"].event(25, 1).name == "Primary data cache misses"


def test_cpuset_takes_every_model_and_irix_sees_no_events_off_mips():
    for name in MODELS:
        cpus = CpuSet(2, name)
        assert cpus.model.name == name and cpus.mhz == MODELS[name].default_mhz and len(cpus.pmus) == 2
    assert not CpuSet(1, "intel").valid_event(0, 0)
    assert CpuSet(1, "r12000").valid_event(1, 31)
    with pytest.raises(ValueError, match="known: r10000"):
        CpuSet(1, "pentium")


def test_an_event_with_no_kind_counts_zero():
    cpu = intel()
    cpu.program(0, 0x06 | X86_USR | X86_EN)  # SEGMENT_REG_LOADS: no kind
    cpu.program(1, 0x3C | X86_USR | X86_EN)
    cpu.run(MS, 0, UNIT)
    assert (cpu.rdpmc(0), cpu.rdpmc(1)) == (0, MS)


def test_modes_select_user_and_system_time_exactly():
    cpu = intel(3)  # 3 cycles per ns * 1/1000
    cpu.program(0, 0xC0 | X86_OS | X86_EN)
    cpu.program(1, 0xC0 | X86_USR | X86_OS)  # no EN: off
    cpu.run(7, 5, BALANCED)  # 5 ns of system time = 15/1000 cycles
    assert cpu.rdpmc(0) == 0
    cpu.run(0, 1_000_000, BALANCED)  # the carried fraction is not lost
    assert cpu.rdpmc(0) == (5 + 1_000_000) * 3 * 8 // 10 // 1000
    assert cpu.rdpmc(1) == 0


def test_unit_masks_share_mesi_events_and_counter_masks_are_steady_conditions():
    cpu = intel()
    cpu.program(0, 0x29 | (0b0011 << 8) | X86_USR | X86_EN)  # L2_LD, two of four states
    cpu.program(1, 0xC0 | (1 << 24) | X86_USR | X86_EN)  # >= 1 instruction per cycle: never at 0.8
    cpu.run(MS, 0, BALANCED)
    assert (cpu.rdpmc(0), cpu.rdpmc(1)) == (MS // 100 // 2, 0)
    cpu.program(1, 0xC0 | (1 << 24) | X86_INV | X86_USR | X86_EN)  # inverted: every cycle
    cpu.run(MS, 0, BALANCED)
    assert cpu.rdpmc(1) == MS


def test_br_inst_retired_unit_mask_selects_outcomes_that_add_up_to_every_branch():
    """Core 2's 0xC4: mask 0 counts every retired branch, each bit one
    outcome (predicted/mispredicted, not taken/taken); PAPI_BR_NTK (0x3) is
    not PAPI_BR_INS, and the four parts sum to the whole."""
    parts = {}
    for mask in (0x0, 0x1, 0x2, 0x4, 0x8, 0x3, 0xC, 0xF):
        cpu = intel()
        cpu.program(0, 0xC4 | (mask << 8) | X86_USR | X86_EN)
        cpu.run(MS, 0, BALANCED)
        parts[mask] = cpu.rdpmc(0)
    assert parts[0x0] == parts[0xF] == MS * 11 // 100  # 0.11 branches a cycle, 1 MHz x 1 ms
    assert parts[0x1] + parts[0x2] + parts[0x4] + parts[0x8] == parts[0x0]
    assert (parts[0x3], parts[0xC]) == (MS * 4 // 100, MS * 7 // 100)  # not taken, taken (0.07)
    assert parts[0x8] == MS * 2 // 1000 and parts[0x2] == MS * 4 // 1000
    assert MODELS["intel"].event(0xC4, 0).part(0x3).counts != MODELS["intel"].event(0xC4, 0).counts


def test_amd_counters_are_48_bits_read_as_40():
    cpu = PmuCpu(0, MODELS["amd"], Fraction(1000))
    cpu.program(0, 0x76 | X86_USR | X86_EN)
    cpu.write(0, (1 << 40) - 10)
    cpu.run(20, 0, UNIT)  # 20 ns = 20 cycles
    assert cpu.rdpmc(0) == 10  # bit 40 is set in the register, not in what a read returns
    assert cpu.total(0) == 20


def test_a_mode_counters_keep_sum_plus_start_across_suspend_and_resume():
    cpu = intel()
    state = CpuState()
    core.update_control(state, cpu.model, CpuControl(True, 2, 0, (1, 0), (0x3C | X86_USR | X86_EN, 0xC0 | X86_USR | X86_EN)))
    assert state.has_tsc and (state.nractrs, state.nrictrs) == (2, 0)
    cpu.write(1, 12345)  # a start value that is not 0
    core.resume(state, cpu, tsc_now=100)
    assert state.pmc[0].start == 12345
    cpu.run(MS, 0, UNIT)
    core.suspend(state, cpu, tsc_now=100 + MS)
    cpu.run(MS, 0, UNIT)  # suspended: the counters were stopped
    core.resume(state, cpu, tsc_now=5 * MS)
    cpu.run(2 * MS, 0, UNIT)
    core.sample(state, cpu, tsc_now=7 * MS)
    assert core.read_sums(state) == (3 * MS, [3 * MS, 3 * MS])


def test_i_mode_counters_preset_overflow_and_reload():
    cpu = intel()
    state = CpuState()
    control = CpuControl(False, 1, 1, (0, 1), (0x3C | X86_USR | X86_EN, 0x3C | X86_USR | X86_EN | core.X86_INT), (0, -1000))
    core.update_control(state, cpu.model, control)
    core.resume(state, cpu, 0)
    assert cpu.rdpmc(1) == (1 << 40) - 1000
    cpu.run(999, 0, UNIT)  # 999 cycles: not yet
    assert core.identify_overflow(state, cpu) == 0
    cpu.run(2501, 0, UNIT)  # 3500 in all: overflowed (three times, reloaded each time)
    core.suspend(state, cpu, 0)
    assert core.identify_overflow(state, cpu) == 0b10
    assert state.pmc[1].start == (1 << 40) - 1000
    core.ireload(state)
    core.resume(state, cpu, 0)
    assert cpu.rdpmc(1) == (1 << 40) - 1000
    assert core.read_sums(state)[1] == [3500, 3500]


def test_update_control_refuses_what_the_hardware_cannot_do():
    model = MODELS["intel"]
    ev = 0xC0 | X86_USR | X86_EN
    bad = [
        CpuControl(False, 3, 0, (0, 1, 2), (ev, ev, ev)),  # three counters on a two-counter CPU
        CpuControl(False, 2, 0, (0, 0), (ev, ev)),  # one counter twice
        CpuControl(False, 1, 0, (0,), (0x01 | X86_EN,)),  # no such event
        CpuControl(False, 0, 1, (0,), (ev,), (5,)),  # an i-mode preset that never overflows
    ]
    for control in bad:
        with pytest.raises(core.ControlError):
            core.update_control(CpuState(), model, control)
    with pytest.raises(core.ControlError, match="global"):
        core.update_control(CpuState(), model, CpuControl(False, 0, 1, (0,), (ev,), (-5,)), is_global=True)


def test_the_tsc_counts_at_the_models_clock():
    assert intel(2400).tsc.at(1_000_000_000) == 2_400_000_000
    assert PmuCpu(0, MODELS["r10000"], Fraction(195)).tsc.at(1000) == 195


def test_the_reservation_names_its_holder():
    reservation = Reservation()
    assert reservation.reserve("pctr") is None
    assert reservation.reserve("pctr") is None  # the holder may reserve again
    assert reservation.reserve("irix-system-mode") == "pctr"
    reservation.release("irix-system-mode")  # not the holder: ignored
    assert reservation.holder == "pctr"
    reservation.release("pctr")
    assert reservation.reserve("irix-system-mode") is None


def test_a_counter_counts_what_it_was_last_programmed_for_and_knows_its_interrupt():
    cpu = PmuCpu(0, MODELS["intel"], Fraction(1000))
    assert not cpu.interrupts
    cpu.program(0, 0x3C | X86_EN | X86_USR | X86_INT)
    assert cpu.interrupts and cpu.selection(0).interrupt and cpu.selection(0).user
    cpu.program(0, 0x3C | X86_EN | X86_OS)  # reprogrammed: the decoded selection follows
    assert not cpu.interrupts and cpu.selection(0).kernel and not cpu.selection(0).user
    cpu.run(1000, 2000, {"cycles": Fraction(1)})
    assert cpu.rdpmc(0) == 2000


def _imode(model: str, nractrs: int, iresets: tuple[int, ...]) -> tuple[PmuCpu, CpuState]:
    """A thread's PMU (frozen at an interrupting overflow) with ``nractrs``
    a-mode and one i-mode cycles counter per ``iresets`` entry."""
    cpu = PmuCpu(0, MODELS[model], Fraction(1000), freeze=True)
    n = nractrs + len(iresets)
    sel = tuple(0x76 if model == "amd" else 0x3C for _ in range(n))
    sel = tuple(s | X86_USR | X86_EN | (X86_INT if i >= nractrs else 0) for i, s in enumerate(sel))
    state = CpuState()
    core.update_control(state, cpu.model, CpuControl(True, nractrs, len(iresets), tuple(range(n)), sel,
                                                    (0,) * nractrs + iresets))  # fmt: skip
    core.resume(state, cpu, 0)
    return cpu, state


def _settle(state: CpuState, cpu: PmuCpu) -> int:
    """virtual.c's interrupt path: suspend, identify, and the handler's iresume."""
    if not cpu.frozen:
        return 0
    core.suspend(state, cpu, 0)
    mask = core.identify_overflow(state, cpu)
    core.ireload(state)
    core.resume(state, cpu, 0)
    return mask


def test_an_interrupting_overflow_stops_every_counter_at_the_overflowing_event():
    cpu, state = _imode("intel", 1, (-1000,))
    assert cpu.run(2500, 0, UNIT) == 0b10  # the 1000th cycle overflows: the rest of the burst counts nothing
    assert cpu.frozen and cpu.run(10**6, 0, UNIT) == 0
    core.suspend(state, cpu, 0)
    assert core.read_sums(state)[1] == [1000, 1000]  # a-mode stopped with it
    assert core.identify_overflow(state, cpu) == 0b10 and not cpu.frozen


def test_the_i_mode_sum_is_signals_times_the_period_plus_the_partial_one():
    cpu, state = _imode("intel", 1, (-1000,))
    signals = 0
    for burst in [300, 999, 1, 2500, 7, 1993, 1000, 12345]:
        cpu.run(burst, 0, UNIT)
        signals += bool(_settle(state, cpu))
    core.sample(state, cpu, 0)
    a_sum, i_sum = core.read_sums(state)[1]
    partial = cpu.raw(1) - ((1 << 40) - 1000)
    assert i_sum == a_sum == signals * 1000 + partial and 0 <= partial < 1000


@pytest.mark.parametrize(("model", "iresets"), [("intel", (-100, -150)), ("amd", (-300, -200, -100))])
def test_iresume_reloads_only_what_overflowed_so_each_counter_keeps_its_period(model, iresets):
    cpu, state = _imode(model, 0, iresets)
    fired = [0] * len(iresets)
    masks = set()
    for _ in range(20_000):
        cpu.run(1, 0, UNIT)
        mask = _settle(state, cpu)
        masks.add(mask)
        for i in range(len(iresets)):
            fired[i] += bool(mask & (1 << i))
    assert fired == [20_000 // -r for r in iresets]  # each at its own period
    core.sample(state, cpu, 0)
    assert core.read_sums(state)[1] == [20_000] * len(iresets)
    # A mask names exactly the counters that overflowed: together when their periods meet.
    assert masks == ({0, 0b01, 0b10, 0b11} if model == "intel" else {0, 0b100, 0b101, 0b110, 0b111})
