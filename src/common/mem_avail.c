/* cr__mem_*: what the host can back, from /proc/meminfo (mem_avail.h). */
#include "common/mem_avail.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/status.h"
#include "crescent/common.h"

#define COMP "mem"

int cr__mem_avail_read(const char *path, cr__mem_avail_t *out)
{
    FILE *f = fopen(path ? path : CR__MEMINFO_PATH, "re");
    if (!f)
        return CR__ERRNO();
    cr__mem_avail_t m = {0};
    int have_avail = 0;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            m.avail = kb > UINT64_MAX / 1024 ? UINT64_MAX : kb * 1024;
            have_avail = 1;
        } else if (sscanf(line, "SwapFree: %llu kB", &kb) == 1) {
            m.swap_free = kb > UINT64_MAX / 1024 ? UINT64_MAX : kb * 1024;
        }
    }
    fclose(f);
    if (!have_avail)
        return -EIO;
    *out = m;
    return 0;
}

int cr__mem_avail_fits(uint64_t len, const cr__mem_avail_t *m)
{
    uint64_t room = m->avail > UINT64_MAX - m->swap_free ? UINT64_MAX : m->avail + m->swap_free;
    return len <= room ? 0 : -ENOMEM;
}

/* "64.0 GiB", "512.0 MiB", "4096 bytes" */
static const char *size_str(uint64_t n, char *buf, size_t cap)
{
    if (n >= (1ull << 30))
        snprintf(buf, cap, "%.1f GiB", (double)n / (double)(1ull << 30));
    else if (n >= (1ull << 20))
        snprintf(buf, cap, "%.1f MiB", (double)n / (double)(1ull << 20));
    else
        snprintf(buf, cap, "%" PRIu64 " bytes", n);
    return buf;
}

int cr__mem_prefault_check(uint64_t len, const char *what, const char *option)
{
    const char *env = getenv("CRESCENT_MEM_CHECK");
    if (env && !strcmp(env, "0"))
        return 0;
    cr__mem_avail_t m;
    int rc = cr__mem_avail_read(NULL, &m);
    if (rc) {
        CR_LOG_DEBUG(COMP, "%s: %s: %s; memory check skipped", what, CR__MEMINFO_PATH,
                     cr_strerror(rc));
        return 0;
    }
    char s_len[32], s_avail[32], s_swap[32];
    size_str(len, s_len, sizeof s_len);
    size_str(m.avail, s_avail, sizeof s_avail);
    size_str(m.swap_free, s_swap, sizeof s_swap);
    if (cr__mem_avail_fits(len, &m)) {
        CR_LOG_ERROR(COMP,
                     "%s: %s (%" PRIu64 " bytes) asked, more than this host can back "
                     "(MemAvailable %s, SwapFree %s): lower %s (CRESCENT_MEM_CHECK=0 skips "
                     "this check)",
                     what, s_len, len, s_avail, s_swap, option);
        return -ENOMEM;
    }
    if (len > m.avail)
        CR_LOG_WARN(COMP,
                    "%s: %s asked, more than MemAvailable (%s): part of it will be in swap "
                    "(SwapFree %s); lower %s to keep it in memory",
                    what, s_len, s_avail, s_swap, option);
    return 0;
}
