/* Engine control channel wire format (docs/architecture/transfer-core.md,
 * "Control channel", links to the wire tables).
 *
 * Every message starts with one fixed 16-byte little-endian header:
 *
 *   off size field
 *   0   4    magic    0x4c435243 ("CRCL" in memory order)
 *   4   1    version  1
 *   5   1    opcode   request: 1 GET_DESC, 2 NOTIFY; response: opcode | 0x80
 *   6   2    flags    0 (reserved; receivers ignore unknown bits)
 *   8   4    status   responses: 0 or a negative errno; requests: 0
 *   12  4    len      bytes of payload that follow this header
 *
 * GET_DESC: no payload; the response carries the segment descriptor JSON.
 * NOTIFY: the engine's notification payload ([u16 from_len][from][msg]);
 * the response has no payload. Requests on one connection are answered in
 * order.
 */
#ifndef CR_TRANSFER_CTL_WIRE_H
#define CR_TRANSFER_CTL_WIRE_H

#include <endian.h>
#include <errno.h>
#include <stdint.h>

#include "crescent/transfer.h"

#define CR__CTL_MAGIC 0x4c435243u
#define CR__CTL_VERSION 1
/* bound on a NOTIFY payload: [u16 from_len][from][msg] */
#define CR__CTL_MAX_NOTIFY (2 + CR_XFER_NAME_MAX + CR_XFER_NOTIFY_MAX)

enum cr__ctl_op {
    CR__CTL_GET_DESC = 1,
    CR__CTL_NOTIFY = 2,
    CR__CTL_RESP = 0x80,
};

typedef struct cr__ctl_hdr {
    uint32_t magic;
    uint8_t version;
    uint8_t opcode;
    uint16_t flags;
    int32_t status;
    uint32_t len;
} cr__ctl_hdr_t;

_Static_assert(sizeof(cr__ctl_hdr_t) == 16, "control header is 16 bytes");

static inline void cr__ctl_hdr_enc(cr__ctl_hdr_t *w, uint8_t op, int32_t status, uint32_t len)
{
    w->magic = htole32(CR__CTL_MAGIC);
    w->version = CR__CTL_VERSION;
    w->opcode = op;
    w->flags = 0;
    w->status = (int32_t)htole32((uint32_t)status);
    w->len = htole32(len);
}

/* Decodes in place; returns 0 if magic and version are right, else -EPROTO. */
static inline int cr__ctl_hdr_dec(cr__ctl_hdr_t *h)
{
    h->magic = le32toh(h->magic);
    h->status = (int32_t)le32toh((uint32_t)h->status);
    h->len = le32toh(h->len);
    return h->magic == CR__CTL_MAGIC && h->version == CR__CTL_VERSION ? 0 : -EPROTO;
}

#endif
