"""Real C and Python clients, as root and as an unprivileged user."""

import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import NOBODY

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
        out, err = proc.communicate("go\n", timeout=30)
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
        out, err = proc.communicate("go\n", timeout=30)
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
