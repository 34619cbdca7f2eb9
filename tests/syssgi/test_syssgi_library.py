"""The C syssgi() of libhwperf (lib/irix/syssgi.c), through examples/syssgi_sys and
IRIX-style sources built against include/ and lib/.

syssgi_sys runs one step per argument and prints "STEP: RESULT ERRNO ...";
"wait" prints "waiting" and reads a line, while the test moves the manual
clock of the emulated CPUs.
"""

import os
import subprocess
import textwrap

import pytest

from tests.conftest import NOBODY, ROOT

CYCLES_PER_MS = 200_000


def run_steps(program, mount, steps, advances=(), env=None, prefix=()):
    """Run ``program STEPS``; at the n-th "waiting" write ``advances[n]`` (a
    list of control commands) to the mount, then let it go on."""
    proc = subprocess.Popen(
        [*prefix, str(program), *steps],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env or mount.env(),
    )  # fmt: skip
    lines = []
    try:
        waits = iter(advances)
        for line in proc.stdout:
            line = line.rstrip("\n")
            if line == "waiting":
                for command in next(waits):
                    mount.control(command)
                proc.stdin.write("go\n")
                proc.stdin.flush()
                continue
            lines.append(line)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read()
    return lines


def test_system_mode_life_cycle_through_syssgi(manual_mount, examples, control):
    steps = [
        "read", "ctl", "cpus",
        "enable:u", "enable:x", "enable:ux",  # no kernel mode: EINVAL
        "enable:k", "enable:k",  # acquired, then EBUSY
        "read", "wait", "read", "cpus", "cpu:2", "cpu:-1", "ctl",
        "set:k", "ctl", "set:u", "wait", "read", "cpu:0", "cpu:1",
        "prof", "badcmd", "badreq",
        "release", "release", "read",
    ]  # fmt: skip
    advances = [
        ["advance-cpu 0 1ms 10ms", "advance-cpu 1 5ms 20ms"],
        ["advance-cpu 0 0 30ms", "advance-cpu 1 7ms 0"],
    ]
    out = run_steps(examples / "syssgi_sys", manual_mount, steps, advances)
    kcyc = lambda ms: ms * CYCLES_PER_MS * 9 // 10  # K counts 9/10 of system time
    c0_cpu0, c0_cpu1 = kcyc(10), kcyc(20)
    g = int(out[6].split()[1])
    assert g > 0
    k = (0 << 5) | 2  # cycles in kernel mode
    assert out == [
        "read: -1 EINVAL 0 0 0",
        "ctl: -1 EINVAL 42405 42405 42405 canary-intact",  # the buffer is left alone
        "cpus: 0 -",  # GET_CPUCNTRS on free counters: 0, as for a bad cpuid
        "enable: -1 EINVAL",
        "enable: -1 EINVAL",
        "enable: -1 EINVAL",
        f"enable: {g} -",
        "enable: -1 EBUSY",
        f"read: {g} - 0 0 0",
        f"read: {g} - {c0_cpu0 + c0_cpu1} {(c0_cpu0 + c0_cpu1) * 8 // 10} 0",
        f"cpu:0: {g} - {c0_cpu0} {c0_cpu0 * 8 // 10} 0",
        f"cpu:1: {g} - {c0_cpu1} {c0_cpu1 * 8 // 10} 0",
        f"cpus: 2 -",
        "cpu:2: 0 - 0 0 0",
        "cpu:-1: 0 - 0 0 0",
        f"ctl: {g} - {k} {(1 << 5) | 2} 0 canary-intact",  # only 64 bytes written
        f"set: {g + 1} -",
        f"ctl: {g + 1} - {k} 0 {(9 << 5) | 2} canary-intact",
        "set: -1 EINVAL",  # user mode only: refused, generation kept
        f"read: {g + 1} - {c0_cpu0 + c0_cpu1 + kcyc(30)} 0 {kcyc(30) // 100}",
        f"cpu:0: {g + 1} - {c0_cpu0 + kcyc(30)} 0 {kcyc(30) // 100}",
        f"cpu:1: {g + 1} - {c0_cpu1} 0 0",  # user time is not counted in K mode
        "prof: -1 E2BIG",  # no region to profile (profcnt 0)
        "badcmd: -1 EINVAL",
        "badreq: -1 EINVAL",
        "release: 0 -",
        "release: -1 EINVAL",
        "read: -1 EINVAL 0 0 0",
    ]


def test_user_and_exception_level_in_system_mode(manual_mount, examples, control):
    out = run_steps(
        examples / "syssgi_sys", manual_mount, ["enable:ukx", "wait", "read", "cpus", "release"],
        [["advance-cpu 0 3ms 10ms", "advance-cpu 1 1ms 0"]],
    )  # fmt: skip
    gen = out[0].split()[1]
    cpu0, cpu1 = 3 * CYCLES_PER_MS + 10 * CYCLES_PER_MS, CYCLES_PER_MS  # U + K + EXL = all of it
    assert out[1:] == [
        f"read: {gen} - {cpu0 + cpu1} {(cpu0 + cpu1) * 8 // 10} 0",
        f"cpu:0: {gen} - {cpu0} {cpu0 * 8 // 10} 0",
        f"cpu:1: {gen} - {cpu1} {cpu1 * 8 // 10} 0",
        "cpus: 2 -",
        "release: 0 -",
    ]


def test_syssgi_displaces_user_mode_counters_forcibly(manual_mount, examples, control, busy):
    from hwperfd.client import ProcessCounters, user

    with ProcessCounters(busy.pid, mount=manual_mount.path) as looping:
        gen = looping.enable({0: user(0)})
        out = run_steps(examples / "syssgi_sys", manual_mount, ["enable:k", "release"])
        assert out[0].startswith("enable: ") and int(out[0].split()[1]) > 0
        assert out[1] == "release: 0 -"
        assert looping.read()[0] == gen + 1


