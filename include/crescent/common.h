/* crescent — common definitions shared by every component.
 *
 * Status convention (all public functions): 0 is success, a negative value is
 * an error, and every number has one meaning:
 *   negated errno values (-EINVAL, -ENOMEM, -ETIMEDOUT, ...; Linux errno
 *   values are 1..133), used by the transfer engine and the conductor;
 *   the store's ErrorCode values (CR_STORE_ERRC_MAP below: -1, -10,
 *   -100..-103, -200, ..., -600..-1702), numerically identical to
 *   Mooncake's ErrorCode table so integrations written against Mooncake
 *   compare against the same numbers.
 * Mooncake's table also uses -1, -10 and -100..-103, which collide with
 * -EPERM, -ECHILD, -ENETDOWN, -ENETUNREACH, -ENETRESET and -ECONNABORTED:
 * crescent never returns those six errno values (they become -EACCES, -EIO,
 * -EHOSTUNREACH, -EHOSTUNREACH, -ECONNRESET, -ECONNRESET), so each number
 * has one meaning. cr_strerror() and cr_err_name() turn any status into a
 * static string, both generated from one list (CR_STORE_ERRC_MAP).
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

/* Store error codes: Mooncake's ErrorCode values (name, value, meaning).
 * This list is the one place they are written: it generates the enum below,
 * cr_strerror() ("NAME: meaning") and cr_err_name() ("NAME"). Append new
 * codes; never renumber (integrations compare against the numbers). */
#define CR_STORE_ERRC_MAP(X)                                                                       \
    X(INTERNAL_ERROR, -1, "internal error")                                                        \
    X(BUFFER_OVERFLOW, -10, "buffer too small")                                                    \
    X(SHARD_INDEX_OUT_OF_RANGE, -100, "shard index out of range")                                  \
    X(SEGMENT_NOT_FOUND, -101, "no such segment")                                                  \
    X(SEGMENT_ALREADY_EXISTS, -102, "segment already mounted")                                     \
    X(CLIENT_NOT_FOUND, -103, "client unknown to the master")                                      \
    X(NO_AVAILABLE_HANDLE, -200, "no space left in the pool")                                      \
    X(INVALID_VERSION, -300, "protocol or object version mismatch")                                \
    X(INVALID_KEY, -400, "empty or oversized key")                                                 \
    X(WRITE_FAIL, -500, "write failed")                                                            \
    X(INVALID_PARAMS, -600, "invalid parameters")                                                  \
    X(ILLEGAL_CLIENT, -601, "client may not do this operation")                                    \
    X(INVALID_WRITE, -700, "invalid write")                                                        \
    X(INVALID_READ, -701, "invalid read")                                                          \
    X(INVALID_REPLICA, -702, "malformed or unusable replica")                                      \
    X(REPLICA_IS_NOT_READY, -703, "object not complete yet")                                       \
    X(OBJECT_NOT_FOUND, -704, "no such key")                                                       \
    X(OBJECT_ALREADY_EXISTS, -705, "key already stored")                                           \
    X(OBJECT_HAS_LEASE, -706, "object is leased to a reader")                                      \
    X(LEASE_EXPIRED, -707, "lease expired before the transfer completed")                          \
    X(OBJECT_HAS_REPLICATION_TASK, -708, "object has a replication task")                          \
    X(OBJECT_NO_REPLICATION_TASK, -709, "object has no replication task")                          \
    X(REPLICA_NOT_FOUND, -710, "no such replica")                                                  \
    X(REPLICA_ALREADY_EXISTS, -711, "replica already exists")                                      \
    X(REPLICA_IS_GONE, -712, "replica existed once but is gone")                                   \
    X(TRANSFER_FAIL, -800, "data transfer failed")                                                 \
    X(RPC_FAIL, -900, "control-plane RPC failed")                                                  \
    X(RPC_TIMEOUT, -901, "control-plane RPC timed out")                                            \
    X(ETCD_OPERATION_ERROR, -1000, "etcd operation failed")                                        \
    X(ETCD_KEY_NOT_EXIST, -1001, "etcd key does not exist")                                        \
    X(ETCD_TRANSACTION_FAIL, -1002, "etcd transaction failed")                                     \
    X(ETCD_CTX_CANCELLED, -1003, "etcd request cancelled")                                         \
    X(OPLOG_ENTRY_NOT_FOUND, -1004, "no such op log entry")                                        \
    X(K8S_LEASE_OPERATION_ERROR, -1005, "Kubernetes lease operation failed")                       \
    X(K8S_LEASE_NOT_FOUND, -1006, "no such Kubernetes lease")                                      \
    X(INCOMPLETE_OPLOG_CATCH_UP, -1007, "op log catch-up incomplete")                              \
    X(UNAVAILABLE_IN_CURRENT_STATUS, -1010, "unavailable now (a bound is reached)")                \
    X(UNAVAILABLE_IN_CURRENT_MODE, -1011, "unavailable in the current mode")                       \
    X(FILE_NOT_FOUND, -1100, "file not found")                                                     \
    X(FILE_OPEN_FAIL, -1101, "cannot open file")                                                   \
    X(FILE_READ_FAIL, -1102, "file read failed")                                                   \
    X(FILE_WRITE_FAIL, -1103, "file write failed")                                                 \
    X(FILE_INVALID_BUFFER, -1104, "invalid file buffer")                                           \
    X(FILE_LOCK_FAIL, -1105, "cannot lock file")                                                   \
    X(FILE_INVALID_HANDLE, -1106, "invalid file handle")                                           \
    X(BUCKET_NOT_FOUND, -1200, "no such bucket")                                                   \
    X(BUCKET_ALREADY_EXISTS, -1201, "bucket already exists")                                       \
    X(KEYS_EXCEED_BUCKET_LIMIT, -1202, "keys exceed the bucket limit")                             \
    X(KEYS_ULTRA_LIMIT, -1203, "too many keys")                                                    \
    X(UNABLE_OFFLOAD, -1300, "cannot offload")                                                     \
    X(UNABLE_OFFLOADING, -1301, "offloading not possible now")                                     \
    X(TASK_NOT_FOUND, -1400, "no such task")                                                       \
    X(TASK_PENDING_LIMIT_EXCEEDED, -1401, "too many pending tasks")                                \
    X(JOB_NOT_FOUND, -1402, "no such job")                                                         \
    X(SERIALIZE_UNSUPPORTED, -1500, "type cannot be serialized")                                   \
    X(SERIALIZE_FAIL, -1501, "serialization failed")                                               \
    X(DESERIALIZE_FAIL, -1502, "deserialization failed")                                           \
    X(PERSISTENT_FAIL, -1503, "persisting to a file failed")                                       \
    X(DFS_NETWORK_TIMEOUT, -1600, "shared file system timed out")                                  \
    X(DFS_SERVICE_UNAVAILABLE, -1601, "shared file system unavailable")                            \
    X(DFS_QUOTA_EXCEEDED, -1602, "shared file system quota exceeded")                              \
    X(DFS_PERMISSION_DENIED, -1603, "shared file system permission denied")                        \
    X(DFS_STALE_HANDLE, -1604, "stale shared file system handle")                                  \
    X(DFS_PARTIAL_WRITE, -1605, "partial write to the shared file system")                         \
    X(TENANT_QUOTA_EXCEEDED, -1700, "tenant quota exceeded")                                       \
    X(TENANT_NOT_REGISTERED, -1701, "tenant not registered")                                       \
    X(TENANT_NOT_EMPTY, -1702, "tenant still holds objects")

