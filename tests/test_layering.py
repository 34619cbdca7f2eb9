"""Each layer imports only what lies beneath it (README, Layout)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# What each layer may import, besides itself.  Data flows down on a call.
ALLOWED = {
    "structs": set(),
    "hwperfd.cpu": set(),
    "hwperfd.host": set(),
    "hwperfd.counters": {"hwperfd.cpu"},
    "hwperfd.irix": {"hwperfd.counters", "hwperfd.cpu", "hwperfd.host", "structs"},
    # The per-user log limit: the FUSE boundary says whose request is logging.
    "hwperfd.lograte": set(),
    # A personality's driver: decode, check in the original's order, call the counters.
    "hwperfd.pctr": {"hwperfd.counters", "hwperfd.cpu", "hwperfd.host", "structs"},
    "hwperfd.perfctr": {"hwperfd.counters", "hwperfd.cpu", "hwperfd.host", "structs"},
    # Solaris libcpc's kernel side, on the same footing as pctr.
    "hwperfd.cpc": {"hwperfd.counters", "hwperfd.cpu", "hwperfd.host", "structs"},
    "hwperfd.procfs": {
        "hwperfd.irix", "hwperfd.pctr", "hwperfd.cpc", "hwperfd.perfctr", "hwperfd.counters", "hwperfd.cpu",
        "hwperfd.host", "hwperfd.lograte", "structs",
    },
    # Tools are clients: they speak to the mount, never to the daemon's insides.
    "hwperfd.perfex": {"hwperfd.client", "hwperfd.cpu", "structs"},
    # ecfind reads Linux's /proc for its ps(1) columns, as any program may.
    "hwperfd.ec": {"hwperfd.client", "hwperfd.cpu", "hwperfd.host", "hwperfd.perfex", "structs"},
    "hwperfd.client": {"structs"},
    # pctr(1) is a client of <mount>/pctr; it knows the models' event tables.
    "hwperfd.pctr.tool": {"hwperfd.cpu", "structs"},
    # cputrack(1) and cpustat(1M) are clients of <mount>/cpc (libcpc's calls, from Python).
    "hwperfd.cpc.tools": {"hwperfd.client", "structs"},
}


def layer_of(module: str) -> str | None:
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {m for m in found if m.startswith(("hwperfd", "structs"))}


def modules():
    for path in sorted((ROOT / "hwperfd").rglob("*.py")) + sorted((ROOT / "structs").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if layer_of(name):
            yield pytest.param(path, layer_of(name), id=name)


@pytest.mark.parametrize("path, layer", list(modules()))
def test_layer_imports_only_what_lies_beneath(path, layer):
    for imported in imports(path):
        target = layer_of(imported) or imported
        assert target == layer or target in ALLOWED[layer], f"{layer} must not import {imported}"
