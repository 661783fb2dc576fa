/* Tiered store: definitions shared by the master (src/store/master/tier.c),
 * the node's disk tier (src/store/tier/ssd/) and the client's disk reads
 * (src/store/client/tier_read.c). Design: docs/architecture/store-tiers.md.
 *
 * A node with --ssd_path mounts, besides its DRAM segment, a *disk segment*
 * named CR__TIER_SSD_PREFIX "<host>:<port>" (the address of its tier read
 * server) of --ssd_capacity bytes. The master allocates inside it like in a
 * DRAM segment (one index, one allocator per segment), never places a put
 * there, and moves objects into it by handing the node OFFLOAD tasks
 * (TIER_SYNC). A replica on a disk segment is read by asking the node's tier
 * server, which reads the object with O_DIRECT, checks key, version and
 * crc32c, and sends the bytes. */
#ifndef CR_STORE_TIER_TIER_H
#define CR_STORE_TIER_TIER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#define CR__TIER_SSD_PREFIX "ssd@"
#define CR__TIER_SSD_PREFIX_LEN 4

static inline int cr__tier_is_ssd(const char *segment)
{
    return segment && !strncmp(segment, CR__TIER_SSD_PREFIX, CR__TIER_SSD_PREFIX_LEN);
}

/* Shared-file-system tier (--root_fs_dir, docs/architecture/store-tiers.md):
 * an object persisted there is listed in replica lists as one replica whose
 * single shard names the segment CR__TIER_FS_SEGMENT (addr 0, len = size).
 * Its file, in the tier's directory, is named by cr__tier_fs_name and holds
 * the disk layout below (header with key, version, crc32c; value). */
#define CR__TIER_FS_SEGMENT "fs@shared"
#define CR__TIER_FS_PREFIX_LEN 3
#define CR__TIER_FS_NAME_MAX 64 /* 32 hex + '-' + 16 hex + NUL, and ".tmp" */
#define CR__TIER_FS_TMP "tmp"   /* subdirectory of files being written */

static inline int cr__tier_is_fs(const char *segment)
{
    return segment && !strncmp(segment, "fs@", CR__TIER_FS_PREFIX_LEN);
}
/* A replica read through the tier paths (a node's disk or the shared FS). */
static inline int cr__tier_is_disk(const char *segment)
{
    return cr__tier_is_ssd(segment) || cr__tier_is_fs(segment);
}
/* The file name of (key, version) on the shared tier: the 128-bit XXH3 of
 * the key (no user text in paths) and the version, both hex. Versions are
 * unique over all keys, so two objects never share a name even if their
 * keys' hashes collide (the reader checks the key in the header anyway). */
void cr__tier_fs_name(char out[CR__TIER_FS_NAME_MAX], const char *key, size_t key_len,
                      uint64_t version);
/* ops of FS_SYNC items (item.flags) */
enum {
    CR__TIER_FS_OP_ATTACH = 1,  /* client wrote tmp/<name>: master renames it and records it */
    CR__TIER_FS_OP_CORRUPT = 2, /* client found the file bad: master drops and counts it */
};

/* Disk layout of one object: a header block (CR__TIER_BLOCK-rounded) then
 * the value padded to CR__TIER_BLOCK. Everything is O_DIRECT-aligned. */
#define CR__TIER_BLOCK 4096u
#define CR__TIER_HDR_FIXED 64u
#define CR__TIER_MAGIC 0x314f5243u /* "CRO1" */

static inline uint64_t cr__tier_round(uint64_t v)
{
    return (v + CR__TIER_BLOCK - 1) & ~(uint64_t)(CR__TIER_BLOCK - 1);
}
static inline uint64_t cr__tier_hdr_len(uint64_t key_len)
{
    return cr__tier_round(CR__TIER_HDR_FIXED + key_len);
}
/* Bytes an object of key_len/size takes on disk. */
static inline uint64_t cr__tier_disk_len(uint64_t key_len, uint64_t size)
{
    return cr__tier_hdr_len(key_len) + cr__tier_round(size);
}

/* TIER_SYNC item ops (item.flags). Completions use the same op codes. */
enum {
    CR__TIER_OP_OFFLOAD = 1, /* copy DRAM replica (replicas[0]) to disk at replicas[1] */
    CR__TIER_OP_ERASE = 2,   /* invalidate the header at replicas[0] (object gone) */
    CR__TIER_OP_CORRUPT = 3, /* node -> master: the disk copy failed its checks */
    CR__TIER_OP_PROMOTE = 4, /* read disk extent replicas[0], check it, copy the value
                                into the DRAM range replicas[1] */
};

/* ---- node tier read protocol (client -> node, TCP) -----------------------
 * Request (little-endian, 56 + key_len bytes):
 *   u32 magic CR__TIER_RD_MAGIC, u32 key_len, u64 version, u64 disk offset,
 *   u64 value size, u64 range offset, u64 range length, u32 tag, u32 0,
 *   key bytes
 * Reply: i32 status, u32 tag (the request's), u64 length; then length
 * bytes (status 0 only). Requests on one connection may be pipelined; each
 * is answered once, as soon as its object is read and checked, so replies
 * can come in any order (the tag tells which). The magic changed with the
 * tag ("CTRD" had neither): a node and a client of different layouts close
 * the connection instead of misreading each other. */
#define CR__TIER_RD_MAGIC 0x32525443u /* "CTR2" */
#define CR__TIER_RD_REQ_FIXED 56u
#define CR__TIER_RD_REP 16u

/* ---- same-host fast path (docs/architecture/store-tiers.md) -------------
 * The node also listens on the abstract Unix socket
 * "\0crescent-tier-v1:<segment>" (abstract names are per network
 * namespace: a client that can connect shares the node's host and
 * namespace). It accepts only peers of its own uid (SO_PEERCRED; the
 * client checks the node's uid the same way), runs the cluster-key
 * handshake (context "tier-local") when security is on, and sends
 *   u32 magic CR__TIER_LOCAL_MAGIC, u32 0, u64 capacity
 * with its data file (O_RDONLY | O_DIRECT) attached as SCM_RIGHTS. The
 * client then reads disk replicas itself with io_uring, straight into the
 * caller's buffer, and checks them exactly as the read server does. The
 * connection stays open: its hang-up tells the client the node is gone. */
#define CR__TIER_LOCAL_MAGIC 0x4f4c5443u /* "CTLO" */
#define CR__TIER_LOCAL_HELLO 16u

/* The abstract address of segment's local socket; returns its length. */
static inline socklen_t cr__tier_local_addr(struct sockaddr_un *sa, const char *segment)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "crescent-tier-v1:%s", segment);
    if (n < 0 || (size_t)n >= sizeof sa->sun_path - 1)
        n = (int)sizeof sa->sun_path - 2;
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

#endif
