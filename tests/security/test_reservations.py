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
from tests.cpc.conftest import cpc_programs, driver  # noqa: F401 - fixtures: cpc_driver.c
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
        pctr_set(intel, CYCLES | USR | EN)
        pctr_set(intel, 0)  # pctr's counters stay programmed (and reserved) until cleared
        # The frozen counts stay the owner's to read: 2 ms at 1000 MHz.
        proc.stdin.write("read\n")
        proc.stdin.flush()
        tsc, pmc0 = map(int, proc.stdout.readline().split())
        assert pmc0 == 2_000_000 and tsc == 2_000_000
    finally:
        proc.kill()
        proc.wait()


def pctr_set(mount, evntsel: int) -> None:
    """Root programs pctr's counter 0 (0: clears it, and pctr lets the reservation go)."""
    pctr = os.open(mount.path / "pctr", os.O_WRONLY)
    try:
        fcntl.ioctl(pctr, PCIOCS[0], struct.pack("I", evntsel))
    finally:
        os.close(pctr)


# Many threads each make a vperfctr on an fd of their own and exit; the
# process keeps every fd and reads each one's frozen sums on request.
ORPHANS = """
import fcntl, os, sys, threading
from structs import perfctr as abi
n = int(sys.argv[2])
fds = [os.open(sys.argv[1], os.O_RDONLY) for _ in range(n)]
def make(fd):
    fcntl.ioctl(fd, abi.VPERFCTR_ATTACH, abi.vperfctr_attach.build({"tid": 0, "creat": 1}))
    fcntl.ioctl(fd, abi.VPERFCTR_CONTROL, bytes.fromhex(sys.argv[3]))
threads = [threading.Thread(target=make, args=(fd,)) for fd in fds]
[t.start() for t in threads]
[t.join() for t in threads]
print("orphaned", flush=True)
sys.stdin.readline()
for fd in fds:
    sums = abi.perfctr_sum_ctrs.parse(fcntl.ioctl(fd, abi.VPERFCTR_READ_SUM, bytes(abi.SUM_CTRS_SIZE)))
    print(sums.pmc[0], flush=True)
sys.stdin.read()
"""


def test_roots_cpu_bind_global_start_and_pctr_go_on_while_many_orphaned_vperfctr_fds_stay_open(
    intel, nobody_python, driver  # noqa: F811 - the fixture imported above
):
    """cpc_bind_cpu, GPERFCTR_START and PCIOCS0, each in turn, while two
    processes of uid 65534 keep 64 fds of vperfctrs whose threads are gone."""
    node = intel.path / "perfctr"
    interpreter, env = nobody_python
    data = control(nractrs=1, evntsel=(CYCLES | USR | EN,))
    keepers = [subprocess.Popen([*NOBODY, interpreter, "-c", ORPHANS, str(node), "32", data.hex()],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
               for _ in range(2)]  # fmt: skip
    try:
        for keeper in keepers:
            assert keeper.stdout.readline() == "orphaned\n"
        assert wait_for(lambda: "reserved-by -" in node.read_text()), node.read_text()
        cpu = driver(intel)
        cpu("add PAPI_tot_cyc 0 6")
        assert cpu("bindcpu 0") == "ok"
        assert "cpu 0 bound" in (intel.path / "cpc").read_text()
        assert cpu("unbind") == "ok"
        gfd = os.open(node, os.O_RDONLY)
        try:
            fcntl.ioctl(gfd, abi.GPERFCTR_CONTROL, gcontrol(0))
            assert fcntl.ioctl(gfd, abi.GPERFCTR_START, 0) == 1
            fcntl.ioctl(gfd, abi.GPERFCTR_STOP)
        finally:
            os.close(gfd)
        pctr_set(intel, CYCLES | USR | EN)
        pctr_set(intel, 0)
        # Every orphan still reads its frozen sums (nothing ran on its thread).
        for keeper in keepers:
            keeper.stdin.write("read\n")
            keeper.stdin.flush()
            assert [keeper.stdout.readline() for _ in range(32)] == ["0\n"] * 32
    finally:
        for keeper in keepers:
            keeper.kill()
            keeper.wait()
