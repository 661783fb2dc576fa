/* crescent-demo te: the Transfer Engine demo (store_demo.c is the default
 * mode, the store cluster demo; `crescent-demo te ...` runs this one).
 *
 * Everything runs locally with no external service:
 *   1. an embedded HTTP metadata server starts in this process (127.0.0.1,
 *      ephemeral port);
 *   2. a target engine starts in a child process (this binary re-executed
 *      with --role target), registers a buffer filled with a known pattern and
 *      publishes its segment through the metadata server;
 *   3. an initiator engine in this process opens the target's segment and
 *      moves --total bytes in --block_size requests by READ (every byte
 *      verified against the pattern) and by WRITE (every byte read back and
 *      verified), once per protocol in --protocols (tcp forces the TCP
 *      transport; auto lets the engine pick shm for this same-host peer);
 *   4. prints throughput and the transport used, stops the child, exits 0
 *      (1 if any transfer or verification failed).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../crescent-bench/bench.h"
#include "common/clock.h"
#include "common/config.h"
#include "crescent/transfer.h"
#include "transfer/metadata/metadata.h"

#define TARGET_SEED 0xdeadbeefcafe0001ull
#define WRITE_SEED 0x5eed000000000002ull
#define TARGET_NAME "demo-target"

typedef struct demo_cfg {
    char role[CR__CFG_STR_MAX];
    char metadata[CR__CFG_STR_MAX];
    char protocols[CR__CFG_STR_MAX];
    uint64_t total;
    uint64_t block_size;
    uint64_t buffer_size;
    int64_t batch_size;
    int64_t ctl_fd;
} demo_cfg_t;

#define OPT(n, d, h, t) {#n, d, h, t, offsetof(demo_cfg_t, n)}
static const cr__cfg_opt_t opts[] = {
    OPT(total, "1GiB", "bytes to move per operation and protocol", CR__CFG_SIZE),
    OPT(block_size, "4MiB", "bytes per request", CR__CFG_SIZE),
    OPT(batch_size, "16", "requests per batch", CR__CFG_INT),
    OPT(buffer_size, "256MiB", "registered buffer on each side (total wraps over it)",
        CR__CFG_SIZE),
    OPT(protocols, "tcp,auto", "comma-separated passes: tcp, shm, auto", CR__CFG_STR),
    OPT(role, "initiator", "internal: 'target' for the child process", CR__CFG_STR),
    OPT(metadata, "", "internal: metadata URI for the child", CR__CFG_STR),
    OPT(ctl_fd, "-1", "internal: child's control pipe", CR__CFG_INT),
};
#define N_OPTS (sizeof opts / sizeof opts[0])

/* ---- child: the target ------------------------------------------------- */

static int run_target(const demo_cfg_t *c)
{
    cr_xfer_params_t p = {.field_mask = CR_XFER_PARAM_LOCAL_NAME | CR_XFER_PARAM_METADATA_URI |
                                        CR_XFER_PARAM_TRANSPORTS,
                          .local_name = TARGET_NAME,
                          .metadata_uri = c->metadata,
                          .transports = "tcp,shm"};
    cr_xfer_engine_t *e;
    int rc = cr_xfer_engine_create(&p, &e);
    if (rc) {
        fprintf(stderr, "demo target: engine: %s\n", cr_strerror(rc));
        return 1;
    }
    void *buf = cr_bench_alloc_prefaulted(c->buffer_size);
    if (!buf) {
        cr_xfer_engine_destroy(e);
        return 1;
    }
    cr_bench_pattern_fill(buf, 0, c->buffer_size, TARGET_SEED);
    rc = cr_xfer_mem_register(e, buf, c->buffer_size, "cpu:0");
    if (rc) {
        fprintf(stderr, "demo target: register: %s\n", cr_strerror(rc));
        cr_xfer_engine_destroy(e);
        return 1;
    }
    /* tell the parent we are published (fd ctl_fd), then serve until it
     * closes the stop pipe (fd ctl_fd + 1) */
    int wfd = (int)c->ctl_fd, rfd = (int)c->ctl_fd + 1;
    if (write(wfd, "R", 1) != 1)
        fprintf(stderr, "demo target: cannot signal readiness\n");
    close(wfd);
    char ch;
    while (read(rfd, &ch, 1) > 0)
        ;
    cr_xfer_mem_unregister(e, buf);
    cr_xfer_engine_destroy(e);
    cr_bench_free(buf, c->buffer_size);
    return 0;
}

