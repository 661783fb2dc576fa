/* Internal logging: one line per event, to the handler installed with
 * cr_log_set_handler (common.h), else to stderr; never stdout.
 * Level from CRESCENT_LOG=error|warn|info|debug (default warn). Thread-safe. */
#ifndef CR_COMMON_LOG_H
#define CR_COMMON_LOG_H

enum cr__log_level { CR__LOG_ERROR = 0, CR__LOG_WARN, CR__LOG_INFO, CR__LOG_DEBUG };

int cr__log_enabled(int level);
void cr__log(int level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define CR_LOG_ERROR(comp, ...) cr__log(CR__LOG_ERROR, comp, __VA_ARGS__)
#define CR_LOG_WARN(comp, ...) cr__log(CR__LOG_WARN, comp, __VA_ARGS__)
#define CR_LOG_INFO(comp, ...)                                                           \
    do {                                                                                 \
        if (cr__log_enabled(CR__LOG_INFO))                                               \
            cr__log(CR__LOG_INFO, comp, __VA_ARGS__);                                    \
    } while (0)
#define CR_LOG_DEBUG(comp, ...)                                                          \
    do {                                                                                 \
        if (cr__log_enabled(CR__LOG_DEBUG))                                              \
            cr__log(CR__LOG_DEBUG, comp, __VA_ARGS__);                                   \
    } while (0)

#endif
