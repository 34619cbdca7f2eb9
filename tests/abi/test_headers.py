"""The shipped C headers agree with the construct definitions and events.py.

A C program built against include/ prints sizeof/offsetof of every struct and
field, the hwperf_spec word produced by the bit-fields, and the value of every
constant, ioctl number and event macro; the values are compared with
structs/ and hwperfd/cpu/events.py.
"""

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest
from construct import Renamed, Struct

from hwperfd.cpu.events import CPU_EVENTS
from structs import hwperftypes as T
from structs import procfs as P
from structs import state as S

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "include"
CC = shutil.which("cc") or shutil.which("gcc")

pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler")

# C type name -> construct definition
STRUCTS = {
    "hwperf_ctrl_t": T.hwperf_ctrl_t,
    "hwperf_eventctrl_t": T.hwperf_eventctrl_t,
    "hwperf_profevctrarg_t": T.hwperf_profevctrarg_t,
    "hwperf_cntr_t": T.hwperf_cntr_t,
    "hwperf_profevctraux_t": T.hwperf_profevctraux_t,
    "hwperf_eventctrlaux_t": T.hwperf_eventctrlaux_t,
    "hwperf_profevctrargex_t": T.hwperf_profevctrargex_t,
    "hwperf_getctrlex_arg_t": T.hwperf_getctrlex_arg_t,
    "hwperfd_enevctrsex_t": T.hwperfd_enevctrsex_t,
    "hwperfd_getevctrlex_t": T.hwperfd_getevctrlex_t,
    "timespec_t": T.timespec_t,
    "cpu_mon_t": T.cpu_mon_t,
    "hwperf_prusage_t": T.hwperf_prusage_t,
    "hwperf_cpucntrs_arg_t": P.hwperf_cpucntrs_arg_t,
    "hwperfd_profenable_t": P.hwperfd_profenable_t,
    "hwperfd_ovflns_t": P.hwperfd_ovflns_t,
    "hwperfd_state_t": S.hwperfd_state_t,
    "hwperfd_state_slot_t": S.hwperfd_state_slot_t,
    "hwperfd_statepage_t": S.hwperfd_statepage_t,
}

SPEC_CASES = [
    (0, 0, 0),
    (9, 1, T.HWPERF_CNTEN_U),
    (0, 0, T.HWPERF_CNTEN_U),
    (15, 0, T.HWPERF_CNTEN_A),
    (1, 1, T.HWPERF_CNTEN_U | T.HWPERF_CNTEN_K | T.HWPERF_CNTEN_E),
    (17, 0, T.HWPERF_CNTEN_K),
    (31, 1, 0xF),
    (1023, 0, 0x4),
    (2047, 1, 0xF),
]


# ---------------------------------------------------------------- helpers


def named_fields(con):
    """(name, offset, subcon) of a Struct's named fields, padding skipped."""
    out, offset = [], 0
    for sub in con.subcons:
        if isinstance(sub, Renamed) and sub.name:
            out.append((sub.name, offset, sub.subcon))
        offset += sub.sizeof()
    return out


def field_offset(con, path):
    """Offset of a dotted field path ("a.b.c") in a construct Struct."""
    offset = 0
    for part in path.split("."):
        for name, off, sub in named_fields(con):
            if name == part:
                offset += off
                con = sub
                break
        else:
            raise KeyError(path)
    return offset


def field_paths(con, prefix=""):
    """Every dotted field path of a Struct, nested Structs included."""
    for name, _, sub in named_fields(con):
        path = prefix + name
        yield path
        if isinstance(sub, Struct):
            yield from field_paths(sub, path + ".")


def int_constants(module, prefixes):
    return {
        name: value
        for name, value in vars(module).items()
        if name.startswith(prefixes) and name.isupper() and isinstance(value, int)
    }


def expected_macros():
    macros = {}
    macros.update(int_constants(T, ("HWPERF_",)))
    macros.update(int_constants(P, ("PIOC", "HWPERFD_PIOC", "HWPERFD_PROF", "HWIOC_", "HWPERF_", "SGI_")))
    macros.update(int_constants(S, ("HWPERFD_",)))
    for table in CPU_EVENTS.values():
        for event in table.events:
            counter = table.counters_for(event.number)[0]
            value = next(
                ev for ev in range(32) if table.on_counter(counter, ev) == event
            )
            macros[event.macro] = value
    return macros