#define CR_ERRC_ENUM_(name, value, text) CR_E_##name = value,
enum cr_store_errc { CR_OK = 0, CR_STORE_ERRC_MAP(CR_ERRC_ENUM_) };
#undef CR_ERRC_ENUM_

/* Returns a static, never-NULL description of any crescent status code:
 * "NAME: meaning" for a store code, the C library's text for an errno. */
CR_API const char *cr_strerror(int status);

/* Returns the static, never-NULL symbolic name of a status: "OK",
 * "OBJECT_NOT_FOUND" (store codes, without the CR_E_ prefix), "EINVAL"
 * (errno values), or "UNKNOWN". */
CR_API const char *cr_err_name(int status);

/* Log levels of cr_log_handler_fn (CRESCENT_LOG=error|warn|info|debug sets
 * which are produced; default warn). */
enum cr_log_level {
    CR_LOG_LEVEL_ERROR = 0,
    CR_LOG_LEVEL_WARN,
    CR_LOG_LEVEL_INFO,
    CR_LOG_LEVEL_DEBUG,
};

/* Receives every log line the library produces: level, component ("xfer",
 * "store-client", "master", ...) and the message (no newline; valid during
 * the call only). May be called from any library thread, concurrently. */
typedef void (*cr_log_handler_fn)(void *user, int level, const char *component,
                                  const char *msg);

/* Routes the library's log lines to fn (NULL: back to the default, one line
 * on stderr). Set it before creating objects; it is process-wide. */
CR_API void cr_log_set_handler(cr_log_handler_fn fn, void *user);

/* Returns the library version as "MAJOR.MINOR.PATCH" (static string). */
CR_API const char *cr_version(void);

#ifdef __cplusplus
}
#endif
#endif
