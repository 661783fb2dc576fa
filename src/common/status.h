/* Internal status helpers (the table itself is in status.c). */
#ifndef CR_COMMON_STATUS_H
#define CR_COMMON_STATUS_H

/* Turns a positive errno (or an already negated one) into a crescent status:
 * the errno values that collide with Mooncake's ErrorCode table (EPERM,
 * ECHILD, ENETDOWN, ENETUNREACH, ENETRESET; see common.h) become -EACCES,
 * -EIO, -EHOSTUNREACH, -EHOSTUNREACH, -ECONNRESET. 0 stays 0. */
int cr__status_from_errno(int err);

#endif
