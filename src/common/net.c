#include "common/net.h"
#include "common/status.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

int cr__net_split_hostport(const char *s, char *host, uint16_t *port, int allow_zero)
{
    if (!s)
        return -EINVAL;
    const char *colon;
    size_t hl;
    const char *h = s;
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':')
            return -EINVAL;
        h = s + 1;
        hl = (size_t)(rb - h);
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -EINVAL;
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= CR__HOST_MAX)
        return -EINVAL;
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || p < (allow_zero ? 0 : 1) || p > 65535)
        return -EINVAL;
    memcpy(host, h, hl);
    host[hl] = 0;
    *port = (uint16_t)p;
    return 0;
}

int cr__net_resolve(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = (host && *host) ? 0 : AI_PASSIVE;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    int rc = getaddrinfo((host && *host) ? host : NULL, ps, &hints, &res);
    if (rc || !res)
        return rc == EAI_NONAME || rc == EAI_FAIL ? -EHOSTUNREACH : -EINVAL;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

int cr__net_listen(const char *host, uint16_t port, int backlog, uint16_t *bound_port)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = cr__net_resolve(host, port, &ss, &len);
    if (rc)
        return rc;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return CR__ERRNO();
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, len) || listen(fd, backlog)) {
        rc = CR__ERRNO();
        close(fd);
        return rc;
    }
    if (bound_port) {
        struct sockaddr_storage b;
        socklen_t bl = sizeof b;
        getsockname(fd, (struct sockaddr *)&b, &bl);
        *bound_port = ntohs(b.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&b)->sin6_port
                                                   : ((struct sockaddr_in *)&b)->sin_port);
    }
    return fd;
}

int cr__net_listen_all(const char (*hosts)[64], uint32_t n, uint16_t port, int backlog, int *fds,
                       uint16_t *bound_port)
{
    int rc = -EINVAL;
    for (int attempt = 0; attempt < CR__NET_LISTEN_RETRIES; attempt++) {
        rc = 0;
        uint16_t want = port;
        uint32_t k = 0;
        for (; k < n; k++) {
            uint16_t bound = 0;
            int fd = cr__net_listen(hosts[k], want, backlog, &bound);
            if (fd < 0) {
                rc = fd;
                break;
            }
            fds[k] = fd;
            want = bound; /* the same port on every host */
        }
        if (rc == 0) {
            *bound_port = want;
            return 0;
        }
        while (k > 0)
            close(fds[--k]);
        if (port != 0 || rc != -EADDRINUSE)
            break; /* a fixed port is taken, or a real error: give up */
    }
    return rc;
}

int cr__net_connect(const char *host, uint16_t port, const char *src_host, int timeout_ms)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = cr__net_resolve(host, port, &ss, &len);
    if (rc)
        return rc;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return CR__ERRNO();
    if (src_host && *src_host) {
        struct sockaddr_storage ls;
        socklen_t ll;
        if ((rc = cr__net_resolve(src_host, 0, &ls, &ll)) ||
            bind(fd, (struct sockaddr *)&ls, ll)) {
            rc = rc ? rc : CR__ERRNO();
            close(fd);
            return rc;
        }
    }
    if (connect(fd, (struct sockaddr *)&ss, len) && errno != EINPROGRESS) {
        rc = cr__status_from_errno(errno);
        close(fd);
        return rc;
    }
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int pr;
    do
        pr = poll(&p, 1, timeout_ms < 0 ? -1 : timeout_ms);
    while (pr < 0 && errno == EINTR);
    if (pr <= 0) {
        close(fd);
        return pr == 0 ? -ETIMEDOUT : CR__ERRNO();
    }
    int err = 0;
    socklen_t el = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err) {
        close(fd);
        return cr__status_from_errno(err);
    }
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    cr__net_set_nodelay(fd);
    return fd;
}

void cr__net_set_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* best effort */
}

static int wait_fd(int fd, short ev, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = ev};
    int r;
    do
        r = poll(&p, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    if (r == 0)
        return -ETIMEDOUT;
    return r < 0 ? CR__ERRNO() : 0;
}

