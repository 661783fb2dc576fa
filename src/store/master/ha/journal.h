/* Master journal: the op records (record.h) of a master appended to a
 * local file, so a master restarted after a crash gets its index back
 * (--journal_dir). The file is a snapshot followed by the records since;
 * it is rewritten from a fresh snapshot at start and whenever it grows past
 * max(64 MiB, 4x the last snapshot).
 *
 * Durability: records are buffered in memory as the master produces them
 * (under the master's state lock) and written by cr__ha_journal_sync(),
 * which the RPC path calls before replying to a request that changed
 * state: one write() for everything buffered (group commit). A written
 * record survives the crash of the master process (SIGKILL, abort); with
 * fsync on it also survives the machine's (fdatasync per group).
 *
 * Thread-safe. Lock order: master state lock, then the journal's. */
#ifndef CR_STORE_MASTER_HA_JOURNAL_H
#define CR_STORE_MASTER_HA_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "store/master/ha/shadow.h"
#include "store/master/master.h"

typedef struct cr__ha_journal cr__ha_journal_t;

typedef struct cr__ha_journal_stats {
    uint64_t records, bytes_written, syncs, writes, compactions;
    uint64_t file_bytes, snapshot_bytes;
} cr__ha_journal_stats_t;

/* Opens (creating) dir/journal and loads what it holds into *loaded (a new
 * shadow index, caller destroys). A torn or corrupt tail is cut off (logged
 * with how many bytes). dir is created mode 0700, the journal (and its
 * journal.tmp on a rewrite) 0600; a symlink, hard link or non-regular file
 * under either name is refused, never followed (common/file.h; the reason
 * is logged). Returns 0, -EINVAL (dir too long), -ENOMEM, -ELOOP
 * (symlink), -EMLINK, -EACCES (another user's file), -ENOTDIR or -errno of
 * the file system. */
int cr__ha_journal_open(const char *dir, int fsync_each, cr__ha_shadow_t **loaded,
                        cr__ha_journal_t **out);

/* The master's journal function (cr__master_set_journal with user = j). */
void cr__ha_journal_record(void *j, const uint8_t *frame, size_t len);

/* Makes every record buffered so far durable. Returns 0 or -errno (the
 * write failed: logged; the caller must not acknowledge the change). */
int cr__ha_journal_sync(cr__ha_journal_t *j);

/* Rewrites the file as a snapshot of m, now (force) or when it has grown
 * past its bound. Blocks the master for the time of the dump. Returns 0
 * or -errno. */
int cr__ha_journal_compact(cr__ha_journal_t *j, cr__master_t *m, int force);

/* Replaces the file's content with buf (a standby's fresh snapshot).
 * Returns 0 or -errno. */
int cr__ha_journal_rewrite(cr__ha_journal_t *j, const uint8_t *buf, size_t len);

void cr__ha_journal_stats(cr__ha_journal_t *j, cr__ha_journal_stats_t *st);

/* Writes what is buffered and closes. NULL is a no-op. */
void cr__ha_journal_close(cr__ha_journal_t *j);

#endif
