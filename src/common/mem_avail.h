/* Whether this host can back memory a caller is about to allocate and
 * pre-fault (a store segment, a staging buffer, shared memory): asked
 * before the first page is touched, so a size larger than the host's free
 * memory is an error naming the setting to lower, not an OOM kill after
 * tens of seconds of page faults (fresh pages fault in at ~2 GB/s here). */
#ifndef CR_COMMON_MEM_AVAIL_H
#define CR_COMMON_MEM_AVAIL_H

#include <stdint.h>

/* What /proc/meminfo says the host can still give, in bytes. */
typedef struct cr__mem_avail {
    uint64_t avail;     /* MemAvailable: free and reclaimable memory */
    uint64_t swap_free; /* SwapFree */
} cr__mem_avail_t;

#define CR__MEMINFO_PATH "/proc/meminfo"

/* Reads MemAvailable and SwapFree (0 when absent) from path, a file in
 * /proc/meminfo's format (NULL = CR__MEMINFO_PATH). Returns 0 and *out, or
 * a negative errno the file's open gave, or -EIO when it has no
 * MemAvailable line (kernels before 3.14). */
int cr__mem_avail_read(const char *path, cr__mem_avail_t *out);

/* Whether len bytes fit in what m says is left: MemAvailable plus SwapFree
 * (memory that ends up in swap is slow, but the process lives). Returns 0
 * or -ENOMEM; no I/O, no log. */
int cr__mem_avail_fits(uint64_t len, const cr__mem_avail_t *m);

/* The check before pre-faulting len bytes, reading CR__MEMINFO_PATH.
 * what names the memory ("global_segment_size + local_buffer_size"),
 * option the setting that sizes it, both for the log line. Returns 0 when
 * the memory fits (a warning when part of it would be in swap), when
 * meminfo cannot be read (the check cannot tell), and when the
 * environment has CRESCENT_MEM_CHECK=0; else -ENOMEM, logged as an error
 * naming the size asked, MemAvailable, SwapFree and option. */
int cr__mem_prefault_check(uint64_t len, const char *what, const char *option);

#endif
