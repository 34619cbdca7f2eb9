"""libcpc through a real C client (tests/cpc/cpc_driver.c) on real mounts:
the model's description, the errors and their subcodes, exact per-LWP
counts under the manual clock, overflow, pctx, as root and as nobody."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import stat
import subprocess
import threading
import time

import pytest

from structs import cpc as abi
from structs.cpc import (
    CPC_ATTRIBUTE_OUT_OF_RANGE,
    CPC_CONFLICTING_REQS,
    CPC_INVALID_ATTRIBUTE,
    CPC_INVALID_EVENT,
    CPC_INVALID_PICNUM,
    CPC_PIC_NOT_CAPABLE,
    CPC_REQ_INVALID_FLAGS,
    CPC_RESOURCE_UNAVAIL,
)
from tests.cpc.conftest import events

MS = 1_000_000
U64 = 1 << 64
PRESET = U64 - 1000  # UINT64_MAX - 999: overflows on the 1000th event


def handled(d, fn: str, subcode: int) -> bool:
    return any(line.startswith(f"handler {fn} {subcode} ") for line in d.handled)


def test_the_node_is_world_readable_and_describes_the_model(sparc):
    info = os.stat(sparc.path / "cpc")
    assert stat.S_IMODE(info.st_mode) == 0o644 and info.st_uid == 0
    text = (sparc.path / "cpc").read_text()
    assert "npic 2\n" in text and "caps 0\n" in text and "attrs picnum\n" in text


def test_ultrasparc_names_ec_ref_on_pic0_and_ec_hit_on_pic1(sparc, driver):
    d = driver(sparc)
    out = d.lines_until("walk")
    assert out[0] == "ok npic 2 caps 0 cciname Sun UltraSPARC II (2 PICs)"
    pic0, generic0, pic1, generic1 = (line.split() for line in out[1:5])
    assert "0:EC_ref" in pic0 and "0:EC_hit" not in pic0
    assert "1:EC_hit" in pic1 and "1:EC_ref" not in pic1
    assert "0:PAPI_tot_cyc" in generic0 and "1:PAPI_tot_ins" in generic1
    everything = out[5].split()[1:]
    assert everything.count("Cycle_cnt") == 1 and {"EC_ref", "EC_hit"} <= set(everything)
    assert "PAPI_tot_cyc" in out[6].split()
    assert out[7].split()[1:] == ["picnum"]


def test_x86_and_mips_models_have_their_own_names_and_generic_ones(intel, mips, driver):
    walk = driver(intel).lines_until("walk")
    assert walk[0].startswith("ok npic 2 caps 3 ")  # overflow interrupt, precise
    assert "0:INST_RET" in walk[1].split() and "0:PAPI_tot_ins" in walk[2].split()
    assert walk[7].split()[1:] == ["picnum", "edge", "inv", "umask", "cmask"]
    walk = driver(mips).lines_until("walk")
    assert walk[0].startswith("ok npic 2 caps 3 ")
    assert "0:Cycles" in walk[1].split() and "1:Graduated_instructions" in walk[3].split()


def test_request_errors_reach_the_handler_with_their_subcodes(sparc, driver):
    d = driver(sparc)
    d("handler")
    assert d("add No_such_event 0 2") == "err EINVAL"
    assert handled(d, "cpc_set_add_request", CPC_INVALID_EVENT)
    assert d("add EC_ref 0 2 picnum=2") == "err EINVAL"
    assert handled(d, "cpc_set_add_request", CPC_INVALID_PICNUM)
    assert d("add EC_ref 0 2 picnum=1") == "err EINVAL"
    assert handled(d, "cpc_set_add_request", CPC_PIC_NOT_CAPABLE)
    assert d("add EC_ref 0 2 umask=1") == "err EINVAL"
    assert handled(d, "cpc_set_add_request", CPC_INVALID_ATTRIBUTE)
    assert d("bind") == "err EINVAL"  # an empty set
    assert d("add EC_ref 0 2") == "ok 0"
    assert d("bind 2") == "err EINVAL"  # not a set flag
    assert d("unbind") == "err EINVAL"  # nothing bound
    assert d("restart") == "err EINVAL"
    assert d("sample") == "err EINVAL"


def test_the_default_handler_prints_libcpcs_message(sparc, driver):
    d = driver(sparc)
    assert d("add No_such_event 0 2") == "err EINVAL"
    assert "libcpc: cpc_set_add_request: Unknown event\n" in d.close()


def test_bind_checks_flags_resources_and_the_ultrasparc_pcr(sparc, intel, driver):
    d = driver(sparc)
    d("handler")
    d("add EC_ref 0 2")
    d("add EC_hit 0 6")  # PIC1 counting system time too: one PCR holds both modes
    assert d("bind") == "err EINVAL"
    assert handled(d, "cpc_bind_curlwp", CPC_CONFLICTING_REQS)
    d("newset")
    d("add EC_ref 0 0x12")
    assert d("bind") == "err EINVAL"
    assert handled(d, "cpc_bind_curlwp", CPC_REQ_INVALID_FLAGS)
    d("newset")
    for _ in range(3):
        d("add Cycle_cnt 0 2")
    assert d("bind") == "err EINVAL"  # three requests, two counters
    assert handled(d, "cpc_bind_curlwp", CPC_RESOURCE_UNAVAIL)
    d("newset")
    d("add EC_ref 0 2")
    d("add 0x8 0 2 picnum=0")  # the raw code of IC_ref, on PIC0 too
    assert d("bind") == "err EINVAL"
    assert handled(d, "cpc_bind_curlwp", CPC_RESOURCE_UNAVAIL)
    x86 = driver(intel)
    x86("handler")
    x86("add INST_RET 0 2 umask=0x100")
    assert x86("bind") == "err EINVAL"
    assert handled(x86, "cpc_bind_curlwp", CPC_ATTRIBUTE_OUT_OF_RANGE)


def test_overflow_notification_on_a_model_without_interrupts_is_enotsup(sparc, driver):
    d = driver(sparc)
    d(f"add EC_ref {PRESET} 3")
    assert d("bind") == "err ENOTSUP"


def test_per_lwp_counts_are_exact_under_the_manual_clock(sparc, driver):
    d = driver(sparc)
    assert d("add EC_ref 0 2") == "ok 0"
    assert d("add EC_hit 0 2") == "ok 1"
    assert d("bind") == "ok"
    assert d.values() == [0, 0]
    sparc.control(f"advance-thread {d.tid} 1ms 1ms")
    ref = events("dcache_misses icache_misses", MS)
    hit = events("dcache_misses icache_misses", MS, "scache_dcache_misses scache_icache_misses")
    assert d.values() == [ref, hit]
    reply = d("sample")
    assert reply.endswith(f"tick {2 * MS}")  # the LWP's own cycles, user and system
    assert d("unbind") == "ok"
    assert d("sample") == "err EINVAL"


def test_system_mode_and_presets_and_raw_codes_and_generic_names(intel, driver):
    d = driver(intel)
    assert d("add PAPI_tot_ins 1000 6") == "ok 0"  # user and system, from a preset
    assert d("add 0x3c 0 4") == "ok 1"  # raw CPU_CLK_UNHALTED, system only
    assert d("bind") == "ok"
    intel.control(f"advance-thread {d.tid} 2ms 1ms")
    assert d.values() == [1000 + events("graduated_instructions", 3 * MS), events("cycles", MS)]


def test_another_thread_of_the_process_does_not_count_for_the_lwp(intel, driver):
    d = driver(intel)
    d("add INST_RET 0 2")
    d("bind")
    other = os.getpid()  # a thread elsewhere: advancing it moves nothing of the driver's
    intel.control(f"advance-thread {other} 5ms")
    assert d.values() == [0]


def test_overflow_freezes_the_set_and_delivers_sigemt_with_emt_cpcovf(intel, driver):
    d = driver(intel)
    d("emt")
    d(f"add INST_RET {PRESET} 3")
    d("add CPU_CLK_UNHALTED 0 2")
    assert d("bind") == "ok"
    intel.control(f"advance-thread {d.tid} 1us")  # 800 instructions: not yet
    assert d("overflows") == "ok 0 signo 0 code 0"
    intel.control(f"advance-thread {d.tid} 1us")  # 1600 in all: past UINT64_MAX
    assert _wait_overflows(d, 1) == "ok 1 signo 16 code 1"  # SIGEMT (SIGSTKFLT), EMT_CPCOVF
    frozen = d.values()
    assert frozen == [0, 1250]  # stopped at the overflowing event: the 1000th instruction, at cycle 1250
    intel.control(f"advance-thread {d.tid} 1ms")
    assert d.values() == frozen  # frozen until restarted
    assert d("restart") == "ok"
    assert d.values() == [PRESET, 0]  # every request from its preset
    assert d("preset 0 18446744073709551515") == "ok"  # UINT64_MAX - 100
    assert d("restart") == "ok"
    intel.control(f"advance-thread {d.tid} 1us")
    assert _wait_overflows(d, 2).startswith("ok 2 ")
    assert d.values() == [0, 126]  # the 101st instruction wrapped it: frozen there (cycle 126.25)


def _wait_overflows(d, n: int) -> str:
    import time

    deadline = time.monotonic() + 10
    while True:
        reply = d("overflows")
        if int(reply.split()[1]) >= n or time.monotonic() > deadline:
            return reply
        time.sleep(0.02)


def test_bind_pctx_counts_another_process_lwp_for_root_and_its_owner(intel, driver):
    target = subprocess.Popen(["sleep", "60"])
    try:
        d = driver(intel)
        d("add INST_RET 0 2")
        assert d(f"bindpctx {target.pid} 1") == "ok"
        intel.control(f"advance-thread {target.pid} 1ms")
        assert d.values() == [events("graduated_instructions", MS)]
        assert d(f"bindpctx {target.pid} 99999999") == "err ESRCH"
        nobody = driver(intel, nobody=True)
        nobody("add INST_RET 0 2")
        assert nobody(f"bindpctx {target.pid} 1") == "err EACCES"  # root's process
        assert d("unbind") == "ok"
    finally:
        target.kill()
        target.wait()


def test_an_unprivileged_user_counts_its_own_lwps(intel, driver):
    d = driver(intel, nobody=True)
    d("add INST_RET 0 2")
    assert d("bind") == "ok"
    intel.control(f"advance-thread {d.tid} 1ms")
    assert d.values() == [events("graduated_instructions", MS)]
    assert d("bindcpu 0") == "err EACCES"  # binding a CPU needs privilege


def test_enable_and_disable_only_apply_to_sets_another_process_bound(intel, driver):
    d = driver(intel)
    d("add INST_RET 0 2")
    d("bind")
    assert d("disable") == "err EINVAL"
    observer = driver(intel)
    observer("add INST_RET 0 2")
    assert observer(f"bindpctx {d.tid} 1") == "ok"  # replaces the LWP's own set
    assert d("disable") == "ok"
    intel.control(f"advance-thread {d.tid} 1ms")
    assert observer.values() == [0]
    assert d("enable") == "ok"
    intel.control(f"advance-thread {d.tid} 1ms")
    assert observer.values() == [events("graduated_instructions", MS)]


def test_garbage_from_a_client_gets_an_errno_and_changes_nothing(intel, driver):
    """Random transport structs on every call: each answers an errno (in the reply or from the ioctl), never EIO, and
    the daemon still serves a good client afterwards."""
    import random

    rng = random.Random(11)
    fd = os.open(intel.path / "cpc", os.O_RDONLY)
    allowed = {0, errno.EINVAL, errno.EAGAIN, errno.EACCES, errno.ENOTSUP, errno.ESRCH}
    try:
        for i in range(300):
            cmds = (abi.HWPERFD_CPCIO_BIND, *abi.HEAD_CALLS, *abi.WHOLE_IO_CALLS)
            cmd = cmds[i % len(cmds)]
            raw = bytearray(rng.randbytes(abi.CPC_IO_SIZE))
            if i % 3 == 0:  # mostly plausible: small counts, ASCII names
                raw[:48] = bytes(48)
                raw[28:32] = rng.randrange(0, 10).to_bytes(4, "little")
                raw[8:12] = rng.randrange(0, 3).to_bytes(4, "little")
            try:
                fcntl.ioctl(fd, cmd, raw)
            except OSError as exc:
                assert exc.errno in allowed, exc
                continue
            assert int.from_bytes(raw[:4], "little", signed=True) in allowed
    finally:
        os.close(fd)
    assert "Traceback" not in intel.log_text() and "EIO" not in intel.log_text()
    d = driver(intel)
    d("add INST_RET 0 2")
    assert d("bind") == "ok"


def test_a_bind_reads_only_the_sets_requests_and_a_sample_answers_the_rest_unchanged(intel):
    """The node decodes the ci_nreqs requests a bind carries and no more: bytes
    past them (here not even ASCII) are the client's, handed back as they came."""
    req = dict(cr_event="INST_RET", cr_preset=0, cr_flags=abi.CPC_COUNT_USER, cr_nattrs=0,
               cr_attr=[dict(ka_name="", ka_val=0)] * abi.HWPERFD_CPC_MAXATTRS)  # fmt: skip
    io = dict(ci_error=0, ci_subcode=0, ci_target=abi.HWPERFD_CPC_LWP, ci_flags=0, ci_pid=0, ci_id=0, ci_index=0,
              ci_nreqs=1, ci_preset=0, ci_hrtime=0, ci_tick=0, ci_data=[0] * abi.HWPERFD_CPC_MAXREQS,
              ci_req=[req] * abi.HWPERFD_CPC_MAXREQS)  # fmt: skip
    raw = bytearray(abi.cpc_io.build(io))
    unused = abi.CPC_IO_HEAD_SIZE + abi.CPC_REQ_SIZE
    raw[unused:] = b"\xff" * (len(raw) - unused)
    fd = os.open(intel.path / "cpc", os.O_RDONLY)
    try:
        fcntl.ioctl(fd, abi.HWPERFD_CPCIO_BIND, raw)
        assert abi.cpc_io_head.parse(bytes(raw)).ci_error == 0
        intel.control(f"advance-thread {os.getpid()} 1ms")
        fcntl.ioctl(fd, abi.HWPERFD_CPCIO_SAMPLE, raw)
        out = abi.cpc_io_head.parse(bytes(raw))
        assert (out.ci_error, out.ci_nreqs, out.ci_data[0]) == (0, 1, events("graduated_instructions", MS))
        assert raw[unused:] == b"\xff" * (len(raw) - unused)
        fcntl.ioctl(fd, abi.HWPERFD_CPCIO_RELE, raw)
    finally:
        os.close(fd)


