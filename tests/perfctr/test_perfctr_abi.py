"""<linux/perfctr.h> and <asm/perfctr.h> against structs/perfctr.py: sizes,
offsets and ioctl numbers as a C compiler sees them."""

from __future__ import annotations

import random
import subprocess

import structs
from hwperfd.perfctr import control as ctl
from hwperfd.perfctr import driver
from structs import perfctr as abi
from tests.conftest import ROOT

PROGRAM = r"""
#include <stddef.h>
#include <stdio.h>
#include <libperfctr.h>
#define S(t) printf(#t " %zu\n", sizeof(struct t))
#define N(c) printf(#c " %lu\n", (unsigned long)(c))
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(struct t, f))
int main(void)
{
    S(perfctr_info); S(perfctr_sum_ctrs); S(perfctr_cpu_control); S(vperfctr_control);
    S(gperfctr_cpu_control); S(gperfctr_cpu_state); S(hwperfd_vperfctr_state);
    S(hwperfd_perfctr_cpu_mask); S(hwperfd_vperfctr_attach); S(hwperfd_vperfctr_statepage);
    S(hwperfd_vperfctr_control_ns); O(hwperfd_vperfctr_control_ns, control);
    O(perfctr_cpu_control, ireset); O(vperfctr_control, preserve); O(gperfctr_cpu_state, sum);
    O(hwperfd_vperfctr_state, sum);
    N(PERFCTR_ABI); N(PERFCTR_INFO); N(PERFCTR_CPUS); N(PERFCTR_CPUS_FORBIDDEN); N(VPERFCTR_CREAT);
    N(VPERFCTR_OPEN); N(VPERFCTR_READ_SUM); N(VPERFCTR_UNLINK); N(VPERFCTR_CONTROL); N(VPERFCTR_IRESUME);
    N(VPERFCTR_READ_CONTROL); N(VPERFCTR_READ_STATE); N(VPERFCTR_ATTACH); N(VPERFCTR_STATEPAGE); N(VPERFCTR_OVERFLOW_NS); N(VPERFCTR_IRESUME_NS);
    N(VPERFCTR_CONTROL_NS); N(VPERFCTR_UNLINK_NS); N(PERFCTR_THREAD_CLOCKS);
    N(GPERFCTR_CONTROL);
    N(GPERFCTR_READ); N(GPERFCTR_STOP); N(GPERFCTR_START); N(PERFCTR_ABI_VERSION); N(SI_PMC_OVF);
    N(PERFCTR_X86_INTEL_CORE2); N(PERFCTR_X86_AMD_K8); N(VPERFCTR_CONTROL_CLOEXEC);
    return 0;
}
"""


def test_headers_match_the_construct_definitions(tmp_path):
    source = tmp_path / "abi.c"
    source.write_text(PROGRAM)
    subprocess.run(["cc", "-Wall", "-Werror", f"-I{ROOT / 'include'}", "-o", str(tmp_path / "abi"), str(source)],
                   check=True)  # fmt: skip
    out = subprocess.run([str(tmp_path / "abi")], capture_output=True, text=True, check=True).stdout
    c = {name: int(value) for name, value in (line.split() for line in out.splitlines())}
    assert c["perfctr_info"] == abi.PERFCTR_INFO_SIZE
    assert c["perfctr_sum_ctrs"] == abi.SUM_CTRS_SIZE == abi.SUM_CTRS_PACK.size
    assert c["perfctr_cpu_control"] == abi.CPU_CONTROL_SIZE
    assert c["vperfctr_control"] == abi.VPERFCTR_CONTROL_SIZE
    assert c["gperfctr_cpu_control"] == abi.GPERFCTR_CPU_CONTROL_SIZE
    assert c["gperfctr_cpu_state"] == abi.GPERFCTR_CPU_STATE_SIZE
    assert c["hwperfd_vperfctr_state"] == abi.VPERFCTR_STATE_SIZE == abi.VPERFCTR_STATE_PACK.size
    assert c["hwperfd_perfctr_cpu_mask"] == abi.CPU_MASK_SIZE
    assert c["hwperfd_vperfctr_attach"] == abi.VPERFCTR_ATTACH_SIZE
    assert c["hwperfd_vperfctr_statepage"] == abi.VPERFCTR_STATEPAGE_SIZE == structs.HWPERFD_STATE_PATH_MAX
    assert c["hwperfd_vperfctr_control_ns"] == abi.VPERFCTR_CONTROL_NS_SIZE
    assert c["hwperfd_vperfctr_control_ns.control"] == 8
    assert c["perfctr_cpu_control.ireset"] == 12 + 4 * (18 * 2 + 20)
    assert c["vperfctr_control.preserve"] == 4 + abi.CPU_CONTROL_SIZE
    assert c["gperfctr_cpu_state.sum"] == 4 + abi.CPU_CONTROL_SIZE
    assert c["hwperfd_vperfctr_state.sum"] == 8
    for name in ("PERFCTR_ABI", "PERFCTR_INFO", "PERFCTR_CPUS", "PERFCTR_CPUS_FORBIDDEN", "VPERFCTR_CREAT",
                 "VPERFCTR_OPEN", "VPERFCTR_READ_SUM", "VPERFCTR_UNLINK", "VPERFCTR_CONTROL", "VPERFCTR_IRESUME",
                 "VPERFCTR_READ_CONTROL", "VPERFCTR_READ_STATE", "VPERFCTR_ATTACH", "VPERFCTR_STATEPAGE",
                 "VPERFCTR_OVERFLOW_NS", "VPERFCTR_IRESUME_NS", "VPERFCTR_CONTROL_NS", "VPERFCTR_UNLINK_NS",
                 "PERFCTR_THREAD_CLOCKS",
                 "GPERFCTR_CONTROL",
                 "GPERFCTR_READ", "GPERFCTR_STOP", "GPERFCTR_START", "PERFCTR_ABI_VERSION", "SI_PMC_OVF",
                 "PERFCTR_X86_INTEL_CORE2", "PERFCTR_X86_AMD_K8", "VPERFCTR_CONTROL_CLOEXEC"):  # fmt: skip
        assert c[name] == getattr(abi, name), name


