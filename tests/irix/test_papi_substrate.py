"""What PAPI 3.5.0's IRIX substrate (irix-mips.c) does with its /proc
counters, done by programs of our own: each test is the check one of PAPI's
ctests made that found hwperfd wrong (docs/irix-papi.md lists the ctests)."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import NOBODY
from tests.irix.conftest import build

# PAPI's _papi_hwd_init: its own process file, PIOCGETEVCTRL, and if that
# fails PIOCENEVCTRS with every slot counting in user mode; then the ctest.
PAPI_INIT = r"""
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <sys/wait.h>
#include <unistd.h>

static int papi_init(void)
{
    hwperf_profevctrarg_t args;
    hwperf_eventctrl_t ctl;
    char path[32];
    int fd, gen, i;

    memset(&args, 0, sizeof args);
    sprintf(path, "/proc/%05d", (int)getpid());
    if ((fd = open(path, O_RDONLY)) < 0)
        return perror(path), -1;
    if ((gen = ioctl(fd, PIOCGETEVCTRL, &ctl)) < 0) {
        for (i = 0; i < HWPERF_EVENTMAX; i++)
            args.hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_mode = HWPERF_CNTEN_U;
        if ((gen = ioctl(fd, PIOCENEVCTRS, &args)) < 0)
            return perror("PIOCENEVCTRS"), -1;
    }
    return fd;
}
"""

# ctests/fork.c: the library initialised in the parent, then in a child
# that exits; the child reads its counters while it makes a few ms of system
# time, which stat shows only in part before the exit split gives all of it; the
# parent reaps it a little later.
FORK = (
    PAPI_INIT
    + r"""
int main(void)
{
    hwperf_cntr_t counts;
    int fd = papi_init(), round, status, i;

    if (fd < 0)
        return 1;
    for (round = 0; round < 20; round++) {
        pid_t pid = fork();
        if (pid == 0) {
            int null = open("/dev/null", O_WRONLY), mine = papi_init();
            if (mine < 0)
                _exit(1);
            for (i = 0; i < 20000; i++)
                if (write(null, &i, 1) != 1 || (i % 1000 == 0 && ioctl(mine, PIOCGETEVCTRS, &counts) < 0))
                    _exit(1);
            _exit(0);
        }
        usleep(100000);  /* the child a zombie meanwhile */
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
            return fprintf(stderr, "child failed\n"), 1;
        if (ioctl(fd, PIOCGETEVCTRS, &counts) < 0)
            return perror("PIOCGETEVCTRS"), 1;
    }
    puts("ok");
    return 0;
}
"""
)


@pytest.fixture(scope="module")
def programs(shared_tmp):
    folder = shared_tmp / "papi-substrate"
    folder.mkdir(exist_ok=True)
    folder.chmod(0o755)
    return {"fork": build(folder, "papi_fork", FORK)}


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_children_that_exit_with_system_time_leave_the_daemon_running(real_mount, programs, user):
    """A child's exit split may give it more system time than stat had shown:
    the daemon keeps serving (its state page once carried a negative room and
    stopped it)."""
    prefix = NOBODY if user == "nobody" else []
    result = subprocess.run(
        [*prefix, str(programs["fork"])], capture_output=True, text=True, env=real_mount.env(), timeout=120
    )
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr
    assert real_mount.process.poll() is None, real_mount.log_text()