/* ---- parent: initiator --------------------------------------------------- */

static pid_t spawn_target(const demo_cfg_t *c, const char *uri, int *ctl)
{
    int sv[2];
    if (pipe(sv) < 0) /* sv[0]: child's end, sv[1]: ours */
        return -1;
    int back[2];
    if (pipe(back) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        /* fd 3: readiness (write), fd 4: stop (EOF when the parent closes it) */
        close(sv[1]);
        close(back[0]);
        /* move both ends above 4 first so the dup2s below cannot clobber them */
        int fds[2] = {fcntl(sv[0], F_DUPFD, 10), fcntl(back[1], F_DUPFD, 10)};
        if (fds[0] < 0 || fds[1] < 0)
            _exit(126);
        char a_uri[600], a_buf[64], a_fd[32];
        snprintf(a_uri, sizeof a_uri, "--metadata=%s", uri);
        snprintf(a_buf, sizeof a_buf, "--buffer_size=%" PRIu64, c->buffer_size);
        if (dup2(fds[1], 3) < 0 || dup2(fds[0], 4) < 0)
            _exit(126);
        snprintf(a_fd, sizeof a_fd, "--ctl_fd=%d", 3);
        execl("/proc/self/exe", "crescent-demo", "te", "--role=target", a_uri, a_buf, a_fd,
              (char *)NULL);
        _exit(127);
    }
    close(sv[0]);
    close(back[1]);
    ctl[0] = back[0]; /* readiness */
    ctl[1] = sv[1];   /* close to stop */
    return pid;
}

typedef struct pass_result {
    double read_gbps, write_gbps;
    const char *transport;
    int ok;
} pass_result_t;

/* Moves c->total bytes with op, batch by batch over the target buffer.
 * Verification (outside the timed part): READ against the target pattern;
 * WRITE by reading back into `check` and comparing with what was sent. */
static int move(cr_xfer_engine_t *e, cr_xfer_segment_t seg, const demo_cfg_t *c,
                cr_xfer_opcode_t op, char *local, char *check, uint64_t tbase, uint64_t tlen,
                double *gbps, uint64_t *write_round)
{
    size_t n = (size_t)c->batch_size;
    uint64_t bs = c->block_size, blocks_in_target = tlen / bs;
    cr_xfer_request_t *reqs = calloc(n, sizeof *reqs);
    if (!reqs)
        return -ENOMEM;
    uint64_t moved = 0, ns = 0, blk = 0;
    int rc = 0;
    while (moved < c->total && !rc) {
        size_t k = 0;
        for (; k < n && moved + k * bs < c->total; k++) {
            uint64_t toff = (blk++ % blocks_in_target) * bs;
            reqs[k] = (cr_xfer_request_t){op, local + k * bs, seg, tbase + toff, bs};
            if (op == CR_XFER_WRITE) /* new content for this block each round */
                cr_bench_pattern_fill(local + k * bs, toff, bs, WRITE_SEED + *write_round);
        }
        if (op == CR_XFER_READ)
            memset(local, 0, k * bs);
        uint64_t t0 = cr__now_ns();
        rc = cr_xfer_transfer_sync(e, reqs, k, NULL);
        ns += cr__now_ns() - t0;
        if (rc) {
            fprintf(stderr, "demo: %s batch failed: %s (%d)\n", op == CR_XFER_READ ? "READ" : "WRITE",
                    cr_strerror(rc), rc);
            break;
        }
        /* verify */
        if (op == CR_XFER_WRITE) {
            cr_xfer_request_t rb[k];
            for (size_t i = 0; i < k; i++)
                rb[i] = (cr_xfer_request_t){CR_XFER_READ, check + i * bs, seg,
                                            reqs[i].target_addr, bs};
            memset(check, 0, k * bs);
            rc = cr_xfer_transfer_sync(e, rb, k, NULL);
            if (rc) {
                fprintf(stderr, "demo: read-back failed: %s\n", cr_strerror(rc));
                break;
            }
        }
        for (size_t i = 0; i < k && !rc; i++) {
            const char *got = (op == CR_XFER_READ ? local : check) + i * bs;
            uint64_t toff = reqs[i].target_addr - tbase;
            size_t bad = op == CR_XFER_READ
                             ? cr_bench_pattern_check(got, toff, bs, TARGET_SEED)
                             : cr_bench_pattern_check(got, toff, bs, WRITE_SEED + *write_round);
            if (bad != (size_t)-1) {
                fprintf(stderr, "demo: VERIFY FAILED (%s) target offset %" PRIu64 " byte %zu\n",
                        op == CR_XFER_READ ? "read" : "write", toff, bad);
                rc = -EIO;
            }
        }
        moved += k * bs;
        if (op == CR_XFER_WRITE)
            (*write_round)++;
    }
    free(reqs);
    *gbps = ns ? (double)moved / ((double)ns / 1e9) / 1e9 : 0;
    return rc;
}

