/* What handing work from one thread to another costs on this host: a
 * one-byte ping-pong through two pipes between two threads, both pinned to
 * CPU 0 (each wake-up is a switch on the same CPU), then pinned to CPUs 0
 * and 1 (each wake-up crosses to the other CPU, which may be idle and
 * halted). Every synchronous request of a store's call (a commit to the
 * master after the last byte, the caller woken by the copy that finished
 * its batch) pays one such hand-off each way (docs/benchmarks.md, issue 16,
 * session of 2026-11-30 22:09 UTC).
 *
 *   cc -O2 -pthread -o /tmp/handoff bench/kvcache/handoff.c && /tmp/handoff [ROUNDS]
 *
 * Prints the mean round trip in microseconds for each placement. Needs
 * two CPUs. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int to_b[2], to_a[2];
static long rounds = 50000;

static int pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *echo(void *arg)
{
    if (pin((int)(long)arg))
        return (void *)1;
    char c;
    for (long i = 0; i < rounds; i++)
        if (read(to_b[0], &c, 1) != 1 || write(to_a[1], &c, 1) != 1)
            return (void *)1;
    return NULL;
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
    if (argc > 1 && (rounds = atol(argv[1])) < 1) {
        fprintf(stderr, "usage: handoff [ROUNDS >= 1]\n");
        return 2;
    }
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
        fprintf(stderr, "handoff: needs two CPUs\n");
        return 2;
    }
    for (int cross = 0; cross < 2; cross++) {
        if (pipe(to_b) || pipe(to_a) || pin(0)) {
            perror("handoff: set-up");
            return 1;
        }
        pthread_t t;
        if (pthread_create(&t, NULL, echo, (void *)(long)cross)) {
            fprintf(stderr, "handoff: pthread_create failed\n");
            return 1;
        }
        char c = 'x';
        int bad = 0;
        double t0 = now_us();
        for (long i = 0; i < rounds && !bad; i++)
            bad = write(to_b[1], &c, 1) != 1 || read(to_a[0], &c, 1) != 1;
        double t1 = now_us();
        void *rv;
        pthread_join(t, &rv);
        if (bad || rv) {
            fprintf(stderr, "handoff: the ping-pong failed\n");
            return 1;
        }
        printf("%s: round trip %.2f us (%ld rounds)\n",
               cross ? "threads on CPUs 0 and 1" : "both threads on CPU 0", (t1 - t0) / (double)rounds,
               rounds);
        close(to_b[0]);
        close(to_b[1]);
        close(to_a[0]);
        close(to_a[1]);
    }
    return 0;
}
