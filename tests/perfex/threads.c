/* A pthread program for perfex -mp, whose threads' counts the manual clock
 * predicts.
 *
 * It starts N threads (argument, default 3), says "counting PID" and then
 * "thread TID" for each on stderr, and waits for SIGUSR1 so that the test can
 * advance each thread's CPU time (advance-thread) in between; then the
 * threads end, one after another, and the program exits 0. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int started, go;
static pid_t tids[64];

static void *thread(void *arg)
{
    int i = (int)(long)arg;

    pthread_mutex_lock(&lock);
    tids[i] = (pid_t)syscall(SYS_gettid);
    started++;
    pthread_cond_broadcast(&changed);
    while (!go)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3, i, sig;
    pthread_t threads[64];
    sigset_t usr1;

    if (n < 1 || n > 64)
        return 2;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    for (i = 0; i < n; i++)
        if (pthread_create(&threads[i], NULL, thread, (void *)(long)i) != 0)
            return 3;
    pthread_mutex_lock(&lock);
    while (started < n)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    fprintf(stderr, "counting %d\n", (int)getpid());
    for (i = 0; i < n; i++)
        fprintf(stderr, "thread %d\n", (int)tids[i]);
    fflush(stderr);
    if (sigwait(&usr1, &sig) != 0)
        return 99;
    pthread_mutex_lock(&lock);
    go = 1;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    for (i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
    return 0;
}