def test_unprivileged_syssgi_reads_but_cannot_change(manual_mount, examples, control):
    """r10k_counters(5): only ENSYSCNTRS, SET_SYSEVCTRL and RELSYSCNTRS need
    root; a non-root syssgi() reads the system counters and control, and
    every command that would change them answers EPERM and changes nothing."""
    gen = control.enable_system({0: (0 << 5) | 2})
    manual_mount.control("advance-cpu 0 0 10ms")
    steps = ["enable:k", "set:k", "read", "cpu:0", "cpu:1", "ctl", "release", "badreq"]
    out = run_steps(examples / "syssgi_sys", manual_mount, steps, prefix=NOBODY)
    kernel = 9 * 200_000  # K share (9/10) of 10 ms at 200 MHz
    assert out == [
        "enable: -1 EPERM",
        "set: -1 EPERM",
        f"read: {gen} - {kernel} 0 0",
        f"cpu:0: {gen} - {kernel} 0 0",
        f"cpu:1: {gen} - 0 0 0",
        f"ctl: {gen} - 2 0 0 canary-intact",
        "release: -1 EPERM",
        "badreq: -1 EINVAL",
    ]
    assert control.system_control() == (gen, (2,) + (0,) * 31)
    assert "system mode held" in (manual_mount.path / "control").read_text()


def test_syssgi_without_hwperfd_reports_the_open_error(examples, shared_tmp):
    env = {**os.environ, "HWPERFD_MOUNT": str(shared_tmp / "not-mounted")}
    result = subprocess.run([examples / "syssgi_sys", "read", "release"], capture_output=True, text=True, env=env)
    assert result.stdout.splitlines() == ["read: -1 ENOENT 0 0 0", "release: -1 ENOENT"]


IRIX_SOURCE = textwrap.dedent(
    r"""
    /* An IRIX system tool's use of the counters, unchanged. */
    #include <errno.h>
    #include <stdio.h>
    #include <string.h>
    #include <sys/types.h>
    #include <sys/syssgi.h>
    #include <sys/hwperftypes.h>
    #include <sys/hwperfmacros.h>

    int main(void)
    {
        hwperf_profevctrarg_t evctr_args;
        hwperf_cntr_t cnts;
        int gen, gen2, cpu, i;

        memset(&evctr_args, 0, sizeof evctr_args);
        for (i = 0; i < HWPERF_EVENTMAX; i++) {
            evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_spec = 0;
            evctr_args.hwp_ovflw_freq[i] = 0;
        }
        evctr_args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_mode = HWPERF_CNTEN_K;
        evctr_args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_ev = HWPERF_C0PRFCNT0_CYCLES;
        evctr_args.hwp_ovflw_sig = 0;
        if ((gen = syssgi(SGI_EVENTCTR, HWPERF_ENSYSCNTRS, (void *)&evctr_args)) < 0) {
            perror("syssgi HWPERF_ENSYSCNTRS");
            return 1;
        }
        if ((gen2 = syssgi(SGI_EVENTCTR, HWPERF_GET_SYSEVCTRL, &evctr_args)) != gen)
            return 2;
        for (cpu = 0; syssgi(SGI_EVENTCTR, HWPERF_GET_CPUCNTRS, cpu, &cnts) > 0; cpu++)
            printf("cpu %d: %llu\n", cpu, (unsigned long long)cnts.hwp_evctr[0]);
        if (syssgi(SGI_EVENTCTR, HWPERF_GET_SYSCNTRS, &cnts) != gen)
            return 3;
        printf("total: %llu\n", (unsigned long long)cnts.hwp_evctr[0]);
        if (syssgi(SGI_EVENTCTR, HWPERF_RELSYSCNTRS) != 0)
            return 4;
        printf("mode: %d\n", evctr_args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_mode);
        return 0;
    }
    """
)


@pytest.fixture(scope="module")
def libhwperf(shared_tmp):
    """lib/Makefile's libhwperf target, built outside the source tree."""
    build = shared_tmp / "libhwperf"
    subprocess.run(["make", "-s", "-C", str(ROOT / "lib"), "libhwperf", f"BUILD={build}"], check=True)
    return build


@pytest.mark.parametrize("link", ["static", "shared"])
def test_irix_source_links_against_libhwperf_and_runs(manual_mount, control, libhwperf, shared_tmp, link):
    src = shared_tmp / "irix_syssgi.c"
    src.write_text(IRIX_SOURCE)
    exe = shared_tmp / f"irix_syssgi_{link}"
    lib = ["-L", str(libhwperf), "-lhwperf", f"-Wl,-rpath,{libhwperf}"]
    if link == "static":
        lib = [str(libhwperf / "libhwperf.a")]
    subprocess.run(
        ["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "include"), str(src), "-o", str(exe), *lib],
        check=True,
    )
    manual_mount.control("advance-cpu 0 0 10ms")  # before acquisition: not counted
    result = subprocess.run([exe], capture_output=True, text=True, env=manual_mount.env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["cpu 0: 0", "cpu 1: 0", "total: 0", f"mode: {2}"]


@pytest.mark.parametrize("std", ["c89", "c99", "gnu11"])
def test_library_compiles_cleanly_in_every_mode(tmp_path, std):
    result = subprocess.run(
        ["cc", f"-std={std}", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "include"),
         "-c", str(ROOT / "lib" / "irix" / "syssgi.c"), "-o", str(tmp_path / "syssgi.o")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
