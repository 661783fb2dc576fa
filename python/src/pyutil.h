/* Internal helpers shared by the types of the crescent._crescent extension
 * (argument conversion, registered-memory tables, hostname/URI parsing).
 *
 * Conventions of the extension:
 *   - Every function that can raise returns -1 (or NULL) with a Python
 *     exception set; "bad type" is TypeError, "bad value" (negative size,
 *     buffer too small, out-of-range) is ValueError.
 *   - Status codes returned to Python keep crescent's convention (0 ok,
 *     negative errno for the engine, Mooncake ErrorCode values for the store).
 *   - Locks taken here never call into Python, so they may be taken with or
 *     without the GIL; code never waits for the GIL while holding one.
 */
#ifndef CR_PY_UTIL_H
#define CR_PY_UTIL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>

/* Module state shared between the files (set up in module.c). */
extern PyTypeObject cr__py_engine_type;
extern PyTypeObject cr__py_store_type;
extern PyTypeObject cr__py_bufhandle_type;
int cr__py_store_types_ready(PyObject *module);
int cr__py_engine_types_ready(PyObject *module);

/* ---- argument conversion ------------------------------------------------ */

/* An int-like object (anything with __index__, e.g. numpy integers) as an
 * unsigned 64-bit value. Non-integers: TypeError; negative or too large:
 * ValueError. Returns 0 or -1 with an exception set. */
int cr__py_u64(PyObject *o, const char *what, uint64_t *out);

/* Like cr__py_u64 but also accepts a human-readable size string such as
 * "512MB", "1GiB", "4096" (K = 1024). */
int cr__py_size(PyObject *o, const char *what, uint64_t *out);

/* A memory address: an int, or any object exporting the buffer protocol
 * (numpy array, bytearray, memoryview, mmap, ...), whose first byte is used.
 * For a buffer, *len_out (if non-NULL) receives its length in bytes and must
 * be C- or F-contiguous; writable requires a writable buffer. For an int,
 * *len_out is set to UINT64_MAX ("unknown"). The object's memory must stay
 * alive as long as the address is used: like ctypes' .data, this does not
 * keep a reference. Returns 0 or -1 with an exception set. */
int cr__py_addr(PyObject *o, const char *what, int writable, uint64_t *addr, uint64_t *len_out);

/* Resolves (addr, size) arguments where size may be None when addr is a
 * buffer object (then its length is used). A given size larger than a
 * buffer object is ValueError ("buffer too small"). */
int cr__py_addr_size(PyObject *addr_o, PyObject *size_o, const char *what, int writable,
                     uint64_t *addr, uint64_t *size);

/* A memory range to register: (addr, size) where addr is an int or a buffer
 * object. A buffer object is held writable and contiguous in a new *view
 * (release with cr__py_release_view), and size, when not None/NULL, must not
 * exceed it (ValueError); an int addr requires a size (TypeError). addr_name
 * and size_name name the arguments in messages. *view is NULL for an int.
 * Returns 0 or -1 with an exception set (and nothing held). */
int cr__py_hold_region(PyObject *addr_o, PyObject *size_o, const char *addr_name,
                       const char *size_name, uint64_t *addr, uint64_t *len, Py_buffer **view);

/* Releases and frees a view from cr__py_hold_region; NULL is a no-op. */
void cr__py_release_view(Py_buffer *view);

/* A key: str (UTF-8) or bytes; returns a pointer valid while o lives and its
 * length. Empty keys are ValueError; other types TypeError. */
int cr__py_key(PyObject *o, const char **s, Py_ssize_t *len);

/* A Python sequence (list/tuple/...) copied into a new tuple (so its items
 * stay referenced while the GIL is released), or NULL with TypeError. Use
 * the PySequence_Fast_* accessors on it. */
PyObject *cr__py_seq(PyObject *o, const char *what);

/* Whether [addr, addr+len) is mapped in this process (mincore()). Used to
 * refuse registering garbage addresses before a later access crashes. */
int cr__py_mem_mapped(uint64_t addr, uint64_t len);

/* Initializes the lock guarding an engine's or store's handle so that a
 * waiting writer (teardown) is not starved by a stream of readers (calls). */
