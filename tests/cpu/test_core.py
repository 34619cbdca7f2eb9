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