static int run_pass(const demo_cfg_t *c, const char *uri, const char *protocol,
                    pass_result_t *res)
{
    const char *transports = !strcmp(protocol, "tcp") ? "tcp" : "tcp,shm";
    cr_xfer_params_t p = {.field_mask = CR_XFER_PARAM_LOCAL_NAME | CR_XFER_PARAM_METADATA_URI |
                                        CR_XFER_PARAM_TRANSPORTS,
                          .local_name = "demo-initiator",
                          .metadata_uri = uri,
                          .transports = transports};
    cr_xfer_engine_t *e = NULL;
    cr_xfer_segment_t seg = -1;
    size_t area = (size_t)c->batch_size * c->block_size;
    char *local = NULL;
    int rc = cr_xfer_engine_create(&p, &e);
    if (rc) {
        fprintf(stderr, "demo: initiator engine: %s\n", cr_strerror(rc));
        return rc;
    }
    local = cr_bench_alloc_prefaulted(2 * area);
    if (!local) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = cr_xfer_mem_register(e, local, 2 * area, "cpu:0")))
        goto out;
    if ((rc = cr_xfer_segment_open(e, TARGET_NAME, &seg))) {
        fprintf(stderr, "demo: open %s: %s\n", TARGET_NAME, cr_strerror(rc));
        goto out;
    }
    res->transport = cr_xfer_segment_transport(e, seg);
    if (!strcmp(protocol, "shm") && (!res->transport || strcmp(res->transport, "shm"))) {
        fprintf(stderr, "demo: asked for shm, engine uses %s\n", res->transport);
        rc = -EPROTONOSUPPORT;
        goto out;
    }
    cr_xfer_buffer_info_t bi;
    size_t nb = 0;
    if ((rc = cr_xfer_segment_buffers(e, seg, &bi, 1, &nb)) || nb < 1 || bi.len < c->block_size) {
        fprintf(stderr, "demo: target has no usable buffer\n");
        rc = rc ? rc : -ENOENT;
        goto out;
    }
    static uint64_t write_round; /* distinct content on every write round, across passes */
    rc = move(e, seg, c, CR_XFER_READ, local, NULL, bi.addr, bi.len, &res->read_gbps, &write_round);
    if (!rc)
        rc = move(e, seg, c, CR_XFER_WRITE, local, local + area, bi.addr, bi.len,
                  &res->write_gbps, &write_round);
    if (!rc) {
        /* leave the target as we found it for the next pass */
        for (uint64_t off = 0; off < bi.len && !rc; off += area) {
            size_t len = bi.len - off < area ? (size_t)(bi.len - off) : area;
            cr_bench_pattern_fill(local, off, len, TARGET_SEED);
            cr_xfer_request_t r = {CR_XFER_WRITE, local, seg, bi.addr + off, len};
            rc = cr_xfer_transfer_sync(e, &r, 1, NULL);
        }
    }
