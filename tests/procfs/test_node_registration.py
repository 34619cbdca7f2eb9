"""A new personality plugs in with no edit of the filesystem: the fake one
(fake_personality.py, written only against hwperfd/node.py) is added to the
wiring's list of nodes at start-up, and a real mount then lists its node,
opens it, routes its two ioctls to it with the caller, counts exactly on the
manual clock, refuses what it refuses with its errno, shows its text, and
keeps the other personalities' nodes as they were."""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import subprocess
import sys

import pytest

from tests.conftest import NOBODY, ROOT, Mount, is_mounted, state_dir, stop_hwperfd
from tests.procfs.fake_personality import FAKE_READ, FAKE_START
from tests.waiting import wait_for

LAUNCHER = """
import sys
import hwperfd.service as service
from tests.procfs.fake_personality import FakeNode
service.PERSONALITY_NODES = (*service.PERSONALITY_NODES, FakeNode)
from hwperfd.daemon import main
sys.exit(main())
"""
MHZ = 200


@pytest.fixture(scope="module")
def fake_mount(shared_tmp):
    path, log = shared_tmp / "mnt-fake", shared_tmp / "hwperfd-fake.log"
    path.mkdir()
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, "--clock", "manual", "--cpus", "1", "--mhz", str(MHZ),
             "--state-dir", str(state_dir()), str(path)],
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip
    mount = Mount(path, process, log)
    try:
        wait_for(lambda: process.poll() is not None or (is_mounted(path) and (path / "control").exists()), 15)
        assert process.poll() is None, log.read_text()
        yield mount
    finally:
        assert stop_hwperfd(mount) == 0, log.read_text()
        assert "Traceback" not in log.read_text()


def test_the_node_is_listed_after_the_others(fake_mount):
    names = os.listdir(fake_mount.path)
    assert names[:5] == ["control", "pinfo", "pctr", "cpc", "perfctr"]
    assert names[5] == "fake"
    assert str(os.getpid()).zfill(5) in names  # processes follow, as before


def test_two_ioctls_count_exactly_and_the_text_follows(fake_mount):
    fd = os.open(fake_mount.path / "fake", os.O_RDONLY)
    try:
        assert os.read(fd, 4096) == b"nobody counts\n"
        fcntl.ioctl(fd, FAKE_START)
        fake_mount.control(f"advance {os.getpid()} 3ms 1ms")
        (cycles,) = struct.unpack("<Q", fcntl.ioctl(fd, FAKE_READ, bytes(8)))
        assert cycles == 3 * MHZ * 1000  # user time only, at the clock rate
    finally:
        os.close(fd)
    with open(fake_mount.path / "fake", "rb", buffering=0) as f:
        assert f.read() == f"pid {os.getpid()} counts\n".encode()


def test_its_refusals_are_its_own(fake_mount, nobody_python):
    fd = os.open(fake_mount.path / "fake", os.O_RDONLY)
    try:
        with pytest.raises(OSError) as unknown:
            fcntl.ioctl(fd, (ord("F") << 8) | 9)
        assert unknown.value.errno == errno.ENOTTY
    finally:
        os.close(fd)
    interpreter, env = nobody_python
    script = (
        "import errno, fcntl, os, sys\n"
        f"fd = os.open({str(fake_mount.path / 'fake')!r}, os.O_RDONLY)\n"
        f"try: fcntl.ioctl(fd, {FAKE_READ}, bytes(8))\n"
        "except OSError as e: sys.exit(0 if e.errno == errno.EINVAL else 1)\n"
        "sys.exit(2)\n"
    )  # fmt: skip
    done = subprocess.run([*NOBODY, interpreter, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr  # nobody never started: the node's own EINVAL
    with pytest.raises(OSError) as write:
        with open(fake_mount.path / "fake", "w") as f:
            f.write("start\n")
    assert write.value.errno == errno.EINVAL  # a node takes ioctls, not commands


def test_the_other_nodes_answer_as_before(fake_mount):
    with open(fake_mount.path / "pctr", "rb", buffering=0) as f:
        assert b"tsc" in f.read()
    assert os.stat(fake_mount.path / "cpc").st_mode & 0o777 == 0o644
