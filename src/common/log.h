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

/* Rate limiting for lines an attacker can trigger at will (refused
 * connections, bad frames): at most CR__LOG_RL_BURST lines per
 * CR__LOG_RL_PERIOD_MS per call site; the first line after a quiet period
 * says how many were suppressed. One static state per call site. */
#define CR__LOG_RL_BURST 5
#define CR__LOG_RL_PERIOD_MS 10000
typedef struct cr__log_rl {
    unsigned long long window_start_ms; /* guarded by atomics */
    unsigned printed, suppressed;
} cr__log_rl_t;
/* Returns 1 when the line may be printed; *suppressed is set to the lines
 * dropped since the last printed one (then reset). Thread-safe. */
int cr__log_rl_allow(cr__log_rl_t *rl, unsigned *suppressed);

#define CR_LOG_RL(level, comp, fmt, ...)                                                 \
    do {                                                                                 \
        static cr__log_rl_t rl_;                                                         \
        unsigned supp_;                                                                  \
        if (cr__log_enabled(level) && cr__log_rl_allow(&rl_, &supp_))                    \
            cr__log(level, comp, fmt "%s%.0u%s", ##__VA_ARGS__, supp_ ? " (" : "",        \
                    supp_, supp_ ? " similar lines suppressed)" : "");                  \
    } while (0)

#endif
