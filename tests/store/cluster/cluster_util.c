#include "cluster_util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/auth/auth.h"
#include "common/net.h"

pid_t cu_spawn(char *const argv[], const char *log, char *const envp_extra[])
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        for (size_t i = 0; envp_extra && envp_extra[i]; i++)
            putenv(envp_extra[i]);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

int cu_wait_file(const char *path, int timeout_ms, char *buf, size_t cap)
{
    for (int t = 0; t < timeout_ms; t += 20) {
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(buf, 1, cap - 1, f);
            fclose(f);
            buf[n] = 0;
            if (n > 0 && strchr(buf, '\n'))
                return 0;
        }
        usleep(20000);
    }
    return -1;
}

int cu_stop(pid_t pid, int sig, int timeout_ms)
{
    int st;
    kill(pid, sig);
    for (int t = 0; t < timeout_ms; t += 10) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return st;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

int cu_alive(pid_t pid)
{
    int st;
    return waitpid(pid, &st, WNOHANG) == 0;
}

int cu_http_get(uint16_t port, const char *path, char *buf, size_t cap)
{
    return cu_http_get_host("127.0.0.1", port, path, buf, cap);
}

int cu_http_get_host(const char *host, uint16_t port, const char *path, char *buf, size_t cap)
{
    int fd = cr__net_connect(host, port, NULL, 2000);
    if (fd < 0)
        return -1;
    /* security on ($CRESCENT_CLUSTER_KEY_FILE, as the daemons read it):
     * admin pages answer signed requests only */
    static cr__auth_t *auth;
    static int auth_tried;
    if (!auth_tried) { /* tests call this from one thread */
        auth_tried = 1;
        const char *kf = getenv(CR__AUTH_ENV_KEY_FILE);
        if (kf && *kf && cr__auth_load_key_file(kf, &auth))
            auth = NULL;
    }
    char sig[CR__AUTH_HTTP_MAX] = "";
    if (auth && cr__auth_http_sign(auth, "GET", path, NULL, 0, sig)) {
        close(fd);
        return -1;
    }
    char req[512 + CR__AUTH_HTTP_MAX];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\n%s%s%s\r\n", path, host,
                     sig[0] ? "X-Crescent-Auth: " : "", sig, sig[0] ? "\r\n" : "");
    if (cr__net_write_full(fd, req, (size_t)n, 2000)) {
        close(fd);
        return -1;
    }
    /* a stopped (SIGSTOP) server accepts but never answers: bounded read */
    struct timeval tv = {.tv_sec = 3};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd, buf + got, cap - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
        if (got == cap - 1)
            break;
    }
    close(fd);
    buf[got] = 0;
    int status = -1;
    if (sscanf(buf, "HTTP/%*s %d", &status) != 1)
        return -1;
    char *body = strstr(buf, "\r\n\r\n");
    if (body)
        memmove(buf, body + 4, strlen(body + 4) + 1);
    return status;
}

void cu_fill(uint8_t *b, size_t len, uint64_t seed, uint64_t salt)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + salt;
    for (size_t i = 0; i < len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t c = len - i < 8 ? len - i : 8;
        memcpy(b + i, &x, c);
    }
}
