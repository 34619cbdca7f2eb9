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

# Threads each make a vperfctr with one a-mode counter on an fd of their
# own and name themselves; on a line they exit (the process keeps the fds),
# and on the next the process reads each fd's frozen sums.
ORPHANS = """
import fcntl, os, sys, threading
from structs import perfctr as abi
fds = [os.open(sys.argv[1], os.O_RDONLY) for _ in range(int(sys.argv[2]))]
made, go = threading.Barrier(len(fds) + 1), threading.Event()
def make(fd):
    fcntl.ioctl(fd, abi.VPERFCTR_ATTACH, abi.vperfctr_attach.build({"tid": 0, "creat": 1}))
    fcntl.ioctl(fd, abi.VPERFCTR_CONTROL, bytes.fromhex(sys.argv[3]))
    tids.append(threading.get_native_id())
    made.wait()
    go.wait()
tids = []
threads = [threading.Thread(target=make, args=(fd,)) for fd in fds]
[t.start() for t in threads]
made.wait()
print(*tids, flush=True)
sys.stdin.readline()
go.set()
[t.join() for t in threads]
print("orphaned", flush=True)
sys.stdin.readline()
for fd in fds:
    sums = abi.perfctr_sum_ctrs.parse(fcntl.ioctl(fd, abi.VPERFCTR_READ_SUM, bytes(abi.SUM_CTRS_SIZE)))
    print(sums.tsc, sums.pmc[0], flush=True)
sys.stdin.read()
"""


class Orphans:
    """A process of uid 65534 whose ``n`` threads each hold a vperfctr
    counting user cycles (``tids``), until ``orphan`` lets them exit and
    leaves their vperfctrs to the fds the process keeps."""

    def __init__(self, mount, nobody_python, n: int) -> None:
        interpreter, env = nobody_python
        data = control(nractrs=1, evntsel=(CYCLES | USR | EN,))
        argv = [*NOBODY, interpreter, "-c", ORPHANS, str(mount.path / "perfctr"), str(n), data.hex()]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.pid = self.proc.pid  # setpriv execs the interpreter
        self.tids = [int(tid) for tid in self.proc.stdout.readline().split()]
        self.n = n

    def _say(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def orphan(self) -> None:
        self._say("exit the threads")
        assert self.proc.stdout.readline() == "orphaned\n"

    def sums(self) -> list[tuple[int, int]]:
        """Each fd's frozen (tsc, pmc0) sums."""
        self._say("read")
        return [tuple(map(int, self.proc.stdout.readline().split())) for _ in range(self.n)]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def global_counters_start_and_stop(mount) -> None:
    """Root's global-mode counters on CPU 0: they take the reservation and give it back."""
    gfd = os.open(mount.path / "perfctr", os.O_RDONLY)
    try:
        fcntl.ioctl(gfd, abi.GPERFCTR_CONTROL, gcontrol(0))
        assert fcntl.ioctl(gfd, abi.GPERFCTR_START, 0) == 1
        fcntl.ioctl(gfd, abi.GPERFCTR_STOP)
    finally:
        os.close(gfd)


def pctr_set(mount, evntsel: int) -> None:
    """Root programs pctr's counter 0 (0: clears it, and pctr lets the reservation go)."""
    pctr = os.open(mount.path / "pctr", os.O_WRONLY)
    try:
        fcntl.ioctl(pctr, PCIOCS[0], struct.pack("I", evntsel))
    finally:
        os.close(pctr)


def test_an_orphaned_vperfctr_keeps_its_counts_but_not_the_machines_reservation(intel, nobody_python):
    node = intel.path / "perfctr"
    orphans = Orphans(intel, nobody_python, 1)
    try:
        [tid] = orphans.tids
        # While the thread lives, it holds the reservation, by name.
        assert f"holder perfctr-virtual uid 65534 pid {orphans.pid} tid {tid}" in node.read_text()
        intel.control(f"advance-thread {tid} 2ms")
        orphans.orphan()
        assert wait_for(lambda: "reserved-by -" in node.read_text()), node.read_text()
        assert "holder" not in node.read_text()
        # Root's global counters and pctr start while the fd is still open.
        global_counters_start_and_stop(intel)
        pctr_set(intel, CYCLES | USR | EN)
        pctr_set(intel, 0)  # pctr's counters stay programmed (and reserved) until cleared
        # The frozen counts stay the owner's to read: 2 ms at 1000 MHz.
        assert orphans.sums() == [(2_000_000, 2_000_000)]
    finally:
        orphans.close()


def test_roots_cpu_bind_global_start_and_pctr_go_on_while_many_orphaned_vperfctr_fds_stay_open(
    intel, nobody_python, driver  # noqa: F811 - the fixture imported above
):
    """cpc_bind_cpu, GPERFCTR_START and PCIOCS0, each in turn, while two
    processes of uid 65534 keep 64 fds of vperfctrs whose threads are gone."""
    node = intel.path / "perfctr"
    keepers = []
    try:
        for _ in range(2):
            keepers.append(Orphans(intel, nobody_python, 32))
        for keeper in keepers:
            keeper.orphan()
        assert wait_for(lambda: "reserved-by -" in node.read_text()), node.read_text()
        cpu = driver(intel)
        cpu("add PAPI_tot_cyc 0 6")
        assert cpu("bindcpu 0") == "ok"
        assert "cpu 0 bound" in (intel.path / "cpc").read_text()
        assert cpu("unbind") == "ok"
        global_counters_start_and_stop(intel)
        pctr_set(intel, CYCLES | USR | EN)
        pctr_set(intel, 0)
        # Every orphan still reads its frozen pmc sums (nothing ran on its thread).
        for keeper in keepers:
            assert [pmc0 for _, pmc0 in keeper.sums()] == [0] * 32
    finally:
        for keeper in keepers:
            keeper.close()
