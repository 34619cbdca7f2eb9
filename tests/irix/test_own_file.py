"""hwperfd-run's shim answers a thread's open of its own "/proc/<getpid()>"
with a duplicate of the one it opened first (PAPI's IRIX substrate opens and
closes it at every thread it registers, at each OpenMP region of its
omptough): no request to the daemon, the same file, and the descriptor it
keeps goes with the thread."""

from __future__ import annotations

import subprocess

import pytest

from tests.irix.conftest import build
from tests.perfctr.test_perfctr_kept import opened
from tests.perfctr.test_perfctr_programs import fields

OWN_FILE = r"""
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <unistd.h>

struct job { long n, done; int gen, err; };

/* What PAPI's IRIX substrate does at each thread it registers: open the
   process file, read the control (enabling the counters the first time),
   close it. */
static void *registering(void *arg)
{
    struct job *job = arg;
    char path[64];
    hwperf_eventctrl_t control;
    hwperf_profevctrarg_t args;
    int i;

    snprintf(path, sizeof path, "/proc/%05d", (int)getpid());
    for (job->done = 0; job->done < job->n; job->done++) {
        int fd = open(path, O_RDONLY);

        if (fd < 0)
            break;
        job->gen = ioctl(fd, PIOCGETEVCTRL, &control);
        if (job->gen < 0) {
            memset(&args, 0, sizeof args);
            for (i = 0; i < HWPERF_EVENTMAX; i++)
                args.hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_mode = HWPERF_CNTEN_U;
            job->gen = ioctl(fd, PIOCENEVCTRS, &args);
        }
        close(fd);
        if (job->gen < 1)
            break;
    }
    job->err = job->done < job->n ? errno : 0;
    return NULL;
}

/* Descriptors of this process open on a file of the mount. */
static int on_mount(void)
{
    const char *mount = getenv("HWPERFD_MOUNT");
    struct dirent *e;
    char link[300], to[4096];
    int n = 0;
    DIR *d = opendir("/proc/self/fd");

    while (d != NULL && (e = readdir(d)) != NULL) {
        ssize_t len;

        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        len = readlink(link, to, sizeof to - 1);
        if (len > 0) {
            to[len] = '\0';
            n += strncmp(to, mount, strlen(mount)) == 0;
        }
    }
    if (d != NULL)
        closedir(d);
    return n;
}

int main(void)
{
    char line[128];
    long n;

    setvbuf(stdout, NULL, _IOLBF, 0);
    puts("ready");
    while (fgets(line, sizeof line, stdin)) {
        struct job job = {0, 0, 0, 0};

        if (sscanf(line, "thread %ld", &n) == 1) {
            pthread_t t;

            job.n = n;
            pthread_create(&t, NULL, registering, &job);
            pthread_join(t, NULL);
        } else if (sscanf(line, "main %ld", &n) == 1) {
            job.n = n;
            registering(&job);
        } else if (strncmp(line, "clobber", 7) == 0) {
            /* A program that closes every descriptor it did not open itself,
               and opens others in their numbers. */
            int fd;
            for (fd = 3; fd < 64; fd++)
                close(fd);
            for (fd = 3; fd < 16; fd++)
                open("/dev/null", O_RDONLY);
        }
        printf("done=%ld gen=%d errno=%d mountfds=%d\n", job.done, job.gen, job.err, on_mount());
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def own_file(shared_tmp):
    folder = shared_tmp / "irix-own-file"
    folder.mkdir(exist_ok=True)
    folder.chmod(0o755)
    return build(folder, "own_file", OWN_FILE, "-pthread")


class Program:
    def __init__(self, path, mount, **env: str) -> None:
        self.proc = subprocess.Popen([str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**mount.env(), **env})  # fmt: skip
        assert self.proc.stdout.readline() == "ready\n"

    def __call__(self, command: str) -> dict[str, int]:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return fields(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


@pytest.fixture
def run(own_file, real_mount):
    started = []

    def start(**env: str) -> Program:
        started.append(Program(own_file, real_mount, **env))
        return started[-1]

    yield start
    for program in started:
        program.close()


@pytest.mark.parametrize("where", ["thread", "main"])
def test_a_threads_opens_of_its_own_file_after_the_first_reach_the_daemon_no_more(real_mount, run, where):
    program = run()
    before = opened(real_mount)
    got = program(f"{where} 300")
    assert got["done"] == 300 and got["gen"] >= 1 and got["errno"] == 0, got
    assert opened(real_mount) - before == 1, "one open of the thread's own file, then duplicates"
    if where == "main":
        assert got["mountfds"] == 1  # kept while the main thread lives
        before = opened(real_mount)
        assert program("main 50")["done"] == 50
        assert opened(real_mount) - before == 0
    else:
        assert got["mountfds"] == 0, "the descriptor a thread kept goes when it ends"


def test_with_hwperfd_proc_keep_0_every_open_reaches_the_daemon(real_mount, run):
    program = run(HWPERFD_PROC_KEEP="0")
    before = opened(real_mount)
    got = program("thread 40")
    assert got["done"] == 40 and got["errno"] == 0, got
    assert opened(real_mount) - before == 40


def test_a_kept_descriptor_the_program_closed_is_not_duplicated(real_mount, run):
    """The program closed every descriptor and opened /dev/null into their
    numbers: the shim opens the file again, never a duplicate of another."""
    program = run()
    assert program("main 3")["mountfds"] == 1
    assert program("clobber")["mountfds"] == 0
    before = opened(real_mount)
    got = program("main 20")
    assert got["done"] == 20 and got["gen"] >= 1 and got["errno"] == 0, got
    assert opened(real_mount) - before == 1
