"""cpc_bind_cpu: one CPU whatever runs there, root only, one set per CPU,
per-LWP sets invalidated and refused while it lasts, and the reservation
every personality shares (pctr, IRIX system mode)."""

from __future__ import annotations

import errno
import fcntl
import os
import struct

import pytest

from hwperfd.client import Control, spec
from hwperfd.cpu.models import MODELS
from structs.pctr import PCIOCS, PCTR_EN, PCTR_U
from tests.cpc.conftest import events

MS = 1_000_000


def test_a_cpu_bind_counts_everything_on_that_cpu_exactly(sparc, driver):
    d = driver(sparc)
    d("add EC_ref 0 6")
    d("add EC_hit 0 6")
    assert d("bindcpu 1") == "ok"
    sparc.control("advance-cpu 1 1ms 1ms")
    sparc.control("advance-cpu 0 5ms")  # another CPU: not this set's
    ref = events("dcache_misses icache_misses", 2 * MS)
    hit = events("dcache_misses icache_misses", 2 * MS, "scache_dcache_misses scache_icache_misses")
    reply = d("sample")
    assert reply == f"ok {ref} {hit} tick {2 * MS}"  # the CPU's cycles since the bind
    assert "cpu 1 bound" in (sparc.path / "cpc").read_text()
    assert d("unbind") == "ok"
    assert "reserved-by -" in (sparc.path / "cpc").read_text()


def test_one_set_per_cpu_and_no_per_lwp_binds_meanwhile(sparc, driver):
    lwp = driver(sparc)
    lwp("add EC_ref 0 2")
    assert lwp("bind") == "ok"
    owner = driver(sparc)
    owner("add Cycle_cnt 0 2")
    assert owner("bindcpu 0") == "ok"
    other = driver(sparc)
    other("add Cycle_cnt 0 2")
    assert other("bindcpu 0") == "err EAGAIN"  # CPU 0 is bound
    assert other("bindcpu 1") == "ok"  # CPU 1 is not
    assert other("unbind") == "ok"
    assert lwp("sample") == "err EAGAIN"  # invalidated by the first CPU bind
    assert lwp("bind") == "err EAGAIN"  # per-LWP counters unavailable meanwhile
    assert owner("unbind") == "ok"
    assert lwp("bind") == "ok"  # available again
    assert lwp.values() == [0]


def test_binding_a_cpu_needs_privilege_and_a_cpu_that_exists(sparc, driver):
    d = driver(sparc, nobody=True)
    d("handler")
    d("add Cycle_cnt 0 2")
    assert d("bindcpu 0") == "err EACCES"
    root = driver(sparc)
    root("handler")
    root("add Cycle_cnt 0 2")
    assert root("bindcpu 2") == "err EINVAL"  # two CPUs
    assert any(line.startswith("handler cpc_bind_cpu 10 ") for line in root.handled)  # CPC_PBIND_FAILED


def test_closing_the_binding_process_frees_the_cpu(sparc, driver):
    d = driver(sparc)
    d("add Cycle_cnt 0 2")
    assert d("bindcpu 0") == "ok"
    d.proc.kill()
    d.proc.wait()
    again = driver(sparc)
    again("add Cycle_cnt 0 2")
    assert again("bindcpu 0") == "ok"


def _pctr_set(mount, function: int) -> None:
    fd = os.open(mount.path / "pctr", os.O_WRONLY)
    try:
        fcntl.ioctl(fd, PCIOCS[0], struct.pack("I", function))
    finally:
        os.close(fd)


def test_pctr_and_cpc_cpu_binds_share_the_reservation(intel, driver):
    d = driver(intel)
    d("add INST_RET 0 2")
    assert d("bindcpu 0") == "ok"
    with pytest.raises(OSError) as busy:
        _pctr_set(intel, 0xC0 | PCTR_U | PCTR_EN)
    assert busy.value.errno == errno.EBUSY  # pctr's dialect
    assert d("unbind") == "ok"
    _pctr_set(intel, 0xC0 | PCTR_U | PCTR_EN)
    try:
        other = driver(intel)
        other("add INST_RET 0 2")
        assert other("bindcpu 0") == "err EAGAIN"  # libcpc's dialect
        assert other("bind") == "err EAGAIN"
    finally:
        _pctr_set(intel, 0)


def test_irix_system_mode_and_cpc_share_the_reservation(mips, driver):
    control = Control(mount=mips.path)
    try:
        d = driver(mips)
        d("add Cycles 0 2")
        assert d("bind") == "ok"
        control.enable_system({0: spec(0, 2)})  # IRIX system mode takes the counters
        assert d("sample") == "err EAGAIN"  # the LWP's set is invalid from now on
        other = driver(mips)
        other("add Cycles 0 2")
        assert other("bindcpu 0") == "err EAGAIN"
        control.release_system()
        assert d("sample") == "err EAGAIN"
        assert other("bindcpu 0") == "ok"
        with pytest.raises(OSError) as busy:
            control.enable_system({0: spec(0, 2)})
        assert busy.value.errno == errno.EBUSY  # IRIX's dialect
        assert other("unbind") == "ok"
    finally:
        try:
            control.release_system()
        except OSError:
            pass
        control.close()


def test_the_models_caps_follow_their_overflow_hardware():
    assert MODELS["ultrasparc"].overflow_interrupt is False
    assert MODELS["intel"].overflow_interrupt and MODELS["intel"].overflow_identified


def test_a_set_whose_counters_another_personality_took_refuses_restart_too(mips, driver):
    """Not only a sample finds the set invalid: restart (and preset) on it are EAGAIN as well, and it stops counting."""
    control = Control(mount=mips.path)
    try:
        d = driver(mips)
        d("add Cycles 0 2")
        assert d("bind") == "ok"
        control.enable_system({0: spec(0, 2)})
        assert d("restart") == "err EAGAIN"
        assert d("sample") == "err EAGAIN"
    finally:
        control.release_system()
        control.close()
