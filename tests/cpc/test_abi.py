"""<sys/cpc_impl.h> and <libcpc.h> agree with structs/cpc.py: a C program
built against include/ prints every transport field's offset, the sizes and
the constants, and they are compared with the construct definitions."""

from __future__ import annotations

import subprocess
from pathlib import Path

from structs import cpc as abi
from tests.conftest import ROOT

CONSTANTS = [
    "CPC_OVF_NOTIFY_EMT", "CPC_COUNT_USER", "CPC_COUNT_SYSTEM", "CPC_COUNT_HV", "CPC_BIND_LWP_INHERIT",
    "CPC_CAP_OVERFLOW_INTERRUPT", "CPC_CAP_OVERFLOW_PRECISE", "CPC_VER_CURRENT", "CPC_INVALID_EVENT",
    "CPC_INVALID_PICNUM", "CPC_INVALID_ATTRIBUTE", "CPC_ATTRIBUTE_OUT_OF_RANGE", "CPC_RESOURCE_UNAVAIL",
    "CPC_PIC_NOT_CAPABLE", "CPC_REQ_INVALID_FLAGS", "CPC_CONFLICTING_REQS", "CPC_ATTR_REQUIRES_PRIVILEGE",
    "CPC_PBIND_FAILED", "CPC_HV_NO_ACCESS", "HWPERFD_CPC_MAXREQS", "HWPERFD_CPC_EVLEN", "HWPERFD_CPC_MAXATTRS",
    "HWPERFD_CPC_LWP", "HWPERFD_CPC_PCTX", "HWPERFD_CPC_CPU", "HWPERFD_CPC_SAMPLE_EXECS",
    "HWPERFD_CPC_SIGCARRIER", "SIGEMT", "EMT_CPCOVF",
    "HWPERFD_CPCIO_BIND", "HWPERFD_CPCIO_SAMPLE", "HWPERFD_CPCIO_RELE", "HWPERFD_CPCIO_PRESET",
    "HWPERFD_CPCIO_RESTART", "HWPERFD_CPCIO_ENABLE", "HWPERFD_CPCIO_DISABLE",
]  # fmt: skip


def test_the_headers_match_the_transport_and_constants(tmp_path: Path):
    fields = [name for name in abi.cpc_io.subcons]
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <libcpc.h>", "int main(void) {"]
    lines.append('printf("size %zu %zu\\n", sizeof(struct hwperfd_cpc_io), sizeof(struct hwperfd_cpc_req));')
    for sub in fields:
        lines.append(f'printf("off {sub.name} %zu\\n", offsetof(struct hwperfd_cpc_io, {sub.name}));')
    for name in CONSTANTS:
        lines.append(f'printf("const {name} %lu\\n", (unsigned long)({name}));')
    lines += ["return 0; }"]
    source = tmp_path / "abi.c"
    source.write_text("\n".join(lines) + "\n")
    subprocess.run(["cc", "-Wall", "-Werror", f"-I{ROOT / 'include'}", "-o", str(tmp_path / "abi"), str(source)],
                   check=True)  # fmt: skip
    out = subprocess.run([str(tmp_path / "abi")], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == f"size {abi.CPC_IO_SIZE} {abi.CPC_REQ_SIZE}"
    offset = 0
    offsets = {}
    for sub in fields:
        offsets[sub.name] = offset
        offset += sub.sizeof()
    for line in out[1:]:
        kind, name, value = line.split()
        if kind == "off":
            assert int(value) == offsets[name], name
        else:
            assert int(value) == getattr(abi, name), name


def test_the_header_packed_by_hand_is_the_construct_definitions():
    """Every call reads and answers the 128-byte head through struct: it
    must say what structs/cpc.py's construct definition says, both ways."""
    import os

    for _ in range(200):
        raw = os.urandom(abi.CPC_IO_HEAD_SIZE)
        fast, slow = abi.parse_head(raw), abi.cpc_io_head.parse(raw)
        assert {k: fast[k] for k in slow if not k.startswith("_")} == {k: slow[k] for k in slow if not k.startswith("_")}
        assert abi.build_head(fast) == abi.cpc_io_head.build(slow) == raw


def test_libcpc_h_leaves_string_h_names_to_the_program(tmp_path: Path):
    """Solaris's <libcpc.h> does not pull in <string.h>: the page's Example 2
    names a global ``index`` (glibc's <string.h> declares index(3))."""
    source = tmp_path / "names.c"
    source.write_text("#include <libcpc.h>\nint index;\nint main(void) { return index; }\n")
    done = subprocess.run(["cc", "-Wall", "-Wno-builtin-declaration-mismatch", "-Werror", f"-I{ROOT / 'include'}",
                           "-fsyntax-only", str(source)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
