/* The compiled baseline for perfex's start-up where perf(1) cannot count:
 * fork, exec true, wait, and read the child's rusage - what any
 * counting wrapper must do at the least. */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        execlp("true", "true", (char *)NULL);
        _exit(127);
    }
    int status;
    struct rusage usage;
    if (wait4(pid, &status, 0, &usage) < 0)
        return 1;
    fprintf(stderr, "%ld.%06ld s user\n", (long)usage.ru_utime.tv_sec, (long)usage.ru_utime.tv_usec);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