def compile_and_run(tmp_path, source, flags=()):
    src = tmp_path / "probe.c"
    exe = tmp_path / "probe"
    src.write_text(source)
    cmd = [CC, "-I", str(INCLUDE), *flags, str(src), "-o", str(exe)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    return out.stdout


def compile_only(tmp_path, name, source, flags=()):
    src = tmp_path / name
    src.write_text(source)
    cmd = [CC, "-I", str(INCLUDE), *flags, "-c", str(src), "-o", str(tmp_path / (name + ".o"))]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def probe_source():
    lines = [
        "#include <stdio.h>",
        "#include <stddef.h>",
        "#include <sys/procfs.h>",
        "#include <sys/syssgi.h>",
        "#include <sys/hwperfmacros.h>",
        "#include <hwperfd/state.h>",
        "",
        "int main(void)",
        "{",
    ]
    for ctype, con in STRUCTS.items():
        lines.append(f'\tprintf("sizeof {ctype} %zu\\n", sizeof({ctype}));')
        if isinstance(con, Struct):
            for path in field_paths(con):
                lines.append(
                    f'\tprintf("offsetof {ctype}.{path} %zu\\n", offsetof({ctype}, {path}));'
                )
    for i, (ev, ie, mode) in enumerate(SPEC_CASES):
        word = T.spec_word(ev, mode, ie=bool(ie))
        lines += [
            "\t{",
            f"\t\thwperf_ctrl_t c{i}, d{i};",
            f"\t\tc{i}.hwperf_spec = 0;",
            f"\t\tc{i}.hwperf_creg.hwp_ev = {ev};",
            f"\t\tc{i}.hwperf_creg.hwp_ie = {ie};",
            f"\t\tc{i}.hwperf_creg.hwp_mode = {mode};",
            f'\t\tprintf("spec {ev}:{ie}:{mode} %u\\n", (unsigned)(unsigned short)c{i}.hwperf_spec);',
            f"\t\td{i}.hwperf_spec = (short){word};",
            f'\t\tprintf("fields {word} %u %u %u\\n", (unsigned)d{i}.hwperf_creg.hwp_ev,'
            f" (unsigned)d{i}.hwperf_creg.hwp_ie, (unsigned)d{i}.hwperf_creg.hwp_mode);",
            f'\t\tprintf("eventsel {word} %u\\n", (unsigned)HWPERF_EVENTSEL((unsigned short){word}));',
            "\t}",
        ]
    for name in sorted(expected_macros()):
        lines.append(f'\tprintf("macro {name} %llu\\n", (unsigned long long)({name}));')
    lines += ["\treturn 0;", "}", ""]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("abi")
    out = compile_and_run(tmp, probe_source(), flags=("-Wall", "-Wextra", "-Werror"))
    result = {}
    for line in out.splitlines():
        kind, key, *values = line.split()
        ints = tuple(int(v) for v in values)
        result[(kind, key)] = ints[0] if len(ints) == 1 else ints
    return result


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("ctype", sorted(STRUCTS))
def test_sizeof(probe, ctype):
    assert probe[("sizeof", ctype)] == STRUCTS[ctype].sizeof()


@pytest.mark.parametrize("ctype", sorted(c for c, con in STRUCTS.items() if isinstance(con, Struct)))
def test_offsets(probe, ctype):
    con = STRUCTS[ctype]
    paths = list(field_paths(con))
    assert paths
    for path in paths:
        assert probe[("offsetof", f"{ctype}.{path}")] == field_offset(con, path), path


def test_offset_helper_agrees_with_build():
    """field_offset() against bytes actually built by construct."""
    value = T.hwperf_prusage_t.parse(bytes(T.hwperf_prusage_t.sizeof()))
    value.pu_cpu_mon.cm_gen = 0x11223344
    value.pu_ktlb = 0x5566778899AABBCC
    data = T.hwperf_prusage_t.build(value)
    off = field_offset(T.hwperf_prusage_t, "pu_cpu_mon.cm_gen")
    assert data[off : off + 4] == (0x11223344).to_bytes(4, "little")
    off = field_offset(T.hwperf_prusage_t, "pu_ktlb")
    assert data[off : off + 8] == (0x5566778899AABBCC).to_bytes(8, "little")
    aux = P.hwperf_cpucntrs_arg_t.build(dict(cpuid=3, cntr=dict(hwp_evctr=[7] * 32)))
    off = field_offset(P.hwperf_cpucntrs_arg_t, "cntr.hwp_evctr")
    assert off == 8 and aux[off : off + 8] == (7).to_bytes(8, "little")


@pytest.mark.parametrize("ev,ie,mode", SPEC_CASES)
def test_bitfields_give_irix_spec(probe, ev, ie, mode):
    word = probe[("spec", f"{ev}:{ie}:{mode}")]
    assert word == (ev << 5) | (ie << 4) | mode
    built = T.hwperf_ctrl_t.build(dict(hwp_ev=ev, hwp_ie=bool(ie), hwp_mode=mode))
    assert built == word.to_bytes(2, "little")


@pytest.mark.parametrize("ev,ie,mode", SPEC_CASES)
def test_spec_gives_bitfields(probe, ev, ie, mode):
    word = T.spec_word(ev, mode, ie=bool(ie))
    assert probe[("fields", str(word))] == (ev, ie, mode)
    parsed = T.hwperf_ctrl_t.parse(word.to_bytes(2, "little"))
    assert (parsed.hwp_ev, int(parsed.hwp_ie), parsed.hwp_mode) == (ev, ie, mode)


@pytest.mark.parametrize("ev,ie,mode", SPEC_CASES)
def test_eventsel(probe, ev, ie, mode):
    word = T.spec_word(ev, mode, ie=bool(ie))
    assert probe[("eventsel", str(word))] == (word & T.HWPERF_EVMASK) >> T.HWPERF_EVSHIFT
    if ev < T.HWPERF_CNTEVENTMAX:
        assert probe[("eventsel", str(word))] == ev


def test_macros(probe):
    expected = expected_macros()
    got = {key[1]: value for key, value in probe.items() if key[0] == "macro"}
    assert got == expected


def test_ioctl_numbers_present(probe):
    names = {key[1] for key in probe if key[0] == "macro"}
    for name in (
        "PIOCENEVCTRS PIOCRELEVCTRS PIOCGETEVCTRS PIOCGETPREVCTRS PIOCGETEVCTRL "
        "PIOCSETEVCTRL PIOCSAVECCNTRS PIOCENEVCTRSEX PIOCGETEVCTRLEX HWPERFD_PIOCENEVCTRSEX "
        "HWPERFD_PIOCGETEVCTRLEX HWIOC_PROFENABLE HWIOC_ENSYSCNTRS HWIOC_GET_CPUCNTRS "
        "HWIOC_PROF_CTR_SUSP HWIOC_PROF_CTR_CONT HWIOC_RELSYSCNTRS HWIOC_GET_SYSCNTRS "
        "HWIOC_GET_SYSEVCTRL HWIOC_SET_SYSEVCTRL HWPERFD_PROFENABLE SGI_EVENTCTR HWPERF_MAXEVENT"
    ).split():
        assert name in names


def test_event_macros_present(probe):
    names = {key[1] for key in probe if key[0] == "macro"}
    for table in CPU_EVENTS.values():
        for event in table.events:
            assert event.macro in names


R10K_EXAMPLE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <fcntl.h>
#include <errno.h>
#include <sys/types.h>
#include <sys/procfs.h>
#include <sys/hwperftypes.h>
#include <sys/hwperfmacros.h>

int count_icache_and_dcache_misses(void)
{
	hwperf_profevctrarg_t evctr_args;
	hwperf_cntr_t cnts;
	char pfile[32];
	int fd, i, generation1, generation2;
	pid_t pid;

	pid = getpid();
	sprintf(pfile, "/proc/%05d", (int)pid);
	fd = open(pfile, O_RDWR);
	for (i = 0; i < HWPERF_CNTEVENTMAX; i++) {
		if (i == 9) {
			evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_mode = HWPERF_CNTEN_U;
			evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_ie = 1;
			evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_ev = i;
			evctr_args.hwp_ovflw_freq[i] = 0;
		} else {
			evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_spec = 0;
			evctr_args.hwp_ovflw_freq[i] = 0;
		}
	}
	for (i = HWPERF_CNT1BASE; i < HWPERF_EVENTMAX; i++) {
		if (i == HWPERF_CNT1BASE + 9) {
			evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_mode = HWPERF_CNTEN_U;
			evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_ie = 1;
			evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_ev = i - HWPERF_CNT1BASE;
			evctr_args.hwp_ovflw_freq[i] = 0;
		} else {
			evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_spec = 0;
			evctr_args.hwp_ovflw_freq[i] = 0;
		}
	}
	evctr_args.hwp_ovflw_sig = 0;
	generation1 = ioctl(fd, PIOCENEVCTRS, (void *)&evctr_args);
	if (generation1 < 0) {
		perror("failed to acquire counters");
		exit(errno);
	}
	if ((generation2 = ioctl(fd, PIOCGETEVCTRS, (void *)&cnts)) < 0) {
		perror("PIOCGETEVCTRS returns error");
		exit(errno);
	}
	if (generation1 != generation2) {
		printf("program lost event counters\n");
		exit(0);
	}
	if ((ioctl(fd, PIOCRELEVCTRS)) < 0) {
		perror("prioctl PIOCRELEVCTRS returns error");
		exit(errno);
	}
	printf("instruction cache misses: %d\n", (int)cnts.hwp_evctr[9]);
	printf("data cache misses: %d\n", (int)cnts.hwp_evctr[25]);
	return 0;
}
"""

IRIX_STYLE = r"""
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <sys/syssgi.h>

/* PAPI, Dyninst and SGI daemon idioms. */
int acquire(int fd, int ev)
{
	hwperf_profevctrarg_t a;
	hwperf_eventctrl_t ctl;
	hwperf_ctrl_t *evctrl;
	__uint64_t total = 0;
	int i, gen;

	memset(&a, 0, sizeof a);
	for (i = 0; i < HWPERF_EVENTMAX; i++)
		a.hwp_evctrargs.hwp_evctrl[i].hwperf_spec =
		    HWPERF_CNTEN_U | HWPERF_CNTEN_K | HWPERF_CNTEN_IE | (ev << HWPERF_EVSHIFT);
	evctrl = &a.hwp_evctrargs.hwp_evctrl[0];
	evctrl->hwperf_creg.hwp_ev = HWPERF_C0PRFCNT0_CYCLES;
	evctrl->hwperf_creg.hwp_mode = HWPERF_CNTEN_U | HWPERF_CNTEN_K;
	a.hwp_evctrargs.hwp_evctrl[HWPERF_CNT1BASE].hwperf_creg.hwp_ev = HWPERF_C0PRFCNT1_SDCMISS;
	a.hwp_evctrargs.hwp_evctrl[2].hwperf_creg.hwp_ev = HWPERF_PRFCNT_PDCMISS;
	a.hwp_ovflw_freq[0] = HWPERF_OVERFLOW_THRESH - 1000;
	if (ioctl(fd, PIOCGETEVCTRL, (void *)&ctl) >= 0)
		return -1;
	if ((gen = ioctl(fd, PIOCENEVCTRS, &a)) < 0)
		return -1;
	if (ioctl(fd, PIOCSAVECCNTRS, 1234) < 0)
		return -1;
	if (syssgi(SGI_EVENTCTR, HWPERF_GET_SYSEVCTRL, &a) < 0)
		return -1;
	for (i = 0; i < HWPERF_EVENTMAX; i++)
		if (HWPERF_EVENTSEL(a.hwp_evctrargs.hwp_evctrl[i].hwperf_spec) > HWPERF_MAXEVENT)
			total++;
	return gen + (int)total;
}
"""


def test_r10k_counters_example_compiles(tmp_path):
    compile_only(tmp_path, "r10k_example.c", R10K_EXAMPLE, flags=("-Wall", "-Werror"))


def test_irix_idioms_compile(tmp_path):
    compile_only(tmp_path, "idioms.c", IRIX_STYLE, flags=("-Wall", "-Werror"))


@pytest.mark.parametrize("std", ["c89", "c99", "c11", "gnu89", "gnu17"])
def test_headers_compile_in_all_modes(tmp_path, std):
    compile_only(
        tmp_path, f"modes_{std}.c", IRIX_STYLE, flags=(f"-std={std}", "-Wall", "-Wextra", "-Werror")
    )


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
def test_headers_compile_as_cxx(tmp_path):
    src = tmp_path / "cxx.cc"
    src.write_text(IRIX_STYLE.replace("__uint64_t total = 0;", "unsigned long total = 0;"))
    res = subprocess.run(
        ["c++", "-I", str(INCLUDE), "-Wall", "-Werror", "-c", str(src), "-o", str(tmp_path / "cxx.o")],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr


def _generator():
    spec = importlib.util.spec_from_file_location("gen_hwperfmacros", INCLUDE / "gen_hwperfmacros.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_event_macros_up_to_date():
    gen = _generator()
    text = (INCLUDE / "sys" / "hwperfmacros.h").read_text()
    assert gen.update(text) == text, "run python3 include/gen_hwperfmacros.py"


def test_generated_section_lists_every_event():
    gen = _generator()
    section = gen.render()
    for table in CPU_EVENTS.values():
        for event in table.events:
            assert f"#define {event.macro} " in section
