"""Random sequences of vperfctr calls mixed with VPERFCTR_STATEPAGE: every
answer is a driver errno, the daemon stays up, and once every handle is
closed no page file is left in the state directory."""

from __future__ import annotations

import errno
import fcntl
import os
import random

from structs import perfctr as abi
from tests.perfctr.test_perfctr_driver import EN, INST_RETIRED, INT, OS_, USR, control

ALLOWED = {errno.EINVAL, errno.EPERM, errno.ESRCH, errno.EEXIST, errno.EBUSY, errno.EAGAIN}


def _statepage(fd: int) -> str | None:
    try:
        raw = fcntl.ioctl(fd, abi.VPERFCTR_STATEPAGE, bytes(abi.VPERFCTR_STATEPAGE_SIZE))
    except OSError as exc:
        assert exc.errno in ALLOWED, exc
        return None
    return raw.split(b"\0", 1)[0].decode()


def test_random_vperfctr_calls_with_state_pages_leave_no_page_behind(intel):
    rng = random.Random(7)
    controls = [
        control(nractrs=1, evntsel=[INST_RETIRED | USR | EN]),
        control(nractrs=2, evntsel=[INST_RETIRED | USR | OS_ | EN, 0x3C | USR | EN], preserve=1),
        control(nractrs=1, nrictrs=1, evntsel=[INST_RETIRED | USR | EN, 0x3C | USR | EN | INT], ireset=[0, -1000]),
        control(tsc_on=0),
        control(nractrs=1, evntsel=[INST_RETIRED | EN]),  # refused: neither user nor kernel
        control(nractrs=5, evntsel=[INST_RETIRED | USR | EN] * 5),  # refused: too many
    ]
    directory = None
    for _ in range(120):
        fds = [os.open(intel.path / "perfctr", os.O_RDONLY) for _ in range(rng.randint(1, 3))]
        try:
            for _ in range(8):
                fd = rng.choice(fds)
                what = rng.random()
                try:
                    if what < 0.25:
                        fcntl.ioctl(fd, abi.VPERFCTR_ATTACH, abi.vperfctr_attach.build(
                            {"tid": rng.choice([0, os.getpid()]), "creat": rng.randint(0, 1)}))  # fmt: skip
                    elif what < 0.5:
                        fcntl.ioctl(fd, abi.VPERFCTR_CONTROL, rng.choice(controls))
                    elif what < 0.75:
                        path = _statepage(fd)
                        if path is not None:
                            directory = os.path.dirname(path)
                            assert os.path.exists(path)
                    elif what < 0.85:
                        fcntl.ioctl(fd, abi.VPERFCTR_UNLINK)
                    elif what < 0.9:
                        fcntl.ioctl(fd, abi.VPERFCTR_IRESUME)
                    else:
                        fcntl.ioctl(fd, abi.VPERFCTR_READ_STATE, bytes(abi.VPERFCTR_STATE_SIZE))
                except OSError as exc:
                    assert exc.errno in ALLOWED, exc
                if rng.random() < 0.2:
                    intel.control(f"advance {os.getpid()} {rng.randint(0, 3)}ms")
        finally:
            for fd in fds:
                try:
                    fcntl.ioctl(fd, abi.VPERFCTR_UNLINK)
                except OSError:
                    pass
                os.close(fd)
    assert intel.process.poll() is None
    assert directory is not None, "no page was ever granted"
    assert os.listdir(directory) == [], "page files outlived every handle"
