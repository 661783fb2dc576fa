/* The one table of status strings (see include/crescent/common.h). */
#include "crescent/common.h"

#include <errno.h>
#include <string.h>

#include "common/status.h"

#define CR_STR_(x) #x
#define CR_STR(x) CR_STR_(x)

static const struct {
    int code;
    const char *text;
} store_errors[] = {
    {CR_E_INTERNAL_ERROR, "INTERNAL_ERROR: internal error"},
    {CR_E_BUFFER_OVERFLOW, "BUFFER_OVERFLOW: buffer too small"},
    {CR_E_SHARD_INDEX_OUT_OF_RANGE, "SHARD_INDEX_OUT_OF_RANGE"},
    {CR_E_SEGMENT_NOT_FOUND, "SEGMENT_NOT_FOUND: no such segment"},
    {CR_E_SEGMENT_ALREADY_EXISTS, "SEGMENT_ALREADY_EXISTS: segment already mounted"},
    {CR_E_CLIENT_NOT_FOUND, "CLIENT_NOT_FOUND: client unknown to the master"},
    {CR_E_NO_AVAILABLE_HANDLE, "NO_AVAILABLE_HANDLE: no space left in the pool"},
    {CR_E_INVALID_VERSION, "INVALID_VERSION: protocol or object version mismatch"},
    {CR_E_INVALID_KEY, "INVALID_KEY: empty or oversized key"},
    {CR_E_WRITE_FAIL, "WRITE_FAIL"},
    {CR_E_INVALID_PARAMS, "INVALID_PARAMS: invalid parameters"},
    {CR_E_ILLEGAL_CLIENT, "ILLEGAL_CLIENT: client may not do this operation"},
    {CR_E_INVALID_WRITE, "INVALID_WRITE"},
    {CR_E_INVALID_READ, "INVALID_READ"},
    {CR_E_INVALID_REPLICA, "INVALID_REPLICA"},
    {CR_E_REPLICA_IS_NOT_READY, "REPLICA_IS_NOT_READY: object not complete yet"},
    {CR_E_OBJECT_NOT_FOUND, "OBJECT_NOT_FOUND: no such key"},
    {CR_E_OBJECT_ALREADY_EXISTS, "OBJECT_ALREADY_EXISTS: key already stored"},
    {CR_E_OBJECT_HAS_LEASE, "OBJECT_HAS_LEASE: object is leased to a reader"},
    {CR_E_LEASE_EXPIRED, "LEASE_EXPIRED: lease expired before the transfer completed"},
    {CR_E_OBJECT_HAS_REPLICATION_TASK, "OBJECT_HAS_REPLICATION_TASK"},
    {CR_E_OBJECT_NO_REPLICATION_TASK, "OBJECT_NO_REPLICATION_TASK"},
    {CR_E_REPLICA_NOT_FOUND, "REPLICA_NOT_FOUND"},
    {CR_E_REPLICA_ALREADY_EXISTS, "REPLICA_ALREADY_EXISTS"},
    {CR_E_REPLICA_IS_GONE, "REPLICA_IS_GONE: replica existed once but is gone"},
    {CR_E_TRANSFER_FAIL, "TRANSFER_FAIL: data transfer failed"},
    {CR_E_RPC_FAIL, "RPC_FAIL: control-plane RPC failed"},
    {CR_E_ETCD_OPERATION_ERROR, "ETCD_OPERATION_ERROR"},
    {CR_E_ETCD_KEY_NOT_EXIST, "ETCD_KEY_NOT_EXIST"},
    {CR_E_ETCD_TRANSACTION_FAIL, "ETCD_TRANSACTION_FAIL"},
    {CR_E_ETCD_CTX_CANCELLED, "ETCD_CTX_CANCELLED"},
    {CR_E_UNAVAILABLE_IN_CURRENT_STATUS, "UNAVAILABLE_IN_CURRENT_STATUS"},
    {CR_E_UNAVAILABLE_IN_CURRENT_MODE, "UNAVAILABLE_IN_CURRENT_MODE"},
    {CR_E_FILE_NOT_FOUND, "FILE_NOT_FOUND"},
    {CR_E_FILE_OPEN_FAIL, "FILE_OPEN_FAIL"},
    {CR_E_FILE_READ_FAIL, "FILE_READ_FAIL"},
    {CR_E_FILE_WRITE_FAIL, "FILE_WRITE_FAIL"},
    {CR_E_FILE_INVALID_BUFFER, "FILE_INVALID_BUFFER"},
    {CR_E_FILE_LOCK_FAIL, "FILE_LOCK_FAIL"},
    {CR_E_FILE_INVALID_HANDLE, "FILE_INVALID_HANDLE"},
    {CR_E_BUCKET_NOT_FOUND, "BUCKET_NOT_FOUND"},
    {CR_E_BUCKET_ALREADY_EXISTS, "BUCKET_ALREADY_EXISTS"},
    {CR_E_KEYS_EXCEED_BUCKET_LIMIT, "KEYS_EXCEED_BUCKET_LIMIT"},
    {CR_E_KEYS_ULTRA_LIMIT, "KEYS_ULTRA_LIMIT"},
    {CR_E_UNABLE_OFFLOAD, "UNABLE_OFFLOAD"},
    {CR_E_UNABLE_OFFLOADING, "UNABLE_OFFLOADING"},
    {CR_E_TASK_NOT_FOUND, "TASK_NOT_FOUND"},
    {CR_E_TASK_PENDING_LIMIT_EXCEEDED, "TASK_PENDING_LIMIT_EXCEEDED"},
};

const char *cr_strerror(int status)
{
    if (status == 0)
        return "OK";
    for (size_t i = 0; i < sizeof store_errors / sizeof store_errors[0]; i++)
        if (store_errors[i].code == status)
            return store_errors[i].text;
    if (status < 0 && status > -512)
        return strerror(-status); /* glibc: static table for known errnos */
    return "unknown status";
}

const char *cr_version(void)
{
    return CR_STR(CR_VERSION_MAJOR) "." CR_STR(CR_VERSION_MINOR) "." CR_STR(CR_VERSION_PATCH);
}

int cr__status_from_errno(int err)
{
    if (err < 0)
        err = -err;
    switch (err) {
    case 0: return 0;
    case EPERM: return -EACCES;
    case ECHILD: return -EIO;
    case ENETDOWN:
    case ENETUNREACH: return -EHOSTUNREACH;
    case ENETRESET: return -ECONNRESET;
    default: return -err;
    }
}
