"""Real C and Python clients, as root and as an unprivileged user."""

import errno
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import NOBODY, finish

CYCLES_PER_MS = 200_000


def run_waiting(cmd, mount, advance: str, env=None):
    """Run a client that prints 'counting' and waits for a line: advance its
    manual clock in between, then let it finish."""
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env or mount.env(),
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        assert line.strip() == "counting", line + proc.stderr.read()
        mount.control(f"advance {proc.pid} {advance}")
        out, err = finish(proc, "go\n", timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    return dict(line.split(": ", 1) for line in out.strip().splitlines())


def test_r10k_counters_example_counts_cache_misses(manual_mount, examples):
    out = run_waiting([examples / "r10k_counters", "-w"], manual_mount, "10ms")
    assert int(out["generation"]) > 0
    assert int(out["instruction cache misses"]) == 10 * CYCLES_PER_MS * 2 // 1000
    assert int(out["data cache misses"]) == 10 * CYCLES_PER_MS // 100


def test_r10k_counters_example_runs_unprivileged(manual_mount, examples):
    out = run_waiting(NOBODY + [str(examples / "r10k_counters"), "-w"], manual_mount, "5ms")
    assert int(out["data cache misses"]) == 5 * CYCLES_PER_MS // 100


def test_papi_call_pattern_works_unchanged(manual_mount, examples):
    out = run_waiting([examples / "papi_style", "-w"], manual_mount, "4ms")
    assert int(out["cycles"]) == 4 * CYCLES_PER_MS
    assert int(out["graduated instructions"]) == 4 * CYCLES_PER_MS * 8 // 10
    assert int(out["slot0 spec"]) == 0x8


def test_dyninst_kernel_mode_request_is_eperm_when_not_root(manual_mount, examples):
    result = subprocess.run(
        NOBODY + [str(examples / "dyninst_style")], capture_output=True, text=True, env=manual_mount.env()
    )
    assert result.stdout.startswith("errno 1 "), result.stdout + result.stderr


def test_dyninst_kernel_mode_request_succeeds_for_root(manual_mount, examples):
    result = subprocess.run([examples / "dyninst_style"], capture_output=True, text=True, env=manual_mount.env())
    assert result.stdout.startswith("ok "), result.stdout + result.stderr
    assert "system mode free" in (manual_mount.path / "control").read_text()


PYTHON_CLIENT = textwrap.dedent(
    """
    import errno, os, sys
    from hwperfd.client import ProcessCounters, user, kernel
    pc = ProcessCounters()
    try:
        pc.enable({0: kernel(0)})
    except OSError as e:
        print("kernel:", errno.errorcode[e.errno])
    gen = pc.enable({0: user(0)})
    print("counting", flush=True)
    sys.stdin.readline()
    g, counts = pc.read()
    print("generation:", g == gen)
    print("cycles:", counts[0])
    """
)


def test_unprivileged_python_client_counts_itself_and_gets_eperm_for_kernel_mode(
    manual_mount, shared_tmp, nobody_python
):
    script = shared_tmp / "client.py"
    script.write_text(PYTHON_CLIENT)
    os.chmod(script, 0o644)
    interpreter, env = nobody_python
    env = {**env, "HWPERFD_MOUNT": str(manual_mount.path)}
    proc = subprocess.Popen(
        NOBODY + [interpreter, str(script)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "kernel: EPERM"
        assert proc.stdout.readline().strip() == "counting"
        manual_mount.control(f"advance {proc.pid} 3ms")
        out, err = finish(proc, "go\n", timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "generation: True" in out
    assert f"cycles: {3 * CYCLES_PER_MS}" in out


def test_unprivileged_user_cannot_open_or_control_another_users_process(manual_mount, nobody_python):
    code = (
        "import os, errno\n"
        f"try:\n    os.open('{manual_mount.path}/{os.getpid():05d}', os.O_RDONLY)\n"
        "except OSError as e:\n    print(errno.errorcode[e.errno])\n"
    )
    interpreter, env = nobody_python
    result = subprocess.run(NOBODY + [interpreter, "-c", code], capture_output=True, text=True, env=env)
    assert result.stdout.strip() == "EACCES", result.stderr


def test_root_cannot_be_refused_by_process_group(manual_mount):
    from hwperfd.client import ProcessCounters, user

    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        with ProcessCounters(child.pid, mount=manual_mount.path) as pc:
            gen = pc.enable({0: user(0)})
            manual_mount.control(f"advance {child.pid} 1ms")
            assert pc.read() == (gen, (CYCLES_PER_MS,) + (0,) * 31)
    finally:
        child.kill()
        child.wait()


# -- IRIX's pointer-carrying calls: PIOCENEVCTRSEX and PIOCGETEVCTRLEX ----------


def test_checkpoint_restart_pattern_continues_counts_under_the_saved_generation(manual_mount, examples):
    """The C example saves counts, generation, events and thresholds with
    PIOCGETEVCTRS + PIOCGETEVCTRLEX and restarts them in a child with
    PIOCENEVCTRSEX, passing IRIX's structs of pointers (the shim carries them)."""
    proc = subprocess.Popen(
        [examples / "checkpoint_restart", "-w"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=manual_mount.env(),
    )  # fmt: skip
    out = {}
    try:
        for advance in ("3ms", "2ms"):  # the checkpointed process, then the restarted one
            while not (line := proc.stdout.readline()).startswith("counting "):
                assert line, proc.stderr.read()
                out.update([line.strip().split(": ", 1)])
            manual_mount.control(f"advance {int(line.split()[1])} {advance}")
            proc.stdin.write("go\n")
            proc.stdin.flush()
        rest, err = finish(proc, timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    out.update(line.split(": ", 1) for line in rest.strip().splitlines())
    assert int(out["checkpoint cycles"]) == 3 * CYCLES_PER_MS
    assert int(out["checkpoint graduated instructions"]) == 3 * CYCLES_PER_MS * 8 // 10
    assert int(out["restart generation"]) == int(out["checkpoint generation"]) > 0
    assert int(out["restart cycles"]) == 5 * CYCLES_PER_MS
    assert int(out["restart graduated instructions"]) == 5 * CYCLES_PER_MS * 8 // 10
    assert int(out["restart threshold 17"]) == 1_000_000
    assert int(out["restart slot 17 spec"]) == (1 << 5) | 0x8  # graduated instructions, user mode


def test_pointer_forms_without_the_shim_are_efault_and_change_nothing(manual_mount):
    from hwperfd.client import ProcessCounters, user
    import structs

    with ProcessCounters(mount=manual_mount.path) as counters:
        for cmd in (structs.PIOCENEVCTRSEX, structs.PIOCGETEVCTRLEX):
            with pytest.raises(OSError) as info:
                counters._ioctl(cmd, bytes(16))
            assert info.value.errno == errno.EFAULT
        with pytest.raises(OSError) as info:
            counters.control()
        assert info.value.errno in (errno.EINVAL, errno.ESRCH)  # released before, or never used
        generation = counters.enable({0: user(0)})
        with pytest.raises(OSError) as info:
            counters._ioctl(structs.PIOCGETEVCTRLEX, bytes(16))
        assert info.value.errno == errno.EFAULT
        assert counters.read()[0] == generation
        counters.release()


def test_python_enable_ex_and_control_ex(manual_mount):
    from hwperfd.client import ProcessCounters, user

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        with ProcessCounters(child.pid, mount=manual_mount.path) as counters:
            saved = [1000 + i for i in range(32)]
            assert counters.enable_ex({0: user(0)}, {0: 5000}, 0, generation=9, counts=saved) == 9
            manual_mount.control(f"advance {child.pid} 1ms")
            generation, counts = counters.read()
            assert generation == 9
            assert counts[0] == 1000 + CYCLES_PER_MS
            assert counts[1:] == tuple(saved[1:])
            assert counters.control_ex() == (9, (user(0),) + (0,) * 31, (5000,) + (0,) * 31, 0)
            counters.release()
            for bad in (dict(generation=9), dict(generation=-2)):  # reused, negative
                with pytest.raises(OSError) as info:
                    counters.enable_ex({0: user(0)}, **bad)
                assert info.value.errno == errno.EINVAL
            assert counters.read() == (generation, counts)
    finally:
        child.kill()
        child.wait()
