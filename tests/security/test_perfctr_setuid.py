"""perfctr follows the setuid-exec rule, as IRIX and libcpc do: a vperfctr
whose owner may no longer ptrace-read its process is unlinked at the exec;
what it counted before stays the owner's, nothing the privileged image runs
reaches them."""

from __future__ import annotations

import subprocess

from tests.conftest import NOBODY
from tests.perfctr.test_perfctr_driver import CYCLES, EN, USR, control
from tests.waiting import wait_for

# uid 65534: a child makes a vperfctr on a handle shared with its parent,
# then, told to, execs the setuid-root program (stdin: a pipe from the
# parent); the parent reads the sums through its handle when told to.
SETUID_PERFCTR = """
import fcntl, os, sys
from structs import perfctr as abi
fd = os.open(sys.argv[1], os.O_RDONLY)
made_r, made_w = os.pipe()
go_r, go_w = os.pipe()
child = os.fork()
if child == 0:
    fcntl.ioctl(fd, abi.VPERFCTR_ATTACH, abi.vperfctr_attach.build({"tid": 0, "creat": 1}))
    fcntl.ioctl(fd, abi.VPERFCTR_CONTROL, bytes.fromhex(sys.argv[2]))
    os.write(made_w, b"x")
    os.dup2(go_r, 0)
    os.read(0, 1)
    os.execv(sys.argv[3], [sys.argv[3], "full"])
os.read(made_r, 1)
print(child, flush=True)
sys.stdin.readline()
os.write(go_w, b"x")
sys.stdin.readline()
sums = abi.perfctr_sum_ctrs.parse(fcntl.ioctl(fd, abi.VPERFCTR_READ_SUM, bytes(abi.SUM_CTRS_SIZE)))
print(sums.tsc, sums.pmc[0], flush=True)
os.close(go_w)
os.waitpid(child, 0)
"""


def test_a_setuid_exec_unlinks_the_users_vperfctr_and_keeps_the_counts_before_it(intel, nobody_python, setuid_program):
    node = intel.path / "perfctr"
    interpreter, env = nobody_python
    data = control(nractrs=1, evntsel=(CYCLES | USR | EN,))
    proc = subprocess.Popen([*NOBODY, interpreter, "-c", SETUID_PERFCTR, str(node), data.hex(), str(setuid_program)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        child = int(proc.stdout.readline())
        assert f"holder perfctr-virtual uid 65534 pid {child} tid {child}" in node.read_text()
        intel.control(f"advance-thread {child} 2ms")  # the user's own run
        proc.stdin.write("exec\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == f"ready {child}\n"
        assert open(f"/proc/{child}/status").read().split("Uid:")[1].split()[:3] == ["0", "0", "0"]
        # The exec unlinked it: no longer counting, no longer reserving.
        assert wait_for(lambda: f"pid {child} " not in node.read_text()), node.read_text()
        intel.control(f"advance-thread {child} 5ms")  # the privileged image's run
        proc.stdin.write("read\n")
        proc.stdin.flush()
        tsc, pmc0 = map(int, proc.stdout.readline().split())
        assert (tsc, pmc0) == (2_000_000, 2_000_000)
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
