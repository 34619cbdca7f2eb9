"""ecfind names the processes counting through their /proc files, as ps -ef would."""

import os
import re

from tests.conftest import run_as_nobody


def rows(stdout: str) -> dict[int, list[str]]:
    """PID -> the line's columns (default layout: UID PID PPID STIME TTY TIME CMD...)."""
    lines = stdout.splitlines()
    assert lines[0].split() == ["UID", "PID", "PPID", "STIME", "TTY", "TIME", "CMD"]
    return {int(line.split()[1]): line.split() for line in lines[1:]}


def test_ecfind_lists_a_counting_process_like_ps(ec, counting_child):
    got = ec("ecfind")
    assert got.returncode == 0 and got.stderr == ""
    row = rows(got.stdout)[counting_child.pid]
    uid, pid, ppid, stime, tty, cpu_time, *cmd = row
    assert (uid, int(ppid)) == ("root", os.getpid())
    assert re.fullmatch(r"\d\d:\d\d", stime)  # started today: the time, as ps shows it
    assert re.fullmatch(r"\d\d:\d\d:\d\d", cpu_time)
    assert tty == "?" or tty.startswith(("pts/", "tty"))
    assert cmd[-1] == "ec-test-child"  # its whole command line
    assert os.getpid() not in rows(got.stdout)  # this process does not count


def test_ecfind_terse_gives_pid_and_command(ec, counting_child):
    got = ec("ecfind", "-t")
    lines = got.stdout.splitlines()
    assert lines[0].split() == ["PID", "COMMAND"]
    mine = [line for line in lines[1:] if int(line.split()[0]) == counting_child.pid]
    assert len(mine) == 1 and mine[0].endswith(" ec-test-child")


def test_ecfind_verbose_says_what_it_looked_at(ec, counting_child):
    got = ec("ecfind", "-v")
    assert got.returncode == 0
    assert got.stderr.startswith("ecfind: looked at ")
    assert f"ecfind: pid {counting_child.pid}: counters enabled, user mode, generation 1\n" in got.stderr


def test_ecfind_finds_nothing_once_counting_stops(ec, counting_child):
    counting_child.stdin.close()
    counting_child.wait(timeout=10)
    got = ec("ecfind")
    assert counting_child.pid not in rows(got.stdout)


def test_another_user_sees_only_their_own_process_files(manual_mount, nobody_python, counting_child):
    got = run_as_nobody(nobody_python, "-m", "hwperfd.ec.ecfind", "-v", mount=manual_mount)
    assert got.returncode == 0, got.stderr
    assert rows(got.stdout) == {}  # root's counting child is not this user's to read
    assert "process files not readable by this user" in got.stderr
    assert f"pid {counting_child.pid}" not in got.stderr
