/* shm proof of ownership (shm_proof.h). */
#include "transfer/transport/shm/shm_proof.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/log.h"
#include "common/status.h"
#include "common/net.h"

#define PROOF_MAX_RANGES (1u << 20)
#define PROOF_MAX_ENGINES 64
#define PROOF_ENTRY 24 /* u64 addr, u64 len, u32 fence slot, u32 generation */

/* The one listener of this process (shm_proof.h says why it is global). */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int lfd, stop_pipe[2];
    pthread_t thread;
    const cr__auth_t *auth;
    cr_xfer_engine_t *engines[PROOF_MAX_ENGINES]; /* guarded by g_mu */
    int n_engines;
} g;

static socklen_t proof_addr(pid_t pid, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    /* abstract name: sun_path[0] = 0, no file to clean up */
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "crescent-shm-v2-%d", (int)pid);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int range_cmp(const void *a, const void *b)
{
    const cr__shm_range_t *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* The ranges registered by the engines of this process (their fence
 * slots, shm_fence.h), encoded. */
static int encode_ranges(uint8_t **out, size_t *len)
{
    cr__shm_range_t *r = NULL;
    uint32_t n = 0;
    int rc = cr__shm_fence_live(&r, &n);
    if (rc)
        return rc;
    if (n > PROOF_MAX_RANGES)
        n = PROOF_MAX_RANGES;
    size_t used = 4 + (size_t)n * PROOF_ENTRY;
    uint8_t *b = malloc(used);
    if (!b) {
        free(r);
        return -ENOMEM;
    }
    cr__put_le(b, n, 4);
    for (uint32_t k = 0; k < n; k++) {
        uint8_t *p = b + 4 + (size_t)k * PROOF_ENTRY;
        cr__put_le(p, r[k].addr, 8);
        cr__put_le(p + 8, r[k].len, 8);
        cr__put_le(p + 16, r[k].slot, 4);
        cr__put_le(p + 20, r[k].gen, 4);
    }
    free(r);
    *out = b;
    *len = used;
    return 0;
}

/* Sends the first bytes of buf with the fence table's fd attached
 * (SCM_RIGHTS), then the rest. Returns 0 or -errno. */
static int send_with_fd(int fd, const uint8_t *buf, size_t len, int pass)
{
    ssize_t k = cr__net_send_fd(fd, buf, len, pass);
    if (k < 0)
        return (int)k;
    return cr__net_write_full(fd, buf + k, len - (size_t)k, CR__SHM_PROOF_TIMEOUT_MS);
}

static void serve_one(int fd)
{
    struct ucred cr;
    socklen_t cl = sizeof cr;
    cr__net_set_timeouts(fd, CR__SHM_PROOF_TIMEOUT_MS);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) || cr.uid != getuid()) {
        CR_LOG_RL(CR__LOG_WARN, "shm", "proof request from another user refused");
        return;
    }
    if (g.auth && cr__auth_server_fd(g.auth, fd, "shm", CR__SHM_PROOF_TIMEOUT_MS)) {
        CR_LOG_RL(CR__LOG_WARN, "shm", "proof request from pid %d failed authentication",
                  (int)cr.pid);
        return;
    }
    /* an engine that checks per-object capabilities is never offered over
     * shm (the initiator would copy unchecked): peers use a transport whose
     * serving side checks */
    pthread_mutex_lock(&g_mu);
    int caps = 0;
    for (int i = 0; i < g.n_engines; i++)
        caps |= cr__xfer_cap_enforced(g.engines[i]);
    pthread_mutex_unlock(&g_mu);
    if (caps) {
        CR_LOG_RL(CR__LOG_INFO, "shm", "pid %d: this process checks capabilities, no shm",
                  (int)cr.pid);
        return;
    }
    /* without the table nobody could check a copy: no shm at all */
    int table = cr__shm_fence_fd();
    uint8_t *b;
    size_t len;
    if (table < 0 || encode_ranges(&b, &len))
        return;
    send_with_fd(fd, b, len, table);
    free(b);
}

static void *srv_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd pf[2] = {{.fd = g.lfd, .events = POLLIN},
                               {.fd = g.stop_pipe[0], .events = POLLIN}};
        if (poll(pf, 2, -1) < 0 && errno != EINTR)
            break;
        if (pf[1].revents)
            break;
        if (!(pf[0].revents & POLLIN))
            continue;
        int fd = accept4(g.lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        serve_one(fd);
        close(fd);
    }
    return NULL;
}

static int start_locked(const cr__auth_t *auth)
{
    g.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (g.lfd < 0)
        return CR__ERRNO();
    if (pipe2(g.stop_pipe, O_CLOEXEC)) {
        int rc = CR__ERRNO();
        close(g.lfd);
        return rc;
    }
    struct sockaddr_un sa;
    socklen_t sl = proof_addr(getpid(), &sa);
    int rc = 0;
    if (bind(g.lfd, (struct sockaddr *)&sa, sl) || listen(g.lfd, 16))
        rc = CR__ERRNO();
    g.auth = auth;
    if (!rc)
        rc = -pthread_create(&g.thread, NULL, srv_main, NULL);
    if (rc) {
        close(g.lfd);
        close(g.stop_pipe[0]);
        close(g.stop_pipe[1]);
    }
    return rc;
}

