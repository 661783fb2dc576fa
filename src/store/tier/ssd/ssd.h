/* Node-local disk tier storage: one preallocated data file under --ssd_path,
 * objects at offsets chosen by the master, read and written with io_uring
 * and O_DIRECT. Layout of one object (store/tier/tier.h):
 *
 *   header block(s): u32 magic, u32 header crc32c (of bytes 8..64+key_len),
 *                    u64 version, u64 value size, u32 value crc32c,
 *                    u32 key length, 32 bytes zero, key
 *   value, zero-padded to 4 KiB
 *
 * A reader checks magic, header crc, key, version, size and the value crc:
 * a torn, stale or corrupted object is an error, never bytes.
 *
 * Files in the directory: crescent-ssd.lock (flock'd by the owning process:
 * a second node on the same directory is refused) and crescent-ssd.data,
 * both mode 0600 and owned by the node's user. Either name being a symlink,
 * a hard link or not a regular file refuses the start (a root node would
 * otherwise truncate whatever the name points at); an existing one readable
 * by other users is narrowed to 0600. Anything else is left alone. */
#ifndef CR_STORE_TIER_SSD_SSD_H
#define CR_STORE_TIER_SSD_SSD_H

#include <stddef.h>
#include <stdint.h>

#include <liburing.h>

typedef struct cr__ssd cr__ssd_t;

/* Opens (creating if needed) the tier in dir with capacity bytes (rounded
 * down to 4 KiB, >= 1 MiB). Checks: dir exists and is a writable directory,
 * no other process holds its lock, the file system has room for the rest of
 * capacity (the file is preallocated with fallocate, so a full disk is found
 * here, not under load). Returns 0 and *out, or a negative errno with a
 * one-line reason in err. */
int cr__ssd_open(const char *dir, uint64_t capacity, cr__ssd_t **out, char *err, size_t errlen);
void cr__ssd_close(cr__ssd_t *s);
uint64_t cr__ssd_capacity(const cr__ssd_t *s);
/* 1 if the data file is still reachable under its path (not deleted nor
 * replaced behind the node), 0 if not; its path in *path. */
int cr__ssd_linked(const cr__ssd_t *s, const char **path);
int cr__ssd_fd(const cr__ssd_t *s);
/* A new read-only O_DIRECT descriptor of the data file (the same-host fast
 * path hands it to local clients); the caller closes it. Or -errno. */
int cr__ssd_open_readonly(const cr__ssd_t *s);

/* Calls cb for every well-formed object header found in the file (ascending
 * offsets; an object whose extent passes the end of the file or the
 * capacity is skipped and counted in *truncated). cb returning non-zero
 * stops the scan. Returns objects found or a negative errno. */
typedef int (*cr__ssd_scan_cb)(void *arg, const char *key, uint32_t key_len, uint64_t version,
                               uint64_t size, uint64_t off, uint64_t disk_len);
long cr__ssd_scan(cr__ssd_t *s, cr__ssd_scan_cb cb, void *arg, uint64_t *truncated);

/* Writes the header + value into buf (CR__TIER_BLOCK-aligned, at least
 * cr__tier_disk_len(key_len, size) bytes): the value is copied from val
 * with its crc computed on the way. Returns the disk length. */
uint64_t cr__ssd_encode(void *buf, const char *key, uint32_t key_len, uint64_t version,
                        const void *val, uint64_t size);

/* Checks an object read into buf (disk_len bytes) against key, version and
 * size: 0, or -EBADMSG (bad magic/header crc/value crc: torn or corrupted),
 * -ESTALE (a well-formed object of another key or version). The value then
 * starts at buf + cr__tier_hdr_len(key_len). */
int cr__ssd_check(const void *buf, const char *key, uint32_t key_len, uint64_t version,
                  uint64_t size);

/* Header fields of the header block(s) at h (avail bytes): 0 if it is
 * well formed (magic, key length, header crc), else -EBADMSG. The key
 * starts at h + CR__TIER_HDR_FIXED. */
int cr__ssd_hdr_parse(const void *h, size_t avail, uint64_t *version, uint64_t *size,
                      uint32_t *vcrc, uint32_t *key_len);

/* The header half of cr__ssd_check, for a reader that holds the header
 * block(s) and the value in different buffers: 0 with the value's crc32c
 * in *value_crc (the caller checks the value against it), -EBADMSG or
 * -ESTALE as above. */
int cr__ssd_check_hdr(const void *hdr, const char *key, uint32_t key_len, uint64_t version,
                      uint64_t size, uint32_t *value_crc);

/* An I/O buffer of at least len bytes for O_DIRECT (free() it); *cap gets
 * its size. One of 1 MiB or more is 2 MiB-aligned, rounded up to 2 MiB and
 * advised to use transparent huge pages: a direct read or write into 4 KiB
 * pages is one DMA segment per page, and a block device allows only so
 * many per request (254 on virtio-blk), so a 1 MiB object (+ its header
 * block) would be split into two requests, a 4 MiB one into five. */
void *cr__ssd_buf_alloc(uint64_t len, uint64_t *cap);

/* One I/O of a batch. */
typedef struct cr__ssd_io {
    int write;    /* 1 write, 0 read */
    void *buf;    /* CR__TIER_BLOCK-aligned */
    uint64_t off; /* CR__TIER_BLOCK-aligned */
    uint64_t len; /* CR__TIER_BLOCK multiple */
    int result;   /* out: 0 or a negative errno (-EIO for a short transfer) */
} cr__ssd_io_t;

/* Per-thread io_uring (rings are not shared between threads). */
typedef struct cr__ssd_ring {
    struct io_uring ring;
    unsigned qd;
    int ok;
} cr__ssd_ring_t;

int cr__ssd_ring_init(cr__ssd_ring_t *r, unsigned qd);
void cr__ssd_ring_fini(cr__ssd_ring_t *r);

/* Runs n I/Os on s's file through ring r, keeping up to r->qd in flight
 * (one io_uring_submit per refill), and waits for all. Each io gets its
 * result. Returns 0 if all succeeded, else the first error. */
int cr__ssd_run(cr__ssd_t *s, cr__ssd_ring_t *r, cr__ssd_io_t *ios, size_t n);

/* Streaming variant: prep(arg, i), if set, is called just before io i is
 * submitted (fill its buffer there; each io is submitted on its own, so the
 * disk works on it while the next one is prepared; non-zero = skip it, its
 * result is -ECANCELED). done(arg, i) is called once per io as soon as its
 * result is final, in completion order, while the others stay in flight
 * (send a reply there: the disk keeps reading meanwhile). */
typedef struct cr__ssd_hooks {
    int (*prep)(void *arg, size_t i);
    void (*done)(void *arg, size_t i);
    void *arg;
} cr__ssd_hooks_t;
int cr__ssd_run_hooked(cr__ssd_t *s, cr__ssd_ring_t *r, cr__ssd_io_t *ios, size_t n,
                       const cr__ssd_hooks_t *h);

#endif