out:
    res->ok = rc == 0;
    if (seg >= 0)
        cr_xfer_segment_close(e, seg);
    if (local)
        cr_xfer_mem_unregister(e, local);
    cr_xfer_engine_destroy(e);
    cr_bench_free(local, 2 * area);
    return rc;
}

int cr_demo_te_main(int argc, char **argv);

/* argv[0] is "te" (the subcommand). */
int cr_demo_te_main(int argc, char **argv)
{
    demo_cfg_t c;
    char err[256] = "";
    int rc = cr__cfg_parse(opts, N_OPTS, &c, argc, argv, 1, "CRESCENT_DEMO_", NULL, 0, NULL, err,
                           sizeof err);
    if (rc == 1) {
        cr__cfg_usage(stdout, "crescent-demo te",
                      "Transfer Engine demo: embedded metadata, a target child, READ/WRITE with "
                      "verification",
                      opts, N_OPTS);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "crescent-demo: %s\n", err);
        return 2;
    }
    if (c.block_size == 0 || c.batch_size < 1 || c.batch_size > 1024 ||
        c.buffer_size < c.block_size || c.total == 0) {
        fprintf(stderr, "crescent-demo: need block_size > 0, 1 <= batch_size <= 1024, "
                        "buffer_size >= block_size, total > 0\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (!strcmp(c.role, "target"))
        return run_target(&c);

    cr__meta_server_t *ms;
    if ((rc = cr__meta_server_start("127.0.0.1", 0, "/metadata", 64u << 20, &ms))) {
        fprintf(stderr, "crescent-demo: metadata server: %s\n", cr_strerror(rc));
        return 1;
    }
    char uri[128];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%u/metadata", cr__meta_server_port(ms));
    printf("crescent-demo: embedded metadata server at %s\n", uri);
    int ctl[2];
    pid_t child = spawn_target(&c, uri, ctl);
    if (child < 0) {
        perror("crescent-demo: fork");
        cr__meta_server_stop(ms);
        return 1;
    }
    char ch;
    int ok = 1;
    if (read(ctl[0], &ch, 1) != 1) {
        fprintf(stderr, "crescent-demo: target process failed to start\n");
        ok = 0;
    } else {
        printf("crescent-demo: target '%s' running in pid %d with %" PRIu64 " MiB registered\n",
               TARGET_NAME, (int)child, c.buffer_size >> 20);
    }
    char protos[CR__CFG_STR_MAX];
    snprintf(protos, sizeof protos, "%s", c.protocols);
    char *save = NULL;
    for (char *pr = strtok_r(protos, ",", &save); ok && pr; pr = strtok_r(NULL, ",", &save)) {
        if (strcmp(pr, "tcp") && strcmp(pr, "shm") && strcmp(pr, "auto")) {
            fprintf(stderr, "crescent-demo: unknown protocol '%s'\n", pr);
            ok = 0;
            break;
        }
        pass_result_t res = {0};
        rc = run_pass(&c, uri, pr, &res);
        printf("crescent-demo: protocol=%-4s transport=%-3s moved %" PRIu64
               " MiB READ %.2f GB/s, WRITE %.2f GB/s in %" PRIu64 " KiB blocks: %s\n",
               pr, res.transport ? res.transport : "-", c.total >> 20, res.read_gbps,
               res.write_gbps, c.block_size >> 10, res.ok ? "verified" : "FAILED");
        if (!res.ok)
            ok = 0;
    }
    close(ctl[1]); /* child sees EOF and exits */
    int status = 0;
    waitpid(child, &status, 0);
    close(ctl[0]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "crescent-demo: target process exited abnormally (status %d)\n", status);
        ok = 0;
    }
    cr__meta_server_stop(ms);
    printf("crescent-demo: %s\n", ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
}
