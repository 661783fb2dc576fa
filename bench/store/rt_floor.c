/* The floor of one tcp round trip on this machine: a reference for the 4 KiB
 * put/get rows of bench/store/run.py (cases d and e).
 *
 * A crescent put or get over tcp is two round trips (the master's, then
 * the node's); Redis's SET or GET is one. This program measures one bare
 * round trip between two processes -- a request of req bytes, a reply of
 * rep bytes, TCP_NODELAY, nothing else -- with both sides busy-polling
 * (recv MSG_DONTWAIT, sched_yield between, as crescent's client, master
 * and tcp target do) or both sides sleeping in recv (as Redis does).
 *
 *   rt_floor serve HOST PORT            one connection at a time, echoes
 *                                       replies of the size each ping asks
 *   rt_floor ping HOST PORT N REQ REP SPIN
 *                                       prints "p50_us=.. p99_us=.."
 *
 * Built by run.py with `cc -O2`; no crescent code involved. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_MSG (1u << 20)

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* Exactly n bytes; returns 0, or -1 on EOF or an error. */
static int recv_all(int fd, char *b, size_t n, int spin)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, b + got, n - got, spin ? MSG_DONTWAIT : 0);
        if (r > 0)
            got += (size_t)r;
        else if (r < 0 && (errno == EAGAIN || errno == EINTR))
            sched_yield();
        else
            return -1;
    }
    return 0;
}

static int send_all(int fd, const char *b, size_t n)
{
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Each request starts with a header: u32 request bytes, u32 reply bytes,
 * u32 spin (the server polls like the client). */
static int serve(int lfd)
{
    char *buf = malloc(MAX_MSG);
    if (!buf)
        return 1;
    for (;;) {
        int c = accept(lfd, NULL, NULL);
        if (c < 0)
            continue;
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        uint32_t h[3];
        int spin = 0;
        while (recv_all(c, (char *)h, sizeof h, spin) == 0) {
            if (h[0] > MAX_MSG || h[1] > MAX_MSG || h[0] < sizeof h || h[1] == 0)
                break;
            spin = h[2] != 0;
            if (recv_all(c, buf, h[0] - sizeof h, spin) || send_all(c, buf, h[1]))
                break;
        }
        close(c);
    }
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s serve HOST PORT | ping HOST PORT N REQ REP SPIN\n", argv[0]);
        return 2;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3]))};
    if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1) {
        fprintf(stderr, "rt_floor: bad address %s\n", argv[2]);
        return 2;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (!strcmp(argv[1], "serve")) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 4)) {
            perror("rt_floor: bind/listen");
            return 1;
        }
        return serve(fd);
    }
    if (argc != 8 || strcmp(argv[1], "ping")) {
        fprintf(stderr, "rt_floor: bad arguments\n");
        return 2;
    }
    int n = atoi(argv[4]), spin = atoi(argv[7]);
    uint32_t req = (uint32_t)atoi(argv[5]), rep = (uint32_t)atoi(argv[6]);
    if (n < 1 || req < 12 || req > MAX_MSG || rep < 1 || rep > MAX_MSG) {
        fprintf(stderr, "rt_floor: N >= 1, 12 <= REQ <= 1 MiB, 1 <= REP <= 1 MiB\n");
        return 2;
    }
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        perror("rt_floor: connect");
        return 1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char *buf = calloc(1, MAX_MSG);
    int warm = n / 20 + 10;
    double *t = malloc((size_t)n * sizeof *t);
    if (!buf || !t)
        return 1;
    for (int i = 0; i < n + warm; i++) {
        uint32_t h[3] = {req, rep, (uint32_t)spin};
        memcpy(buf, h, sizeof h);
        double t0 = now_us();
        if (send_all(fd, buf, req) || recv_all(fd, buf, rep, spin)) {
            fprintf(stderr, "rt_floor: connection lost\n");
            return 1;
        }
        if (i >= warm)
            t[i - warm] = now_us() - t0;
    }
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    printf("p50_us=%.1f p99_us=%.1f\n", t[n / 2], t[(size_t)n * 99 / 100]);
    return 0;
}
