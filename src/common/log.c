#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_level = -1;
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
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    /* one fprintf call: stdio locks the stream, so lines never interleave */
    fprintf(stderr, "%s %02d:%02d:%02d.%03ld %s: %s\n", names[level], tm.tm_hour, tm.tm_min,
            tm.tm_sec, ts.tv_nsec / 1000000, component, msg);
}
