"""A thread's own counters: under hwperfd-run, a thread other than the main
one that opens its process's "/proc/<getpid()>" gets counters of its own,
counting its own CPU time, as each member of an IRIX share group (the
threads of an -mp program are sproc(2)'d processes) has its own pid and
counters.  PAPI 3.5.0's IRIX substrate opens that file in every thread it
counts (zero_omp, omptough); each thread's event set then starts, stops and
reads without touching another's (docs/irix.md, Threads)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import NOBODY, finish
from tests.irix.conftest import build

MHZ = 200  # the session's manual mount: 1 ms = 200 000 cycles

# Two threads and the main one each enable cycles on their own
# "/proc/<getpid()>"; after the test's "go" each thread reads; then thread 1
# changes its control (PIOCSETEVCTRL: a new generation for it alone) and
# thread 0 and the main thread read again.
THREADS = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <unistd.h>

static pthread_barrier_t enabled, go, changed;
static hwperf_profevctrarg_t args;

static int own_file(int *gen)
{
    char path[32];
    int fd;

    sprintf(path, "/proc/%05d", (int)getpid());
    if ((fd = open(path, O_RDWR)) < 0 || (*gen = ioctl(fd, PIOCENEVCTRS, &args)) < 0) {
        perror(path);
        exit(1);
    }
    return fd;
}

static void report(const char *who, int fd)
{
    hwperf_cntr_t counts;
    int gen = ioctl(fd, PIOCGETEVCTRS, &counts);

    if (gen < 0) {
        perror("PIOCGETEVCTRS");
        exit(1);
    }
    printf("%s gen %d cycles %lld\n", who, gen, (long long)counts.hwp_evctr[0]);
    fflush(stdout);
}

static void *thread(void *arg)
{
    int n = (int)(long)arg, gen, fd = own_file(&gen);
    char who[16];

    sprintf(who, "thread%d", n);
    printf("%s tid %d gen %d\n", who, gettid(), gen);
    fflush(stdout);
    pthread_barrier_wait(&enabled);
    pthread_barrier_wait(&go);
    report(who, fd);
    if (n == 1 && (gen = ioctl(fd, PIOCSETEVCTRL, &args)) < 0) {
        perror("PIOCSETEVCTRL");
        exit(1);
    }
    pthread_barrier_wait(&changed);
    report(who, fd);
    return NULL;
}

int main(void)
{
    pthread_t t[2];
    char line[16];
    int gen, fd, i;

    args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_mode = HWPERF_CNTEN_U;
    pthread_barrier_init(&enabled, NULL, 3);
    pthread_barrier_init(&go, NULL, 3);
    pthread_barrier_init(&changed, NULL, 3);
    fd = own_file(&gen);
    printf("main pid %d gen %d\n", (int)getpid(), gen);
    for (i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, thread, (void *)(long)i);
    pthread_barrier_wait(&enabled);
    puts("ready");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        return 1;
    pthread_barrier_wait(&go);
    pthread_barrier_wait(&changed);
    for (i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    puts("joined");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        return 1;
    report("main", fd);
    return ioctl(fd, PIOCRELEVCTRS) < 0;
}
"""


@pytest.fixture(scope="module")
def program(shared_tmp):
    folder = shared_tmp / "irix-threads"
    folder.mkdir(exist_ok=True)
    folder.chmod(0o755)
    return build(folder, "own_threads", THREADS, "-pthread")


def _start(program, mount, user: str) -> subprocess.Popen:
    argv = [str(program)]
    if user == "nobody":
        argv = NOBODY + argv
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=mount.env())  # fmt: skip


