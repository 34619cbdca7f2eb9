"""What PAPI 3.5.0's IRIX substrate (irix-mips.c) does with its /proc
counters, done by programs of our own: each test is the check one of PAPI's
ctests made that found hwperfd wrong (docs/irix-papi.md lists the ctests)."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import NOBODY, ROOT
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


# PAPI's _internal_scan_cpu_info: the board by a switch over every IRIX 6.5
# board state (<invent.h> once named only the IP27), the chip by its PRId.
BOARDS = r"""
#include <invent.h>
#include <stdio.h>

static int scan(inventory_t *item, void *arg)
{
    const char *board = "unknown";
    (void)arg;
    if (item->inv_class != INV_PROCESSOR)
        return 0;
    if (item->inv_type == INV_CPUBOARD) {
        switch (item->inv_state) {
        case INV_IPMHSIMBOARD: board = "IPMHSIM"; break;
        case INV_IP19BOARD: board = "IP19"; break;
        case INV_IP20BOARD: board = "IP20"; break;
        case INV_IP21BOARD: board = "IP21"; break;
        case INV_IP22BOARD: board = "IP22"; break;
        case INV_IP25BOARD: board = "IP25"; break;
        case INV_IP26BOARD: board = "IP26"; break;
        case INV_IP27BOARD: board = "IP27"; break;
        case INV_IP28BOARD: board = "IP28"; break;
        case INV_IP30BOARD: board = "IP30"; break;
        case INV_IP32BOARD: board = "IP32"; break;
        case INV_IP33BOARD: board = "IP33"; break;
        case INV_IP35BOARD: board = "IP35"; break;
        }
        printf("board %s %ld MHz\n", board, item->inv_controller);
    } else if (item->inv_type == INV_CPUCHIP && item->inv_unit == 0) {
        printf("chip %x\n", (item->inv_state & C0_IMPMASK) >> C0_IMPSHIFT);
    }
    return 0;
}

int main(void)
{
    return scaninvent(scan, NULL) < 0;
}
"""


@pytest.fixture(scope="module")
def programs(shared_tmp):
    folder = shared_tmp / "papi-substrate"
    folder.mkdir(exist_ok=True)
    folder.chmod(0o755)
    syssgi = str(ROOT / "lib" / "irix" / "syssgi.c")
    return {"fork": build(folder, "papi_fork", FORK), "boards": build(folder, "papi_boards", BOARDS, syssgi)}


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


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_the_board_is_an_ip27_among_every_irix_board_state(real_mount, programs, user):
    """IRIX 6.5's board states have IRIX's values (INV_IP27BOARD 19): a switch
    over all of them, as PAPI's substrate makes, finds the emulated Origin."""
    prefix = NOBODY if user == "nobody" else []
    result = subprocess.run(
        [*prefix, str(programs["boards"])], capture_output=True, text=True, env=real_mount.env(), timeout=60
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("board IP27 ")
    assert "chip 9" in lines  # C0_IMP_R10000
