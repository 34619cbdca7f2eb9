"""The C side installed like a system library: `make install PREFIX=...` puts
headers, libperfex and libhwperf, hwperfd.pc and the man pages under the
prefix; IRIX programs then build from any directory with pkg-config and count
on a real mount, and man(1) renders every page."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, finish
from tests.perfex.conftest import CYCLES_PER_MS, run_waiting

PAGES = sorted(p for p in (ROOT / "man").iterdir() if p.suffix[1:].isdigit())
# What a copy of the tree leaves out: build products and caches.
NOT_SOURCES = shutil.ignore_patterns(
    ".git", "__pycache__", "*.so", "*.o", "*.a", "bin", "build", "dist", "*.egg-info", ".hypothesis", ".*_cache"
)
REQUIRED_PAGES = {
    "hwperfd.8", "perfex.1", "libperfex.3", "ecadmin.1", "ecstats.1", "ecfind.1", "hwperfd-run.1",
    "hwperfd_ioctls.5",
}  # fmt: skip


def make_install(prefix: Path, build: Path, *extra: str, source: Path = ROOT) -> None:
    result = subprocess.run(
        ["make", "-s", "-C", str(source), "install", f"PREFIX={prefix}", f"BUILD={build}", *extra],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def prefix(shared_tmp) -> Path:
    """A fresh prefix installed by the top-level `make install`."""
    path = shared_tmp / "prefix"
    make_install(path, shared_tmp / "install-build")
    return path


@pytest.fixture(scope="module")
def elsewhere(shared_tmp) -> Path:
    """A directory outside the checkout holding only the programs' sources:
    nothing but the installed files can supply the headers and libraries."""
    path = shared_tmp / "elsewhere"
    path.mkdir()
    shutil.copy(ROOT / "examples" / "r10k_counters.c", path)
    shutil.copy(ROOT / "examples" / "example_body.h", path)
    shutil.copy(ROOT / "examples" / "syssgi_sys.c", path)
    shutil.copy(ROOT / "tests" / "perfex" / "libperfex_client.c", path)
    return path


def pkg_env(prefix: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CPATH", "C_INCLUDE_PATH", "LIBRARY_PATH")}
    return {**env, "PKG_CONFIG_PATH": str(prefix / "lib" / "pkgconfig")}


def build(prefix: Path, directory: Path, command: str) -> None:
    result = subprocess.run(["sh", "-c", command], cwd=directory, env=pkg_env(prefix), capture_output=True, text=True)
    assert result.returncode == 0, f"{command}\n{result.stdout}{result.stderr}"


def test_install_puts_every_part_under_the_prefix(prefix):
    assert {p.name for p in (prefix / "lib").iterdir() if p.is_file()} == {
        "libperfex.so", "libperfex.a", "libhwperf.so", "libhwperf.a", "libpctr.so", "libpctr.a",
        "libperfctr.so", "libperfctr.a",
        "libcpc.so", "libcpc.a",
    }  # fmt: skip
    headers = prefix / "include" / "hwperfd"
    assert sorted(str(p.relative_to(headers)) for p in headers.rglob("*.h")) == sorted(
        str(p.relative_to(ROOT / "include")) for p in (ROOT / "include").rglob("*.h")
    )
    for page in PAGES:
        assert (prefix / "share" / "man" / f"man{page.suffix[1:]}" / page.name).read_bytes() == page.read_bytes()
    assert REQUIRED_PAGES <= {p.name for p in PAGES}


def test_pkg_config_names_the_prefix(prefix):
    env = pkg_env(prefix)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "hwperfd"], env=env, capture_output=True, text=True)
    assert flags.returncode == 0, flags.stderr
    assert flags.stdout.split() == [
        f"-I{prefix}/include/hwperfd", f"-L{prefix}/lib",
        "-Wl,--push-state,--no-as-needed", "-lperfex", "-lhwperf", "-Wl,--pop-state",
    ]  # fmt: skip
    version = subprocess.run(["pkg-config", "--modversion", "hwperfd"], env=env, capture_output=True, text=True)
    assert version.stdout.strip() == "0.1.0"


def test_irix_program_built_elsewhere_with_pkg_config_counts_on_the_mount(prefix, elsewhere, manual_mount):
    """r10k_counters(5)'s example, headers only, opening "/proc/%05d" (the shim
    sends it to the mount): the counts are exact under the manual clock."""
    build(prefix, elsewhere, "cc $(pkg-config --cflags --libs hwperfd) -o r10k_counters r10k_counters.c")
    proc = subprocess.Popen(
        [str(elsewhere / "r10k_counters"), "-w"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=manual_mount.env(LD_LIBRARY_PATH=str(prefix / "lib")), cwd=elsewhere,
    )  # fmt: skip
    try:
        assert proc.stdout.readline() == "counting\n", proc.stderr.read()
        manual_mount.control(f"advance {proc.pid} 10ms")
        out, err = finish(proc, "go\n", timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    lines = dict(line.split(": ") for line in out.splitlines())
    assert int(lines["generation"]) > 0
    assert int(lines["instruction cache misses"]) == 10 * CYCLES_PER_MS * 2 // 1000
    assert int(lines["data cache misses"]) == 10 * CYCLES_PER_MS // 100


@pytest.mark.parametrize("linkage", ["shared", "static"])
def test_libperfex_program_built_elsewhere_counts_exactly(prefix, elsewhere, manual_mount, linkage):
    binary = f"libperfex_client_{linkage}"
    if linkage == "shared":
        build(prefix, elsewhere, f"cc $(pkg-config --cflags --libs hwperfd) -o {binary} libperfex_client.c")
        env = manual_mount.env(LD_LIBRARY_PATH=str(prefix / "lib"))
    else:
        build(
            prefix, elsewhere,
            f"cc $(pkg-config --cflags hwperfd) -o {binary} libperfex_client.c"
            ' "$(pkg-config --variable=libdir hwperfd)/libperfex.a" -lm',
        )  # fmt: skip
        env = manual_mount.env()
    linked = subprocess.run(["ldd", str(elsewhere / binary)], env=env, capture_output=True, text=True).stdout
    assert (f"{prefix}/lib/libperfex.so" in linked) == (linkage == "shared"), linked
    code, out, err = run_waiting([elsewhere / binary, 0, 25], manual_mount, "10ms", env=env, cwd=elsewhere)
    assert code == 0, err
    gen1, gen2 = map(int, out["generation"].split())
    assert gen1 == gen2 > 0
    assert (int(out["c0"]), int(out["c1"])) == (10 * CYCLES_PER_MS, 10 * CYCLES_PER_MS // 100)


def test_syssgi_program_links_against_libhwperf(prefix, elsewhere):
    build(prefix, elsewhere, "cc $(pkg-config --cflags --libs hwperfd) -o syssgi_sys syssgi_sys.c")
    symbols = subprocess.run(
        ["nm", "-D", "--undefined-only", str(elsewhere / "syssgi_sys")], capture_output=True, text=True
    )
    assert " syssgi" in symbols.stdout  # resolved from the installed libhwperf.so at run time


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_man_renders_each_page_without_warnings(prefix, page):
    name, section = page.stem, page.suffix[1:]
    env = {**os.environ, "MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "80", "LC_ALL": "C.UTF-8"}
    shown = subprocess.run(
        ["man", "--warnings", "-M", str(prefix / "share" / "man"), section, name],
        env=env, capture_output=True, text=True, cwd="/",
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr == ""
    text = shown.stdout
    assert "NAME" in text and "DESCRIPTION" in text and name in text
    assert f"{name.upper()}({section})" in text


def test_destdir_stages_without_touching_the_prefix(shared_tmp):
    stage = shared_tmp / "stage"
    make_install(Path("/opt/hwperfd-never"), shared_tmp / "stage-build", f"DESTDIR={stage}")
    assert not Path("/opt/hwperfd-never").exists()
    pc = (stage / "opt/hwperfd-never/lib/pkgconfig/hwperfd.pc").read_text()
    assert "prefix=/opt/hwperfd-never\n" in pc and "includedir=/opt/hwperfd-never/include/hwperfd\n" in pc
    assert (stage / "opt/hwperfd-never/share/man/man1/perfex.1").exists()


def test_sdist_carries_what_the_c_build_needs(shared_tmp):
    """An sdist built from a copy of the tree installs the C side by itself."""
    copy = shared_tmp / "sdist-tree"
    shutil.copytree(ROOT, copy, ignore=NOT_SOURCES)
    dist = shared_tmp / "dist"
    made = subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "-d", str(dist)], cwd=copy, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    (archive,) = dist.glob("hwperfd-*.tar.gz")
    with tarfile.open(archive) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
        tar.extractall(shared_tmp / "unpacked", filter="data")
    for needed in (
        "Makefile", "lib/Makefile", "lib/irix/libperfex.c", "lib/irix/syssgi.c", "lib/procredirect.c", "lib/irix/perfex_tables.h",
        "include/perfex.h", "include/sys/procfs.h", "examples/Makefile", "examples/r10k_counters.c",
        "hwperfd/procfs/_ioctl_bridge.c", "hwperfd/procfs/_ioctl_bridge.map", "hwperfd/py.typed", "structs/py.typed",
        *(f"man/{page.name}" for page in PAGES),
    ):  # fmt: skip
        assert needed in names, needed
    (source,) = (shared_tmp / "unpacked").iterdir()
    installed = shared_tmp / "sdist-prefix"
    make_install(installed, shared_tmp / "sdist-build", source=source)
    assert (installed / "lib" / "libperfex.so").exists()
    assert (installed / "share" / "man" / "man8" / "hwperfd.8").exists()


def test_wheel_contents_mark_the_packages_typed(shared_tmp):
    """What build_py puts in the wheel: py.typed in both packages, the bridge's stub."""
    copy = shared_tmp / "build-py-tree"
    shutil.copytree(ROOT, copy, ignore=NOT_SOURCES)
    out = shared_tmp / "build-py"
    built = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(out)],
        cwd=copy, capture_output=True, text=True,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    for typed in ("hwperfd/py.typed", "structs/py.typed", "hwperfd/procfs/_ioctl_bridge.pyi"):
        assert (out / typed).is_file(), typed
