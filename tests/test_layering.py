"""Each layer imports only what lies beneath it (docs/design.md, Layers):
every Python module of hwperfd and structs, the top-level ones included, and
the C libraries of lib/, whose objects may call only the libraries below
them - no two call each other, not even through a C library function one of
them interposes (the hwperfd-run shim's open and ioctl)."""

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# What each layer may import, besides itself.  Data flows down on a call.
ALLOWED = {
    "structs": set(),
    # typing.NamedTuple's class statement without typing, for perfex's start-up.
    "hwperfd.records": set(),
    "hwperfd.cpu": {"hwperfd.trace", "hwperfd.records"},
    "hwperfd.host": set(),
    "hwperfd.counters": {"hwperfd.cpu", "hwperfd.trace"},
    # IRIX answers the mount's own files through hwperfd/node.py's contract, as the other personalities do.
    "hwperfd.irix": {"hwperfd.counters", "hwperfd.cpu", "hwperfd.host", "hwperfd.node", "structs"},
    # The per-user log limit: the FUSE boundary says whose request is logging.
    "hwperfd.lograte": set(),
    # A personality's driver: decode, check in the original's order, call the counters.
    "hwperfd.pctr": {"hwperfd.counters", "hwperfd.cpu", "hwperfd.host", "hwperfd.node", "structs"},
    "hwperfd.perfctr": {"hwperfd.counters", "hwperfd.cpu", "hwperfd.host", "hwperfd.node", "structs", "hwperfd.trace"},
    # Solaris libcpc's kernel side, on the same footing as pctr.
    "hwperfd.cpc": {"hwperfd.counters", "hwperfd.cpu", "hwperfd.host", "hwperfd.node", "structs", "hwperfd.trace"},
    # A personality's node in the mount: the contract between procfs and a personality.
    "hwperfd.node": {"hwperfd.counters"},
    "hwperfd.procfs": {
        "hwperfd.node", "hwperfd.counters", "hwperfd.cpu", "hwperfd.host", "hwperfd.lograte",
        "structs", "hwperfd.trace",
    },
    # Tools are clients: they speak to the mount, never to the daemon's insides.
    "hwperfd.perfex": {"hwperfd.client", "hwperfd.cpu", "hwperfd.records", "structs"},
    # ecfind reads Linux's /proc for its ps(1) columns, as any program may.
    "hwperfd.ec": {"hwperfd.client", "hwperfd.cpu", "hwperfd.host", "hwperfd.perfex", "structs"},
    "hwperfd.client": {"hwperfd.records", "structs"},
    # pctr(1) is a client of <mount>/pctr; it knows the models' event tables.
    "hwperfd.pctr.tool": {"hwperfd.cpu", "structs"},
    # cputrack(1) and cpustat(1M) are clients of <mount>/cpc (libcpc's calls, from Python).
    "hwperfd.cpc.tools": {"hwperfd.client", "structs"},
    # The top-level modules.  Time sources read the host; overflow signals go to its processes.
    "hwperfd.clock": {"hwperfd.host"},
    "hwperfd.signals": {"hwperfd.counters", "hwperfd.host", "hwperfd.trace"},
    # What the command line and the wiring both tell the one who started the daemon.
    "hwperfd.startup": set(),
    # The wiring: every layer of the daemon, put together.
    "hwperfd.service": {
        "hwperfd.procfs", "hwperfd.node", "hwperfd.irix", "hwperfd.pctr", "hwperfd.cpc", "hwperfd.perfctr",
        "hwperfd.counters",
        "hwperfd.cpu", "hwperfd.host", "hwperfd.clock", "hwperfd.signals", "hwperfd.startup", "hwperfd.lograte",
        "structs", "hwperfd.trace",
    },
    # The command line: options, set-up checks, then the wiring.
    "hwperfd.daemon": {"hwperfd.service", "hwperfd.startup", "hwperfd.lograte", "hwperfd.cpu", "hwperfd.trace"},
    # The timeline (docs/trace.md): beneath every layer that records into it,
    # it imports none of them; hwperfd-trace reads the files it writes.
    "hwperfd.trace": set(),
    "hwperfd.__main__": {"hwperfd.daemon"},
    # hwperfd-run: finds the shim and execs; no layer of the daemon.
    "hwperfd.run": set(),
    "hwperfd": set(),  # the package's __init__
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


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules():
    for path in sorted((ROOT / "hwperfd").rglob("*.py")) + sorted((ROOT / "structs").rglob("*.py")):
        name = module_name(path)
        yield pytest.param(path, layer_of(name), id=name)


@pytest.mark.parametrize("path, layer", list(modules()))
def test_layer_imports_only_what_lies_beneath(path, layer):
    assert layer is not None, f"{path.relative_to(ROOT)} belongs to no layer: give it one in ALLOWED"
    for imported in imports(path):
        target = layer_of(imported) or imported
        assert target == layer or target in ALLOWED[layer], f"{layer} must not import {imported}"


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (node -> nodes it depends on), or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return path[path.index(node) :] + [node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            found = visit(nxt, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    return next((found for node in sorted(graph) if (found := visit(node, []))), None)


def test_python_layers_form_no_circle():
    assert cycle({layer: set(allowed) for layer, allowed in ALLOWED.items()}) is None


# lib/: what each C library's object may call in another's, by the file's stem
# (path under lib/ without .c).  The state page reader is shared; each
# personality's library stands alone on it.
ALLOWED_C = {
    "state": set(),  # reads a mapped page: the shim calls it, so it calls nothing the shim interposes
    "state_open": {"state"},  # asks for the page and opens it, for the libraries
    "procredirect": {"state"},  # the hwperfd-run shim
    "irix/libperfex": {"state", "state_open"},
    "irix/syssgi": set(),  # libhwperf
    "perfctr/libperfctr": {"state", "state_open"},
    "cpc/libcpc": {"state", "state_open"},  # a set bound on its own LWP is sampled from its page
    "pctr/libpctr": {"state", "state_open"},  # rdtsc() and rdpmc() read the page of every CPU
    "pctr/compat/openbsd": set(),  # libopenbsd-compat, for building OpenBSD's pctr(1)
}
C_SOURCES = sorted((ROOT / "lib").rglob("*.c"))


@pytest.fixture(scope="module")
def c_symbols(tmp_path_factory) -> dict[str, tuple[set[str], set[str]]]:
    """file -> (the global symbols its object defines, those it uses)."""
    out = tmp_path_factory.mktemp("layering-c")
    includes = [f"-I{ROOT / 'include'}", f"-I{ROOT / 'lib'}", f"-I{ROOT / 'lib' / 'pctr' / 'compat' / 'include'}"]
    flags = ["-O2", "-fPIC", "-pthread", *includes]
    table = {}
    for source in C_SOURCES:
        name = str(source.relative_to(ROOT / "lib").with_suffix(""))
        obj = out / (name.replace("/", "_") + ".o")
        subprocess.run(["cc", *flags, "-c", "-o", str(obj), str(source)], check=True, cwd=source.parent)
        symbols = subprocess.run(["nm", "-g", str(obj)], check=True, capture_output=True, text=True).stdout
        defined, used = set(), set()
        for line in symbols.splitlines():
            kind, symbol = line.split()[-2:]
            (used if kind == "U" else defined).add(symbol)
        table[name] = (defined, used)
    return table


def c_graph(table: dict[str, tuple[set[str], set[str]]]) -> dict[str, set[str]]:
    return {
        a: {b for b, (defined, _) in table.items() if b != a and used & defined}
        for a, (_, used) in table.items()
    }


def test_every_c_library_source_has_a_layer():
    assert {str(p.relative_to(ROOT / "lib").with_suffix("")) for p in C_SOURCES} == set(ALLOWED_C)


# The shim defines only C library functions (open, ioctl, ...), which every
# program's calls reach when it is preloaded: calling them is no dependence on
# it; calling back into what it uses would be a circle (the test below).
INTERPOSER = "procredirect"


@pytest.mark.parametrize("name", sorted(ALLOWED_C))
def test_c_library_calls_only_what_lies_beneath(c_symbols, name):
    calls = c_graph(c_symbols)[name] - {INTERPOSER}
    assert calls <= ALLOWED_C[name], f"lib/{name}.c calls into {sorted(calls - ALLOWED_C[name])}"


def test_c_libraries_form_no_circle(c_symbols):
    assert cycle(c_graph(c_symbols)) is None
