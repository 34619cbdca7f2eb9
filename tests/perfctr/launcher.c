/* A perfex-like launcher, the way perfctr's examples/perfex runs a command:
   the child creates its vperfctr, programs it, hands the descriptor to the
   parent over a unix socket and execs the command; the parent waits and
   reads the final counts through the descriptor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include "libperfctr.h"

static void send_fd(int sock, int fd)
{
    struct msghdr msg;
    struct iovec iov;
    char byte = 0;
    union { struct cmsghdr hdr; char buf[CMSG_SPACE(sizeof(int))]; } u;
    struct cmsghdr *cmsg;

    memset(&msg, 0, sizeof msg);
    iov.iov_base = &byte;
    iov.iov_len = 1;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = u.buf;
    msg.msg_controllen = sizeof u.buf;
    cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cmsg), &fd, sizeof fd);
    if (sendmsg(sock, &msg, 0) != 1) {
	perror("sendmsg");
	exit(1);
    }
}

static int receive_fd(int sock)
{
    struct msghdr msg;
    struct iovec iov;
    char byte;
    union { struct cmsghdr hdr; char buf[CMSG_SPACE(sizeof(int))]; } u;
    struct cmsghdr *cmsg;
    int fd;

    memset(&msg, 0, sizeof msg);
    iov.iov_base = &byte;
    iov.iov_len = 1;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = u.buf;
    msg.msg_controllen = sizeof u.buf;
    if (recvmsg(sock, &msg, 0) != 1 || (cmsg = CMSG_FIRSTHDR(&msg)) == NULL || cmsg->cmsg_type != SCM_RIGHTS)
	return -1;
    memcpy(&fd, CMSG_DATA(cmsg), sizeof fd);
    return fd;
}

int main(int argc, char **argv)
{
    struct perfctr_info info;
    struct vperfctr_control control;
    struct perfctr_sum_ctrs sum;
    int sv[2], fd, status;
    pid_t pid;

    if (argc < 2) {
	fprintf(stderr, "usage: %s command [args...]\n", argv[0]);
	return 2;
    }
    if (perfctr_get_info(&info) < 0) {
	perror("perfctr_get_info");
	return 1;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) {
	perror("socketpair");
	return 1;
    }
    pid = fork();
    if (pid < 0) {
	perror("fork");
	return 1;
    }
    if (pid == 0) {
	close(sv[0]);
	fd = _vperfctr_open(1);
	if (fd < 0) {
	    perror("_vperfctr_open");
	    _exit(1);
	}
	memset(&control, 0, sizeof control);
	control.cpu_control.tsc_on = 1;
	control.cpu_control.nractrs = 2;
	control.cpu_control.pmc_map[0] = 0;
	control.cpu_control.evntsel[0] = 0xC0 | (1 << 16) | (1 << 22);
	control.cpu_control.pmc_map[1] = 1;
	control.cpu_control.evntsel[1] = (info.cpu_type == PERFCTR_X86_AMD_K8 ? 0x76 : 0x3C)
	    | (1 << 16) | (1 << 17) | (1 << 22);
	if (getenv("LAUNCHER_CLOEXEC"))
	    control.flags = VPERFCTR_CONTROL_CLOEXEC;
	if (_vperfctr_control(fd, &control) < 0) {
	    perror("_vperfctr_control");
	    _exit(1);
	}
	send_fd(sv[1], fd);
	close(fd);
	close(sv[1]);
	execvp(argv[1], argv + 1);
	perror(argv[1]);
	_exit(127);
    }
    close(sv[1]);
    fd = receive_fd(sv[0]);
    close(sv[0]);
    if (fd < 0) {
	fprintf(stderr, "no descriptor from the child\n");
	return 1;
    }
    printf("child pid=%d\n", (int)pid);
    fflush(stdout);
    if (waitpid(pid, &status, 0) < 0) {
	perror("waitpid");
	return 1;
    }
    if (_vperfctr_read_sum(fd, &sum) < 0 || _vperfctr_read_control(fd, &control) < 0) {
	perror("_vperfctr_read_sum");
	return 1;
    }
    printf("exit=%d tsc=%llu pmc0=%llu pmc1=%llu evntsel0=0x%08X\n", WEXITSTATUS(status), sum.tsc, sum.pmc[0],
	   sum.pmc[1], control.cpu_control.evntsel[0]);
    close(fd);
    return 0;
}