def _lines_until(proc: subprocess.Popen, last: str, timeout: float = 20) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.split())
        if line.strip() == last:
            return lines
    proc.kill()
    raise AssertionError(f"no {last!r}: {lines} {proc.stderr.read()}")


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_each_thread_counts_its_own_time_under_its_own_generation(manual_mount, program, user):
    """Thread 0 ran 10 ms, thread 1 30 ms, the main thread 5 ms: each
    thread's counters hold exactly its own time; the main thread's file is
    the process's and holds all 45 ms.  Thread 1's PIOCSETEVCTRL restarts
    its counters under a new generation; thread 0 and the main thread keep
    their generation and counts."""
    proc = _start(program, manual_mount, user)
    try:
        head = _lines_until(proc, "ready")
        pid = next(int(words[2]) for words in head if words[0] == "main")
        tids = {words[0]: int(words[2]) for words in head if words[0].startswith("thread")}
        gens = {words[0]: int(words[-1]) for words in head if words[0] != "ready"}
        assert gens == {"main": 1, "thread0": 1, "thread1": 1}
        assert len(set(tids.values()) | {pid}) == 3
        manual_mount.control(f"advance-thread {tids['thread0']} 10ms")
        manual_mount.control(f"advance-thread {tids['thread1']} 30ms")
        manual_mount.control(f"advance {pid} 5ms")
        out, err = finish(proc, "go\ngo\n", timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    reads = [line.split() for line in out.splitlines() if line != "joined"]
    by_thread: dict[str, list[tuple[int, int]]] = {}
    for who, _, gen, _, cycles in reads:
        by_thread.setdefault(who, []).append((int(gen), int(cycles)))
    assert by_thread["thread0"] == [(1, 10 * MHZ * 1000), (1, 10 * MHZ * 1000)]
    # IRIX's PIOCSETEVCTRL disables and enables again: slots from zero, generation up by 2.
    assert by_thread["thread1"] == [(1, 30 * MHZ * 1000), (3, 0)]
    assert by_thread["main"] == [(1, 45 * MHZ * 1000)]


def test_a_thread_file_is_refused_to_another_user(manual_mount, program):
    """A thread's file is its process's to open, as the process file is
    (mode 0600 to the owner): root's thread, unprivileged opener, EACCES."""
    proc = _start(program, manual_mount, "root")
    try:
        head = _lines_until(proc, "ready")
        tid = next(int(words[2]) for words in head if words[0] == "thread0")
        probe = subprocess.run(
            NOBODY + ["python3", "-c", f"import os; os.open('{manual_mount.path}/{tid}', os.O_RDONLY)"],
            capture_output=True, text=True,
        )  # fmt: skip
        assert probe.returncode != 0
        assert "PermissionError" in probe.stderr
        proc.communicate("go\ngo\n", timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()


def _with_counters(mount) -> int:
    text = (mount.path / "control").read_text()
    return int(next(line for line in text.splitlines() if line.startswith("processes with counters")).split()[-1])


def test_a_threads_counters_go_when_it_ends(real_mount, program):
    """Each thread's own counters are state the daemon keeps for it: when
    the thread ends they go (its process's stay), so threads that come and
    go cannot grow the daemon."""
    before = _with_counters(real_mount)
    proc = _start(program, real_mount, "nobody")
    try:
        _lines_until(proc, "ready")
        assert _with_counters(real_mount) == before + 3
        proc.stdin.write("go\n")
        proc.stdin.flush()
        _lines_until(proc, "joined")
        deadline = time.monotonic() + 20
        while _with_counters(real_mount) > before + 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _with_counters(real_mount) == before + 1  # the process's own, on the main thread's file
        proc.communicate("go\n", timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0


@pytest.mark.parametrize("chosen", [{}, {"OMP_WAIT_POLICY": "active"}, {"GOMP_SPINCOUNT": "1000"}])
def test_hwperfd_run_leaves_how_openmp_threads_wait_to_the_program(chosen):
    """The shim sends opens to the mount and names the PMU to libpfm, no
    more: a team that spins at its barriers spins under hwperfd-run too,
    and those cycles are the program's to count (PAPI's omptough runs
    slower for it on two shared CPUs; that is the daemon's cost to cut)."""
    names = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
    env = {k: v for k, v in os.environ.items() if k not in names}
    show = [sys.executable, "-m", "hwperfd.run", "sh", "-c", 'echo "$OMP_WAIT_POLICY,$GOMP_SPINCOUNT,$KMP_BLOCKTIME"']
    out = subprocess.run(show, env={**env, **chosen}, capture_output=True, text=True, check=True).stdout
    assert out == ",".join(chosen.get(name, "") for name in names) + "\n"
