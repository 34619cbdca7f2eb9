"""IRIX proc(4)'s informational structs in include/sys/procfs.h agree with
structs/prinfo.py, and the header is IRIX's, usable beside Linux headers."""

import pytest

import structs
from structs import machine as M
from structs import prinfo as I
from tests.abi.test_headers import (
    CC,
    compile_and_run,
    compile_only,
    field_offset,
    field_paths,
)

pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler")

STRUCTS = {
    "prpsinfo_t": I.prpsinfo_t,
    "prusage_t": I.prusage_t,
    "prmap_t": I.prmap_t,
    "prcred_t": I.prcred_t,
    "hwperfd_machine_t": M.hwperfd_machine_t,
}
MACROS = [n for mod in (I, M) for n in dir(mod) if n.isupper() and isinstance(getattr(mod, n), int)]


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <sys/procfs.h>", "#include <sys/syssgi.h>"]
    lines += ["#include <sys/sysmp.h>", "int main(void)", "{"]
    for ctype, con in STRUCTS.items():
        lines.append(f'\tprintf("sizeof {ctype} %zu\\n", sizeof({ctype}));')
        for path in field_paths(con):
            lines.append(f'\tprintf("offsetof {ctype}.{path} %zu\\n", offsetof({ctype}, {path}));')
    lines.append('\tprintf("sizeof timers %zu\\n", sizeof(timespec_t[MAX_PROCTIMER]));')
    for name in MACROS:
        lines.append(f'\tprintf("macro {name} %llu\\n", (unsigned long long)({name}));')
    lines += ["\treturn 0;", "}", ""]
    out = compile_and_run(tmp_path_factory.mktemp("prinfo"), "\n".join(lines), flags=("-Wall", "-Wextra", "-Werror"))
    return {tuple(line.split()[:2]): int(line.split()[2]) for line in out.splitlines()}


@pytest.mark.parametrize("ctype", sorted(STRUCTS))
def test_sizes_and_offsets_match_the_construct_definitions(probe, ctype):
    con = STRUCTS[ctype]
    assert probe[("sizeof", ctype)] == con.sizeof()
    for path in field_paths(con):
        assert probe[("offsetof", f"{ctype}.{path}")] == field_offset(con, path), path


def test_irix_sizes():
    # 64-bit IRIX layouts: prusage_t is hwperf_prusage_t without cpu_mon_t.
    assert I.prusage_t.sizeof() == structs.hwperf_prusage_t.sizeof() - structs.cpu_mon_t.sizeof() == 376
    assert (I.prpsinfo_t.sizeof(), I.prmap_t.sizeof(), I.prcred_t.sizeof(), I.prtimers_t.sizeof()) == (408, 64, 28, 176)
    assert I.PRMAPMAX * I.prmap_t.sizeof() <= 0x3FFF


def test_macros_and_ioctl_numbers_match(probe):
    assert probe[("sizeof", "timers")] == I.prtimers_t.sizeof()
    for name in MACROS:
        value = getattr(I, name) if hasattr(I, name) else getattr(M, name)
        assert probe[("macro", name)] == value & 0xFFFFFFFFFFFFFFFF, name
    # IRIX's numbers, Linux's encoding
    assert [structs.ioc_size(getattr(I, n)) for n in ("PIOCPSINFO", "PIOCUSAGE", "PIOCCRED")] == [408, 376, 28]
    assert [getattr(I, n) & 0xFF for n in ("PIOCPSINFO", "PIOCNMAP", "PIOCMAP", "PIOCCRED", "PIOCUSAGE", "PIOCGETPTIMER")] == [
        30, 31, 32, 34, 43, 250,
    ]  # fmt: skip


def test_irix_prpsinfo_not_linux_elf_core_one_beside_ordinary_linux_headers(tmp_path):
    """<sys/procfs.h> gives IRIX's prpsinfo_t (pr_rssize, pr_psargs[80]) and
    still compiles with the headers a Linux program includes anyway."""
    source = "\n".join(
        [
            "#define _GNU_SOURCE",
            "#include <stdio.h>",
            "#include <stdlib.h>",
            "#include <string.h>",
            "#include <signal.h>",
            "#include <unistd.h>",
            "#include <fcntl.h>",
            "#include <pthread.h>",
            "#include <sys/types.h>",
            "#include <sys/stat.h>",
            "#include <sys/time.h>",
            "#include <sys/resource.h>",
            "#include <sys/wait.h>",
            "#include <sys/mman.h>",
            "#include <sys/ucontext.h>",
            "#include <sys/user.h>",
            "#include <sys/procfs.h>",
            "#include <sys/syssgi.h>",
            "long f(prpsinfo_t *p, prusage_t *u) { return p->pr_rssize + (long)sizeof p->pr_psargs + (long)u->pu_minf; }",
            "",
        ]
    )
    for std in ("-std=gnu11", "-std=c99", "-std=c89"):
        compile_only(tmp_path, f"linux{std[5:]}.c", source, flags=(std, "-Wall", "-Wextra", "-Werror"))