void cr__py_rwlock_init(pthread_rwlock_t *lock);

/* ---- registered memory table ------------------------------------------- */

typedef struct cr__py_region {
    uint64_t addr;
    uint64_t len;
    Py_buffer *view; /* held buffer keeping the exporter alive, or NULL */
} cr__py_region_t;

/* Sorted, non-overlapping set of registered ranges. Thread-safe. */
typedef struct cr__py_regtab {
    pthread_mutex_t mu;
    cr__py_region_t *v; /* guarded by mu */
    size_t n, cap;      /* guarded by mu */
} cr__py_regtab_t;

void cr__py_reg_init(cr__py_regtab_t *t);
/* Adds a range. Returns 0, -EEXIST (overlaps), -ENOMEM. */
int cr__py_reg_add(cr__py_regtab_t *t, uint64_t addr, uint64_t len, Py_buffer *view);
/* Removes the range starting at addr. Returns 0 and the held view (the caller
 * releases it with the GIL held), or -ENOENT. */
int cr__py_reg_remove(cr__py_regtab_t *t, uint64_t addr, uint64_t *len, Py_buffer **view);
/* 1 if [addr, addr+len) lies inside one registered range, else 0. */
int cr__py_reg_covers(cr__py_regtab_t *t, uint64_t addr, uint64_t len);
/* Empties the table (for teardown) and releases the held views; GIL held. */
void cr__py_reg_release_all(cr__py_regtab_t *t);
void cr__py_reg_destroy(cr__py_regtab_t *t);

/* ---- hostnames and metadata URIs ---------------------------------------- */

/* Splits "host", "host:port" or "[v6]:port". host gets the bare host
 * (< hostcap), *port 0 when absent. Returns 0 or -EINVAL. */
int cr__py_split_host(const char *s, char *host, size_t hostcap, uint16_t *port);

/* Resolves a host name to a numeric IPv4/IPv6 address string. "" and
 * "localhost" give 127.0.0.1. Returns 0 or -EHOSTUNREACH (logged: the name
 * does not resolve). */
int cr__py_resolve_ip(const char *host, char *ip, size_t ipcap);

/* Maps a Mooncake metadata_server string to a crescent metadata URI:
 * "P2PHANDSHAKE"/"p2p" -> "p2p", "http://..."/"etcd://..." unchanged,
 * bare "host:port" -> "etcd://host:port" (Mooncake's legacy form).
 * Returns 0 or -EINVAL (unsupported scheme such as redis://). */
int cr__py_metadata_uri(const char *in, char *out, size_t cap);

/* A comma-separated device list keeps only entries that are IP addresses
 * (crescent NICs are addresses; RDMA device names such as mlx5_0 are
 * ignored). out is "" when none is an address. */
void cr__py_nics_from_devices(const char *devices, char *out, size_t cap);

/* ---- Mooncake's environment ---------------------------------------------- */

/* What TransferEngine.initialize and MooncakeDistributedStore.setup both take
 * from their arguments and Mooncake's environment variables, read in one
 * place so the two entry points cannot drift apart. */
typedef struct cr__py_mc_env {
    char metadata_uri[1024]; /* the argument, else $MC_METADATA_SERVER, else
                              * P2PHANDSHAKE; as a crescent URI */
    char transports[32];     /* from the protocol; $CRESCENT_TRANSPORTS overrides */
    int legacy_port;         /* $MC_LEGACY_RPC_PORT_BINDING set and not "0":
                              * listen on the port given in local_hostname */
    unsigned timeout_ms;     /* $MC_TRANSFER_TIMEOUT (seconds) or 0 = default */
} cr__py_mc_env_t;

/* Fills *env. protocol "" or "tcp" selects for_tcp, "shm" or "tcp,shm"
 * selects for_shm; any other (rdma, nvlink, ...) warns (RuntimeWarning) and
 * selects for_tcp. Returns 0; -EINVAL for an unsupported metadata server;
 * -1 with a Python exception set when the warning was turned into an error.
 * GIL held. */
int cr__py_mc_env(const char *metadata_server, const char *protocol, const char *for_tcp,
                  const char *for_shm, cr__py_mc_env_t *env);

#endif