def test_every_call_but_a_bind_carries_the_head_alone_and_is_taken_with_the_whole_struct_too(intel):
    """A sample crosses FUSE as the 128-byte head (its number says so), from
    a caller whose buffer is no bigger; the same calls sent with the whole
    hwperfd_cpc_io (as a program linked with another build of libcpc may
    send them, still running as the daemon is upgraded) answer the same."""
    assert [cmd >> 16 & 0x3FFF for cmd in abi.HEAD_CALLS] == [abi.CPC_IO_HEAD_SIZE] * 6
    assert abi.HWPERFD_CPCIO_BIND >> 16 & 0x3FFF == abi.CPC_IO_SIZE
    req = dict(cr_event="INST_RET", cr_preset=0, cr_flags=abi.CPC_COUNT_USER, cr_nattrs=0,
               cr_attr=[dict(ka_name="", ka_val=0)] * abi.HWPERFD_CPC_MAXATTRS)  # fmt: skip
    io = dict(ci_error=0, ci_subcode=0, ci_target=abi.HWPERFD_CPC_LWP, ci_flags=0, ci_pid=0, ci_id=0, ci_index=0,
              ci_nreqs=1, ci_preset=0, ci_hrtime=0, ci_tick=0, ci_data=[0] * abi.HWPERFD_CPC_MAXREQS,
              ci_req=[req] * abi.HWPERFD_CPC_MAXREQS)  # fmt: skip
    whole = {head: number for number, head in abi.WHOLE_IO_CALLS.items()}
    tid = threading.get_native_id()
    fd = os.open(intel.path / "cpc", os.O_RDONLY)
    try:
        fcntl.ioctl(fd, abi.HWPERFD_CPCIO_BIND, bytearray(abi.cpc_io.build(io)))
        intel.control(f"advance-thread {tid} 1ms")
        head = bytearray(abi.CPC_IO_HEAD_SIZE)  # ci_target 0: the calling LWP
        fcntl.ioctl(fd, abi.HWPERFD_CPCIO_SAMPLE, head)
        raw = bytearray(abi.cpc_io.build(io))
        fcntl.ioctl(fd, whole[abi.HWPERFD_CPCIO_SAMPLE], raw)
        a, b = abi.parse_head(bytes(head)), abi.parse_head(bytes(raw))
        assert (a.ci_error, a.ci_nreqs, a.ci_data[0]) == (0, 1, events("graduated_instructions", MS))
        assert (b.ci_error, b.ci_nreqs, b.ci_data[0], b.ci_tick) == (0, 1, a.ci_data[0], a.ci_tick)
        # cpc_enable and cpc_disable refuse a set the LWP bound itself (EINVAL), either way.
        for cmd, error in ((abi.HWPERFD_CPCIO_DISABLE, errno.EINVAL), (abi.HWPERFD_CPCIO_ENABLE, errno.EINVAL),
                           (abi.HWPERFD_CPCIO_PRESET, 0), (abi.HWPERFD_CPCIO_RESTART, 0)):  # fmt: skip
            raw = bytearray(abi.cpc_io.build(io))
            fcntl.ioctl(fd, whole[cmd], raw)
            assert abi.parse_head(bytes(raw)).ci_error == error, hex(cmd)
        intel.control(f"advance-thread {tid} 1ms")
        head = bytearray(abi.CPC_IO_HEAD_SIZE)
        fcntl.ioctl(fd, abi.HWPERFD_CPCIO_SAMPLE, head)
        assert abi.parse_head(bytes(head)).ci_data[0] == events("graduated_instructions", MS)  # preset 0, restarted
        fcntl.ioctl(fd, whole[abi.HWPERFD_CPCIO_RELE], bytearray(abi.CPC_IO_SIZE))
        head = bytearray(abi.CPC_IO_HEAD_SIZE)
        fcntl.ioctl(fd, abi.HWPERFD_CPCIO_SAMPLE, head)
        assert abi.parse_head(bytes(head)).ci_error == errno.EINVAL  # released: nothing bound
    finally:
        os.close(fd)


