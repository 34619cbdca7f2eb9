"""The mount's listing reuses owners for a short lifetime; opens never do."""

import os
import subprocess
import sys
import time

from hwperfd.procfs.listing import LIFETIME_NS
from tests.conftest import run_as_nobody

SWITCHER = """
import os, sys
os.setresuid(65534, 0, 0)          # real user nobody, still root underneath
print("nobody", flush=True)
sys.stdin.readline()
os.setresuid(0, 0, 0)              # and back: the real user is root again
print("root", flush=True)
sys.stdin.readline()
"""


def test_listing_shows_owners_and_open_checks_the_owner_afresh(manual_mount, nobody_python):
    child = subprocess.Popen([sys.executable, "-c", SWITCHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "nobody\n"
        name = f"{child.pid:05d}"
        # Other processes come and go while we list: stat only the one we watch.
        [entry] = [e for e in os.scandir(manual_mount.path) if e.name == name]
        listed = entry.stat()
        assert (listed.st_uid, listed.st_gid) == (65534, 0)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "root\n"
        # The kernel may still hold the listed owner (nobody); the open must not trust it.
        probe = f"open({str(manual_mount.path / name)!r}, 'rb')"
        result = run_as_nobody(nobody_python, "-c", probe)
        assert result.returncode != 0 and "PermissionError" in result.stderr, result.stderr
    finally:
        child.kill()
        child.wait()


def test_listed_process_that_exits_vanishes_before_its_entry_would_expire(manual_mount):
    child = subprocess.Popen(["sleep", "30"])
    name = f"{child.pid:05d}"
    assert name in os.listdir(manual_mount.path)
    listed = time.monotonic()
    child.kill()
    child.wait()
    while (manual_mount.path / name).exists():
        assert time.monotonic() - listed < LIFETIME_NS / 1e9, "the exit event did not drop the listed entry"
        time.sleep(0.005)
    assert name not in os.listdir(manual_mount.path)


def test_every_page_of_a_long_listing_comes_once_and_in_order(manual_mount):
    r, w = os.pipe()
    pids = []
    try:
        for _ in range(300):  # a dozen pages of entries with attributes
            pid = os.fork()
            if pid == 0:
                os.close(w)
                os.read(r, 1)
                os._exit(0)
            pids.append(pid)
        names = [n for n in os.listdir(manual_mount.path) if n.isdigit()]
        assert names == sorted(names, key=int) and len(set(names)) == len(names)
        assert {f"{p:05d}" for p in pids} <= set(names)
    finally:
        os.close(r)
        os.close(w)
        for pid in pids:
            os.waitpid(pid, 0)


def test_a_refused_entry_invalidation_is_one_line_not_a_traceback(caplog):
    """pyfuse3 logs a refused invalidation with its traceback; at shutdown one
    can fail harmlessly, and a daemon's log must hold no traceback."""
    import logging

    import hwperfd.procfs.fs  # noqa: F401 - installs the filter

    logger = logging.getLogger("pyfuse3")
    with caplog.at_level(logging.INFO, logger="pyfuse3"):
        try:
            raise OSError(22, "fuse_lowlevel_notify_inval_entry returned: Invalid argument")
        except OSError:
            logger.exception("Failed to submit invalidate_entry request for parent inode %d, name %s", 1, b"20625")
        logger.error("something else")
    refused, other = caplog.records
    assert refused.levelname == "INFO" and refused.exc_info is None
    assert "name b'20625'" in refused.getMessage() and "Invalid argument" in refused.getMessage()
    assert "Traceback" not in caplog.text
    assert other.levelname == "ERROR"
