/*
 * Finding and opening one's state page (include/hwperfd/state.h), for the
 * libraries: ask the daemon for its name, open it, and hand the descriptor to
 * state.c's reader.  The hwperfd-run shim does these itself through the C
 * library's own ioctl and open, which it interposes.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>

#include "hwperfd/state.h"

int hwperfd_state_map(const char *path, struct hwperfd_state_reader *r)
{
    int page_fd;

    memset(r, 0, sizeof *r);
    page_fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (page_fd < 0)
        return -1;
    return hwperfd_state_map_fd(page_fd, r);
}

int hwperfd_state_open(int fd, struct hwperfd_state_reader *r)
{
    hwperfd_statepage_t arg;

    memset(r, 0, sizeof *r);
    memset(&arg, 0, sizeof arg);
    if (ioctl(fd, HWPERFD_PIOCSTATEPAGE, &arg) < 0)
        return -1;
    arg.hp_path[sizeof arg.hp_path - 1] = '\0';
    return hwperfd_state_map(arg.hp_path, r);
}
