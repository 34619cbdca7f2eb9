"""Reservations are held only by counters that can count: an unprivileged
vperfctr whose thread is gone keeps its frozen counts readable through the
fd its process kept, but no longer vetoes root's global counters or pctr;
the perfctr node names each holder of the machine's reservation."""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess

from structs import perfctr as abi
from structs.pctr import PCIOCS
from tests.conftest import NOBODY
from tests.perfctr.test_perfctr_driver import CYCLES, EN, USR, control, gcontrol
from tests.waiting import wait_for

# A thread makes a vperfctr with one a-mode counter, waits for a line, exits;
# the process keeps the fd and, on the next line, reads the frozen sums.
ORPHAN = """
import fcntl, os, sys, threading
from structs import perfctr as abi
fd = os.open(sys.argv[1], os.O_RDONLY)
go = threading.Event()
def make():
    fcntl.ioctl(fd, abi.VPERFCTR_ATTACH, abi.vperfctr_attach.build({"tid": 0, "creat": 1}))
    fcntl.ioctl(fd, abi.VPERFCTR_CONTROL, bytes.fromhex(sys.argv[2]))
    print(threading.get_native_id(), flush=True)
    go.wait()
t = threading.Thread(target=make)
t.start()
print(os.getpid(), flush=True)
sys.stdin.readline()
go.set()
t.join()
print("joined", flush=True)
sys.stdin.readline()
sums = abi.perfctr_sum_ctrs.parse(fcntl.ioctl(fd, abi.VPERFCTR_READ_SUM, bytes(abi.SUM_CTRS_SIZE)))
print(sums.tsc, sums.pmc[0], flush=True)
sys.stdin.read()
"""


def test_an_orphaned_vperfctr_keeps_its_counts_but_not_the_machines_reservation(intel, nobody_python):
    node = intel.path / "perfctr"
    interpreter, env = nobody_python
    data = control(nractrs=1, evntsel=(CYCLES | USR | EN,))
    proc = subprocess.Popen([*NOBODY, interpreter, "-c", ORPHAN, str(node), data.hex()],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        pid = proc.pid  # setpriv execs the interpreter
        [tid] = {int(proc.stdout.readline()), int(proc.stdout.readline())} - {pid}
        # While the thread lives, it holds the reservation, by name.
        assert f"holder perfctr-virtual uid 65534 pid {pid} tid {tid}" in node.read_text()
        intel.control(f"advance-thread {tid} 2ms")
        proc.stdin.write("exit the thread\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "joined\n"
        assert wait_for(lambda: "reserved-by -" in node.read_text()), node.read_text()
        assert "holder" not in node.read_text()
        # Root's global counters and pctr start while the fd is still open.
        gfd = os.open(node, os.O_RDONLY)
        try:
            fcntl.ioctl(gfd, abi.GPERFCTR_CONTROL, gcontrol(0))
            assert fcntl.ioctl(gfd, abi.GPERFCTR_START, 0) == 1
            fcntl.ioctl(gfd, abi.GPERFCTR_STOP)
        finally:
            os.close(gfd)
        pctr = os.open(intel.path / "pctr", os.O_WRONLY)
        try:
            fcntl.ioctl(pctr, PCIOCS[0], struct.pack("I", CYCLES | USR | EN))
        finally:
            os.close(pctr)
        # The frozen counts stay the owner's to read: 2 ms at 1000 MHz.
        proc.stdin.write("read\n")
        proc.stdin.flush()
        tsc, pmc0 = map(int, proc.stdout.readline().split())
        assert pmc0 == 2_000_000 and tsc == 2_000_000
    finally:
        proc.kill()
        proc.wait()
