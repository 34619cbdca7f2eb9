"""The inner layers of the cpc personality: names per model, raw codes,
generic events, and a bound set's 64-bit virtual counters on a PMU."""

from __future__ import annotations

from fractions import Fraction

from hwperfd.cpc.events import EventNames, cpc_name, raw_code
from hwperfd.cpc.sets import U64, BoundSet, Request
from hwperfd.cpu.core import X86_EN, X86_INT, X86_USR, PmuCpu
from hwperfd.cpu.models import MODELS

RATES = {"graduated_instructions": Fraction(1), "cycles": Fraction(1)}


def test_names_become_cpc_names_and_duplicates_keep_the_first():
    assert cpc_name("Dispatched FPU operations") == "Dispatched_FPU_operations"
    names = EventNames(MODELS["intel"])
    assert "RS_UOPS_DISPATCHED" in names.names(0) and "RS_UOPS_DISPATCHED_0xa1" in names.names(0)
    assert names.resolve("RS_UOPS_DISPATCHED", 0).code == 0xA0


def test_raw_codes_read_as_strtol_base_0_and_must_fit_the_select_field():
    assert (raw_code("0x3c"), raw_code("074"), raw_code("60"), raw_code("0"), raw_code("x")) == (60, 60, 60, None, None)
    sparc = EventNames(MODELS["ultrasparc"])
    assert sparc.resolve("0xc", 0).event.name == "EC_ref" and sparc.resolve("0xc", 1).event.name == "EC_hit"
    assert sparc.resolve("0x40", 0) is None  # six bits of select


def test_generic_events_are_on_the_pics_whose_events_count_the_kind():
    sparc = EventNames(MODELS["ultrasparc"])
    assert sparc.resolve("PAPI_tot_cyc", 0).event.name == "Cycle_cnt"
    assert sparc.resolve("PAPI_br_msp", 0) is None and sparc.resolve("PAPI_br_msp", 1) is not None


def _set(precise: bool, *presets_flags: tuple[int, int]) -> tuple[BoundSet, PmuCpu]:
    cpu = PmuCpu(0, MODELS["intel"], Fraction(1000))
    reqs = [Request(i, "INST_RET", i, 0xC0 | X86_USR | X86_EN | (X86_INT if f & 1 else 0), p, f)
            for i, (p, f) in enumerate(presets_flags)]  # fmt: skip
    bset = BoundSet(reqs, precise)
    bset.start(cpu)
    return bset, cpu


def test_a_value_passing_uint64_max_freezes_the_set_only_for_its_notify_request():
    bset, cpu = _set(True, (U64 - 10, 0x2), (U64 - 1000, 0x3))
    cpu.run(1000, 0, RATES)  # 1000 events on each counter
    assert bset.sync(cpu) is True  # the second request notifies
    assert bset.values == [990, 0] and bset.frozen
    cpu.run(1000, 0, RATES)
    bset.sync(cpu)
    assert bset.values == [990, 0]  # frozen
    bset.restart(cpu)
    assert bset.values == [U64 - 10, U64 - 1000] and not bset.frozen


def test_without_precise_overflow_any_wrap_signals_when_a_request_notifies():
    precise, cpu = _set(True, (U64 - 10, 0x2), (0, 0x3))
    cpu.run(100, 0, RATES)
    assert precise.sync(cpu) is False  # the wrapped request does not notify
    imprecise, cpu = _set(False, (U64 - 10, 0x2), (0, 0x3))
    cpu.run(100, 0, RATES)
    assert imprecise.sync(cpu) is True


def test_an_inherited_copy_starts_from_the_presets_or_uint64_max_for_emt():
    bset, cpu = _set(True, (5, 0x2), (U64 - 1000, 0x3))
    cpu.run(100, 0, RATES)
    bset.sync(cpu)
    child_cpu = PmuCpu(0, MODELS["intel"], Fraction(1000))
    child = bset.inherited(child_cpu, emt=True)
    assert child.values == [5, U64 - 1] and child.frozen
    plain = bset.inherited(child_cpu, emt=False)
    assert plain.values == [5, U64 - 1000] and not plain.frozen


def test_raw_codes_take_only_what_strtol_reads_to_the_end():
    assert (raw_code(" 0x3c"), raw_code("-1"), raw_code("+074")) == (60, -1, 60)
    assert (raw_code("1_0"), raw_code("0x_3c"), raw_code("60 "), raw_code("0x"), raw_code("09")) == (None,) * 5
