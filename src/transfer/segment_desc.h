/* Segment descriptor: what a peer needs to reach a segment. Published as
 * JSON (docs/architecture.md "Segment descriptor") under the metadata key
 * CR__SEG_KEY_PREFIX<name>, or served by the segment's control channel in p2p
 * mode. */
#ifndef CR_TRANSFER_SEGMENT_DESC_H
#define CR_TRANSFER_SEGMENT_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "crescent/transfer.h"

#define CR__SEG_KEY_PREFIX "crescent/segment/"
#define CR__SEG_MAX_BUFFERS 65536 /* registrations one segment may publish */
#define CR__SEG_DESC_MAX_JSON (16u << 20) /* bound on an encoded descriptor */
#define CR__HOST_ID_MAX 160

typedef struct cr__seg_nic {
    char addr[64]; /* numeric IP address */
    uint16_t port; /* the network data transport's port on this NIC (0: none) */
} cr__seg_nic_t;

typedef struct cr__seg_desc {
    char name[CR_XFER_NAME_MAX];
    /* Identifies "the same host" for same-host transports: machine-id, boot id,
     * network-namespace and pid-namespace inodes. Two processes in different
     * network namespaces count as different hosts (that is how multi-host
     * tests model hosts). */
    char host_id[CR__HOST_ID_MAX];
    int32_t pid;
    uint64_t version; /* bumped on every (un)registration */
    uint16_t rpc_port; /* the control channel's port, on every NIC (0: unknown) */
    uint32_t n_nics;
    cr__seg_nic_t nics[CR_XFER_MAX_NICS];
    uint32_t n_buffers;
    cr_xfer_buffer_info_t *buffers; /* malloc'd array of n_buffers, sorted by addr */
} cr__seg_desc_t;

/* Encodes to a malloc'd NUL-terminated JSON string (*out, caller frees).
 * Returns 0 or -ENOMEM. */
int cr__seg_desc_encode(const cr__seg_desc_t *d, char **out, size_t *out_len);

/* Decodes and validates JSON (bounded by len, need not be NUL-terminated).
 * On success *d owns a malloc'd buffers array (free with
 * cr__seg_desc_clear). Returns 0 or -EINVAL (malformed, too many entries,
 * overlong strings, overlapping buffers). *d is untouched on failure. */
int cr__seg_desc_decode(const char *json, size_t len, cr__seg_desc_t *d);

/* Frees d->buffers and zeroes the struct. */
void cr__seg_desc_clear(cr__seg_desc_t *d);

/* Fills buf with this process's host id (see host_id above). */
void cr__seg_host_id(char buf[CR__HOST_ID_MAX]);

/* 1 if [addr, addr+len) lies inside one registered buffer of d. */
int cr__seg_desc_contains(const cr__seg_desc_t *d, uint64_t addr, uint64_t len);

#endif