int cr__shm_proof_attach(cr_xfer_engine_t *e, const cr__auth_t *auth)
{
    pthread_mutex_lock(&g_mu);
    int rc = 0;
    if (g.n_engines == PROOF_MAX_ENGINES)
        rc = -ENOSPC;
    else if (g.n_engines == 0 && !(rc = cr__shm_fence_init()))
        rc = start_locked(auth);
    if (!rc)
        g.engines[g.n_engines++] = e;
    pthread_mutex_unlock(&g_mu);
    return rc;
}

void cr__shm_proof_detach(cr_xfer_engine_t *e)
{
    pthread_mutex_lock(&g_mu);
    int found = 0;
    for (int i = 0; i < g.n_engines; i++)
        if (g.engines[i] == e) {
            g.engines[i] = g.engines[--g.n_engines];
            found = 1;
            break;
        }
    int last = found && g.n_engines == 0;
    pthread_mutex_unlock(&g_mu);
    if (!last)
        return;
    /* the thread takes g_mu in encode_ranges: join without holding it; a
     * new attach meanwhile would start a second listener on a busy name,
     * which fails cleanly with -EADDRINUSE */
    char b = 1;
    if (write(g.stop_pipe[1], &b, 1) != 1) {
        /* a pipe with room never fails this write */
    }
    pthread_join(g.thread, NULL);
    close(g.lfd);
    close(g.stop_pipe[0]);
    close(g.stop_pipe[1]);
}

int cr__shm_proof_parse(const uint8_t *buf, size_t len, cr__shm_range_t **out, uint32_t *n)
{
    if (len < 4)
        return -EBADMSG;
    uint64_t count = cr__get_le(buf, 4);
    if (count > PROOF_MAX_RANGES || len != 4 + PROOF_ENTRY * count)
        return -EBADMSG;
    cr__shm_range_t *r = NULL;
    if (count && !(r = malloc(count * sizeof *r)))
        return -ENOMEM;
    for (uint64_t i = 0; i < count; i++) {
        const uint8_t *p = buf + 4 + PROOF_ENTRY * i;
        r[i].addr = cr__get_le(p, 8);
        r[i].len = cr__get_le(p + 8, 8);
        r[i].slot = (uint32_t)cr__get_le(p + 16, 4);
        r[i].gen = (uint32_t)cr__get_le(p + 20, 4);
        /* a registered range has an odd generation (shm_fence.h) */
        if (r[i].len == 0 || r[i].addr + r[i].len < r[i].addr ||
            r[i].slot >= CR__SHM_FENCE_SLOTS || !(r[i].gen & 1)) {
            free(r);
            return -EBADMSG;
        }
    }
    if (count)
        qsort(r, count, sizeof *r, range_cmp);
    *out = r;
    *n = (uint32_t)count;
    return 0;
}

int cr__shm_proof_fetch(pid_t pid, const cr__auth_t *auth, cr__shm_range_t **out, uint32_t *n,
                        int *fence_fd)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return CR__ERRNO();
    cr__net_set_timeouts(fd, CR__SHM_PROOF_TIMEOUT_MS);
    struct sockaddr_un sa;
    socklen_t sl = proof_addr(pid, &sa);
    int rc = 0;
    if (connect(fd, (struct sockaddr *)&sa, sl)) {
        rc = CR__ERRNO();
        close(fd);
        return rc;
    }
    /* the kernel says who listens there: it must be the claimed process */
    struct ucred cr;
    socklen_t cl = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) || cr.pid != pid ||
        cr.uid != getuid()) {
        CR_LOG_RL(CR__LOG_WARN, "shm",
                  "pid %d: its proof socket belongs to pid %d: descriptor not trusted", (int)pid,
                  (int)cr.pid);
        close(fd);
        return -EACCES;
    }
    if (auth && (rc = cr__auth_client_fd(auth, fd, "shm", CR__SHM_PROOF_TIMEOUT_MS))) {
        close(fd);
        return rc == -ETIMEDOUT ? rc : -EACCES;
    }
    /* read to EOF, bounded; the fence table's fd comes with the first bytes */
    int table = -1;
    size_t cap = 4096, len = 0;
    uint8_t *b = malloc(cap);
    if (!b) {
        close(fd);
        return -ENOMEM;
    }
    for (;;) {
        if (len == cap) {
            if (cap >= 4 + (size_t)PROOF_ENTRY * PROOF_MAX_RANGES) {
                rc = -EBADMSG;
                break;
            }
            uint8_t *nb = realloc(b, cap * 2);
            if (!nb) {
                rc = -ENOMEM;
                break;
            }
            b = nb;
            cap *= 2;
        }
        ssize_t k = cr__net_recv_fd(fd, b + len, cap - len, 0, &table);
        if (k == 0)
            break;
        if (k < 0) {
            if (k == -EINTR)
                continue;
            rc = k == -EAGAIN ? -ETIMEDOUT : (int)k;
            break;
        }
        len += (size_t)k;
    }
    close(fd);
    if (!rc && table < 0)
        rc = -EBADMSG; /* a peer whose copies nobody could revoke */
    if (!rc)
        rc = cr__shm_proof_parse(b, len, out, n);
    free(b);
    if (rc) {
        if (table >= 0)
            close(table);
        return rc == -EBADMSG ? -EACCES : rc;
    }
    *fence_fd = table;
    return 0;
}
