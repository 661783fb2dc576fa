/* Internal status helpers (the table itself is in status.c). */
#ifndef CR_COMMON_STATUS_H
#define CR_COMMON_STATUS_H

/* Turns a positive errno (or an already negated one) into a crescent status:
 * the errno values that collide with Mooncake's ErrorCode table (EPERM,
 * ECHILD, ENETDOWN, ENETUNREACH, ENETRESET, ECONNABORTED; see common.h)
 * become -EACCES, -EIO, -EHOSTUNREACH, -EHOSTUNREACH, -ECONNRESET,
 * -ECONNRESET. 0 stays 0. Every errno a library call returns goes through
 * it (CR__ERRNO() for the current errno). */
int cr__status_from_errno(int err);

/* The current errno as a crescent status. */
#define CR__ERRNO() cr__status_from_errno(errno)

#endif