def _pending(sig: int) -> bool:
    with open(f"/proc/self/task/{threading.get_native_id()}/status") as f:
        return any(line.startswith("SigPnd:") and int(line.split()[1], 16) >> (sig - 1) & 1 for line in f)


def test_a_call_made_while_its_overflows_sigemt_is_on_its_way_is_eintr_and_its_retry_takes_effect(intel):
    """The carrier of an overflow's SIGEMT went before the LWP's call reached
    the daemon, and the LWP has not taken it yet (here blocked; in a program,
    it came while the call was on its way): the call answers EINTR, so the
    handler runs before the call takes effect, and the same call made again
    takes effect."""
    req = dict(cr_event="INST_RET", cr_preset=PRESET, cr_flags=abi.CPC_COUNT_USER | abi.CPC_OVF_NOTIFY_EMT,
               cr_nattrs=0, cr_attr=[dict(ka_name="", ka_val=0)] * abi.HWPERFD_CPC_MAXATTRS)  # fmt: skip
    io = dict(ci_error=0, ci_subcode=0, ci_target=abi.HWPERFD_CPC_LWP, ci_flags=0, ci_pid=0, ci_id=0, ci_index=0,
              ci_nreqs=1, ci_preset=0, ci_hrtime=0, ci_tick=0, ci_data=[0] * abi.HWPERFD_CPC_MAXREQS,
              ci_req=[req] * abi.HWPERFD_CPC_MAXREQS)  # fmt: skip
    raw = bytearray(abi.cpc_io.build(io))
    carrier = abi.HWPERFD_CPC_SIGCARRIER
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {carrier})
    fd = os.open(intel.path / "cpc", os.O_RDONLY)
    try:
        fcntl.ioctl(fd, abi.HWPERFD_CPCIO_BIND, raw)
        assert abi.cpc_io_head.parse(bytes(raw)).ci_error == 0
        intel.control(f"advance-thread {threading.get_native_id()} 1ms")
        deadline = time.monotonic() + 10
        while not _pending(carrier):
            assert time.monotonic() < deadline, "the overflow's carrier never came"
            time.sleep(0.01)
        with pytest.raises(InterruptedError):
            fcntl.ioctl(fd, abi.HWPERFD_CPCIO_SAMPLE, raw)
        fcntl.ioctl(fd, abi.HWPERFD_CPCIO_SAMPLE, raw)  # the retry: taken, the carrier still pending
        out = abi.cpc_io_head.parse(bytes(raw))
        assert (out.ci_error, out.ci_data[0]) == (0, 0)  # frozen at the wrap
        assert signal.sigtimedwait({carrier}, 0) is not None  # taken, as the handler would
        fcntl.ioctl(fd, abi.HWPERFD_CPCIO_RELE, raw)
    finally:
        os.close(fd)
        signal.sigtimedwait({carrier}, 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def test_a_name_that_only_begins_with_a_number_is_no_raw_code(sparc, driver):
    """cpc_set_add_request takes a raw code only when strtol reads the whole
    name, as the node does at bind: the refusal comes at once, not at bind."""
    d = driver(sparc)
    d("handler")
    assert d("add 0xcjunk 0 2") == "err EINVAL"
    assert handled(d, "cpc_set_add_request", CPC_INVALID_EVENT)
    assert d("add 0xc 0 2") == "ok 0"
    assert d("bind") == "ok"


@pytest.mark.parametrize("seconds", [1, 10])
def test_a_long_period_overflows_once_a_period_on_the_manual_clock(intel, driver, seconds):
    """CPC_OVF_NOTIFY_EMT with a period of seconds of CPU time (cycles at
    1 000 MHz): each period's overflow arrives, the set frozen at it, and
    none comes a cycle early."""
    period = seconds * 10**9
    d = driver(intel)
    d("emt")
    d(f"add CPU_CLK_UNHALTED {U64 - period} 3")
    assert d("bind") == "ok"
    for k in range(1, 4):
        intel.control(f"advance-thread {d.tid} {period - 1}ns")
        assert d("overflows").startswith(f"ok {k - 1} ")
        intel.control(f"advance-thread {d.tid} 2ns")  # the overflow, and a cycle it does not count
        assert _wait_overflows(d, k).startswith(f"ok {k} ")
        assert d.values() == [0]
        assert d("restart") == "ok"


def test_binding_again_without_unbind_counts_from_the_new_bind_at_once(sparc, driver):
    """cpc_bind_curlwp(3CPC) NOTES: after an overflow, binding the set again
    re-enables counting.  A second bind on an LWP that has a bound set (no
    cpc_unbind between) counts from that bind on, at once, whatever the
    thread ran under the first."""
    d = driver(sparc)
    assert d("add Cycle_cnt 0 2") == "ok 0"
    assert d("bind") == "ok"
    sparc.control(f"advance-thread {d.tid} 5ms")
    assert d.values() == [5 * MS]
    assert d("bind") == "ok"
    assert d.values() == [0]
    sparc.control(f"advance-thread {d.tid} 1ms")
    assert d.values() == [MS]
    assert d("sample").endswith(f"tick {MS}")


def test_a_set_binds_only_through_the_handle_that_created_it(sparc, driver):
    """cpc_bind_curlwp(3CPC) ERRORS: EINVAL for a set not created with this
    cpc handle, as cpc_bind_pctx and cpc_bind_cpu answer; the set stays
    unbound (sampling it is EINVAL too)."""
    d = driver(sparc)
    assert d("add Cycle_cnt 0 2") == "ok 0"
    assert d("reopen") == "ok"
    assert d("bind") == "err EINVAL"
    assert d(f"bindpctx {d.proc.pid} 1") == "err EINVAL"
    assert d("bindcpu 0") == "err EINVAL"
    assert d("sample") == "err EINVAL"
