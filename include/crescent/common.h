/* crescent — common definitions shared by every component.
 *
 * Status convention (all public functions): 0 is success, a negative value is
 * an error. Two ranges are used and never overlap:
 *   -1 .. -511      negated errno values (-EINVAL, -ENOMEM, -ETIMEDOUT, ...),
 *                   used by the transfer engine and the conductor;
 *   -600 .. -1999   the store's ErrorCode values, numerically identical to
 *                   Mooncake's ErrorCode table so integrations written against
 *                   Mooncake compare against the same numbers.
 * Mooncake's table also uses -1, -10 and -100..-103, which collide with
 * -EPERM, -ECHILD, -ENETDOWN..-ENETRESET and -ECONNABORTED: crescent never
 * returns those six errno values (it uses -EACCES, -EHOSTUNREACH, -ECONNRESET instead), so
 * each number has one meaning. cr_strerror() turns any status into a static
 * string from one table.
 */
#ifndef CRESCENT_COMMON_H
#define CRESCENT_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CR_API __attribute__((visibility("default")))
#else
#define CR_API
#endif

#define CR_VERSION_MAJOR 0
#define CR_VERSION_MINOR 1
#define CR_VERSION_PATCH 0

/* Store error codes (Mooncake ErrorCode values). */
enum cr_store_errc {
    CR_OK = 0,
    CR_E_INTERNAL_ERROR = -1,
    CR_E_BUFFER_OVERFLOW = -10,
    CR_E_SHARD_INDEX_OUT_OF_RANGE = -100,
    CR_E_SEGMENT_NOT_FOUND = -101,
    CR_E_SEGMENT_ALREADY_EXISTS = -102,
    CR_E_CLIENT_NOT_FOUND = -103, /* (collides with -ECONNABORTED, never returned as errno) */
    CR_E_NO_AVAILABLE_HANDLE = -200,
    CR_E_INVALID_VERSION = -300,
    CR_E_INVALID_KEY = -400,
    CR_E_WRITE_FAIL = -500,
    CR_E_INVALID_PARAMS = -600,
    CR_E_ILLEGAL_CLIENT = -601,
    CR_E_INVALID_WRITE = -700,
    CR_E_INVALID_READ = -701,
    CR_E_INVALID_REPLICA = -702,
    CR_E_REPLICA_IS_NOT_READY = -703,
    CR_E_OBJECT_NOT_FOUND = -704,
    CR_E_OBJECT_ALREADY_EXISTS = -705,
    CR_E_OBJECT_HAS_LEASE = -706,
    CR_E_LEASE_EXPIRED = -707,
    CR_E_OBJECT_HAS_REPLICATION_TASK = -708,
    CR_E_OBJECT_NO_REPLICATION_TASK = -709,
    CR_E_REPLICA_NOT_FOUND = -710,
    CR_E_REPLICA_ALREADY_EXISTS = -711,
    CR_E_REPLICA_IS_GONE = -712,
    CR_E_TRANSFER_FAIL = -800,
    CR_E_RPC_FAIL = -900,
    CR_E_ETCD_OPERATION_ERROR = -1000,
    CR_E_ETCD_KEY_NOT_EXIST = -1001,
    CR_E_ETCD_TRANSACTION_FAIL = -1002,
    CR_E_ETCD_CTX_CANCELLED = -1003,
    CR_E_UNAVAILABLE_IN_CURRENT_STATUS = -1010,
    CR_E_UNAVAILABLE_IN_CURRENT_MODE = -1011,
    CR_E_FILE_NOT_FOUND = -1100,
    CR_E_FILE_OPEN_FAIL = -1101,
    CR_E_FILE_READ_FAIL = -1102,
    CR_E_FILE_WRITE_FAIL = -1103,
    CR_E_FILE_INVALID_BUFFER = -1104,
    CR_E_FILE_LOCK_FAIL = -1105,
    CR_E_FILE_INVALID_HANDLE = -1106,
    CR_E_BUCKET_NOT_FOUND = -1200,
    CR_E_BUCKET_ALREADY_EXISTS = -1201,
    CR_E_KEYS_EXCEED_BUCKET_LIMIT = -1202,
    CR_E_KEYS_ULTRA_LIMIT = -1203,
    CR_E_UNABLE_OFFLOAD = -1300,
    CR_E_UNABLE_OFFLOADING = -1301,
    CR_E_TASK_NOT_FOUND = -1400,
    CR_E_TASK_PENDING_LIMIT_EXCEEDED = -1401,
};

/* Returns a static, never-NULL description of any crescent status code. */
CR_API const char *cr_strerror(int status);

/* Returns the library version as "MAJOR.MINOR.PATCH" (static string). */
CR_API const char *cr_version(void);

#ifdef __cplusplus
}
#endif
#endif
