"""pkg-config for every library: `pkg-config --cflags --libs NAME` (hwperfd,
libcpc, libperfctr, libpctr) builds the seeds' programs - libcpc(3CPC)'s
Example 1, perfctr's self-monitoring example, pctr(4)'s rdtsc() timing, the
r10k_counters(5) example - from an installed prefix and from the source tree
(NAME-uninstalled.pc, which pkg-config prefers), and each binary loads the
library it was built against."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.install.test_install import make_install

TESTS = ROOT / "tests"
# package -> (program, its sources, extra compiler flags, the shared library it must load)
SEEDS = {
    "hwperfd": ("r10k_counters", ["examples/r10k_counters.c"], ["-Iexamples"], "libperfex.so"),
    "libcpc": (
        "example1", ["tests/cpc/example1.c", "tests/cpc/page_error.c"],
        ["-Wno-misleading-indentation", "-include", "tests/cpc/page_error.h"], "libcpc.so",
    ),
    "libperfctr": ("self", ["tests/perfctr/self.c"], [], "libperfctr.so"),
    "libpctr": ("rdtsc_timing", ["tests/pctr/rdtsc_timing.c"], [], "libpctr.so"),
}  # fmt: skip
LIBS = {"hwperfd": ["-lperfex", "-lhwperf"], "libcpc": ["-lcpc"], "libperfctr": ["-lperfctr"], "libpctr": ["-lpctr"]}


@pytest.fixture(scope="module")
def installed(shared_tmp) -> Path:
    prefix = shared_tmp / "pc-prefix"
    make_install(prefix, shared_tmp / "pc-install-build")
    return prefix / "lib" / "pkgconfig"


@pytest.fixture(scope="module")
def source_tree(shared_tmp) -> Path:
    """`make` in lib/ (into its own BUILD folder): the libraries and NAME-uninstalled.pc."""
    build = shared_tmp / "pc-tree-build"
    made = subprocess.run(["make", "-s", "-C", str(ROOT / "lib"), f"BUILD={build}"], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    return build


def pkg_config(path: Path, *args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CPATH", "C_INCLUDE_PATH", "LIBRARY_PATH")}
    result = subprocess.run(
        ["pkg-config", *args], env={**env, "PKG_CONFIG_PATH": str(path)}, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.mark.parametrize("package", SEEDS)
def test_installed_pc_names_the_prefix(installed, package):
    prefix = installed.parent.parent
    flags = pkg_config(installed, "--cflags", "--libs", package)
    assert f"-I{prefix}/include/hwperfd" in flags and f"-L{prefix}/lib" in flags
    libs = flags[flags.index("-Wl,--push-state,--no-as-needed") + 1 : flags.index("-Wl,--pop-state")]
    assert libs == LIBS[package]
    assert pkg_config(installed, "--modversion", package) == ["0.1.0"]


@pytest.mark.parametrize("package", SEEDS)
def test_source_tree_pc_names_the_tree(source_tree, package):
    flags = pkg_config(source_tree, "--cflags", "--libs", package)
    assert f"-I{ROOT / 'include'}" in flags and f"-L{source_tree}" in flags
    assert f"-Wl,-rpath,{source_tree}" in flags


@pytest.mark.parametrize("where", ["installed", "source_tree"])
@pytest.mark.parametrize("package", SEEDS)
def test_seed_program_builds_with_pkg_config_and_loads_its_library(request, shared_tmp, where, package):
    pc_path = request.getfixturevalue(where)
    name, sources, extra, library = SEEDS[package]
    binary = shared_tmp / f"pc-{where}-{name}"
    flags = pkg_config(pc_path, "--cflags", "--libs", package)
    built = subprocess.run(
        ["cc", "-O2", "-Wall", *extra, "-o", str(binary), *sources, *flags], cwd=ROOT, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    if where == "installed":
        env["LD_LIBRARY_PATH"] = str(pc_path.parent)
    linked = subprocess.run(["ldd", str(binary)], env=env, capture_output=True, text=True).stdout
    expected = pc_path.parent if where == "installed" else pc_path
    assert f"{expected}/{library}" in linked, linked
