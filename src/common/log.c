#include "common/log.h"

#include "crescent/common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert((int)CR__LOG_ERROR == (int)CR_LOG_LEVEL_ERROR &&
                   (int)CR__LOG_DEBUG == (int)CR_LOG_LEVEL_DEBUG,
               "internal and public log levels agree");

static int g_level = -1;
/* The handler and its argument, swapped together (one pointer). */
typedef struct handler {
    cr_log_handler_fn fn;
    void *user;
    struct handler *older; /* every handler ever set stays reachable */
} handler_t;
static handler_t *_Atomic g_handler;
static handler_t *g_all; /* guarded by g_set_mu */
static pthread_mutex_t g_set_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void log_init(void)
{
    const char *e = getenv("CRESCENT_LOG");
    g_level = CR__LOG_WARN;
    if (!e)
        return;
    if (!strcmp(e, "error"))
        g_level = CR__LOG_ERROR;
    else if (!strcmp(e, "info"))
        g_level = CR__LOG_INFO;
    else if (!strcmp(e, "debug"))
        g_level = CR__LOG_DEBUG;
}

int cr__log_enabled(int level)
{
    pthread_once(&g_once, log_init);
    return level <= g_level;
}

void cr__log(int level, const char *component, const char *fmt, ...)
{
    static const char *names[] = {"E", "W", "I", "D"};
    if (!cr__log_enabled(level))
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    handler_t *h = atomic_load(&g_handler);
    if (h) {
        h->fn(h->user, level, component, msg);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    /* one fprintf call: stdio locks the stream, so lines never interleave */
    fprintf(stderr, "%s %02d:%02d:%02d.%03ld %s: %s\n", names[level], tm.tm_hour, tm.tm_min,
            tm.tm_sec, ts.tv_nsec / 1000000, component, msg);
}

void cr_log_set_handler(cr_log_handler_fn fn, void *user)
{
    handler_t *h = NULL;
    pthread_mutex_lock(&g_set_mu);
    if (fn) {
        h = malloc(sizeof *h);
        if (!h) {
            pthread_mutex_unlock(&g_set_mu);
            return; /* keeps the current handler */
        }
        h->fn = fn;
        h->user = user;
        /* a logging thread may still be calling an older handler: none is
         * freed (a few bytes per call; set once in practice) */
        h->older = g_all;
        g_all = h;
    }
    atomic_store(&g_handler, h);
    pthread_mutex_unlock(&g_set_mu);
}

int cr__log_rl_allow(cr__log_rl_t *rl, unsigned *suppressed)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned long long now =
        (unsigned long long)ts.tv_sec * 1000ull + (unsigned long long)ts.tv_nsec / 1000000ull;
    int ok;
    pthread_mutex_lock(&mu);
    if (now - rl->window_start_ms >= CR__LOG_RL_PERIOD_MS || rl->window_start_ms == 0) {
        rl->window_start_ms = now ? now : 1;
        rl->printed = 0;
    }
    ok = rl->printed < CR__LOG_RL_BURST;
    *suppressed = 0;
    if (ok) {
        rl->printed++;
        *suppressed = rl->suppressed;
        rl->suppressed = 0;
    } else {
        rl->suppressed++;
    }
    pthread_mutex_unlock(&mu);
    return ok;
}
