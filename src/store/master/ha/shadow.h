/* Shadow index: the master's durable state rebuilt from op records
 * (record.h), without allocators or clients. A standby keeps one up to
 * date from its leader's stream; a master starting from its journal loads
 * one; either becomes the live master state with cr__ha_restore()
 * (restore.h).
 *
 * Not thread-safe: the owner serialises apply/iterate. */
#ifndef CR_STORE_MASTER_HA_SHADOW_H
#define CR_STORE_MASTER_HA_SHADOW_H

#include <stddef.h>
#include <stdint.h>

#include "store/master/ha/record.h"

typedef struct cr__ha_shadow cr__ha_shadow_t;

typedef struct cr__ha_seg {
    char name[CR__RPC_SEGMENT_NAME_MAX];
    uint64_t base, size;
    cr__rpc_client_id_t client;
} cr__ha_seg_t;

/* An allocation window (record.h WIN) not closed yet. */
typedef struct cr__ha_win {
    char name[CR__RPC_SEGMENT_NAME_MAX];
    uint64_t off, len;
} cr__ha_win_t;
#define CR__HA_WINS_MAX 4096 /* open windows kept; more is a corrupt stream */

/* A held name (record.h HELD) not over yet; times in ms remaining at its
 * last record. */
typedef struct cr__ha_held {
    char name[CR__RPC_SEGMENT_NAME_MAX];
    cr__rpc_client_id_t client;
    uint64_t base, size, hold_ms;
    int whole; /* the whole memory (no ranges, or more than CR__HA_HELD_RANGES_MAX) */
    cr__ha_held_rg_t *rg;
    uint32_t n_rg, cap_rg;
} cr__ha_held_t;
#define CR__HA_HELDS_MAX 64 /* held names kept (the master's HELD_MAX); more is a corrupt stream */
#define CR__HA_HELD_RANGES_MAX 65536u /* ranges per name (the master's HELD_RANGES_MAX) */

/* Returns 0 and *out or -ENOMEM. */
int cr__ha_shadow_create(cr__ha_shadow_t **out);
void cr__ha_shadow_destroy(cr__ha_shadow_t *s);
/* Forgets everything (a snapshot follows). */
void cr__ha_shadow_reset(cr__ha_shadow_t *s);

/* Applies one decoded record whose frame is frame[0..len). Returns 0 or
 * -ENOMEM. Records that do not match the state (END/DEL of another
 * version, SEGDROP of an unknown name) are ignored, as the master would. */
int cr__ha_shadow_apply(cr__ha_shadow_t *s, const uint8_t *frame, size_t len,
                        const cr__ha_rec_t *r);

/* Applies every whole record of buf[0..len). Returns the bytes consumed
 * (a torn tail is left over), or -EBADMSG (a corrupt record: *consumed
 * gets the good prefix) / -ENOMEM. */
long cr__ha_shadow_load(cr__ha_shadow_t *s, const uint8_t *buf, size_t len);

uint64_t cr__ha_shadow_objects(const cr__ha_shadow_t *s);
uint64_t cr__ha_shadow_next_version(const cr__ha_shadow_t *s);

/* Iteration (no apply in between). fn returns 0 to go on. */
int cr__ha_shadow_foreach_seg(const cr__ha_shadow_t *s, int (*fn)(void *, const cr__ha_seg_t *),
                              void *user);
int cr__ha_shadow_foreach_win(const cr__ha_shadow_t *s, int (*fn)(void *, const cr__ha_win_t *),
                              void *user);
/* Held names: how many, and the i-th (NULL past the last). */
uint32_t cr__ha_shadow_n_held(const cr__ha_shadow_t *s);
const cr__ha_held_t *cr__ha_shadow_held(const cr__ha_shadow_t *s, uint32_t i);
/* fn gets the object's OBJ record decoded (r->flags has COMPLETE). */
int cr__ha_shadow_foreach_obj(const cr__ha_shadow_t *s, int (*fn)(void *, const cr__ha_rec_t *),
                              void *user);

#endif
