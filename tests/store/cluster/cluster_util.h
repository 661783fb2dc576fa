/* Process helpers for the multi-process store tests: spawn a tool with its
 * output in a log file, wait for a file to appear, tiny HTTP GET. */
#ifndef CR_TESTS_STORE_CLUSTER_UTIL_H
#define CR_TESTS_STORE_CLUSTER_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* fork+exec argv (NULL-terminated) with stdout+stderr appended to log; the
 * child gets SIGKILL if this process dies. Returns the pid or -1. */
pid_t cu_spawn(char *const argv[], const char *log, char *const envp_extra[]);

/* Waits up to timeout_ms for path to exist and be non-empty; copies its
 * content (NUL-terminated) into buf. Returns 0 or -1. */
int cu_wait_file(const char *path, int timeout_ms, char *buf, size_t cap);

/* Sends sig and waits up to timeout_ms; returns the wait status, or -1 if
 * it did not exit (then it is SIGKILLed and reaped). */
int cu_stop(pid_t pid, int sig, int timeout_ms);

/* 1 if pid has not exited. */
int cu_alive(pid_t pid);

/* GET http://127.0.0.1:port/path into buf. Returns the HTTP status or -1. */
int cu_http_get(uint16_t port, const char *path, char *buf, size_t cap);
/* the same against host (an address in another network namespace) */
int cu_http_get_host(const char *host, uint16_t port, const char *path, char *buf, size_t cap);

/* Fills b with the self-verifying pattern of value `seed` (xorshift64 from
 * seed and salt): a reader regenerates it to compare byte for byte. */
void cu_fill(uint8_t *b, size_t len, uint64_t seed, uint64_t salt);

#endif
