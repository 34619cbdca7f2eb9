"""The mount as a /proc: names, owners, modes, liveness, the text view."""

import errno
import fcntl
import os
import stat
import subprocess
import sys
import time

import pytest

import structs


def test_root_lists_live_processes_as_padded_pids(manual_mount):
    names = os.listdir(manual_mount.path)
    assert f"{os.getpid():05d}" in names
    assert "control" in names and "pinfo" in names and "pctr" in names and "cpc" in names and "perfctr" in names
    assert all(n in ("control", "pinfo", "pctr", "cpc", "perfctr") or (n.isdigit() and len(n) >= 5) for n in names)


def test_lookup_accepts_padded_and_unpadded_pids(manual_mount):
    pid = os.getpid()
    padded = os.stat(manual_mount.path / f"{pid:05d}")
    plain = os.stat(manual_mount.path / str(pid))
    assert padded.st_ino == plain.st_ino


def test_unknown_names_are_enoent(manual_mount):
    for name in ("abc", "-1", "0", "+42", "99999999"):
        with pytest.raises(FileNotFoundError):
            os.stat(manual_mount.path / name)


def test_process_file_is_owned_by_its_real_user_with_mode_0600(manual_mount):
    child = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "30"])
    try:
        time.sleep(0.2)
        st = os.stat(manual_mount.path / f"{child.pid:05d}")
        assert (st.st_uid, st.st_gid) == (65534, 65534)
        assert stat.S_IMODE(st.st_mode) == 0o600 and stat.S_ISREG(st.st_mode)
    finally:
        child.kill()
        child.wait()


def test_exited_process_disappears(manual_mount):
    child = subprocess.Popen(["sleep", "30"])
    path = manual_mount.path / f"{child.pid:05d}"
    assert path.exists()
    child.kill()
    child.wait()
    assert not path.exists()
    assert f"{child.pid:05d}" not in os.listdir(manual_mount.path)


def test_reading_a_process_file_summarises_its_counters(manual_mount):
    from hwperfd.client import ProcessCounters, user

    child = subprocess.Popen(["sleep", "30"])
    try:
        with ProcessCounters(child.pid, mount=manual_mount.path) as pc:
            assert "counters not in use" in pc.summary()
            gen = pc.enable({9: user(9)})
            manual_mount.control(f"advance {child.pid} 1ms")
            text = pc.summary()
    finally:
        child.kill()
        child.wait()
    assert f"pid {child.pid} (sleep)" in text
    assert f"generation {gen}" in text
    assert "Primary instruction cache misses" in text
    assert " 400 " in text  # 200 000 cycles x 0.002 misses per cycle


def test_unknown_ioctl_is_enotty(manual_mount):
    with open(manual_mount.path / f"{os.getpid():05d}", "rb") as f:
        for cmd in (structs._IOR("q", 200, 8), structs._IO("x", 1), structs._IOW("q", 233, 100)):
            with pytest.raises(OSError) as info:
                fcntl.ioctl(f.fileno(), cmd, bytearray(8) if cmd & (3 << 30) else 0)
            assert info.value.errno == errno.ENOTTY


def test_control_node_is_readable_by_all_and_writable_by_root(manual_mount):
    st = os.stat(manual_mount.path / "control")
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o644)
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    result = subprocess.run([*nobody, "cat", str(manual_mount.path / "control")], capture_output=True)
    assert result.returncode == 0 and b"system mode" in result.stdout, result.stderr
    result = subprocess.run(
        [*nobody, "sh", "-c", f"echo 'advance-cpu 0 1s' > {manual_mount.path / 'control'}"], capture_output=True
    )
    assert result.returncode != 0 and b"Permission denied" in result.stderr


def test_bad_control_commands_are_einval_and_change_nothing(manual_mount):
    before = (manual_mount.path / "control").read_text()
    for command in ("advance", "advance 1 -5", "advance abc 1ms", "warp 9", "advance-cpu 99 1ms", "profile 1 nosuch",
                    "profile 99999999 balanced", f"advance {os.getpid()} 1e999999999",
                    f"profile {os.getpid()} balanced cycles=1e999999999"):
        with pytest.raises(OSError) as info:
            manual_mount.control(command)
        assert info.value.errno == errno.EINVAL
    assert (manual_mount.path / "control").read_text() == before


def test_huge_or_odd_profile_rates_are_einval_and_change_nothing(manual_mount):
    from hwperfd.client import ProcessCounters

    with ProcessCounters(mount=manual_mount.path) as pc:
        before = pc.summary().splitlines()[1]
        for text in ("balanced cycles=1e999999999", "balanced cycles=65", "balanced cycles=-1", "nosuch"):
            with pytest.raises(OSError) as info:
                pc.set_profile(text)
            assert info.value.errno == errno.EINVAL
        assert pc.summary().splitlines()[1] == before


def test_reaped_process_file_answers_esrch_even_to_root(manual_mount):
    from hwperfd.client import ProcessCounters

    child = subprocess.Popen(["sleep", "30"])
    pc = ProcessCounters(child.pid, mount=manual_mount.path)
    try:
        child.kill()
        child.wait()
        for call in (pc.read, pc.control, pc.release):
            with pytest.raises(OSError) as info:
                call()
            assert info.value.errno == errno.ESRCH
    finally:
        pc.close()


def test_a_reader_part_way_through_a_long_text_is_not_torn_by_another(counters, manual_mount):
    """Readers share one rendering of a file; one that has read part of it
    keeps that rendering to its end, even when another reader renders the
    file anew after the counts moved."""
    from hwperfd.client import user

    counters.enable({slot: user(slot % 16) for slot in range(32)})  # a text of several reads
    path = manual_mount.path / f"{os.getpid():05d}"
    first = os.open(path, os.O_RDONLY)
    try:
        head = os.pread(first, 100, 0)
        manual_mount.control(f"advance {os.getpid()} 1ms")  # 200 000 cycles in slot 0
        fresh = path.read_bytes()
        rest = os.pread(first, 1 << 16, 100)
    finally:
        os.close(first)
    assert len(fresh) > 1000 and b" 200000 " in fresh
    assert b" 200000 " not in head + rest  # what the first reader began on, whole
    assert (head + rest).count(b"\n") == fresh.count(b"\n")


def test_advance_thread_moves_that_thread_and_its_process(manual_mount):
    from hwperfd.client import ProcessCounters, user

    code = (
        "import sys, threading\n"
        "t = threading.Thread(target=sys.stdin.readline)\n"
        "t.start()\n"
        "print(t.native_id, flush=True)\n"
        "t.join()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        tid = int(child.stdout.readline())
        with ProcessCounters(child.pid, mount=manual_mount.path) as pc:
            pc.enable({0: user(0)})
            manual_mount.control(f"advance-thread {tid} 1ms")
            assert pc.read()[1][0] == 200_000  # the R10000 at 200 MHz: cycles of the process's thread
        for command in (f"advance-thread {tid} -1ms", "advance-thread 99999999 1ms", f"advance-thread {tid}"):
            with pytest.raises(OSError) as info:
                manual_mount.control(command)
            assert info.value.errno == errno.EINVAL
    finally:
        child.kill()
        child.wait()