def test_the_event_tables_are_generated_from_the_models():
    check = subprocess.run(["python3", str(ROOT / "lib" / "perfctr" / "gen_perfctr_events.py"), "--check"])
    assert check.returncode == 0, "run python3 lib/perfctr/gen_perfctr_events.py"


EVENTS = r"""
#include <stdio.h>
#include <libperfctr.h>
int main(void)
{
    unsigned int types[] = { PERFCTR_X86_INTEL_CORE2, PERFCTR_X86_AMD_K8, PERFCTR_X86_GENERIC }, t, i;
    for (t = 0; t < 3; ++t) {
        const struct perfctr_event_set *set = perfctr_cpu_event_set(types[t]);
        if (!set) {
            printf("%u none\n", types[t]);
            continue;
        }
        printf("%u %s %u", set->cpu_type, set->event_prefix, set->nevents);
        for (i = 0; i < set->nevents; ++i)
            if (set->events[i].evntsel == 0xC0)
                printf(" %s/%#x", set->events[i].name, set->events[i].counters_set);
        printf("\n");
    }
    return 0;
}
"""


def test_event_sets_describe_the_models_events(tmp_path):
    from hwperfd.cpu.models import MODELS

    source = tmp_path / "events.c"
    source.write_text(EVENTS)
    subprocess.run(["make", "-s", "-C", str(ROOT / "lib"), "libperfctr"], check=True)
    subprocess.run(["cc", "-Wall", "-Werror", f"-I{ROOT / 'include'}", "-o", str(tmp_path / "events"), str(source),
                    str(ROOT / "lib" / "libperfctr.a")], check=True)  # fmt: skip
    lines = subprocess.run([str(tmp_path / "events")], capture_output=True, text=True, check=True).stdout.splitlines()
    assert lines[0] == f"18 CORE2_ {len(MODELS['intel'].events)} INST_RET/0x3"
    assert lines[1] == f"13 K8_ {len(MODELS['amd'].events)} RETIRED_INSTRUCTIONS/0xf"
    assert lines[2] == "0 none"


def test_a_vperfctr_control_reads_as_its_construct_definition_does():
    """The driver unpacks vperfctr_control with struct on its hot path: every
    word lands in the field structs.perfctr names, signed where it is."""
    rng = random.Random(7)
    for _ in range(200):
        data = bytes(rng.getrandbits(8) for _ in range(abi.VPERFCTR_CONTROL_SIZE))
        request = abi.vperfctr_control.parse(data)
        head, control = driver._control(data)
        assert head == (request.si_signo, request.preserve, request.flags)
        assert control == ctl.PerfctrControl.parse(request.cpu_control)
    head, control = driver._control(bytes(abi.VPERFCTR_CONTROL_SIZE - 4))  # short: construct's error, kept
    assert head == (0, 0, 0) and isinstance(control, Exception)