int cr__net_read_full(int fd, void *buf, size_t len, int timeout_ms)
{
    char *p = buf;
    while (len) {
        if (timeout_ms >= 0) {
            int w = wait_fd(fd, POLLIN, timeout_ms);
            if (w)
                return w;
        }
        ssize_t n = recv(fd, p, len, 0);
        if (n == 0)
            return -ECONNRESET;
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return cr__status_from_errno(errno);
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int cr__net_write_full(int fd, const void *buf, size_t len, int timeout_ms)
{
    const char *p = buf;
    while (len) {
        if (timeout_ms >= 0) {
            int w = wait_fd(fd, POLLOUT, timeout_ms);
            if (w)
                return w;
        }
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return errno == EPIPE ? -ECONNRESET : cr__status_from_errno(errno);
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

ssize_t cr__net_send_fd(int fd, const void *buf, size_t len, int pass_fd)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
                       .msg_controllen = sizeof ctl.b};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &pass_fd, sizeof pass_fd);
    ssize_t k;
    do
        k = sendmsg(fd, &m, MSG_NOSIGNAL);
    while (k < 0 && errno == EINTR);
    if (k < 0)
        return errno == EPIPE ? -ECONNRESET : CR__ERRNO();
    return k;
}

ssize_t cr__net_recv_fd(int fd, void *buf, size_t len, int flags, int *passed)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
                       .msg_controllen = sizeof ctl.b};
    ssize_t k = recvmsg(fd, &m, flags | MSG_CMSG_CLOEXEC);
    if (k < 0)
        return CR__ERRNO();
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < nfd; i++) {
            int got;
            memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
            if (*passed < 0)
                *passed = got;
            else
                close(got);
        }
    }
    if (m.msg_flags & MSG_CTRUNC)
        return -EPROTO;
    return k;
}

int cr__net_set_timeouts(int fd, int timeout_ms)
{
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv))
        return CR__ERRNO();
    return 0;
}

int cr__net_same_source(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                       &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
    return 1; /* unix sockets and the like: one source */
}

/* the key cr__net_same_source compares: family, then the address */
typedef struct src_key {
    uint8_t k[17];
    int i;
} src_key_t;

static void src_key_make(const struct sockaddr_storage *a, src_key_t *out)
{
    memset(out->k, 0, sizeof out->k);
    out->k[0] = (uint8_t)a->ss_family;
    if (a->ss_family == AF_INET)
        memcpy(out->k + 1, &((const struct sockaddr_in *)a)->sin_addr, 4);
    else if (a->ss_family == AF_INET6)
        memcpy(out->k + 1, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
}

static int src_key_cmp(const void *a, const void *b)
{
    return memcmp(((const src_key_t *)a)->k, ((const src_key_t *)b)->k, sizeof(uint8_t[17]));
}

int cr__net_fair_victim(const cr__net_peer_t *peers, int n, const struct sockaddr_storage *src)
{
    if (n <= 0)
        return -1;
    src_key_t *keys = malloc((size_t)n * sizeof *keys), mine;
    if (!keys)
        return -1;
    for (int i = 0; i < n; i++) {
        src_key_make(peers[i].addr, &keys[i]);
        keys[i].i = i;
    }
    src_key_make(src, &mine);
    qsort(keys, (size_t)n, sizeof *keys, src_key_cmp);
    /* runs of one source: the largest, and the newcomer's */
    int max = 0, own = 0;
    for (int a = 0, b; a < n; a = b) {
        for (b = a + 1; b < n && !src_key_cmp(&keys[a], &keys[b]); b++)
            ;
        if (b - a > max)
            max = b - a;
        if (!src_key_cmp(&keys[a], &mine))
            own = b - a;
    }
    int victim = -1;
    if (own < max) {
        for (int a = 0, b; a < n; a = b) {
            for (b = a + 1; b < n && !src_key_cmp(&keys[a], &keys[b]); b++)
                ;
            if (b - a != max)
                continue;
            for (int j = a; j < b; j++) {
                const cr__net_peer_t *p = &peers[keys[j].i];
                if (p->idle_ms != CR__NET_BUSY &&
                    (victim < 0 || p->idle_ms < peers[victim].idle_ms))
                    victim = keys[j].i;
            }
        }
    }
    free(keys);
    return victim;
}

long cr__net_raise_nofile(const char *prog)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return CR__ERRNO();
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl))
            rl.rlim_cur = was;
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < CR__NET_NOFILE_WANT)
        fprintf(stderr,
                "%s: open files limited to %llu (ulimit -n); connection caps can be reached "
                "early, raise it to %d or more\n",
                prog, (unsigned long long)rl.rlim_cur, CR__NET_NOFILE_WANT);
    return rl.rlim_cur == RLIM_INFINITY ? (long)CR__NET_NOFILE_WANT : (long)rl.rlim_cur;
}
