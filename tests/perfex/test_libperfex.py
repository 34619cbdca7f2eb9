"""libperfex(3C): the C library and its Python twin, against the manual-clock mount."""

import io
import os
import subprocess
import sys
import textwrap

import pytest

from hwperfd.perfex import libperfex
from tests.conftest import NOBODY, ROOT, build_c
from tests.perfex.conftest import CYCLES_PER_MS, HERE, counts_of, run_waiting

MS = CYCLES_PER_MS


@pytest.fixture(scope="module")
def print_costs_c(programs):
    return build_c(HERE / "print_costs.c", programs.lib.parent / "print_costs",
                   "-L", str(programs.lib), "-lperfex", f"-Wl,-rpath,{programs.lib}")  # fmt: skip


@pytest.fixture
def python_lib(manual_mount, monkeypatch):
    """The Python library, fresh, pointed at the test mount."""
    monkeypatch.setenv("HWPERFD_MOUNT", str(manual_mount.path))
    monkeypatch.delenv("PERFEX_COSTS", raising=False)
    for name in ("T5_EVENT0", "T5_EVENT1"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(libperfex, "_machine", None)
    monkeypatch.setattr(libperfex, "_costs", None)
    monkeypatch.setattr(libperfex, "_counters", None)
    return libperfex


def test_the_c_tables_are_generated_from_the_python_ones():
    check = subprocess.run([sys.executable, str(ROOT / "lib" / "irix" / "gen_perfex_tables.py"), "--check"])
    assert check.returncode == 0, "run python3 lib/irix/gen_perfex_tables.py"


@pytest.mark.parametrize("client", ["libperfex_client", "libperfex_static_client"])
def test_c_program_counts_exactly(manual_mount, programs, client):
    code, out, err = run_waiting([getattr(programs, client), 0, 25], manual_mount, "10ms")
    assert code == 0, err
    gen1, gen2 = map(int, out["generation"].split())
    assert gen1 == gen2 > 0
    assert int(out["c0"]) == 10 * MS
    assert int(out["c1"]) == 10 * MS // 100
    printed, costs = err.split("--\n")
    assert printed == (
        " 0 Cycles......................................................         2000000\n"
        "25 Primary data cache misses...................................           20000\n"
    )
    assert "Based on 200 MHz MIPS R10000 CPU" in costs
    assert "25 Primary data cache misses" in costs and "0.000900     0.000290     0.001000" in costs


def test_c_cycles_moves_to_the_free_counter_and_reads_back_by_event(manual_mount, programs):
    code, out, err = run_waiting([programs.libperfex_client, 0, 9], manual_mount, "5ms")
    assert code == 0, err
    assert int(out["c0"]) == 5 * MS and int(out["c1"]) == 5 * MS * 2 // 1000


def test_c_conflicting_counters(manual_mount, programs):
    result = subprocess.run(
        [programs.libperfex_client, "9", "10"], capture_output=True, text=True, env=manual_mount.env(), timeout=30
    )
    assert result.returncode == 1
    assert "libperfex: conflicting counters: events 9 (Primary instruction cache misses) and 10" in result.stderr


def test_c_t5_event_variables_override_the_arguments(manual_mount, programs):
    env = manual_mount.env(T5_EVENT0="9", T5_EVENT1="Graduated loads")
    code, out, err = run_waiting([programs.libperfex_client, 0, 25], manual_mount, "10ms", env=env)
    assert code == 0, err
    assert int(out["c0"]) == 10 * MS * 2 // 1000  # event 9
    assert int(out["c1"]) == 10 * MS * 22 // 100  # event 18
    assert " 9 Primary instruction cache misses" in err and "18 Graduated loads" in err


def test_c_runs_unprivileged(manual_mount, programs, shared_tmp):
    # Not root: the control node is readable by everyone, so the library
    # learns the CPU type there, without a moment of counting on itself.
    code, out, err = run_waiting(
        [programs.libperfex_client, 0, 25], manual_mount, "10ms", prefix=NOBODY,
        env={"HWPERFD_MOUNT": str(manual_mount.path), "PATH": os.environ["PATH"]},
    )  # fmt: skip
    assert code == 0, err
    gen1, gen2 = map(int, out["generation"].split())
    assert gen1 == gen2 == 1
    assert int(out["c0"]) == 10 * MS and int(out["c1"]) == 10 * MS // 100


def test_c_not_mounted_says_where_it_looked(programs, tmp_path):
    result = subprocess.run(
        [programs.libperfex_client, "0", "25"], capture_output=True, text=True, timeout=30,
        env={**os.environ, "HWPERFD_MOUNT": str(tmp_path)},
    )  # fmt: skip
    assert result.returncode == 1
    assert f"libperfex: hwperfd is not mounted at {tmp_path}" in result.stderr


def test_an_irix_era_cxx_program_builds_and_runs(manual_mount, programs, tmp_path):
    binary = tmp_path / "irix_era"
    subprocess.run(
        ["g++", "-O2", "-Wall", "-o", str(binary), str(HERE / "irix_era.cc"), "-L", str(programs.lib), "-lperfex",
         f"-Wl,-rpath,{programs.lib}"],
        check=True,
    )  # fmt: skip
    result = subprocess.run([binary], capture_output=True, text=True, env=manual_mount.env(), timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "c: 0 0\nfortran: 0 0\n"  # no CPU time passed on the manual clock
    assert counts_of(result.stderr) == {0: 0, 26: 0}


@pytest.mark.parametrize(
    "e0, c0, e1, c1",
    [
        (0, 2_000_000, 25, 20_000),
        (21, 100_000, 0, 2_000_000),  # FP / cycle, MFLOPS
        (17, 1_600_000, 0, 2_000_000),  # IPC from 17 and 0
        (25, 320_000, 26, 32_000),  # L2 reuse and hit rate
        (24, 1_200, 6, 24_000),  # mispredict ratio
        (18, 7, 18, 7),  # the same event twice: one line
        (26, 0, 16, 0),
    ],
)
def test_c_and_python_print_the_same(python_lib, print_costs_c, manual_mount, e0, c0, e1, c1):
    result = subprocess.run(
        [print_costs_c, str(e0), str(c0), str(e1), str(c1)], capture_output=True, text=True,
        env=manual_mount.env(), timeout=30,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = io.StringIO()
    python_lib.print_counters(e0, c0, e1, c1, file=out)
    out.write("--\n")
    python_lib.print_costs(e0, c0, e1, c1, file=out)
    assert result.stderr == out.getvalue()


def test_c_and_python_load_the_same_cost_files(python_lib, print_costs_c, manual_mount, tmp_path, monkeypatch):
    system = tmp_path / "system.costs"
    system.write_text("26 Secondary data cache misses 500 nsec 300 nsec 700 nsec\n")
    mine = tmp_path / "mine.costs"
    mine.write_text("# mine\n25   12 clks 4 clks 14.5 clks\nTLB misses 70 clks 70 clks 90 clks\n")
    env = manual_mount.env(PERFEX_COSTS=str(system))
    result = subprocess.run(
        [print_costs_c, "25", "320000", "26", "32000", str(mine)], capture_output=True, text=True, env=env, timeout=30
    )
    assert result.returncode == 0, result.stderr
    monkeypatch.setenv("PERFEX_COSTS", str(system))
    python_lib.load_costs(mine)
    out = io.StringIO()
    python_lib.print_counters(25, 320000, 26, 32000, file=out)
    out.write("--\n")
    python_lib.print_costs(25, 320000, 26, 32000, file=out)
    assert result.stderr == out.getvalue()
    assert "0.019200     0.006400     0.023200" in result.stderr  # 320000 x 12 / 4 / 14.5 clks
    assert "0.016000     0.009600     0.022400" in result.stderr  # 32000 x 500 / 300 / 700 ns


@pytest.mark.parametrize(
    "line, message",
    [
        ("26 fast clks 1 clks 1 clks", "cost 'fast' is not a number"),
        ("26 1 clks 1 clks 1 parsecs", "unit 'parsecs' is neither clks nor nsec"),
        ("26 Primary data cache misses 1 clks 1 clks 1 clks", "event 26 is 'Secondary data cache misses'"),
        ("Cycles 1 clks 1 clks 1 clks", "give the event number"),
        ("26 1 clks", "expected an event"),
    ],
)
def test_c_refuses_bad_cost_files_by_line(print_costs_c, manual_mount, tmp_path, line, message):
    bad = tmp_path / "bad.costs"
    bad.write_text(f"# ok\n25 1 clks 1 clks 1 clks\n{line}\n")
    result = subprocess.run(
        [print_costs_c, "0", "1", "25", "1", str(bad)], capture_output=True, text=True, env=manual_mount.env()
    )
    assert result.returncode == 3
    assert f"libperfex: {bad}:3: " in result.stderr and message in result.stderr


PYTHON_CLIENT = textwrap.dedent(
    """
    import os, signal, sys
    from hwperfd.perfex.libperfex import start_counters, read_counters, print_counters
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    gen = start_counters(0, 25)
    print("counting", os.getpid(), file=sys.stderr, flush=True)
    signal.sigwait({signal.SIGUSR1})
    gen2, c0, c1 = read_counters(0, 25)
    print("generation:", gen, gen2)
    print("c0:", c0)
    print("c1:", c1)
    print_counters(0, c0, 25, c1)
    """
)


def test_python_library_counts_exactly(manual_mount):
    code, out, err = run_waiting([sys.executable, "-c", PYTHON_CLIENT], manual_mount, "10ms")
    assert code == 0, err
    gen1, gen2 = map(int, out["generation"].split())
    assert gen1 == gen2 > 0
    assert int(out["c0"]) == 10 * MS and int(out["c1"]) == 10 * MS // 100
    assert counts_of(err) == {0: 10 * MS, 25: 10 * MS // 100}


def test_python_conflicting_counters(python_lib):
    with pytest.raises(ValueError, match="conflicting counters"):
        python_lib.start_counters(9, 10)


def test_make_install_gives_headers_and_libraries(tmp_path, manual_mount):
    prefix = tmp_path / "usr"
    build = tmp_path / "build"
    subprocess.run(
        ["make", "-s", "-C", str(ROOT / "lib"), "install", f"PREFIX={prefix}", f"BUILD={build}"],
        check=True, capture_output=True,
    )  # fmt: skip
    for path in ("lib/libperfex.so", "lib/libperfex.a", "include/hwperfd/perfex.h", "include/hwperfd/sys/procfs.h",
                 "include/hwperfd/sys/hwperftypes.h"):  # fmt: skip
        assert (prefix / path).exists(), path
    program = tmp_path / "prog.c"
    program.write_text(
        "#include <perfex.h>\n#include <stdio.h>\n"
        "int main(void) { long long a, b; int g = start_counters(0, 25);\n"
        "  if (g < 0 || read_counters(0, &a, 25, &b) != g) return 1; printf(\"%lld %lld\\n\", a, b); return 0; }\n"
    )
    binary = tmp_path / "prog"
    subprocess.run(
        ["cc", "-I", str(prefix / "include" / "hwperfd"), "-o", str(binary), str(program), "-L", str(prefix / "lib"), "-lperfex",
         f"-Wl,-rpath,{prefix / 'lib'}"],
        check=True,
    )  # fmt: skip
    result = subprocess.run([binary], capture_output=True, text=True, env=manual_mount.env(), timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "0 0\n"
