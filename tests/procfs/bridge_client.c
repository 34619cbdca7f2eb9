/*
 * C client for test_bridge.py: issues ioctls on a file of the bridge test
 * filesystem (bridge_fs.py, same command numbers) and prints one line per
 * call: "NAME RESULT ERRNO HEX-BUFFER" ("-" when no buffer is involved).
 *
 *   bridge_client FILE            run the checks
 *   bridge_client FILE bench N    time N no-op ioctls, print microseconds per call
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define BRIDGE(dir, nr, size) _IOC(dir, 'B', nr, size)
#define ECHO        BRIDGE(_IOC_READ | _IOC_WRITE, 1, 64)
#define ARG         BRIDGE(_IOC_NONE, 2, 0)
#define WHO         BRIDGE(_IOC_READ, 3, 12)
#define PUT         BRIDGE(_IOC_WRITE, 4, 16)
#define GET         BRIDGE(_IOC_READ, 5, 16)
#define FAIL_EINVAL BRIDGE(_IOC_NONE, 6, 0)
#define FAIL_VALUE  BRIDGE(_IOC_NONE, 7, 0)
#define FAIL_ENOSYS BRIDGE(_IOC_NONE, 8, 0)
#define SHORT       BRIDGE(_IOC_READ, 9, 32)
#define LONG        BRIDGE(_IOC_READ, 10, 8)
#define MALFORMED   BRIDGE(_IOC_NONE, 11, 0)
#define NOOP        BRIDGE(_IOC_NONE, 12, 0)
#define NEGATIVE    BRIDGE(_IOC_NONE, 14, 0)
#define UNKNOWN     BRIDGE(_IOC_NONE, 99, 0)

static int fd;

static void
report(const char *name, int rc, const unsigned char *buf, size_t len)
{
    int err = rc < 0 ? errno : 0;
    printf("%s %d %d ", name, rc, err);
    if (buf == NULL)
        printf("-");
    for (size_t i = 0; buf && i < len; i++)
        printf("%02x", buf[i]);
    printf("\n");
}

static void
with_buffer(const char *name, unsigned long cmd, unsigned char fill, size_t len)
{
    unsigned char buf[64];
    for (size_t i = 0; i < len; i++)
        buf[i] = fill == 0xff ? (unsigned char)i : fill;
    report(name, ioctl(fd, cmd, buf), buf, len);
}

static void
plain(const char *name, unsigned long cmd, unsigned long arg)
{
    report(name, ioctl(fd, cmd, arg), NULL, 0);
}

static int
bench(long n)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) {
        if (ioctl(fd, NOOP, 0) != 0) {
            perror("ioctl");
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3;
    printf("us_per_call %.2f\n", us / n);
    return 0;
}

int
main(int argc, char **argv)
{
    if (argc != 2 && !(argc == 4 && strcmp(argv[2], "bench") == 0)) {
        fprintf(stderr, "usage: %s FILE [bench N]\n", argv[0]);
        return 2;
    }
    fd = open(argv[1], O_RDONLY);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    if (argc == 4)
        return bench(atol(argv[3]));

    printf("self %d %u %u\n", (int)getpid(), (unsigned)getuid(), (unsigned)getgid());
    with_buffer("echo", ECHO, 0xff, 64);
    plain("arg", ARG, 424242);
    plain("arg_zero", ARG, 0);
    with_buffer("who", WHO, 0, 12);
    with_buffer("put", PUT, 0xff, 16);
    with_buffer("get", GET, 0, 16);
    plain("einval", FAIL_EINVAL, 0);
    plain("value_error", FAIL_VALUE, 0);
    plain("enosys", FAIL_ENOSYS, 0);
    with_buffer("short", SHORT, 0x55, 32);
    with_buffer("long", LONG, 0x55, 8);
    plain("malformed", MALFORMED, 0);
    plain("negative", NEGATIVE, 0);
    plain("unknown", UNKNOWN, 0);
    with_buffer("echo_again", ECHO, 0xff, 64);
    return 0;
}
