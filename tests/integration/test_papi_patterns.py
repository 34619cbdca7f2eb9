"""PAPI's IRIX substrate, as C programs: stop and start on one descriptor.
Exact counts on the manual clock, as root and as an unprivileged user."""

import errno
import subprocess

import pytest

from tests.conftest import NOBODY

R10K_CYCLES_PER_MS = 200_000  # manual_mount: R10000 at 200 MHz


def run_steps(cmd, mount, advances: list[str]) -> dict[str, str]:
    """Run a client that prints 'counting' and waits for a line once per
    entry of ``advances``: move its manual clock by that much each time."""
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mount.env()
    )
    lines = []
    try:
        for advance in advances:
            while True:
                line = proc.stdout.readline()
                assert line, proc.stderr.read()
                if line.strip() == "counting":
                    break
                lines.append(line)
            mount.control(f"advance {proc.pid} {advance}")
            proc.stdin.write("go\n")
            proc.stdin.flush()
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    return dict(line.rstrip("\n").split(": ", 1) for line in lines + out.splitlines(keepends=True))


@pytest.mark.parametrize("who", ["root", "nobody"])
def test_papi_stop_start_reset_cycle_counts_each_run_from_zero(manual_mount, examples, who):
    prefix = NOBODY if who == "nobody" else []
    out = run_steps(prefix + [str(examples / "papi_cycle"), "-w"], manual_mount, ["3ms", "2ms", "1ms", "5ms"])
    ms = R10K_CYCLES_PER_MS
    assert int(out["probe errno"]) == errno.EINVAL
    init = int(out["init generation"])
    first = int(out["first generation"])
    assert first > init > 0
    assert int(out["first cycles"]) == 3 * ms
    assert int(out["first graduated instructions"]) == 3 * ms * 8 // 10
    # Released: PIOCGETEVCTRL says EINVAL, time is not counted, counts stay.
    assert int(out["control after stop"]) == errno.EINVAL
    assert int(out["stopped generation"]) == first
    assert int(out["stopped cycles"]) == 3 * ms
    # PIOCSETEVCTRL after the release starts again, from zero, newer generation.
    restart = int(out["restart generation"])
    assert restart > first
    assert int(out["second generation"]) == restart
    assert int(out["second cycles"]) == 1 * ms
    # PAPI_reset: stop + start.
    reset = int(out["reset generation"])
    assert reset > restart
    assert int(out["reset cycles"]) == 0
    assert int(out["third cycles"]) == 5 * ms
    assert int(out["third graduated instructions"]) == 5 * ms * 8 // 10
    # A second library init on released counters acquires again.
    assert int(out["reinit generation"]) > reset
