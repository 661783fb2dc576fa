/* Cluster authentication: one module for every daemon, client and tool
 * (docs/security.md).
 *
 * Security is ON when a cluster key is configured: --cluster_key_file on a
 * tool, the cluster_key_file field of the library's params, or the
 * environment variable CRESCENT_CLUSTER_KEY_FILE (library users). Without a
 * key everything runs as before ("security off": trusted network) and
 * daemons that listen beyond loopback say so loudly at start.
 *
 * The key file holds a secret of at least CR__AUTH_KEY_MIN bytes (e.g.
 * `openssl rand -hex 32 > cluster.key`; trailing whitespace is ignored) and
 * must not be readable by group or others. It is used only as an
 * HMAC-SHA256 key (OpenSSL libcrypto); per-purpose keys are derived from it
 * with a label, so a MAC made for one purpose never verifies for another.
 *
 * What it provides:
 *  - a mutual challenge-response handshake over any stream (master RPC,
 *    Transfer Engine, shm proof): both sides prove they hold the key without
 *    sending it, bound to a context label ("rpc", "te", ...) and to fresh
 *    nonces from both sides, so a recorded handshake cannot be replayed and
 *    one service's handshake cannot be reflected into another;
 *  - HTTP request signatures (header X-Crescent-Auth) over method, request
 *    target, time and body hash, checked within a time window with a replay
 *    cache;
 *  - MACs over arbitrary data (signed segment descriptors, capabilities).
 *
 * Threads: a cr__auth_t is immutable after cr__auth_load() except its replay
 * cache (internally locked); share it between threads freely.
 * Ownership: cr__auth_load() allocates; cr__auth_free() releases.
 */
#ifndef CR_COMMON_AUTH_H
#define CR_COMMON_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define CR__AUTH_ENV_KEY_FILE "CRESCENT_CLUSTER_KEY_FILE"
#define CR__AUTH_KEY_MIN 32   /* bytes of secret in the key file, at least */
#define CR__AUTH_KEY_MAX 1024 /* bytes read from the key file, at most */
#define CR__AUTH_MAC_LEN 32   /* HMAC-SHA256 */
#define CR__AUTH_NONCE_LEN 32
#define CR__AUTH_KEYID_LEN 8

typedef struct cr__auth cr__auth_t;

/* Where the credentials come from. Any field may be NULL or "". */
typedef struct cr__auth_cfg {
    const char *cluster_key_file; /* "" = use $CRESCENT_CLUSTER_KEY_FILE, if set */
    const char *tls_cert;         /* for cr__tls_load (common/tls/tls.h); ignored here */
    const char *tls_key;
    const char *tls_ca;
} cr__auth_cfg_t;

/* Loads the credentials. With no key configured (field and environment
 * empty) returns 0 with *out = NULL: security off. Returns 0 and *out, or
 * -ENOENT (file missing), -EPERM (file readable by group/others), -EINVAL
 * (secret shorter than CR__AUTH_KEY_MIN), -ENOMEM; the reason is logged
 * once. The tls_* fields are not looked at: cr__tls_load() takes them. */
int cr__auth_load(const cr__auth_cfg_t *cfg, cr__auth_t **out);

/* Same, from a key file path only (NULL/"" = environment). */
int cr__auth_load_key_file(const char *path, cr__auth_t **out);

/* Builds a context straight from secret bytes (tests, tools that generate a
 * key). Returns 0, -EINVAL (shorter than CR__AUTH_KEY_MIN), -ENOMEM. */
int cr__auth_from_secret(const void *secret, size_t len, cr__auth_t **out);

/* Frees; NULL is a no-op. */
void cr__auth_free(cr__auth_t *a);

/* Writes a fresh random key (64 hex chars + newline) to path with mode 0600
 * (O_EXCL: never overwrites). Returns 0 or -errno. Used by the demo. */
int cr__auth_keygen(const char *path);

/* The key's public identifier (first 8 bytes of a labelled MAC), for
 * diagnostics: "client uses another key" vs "client has no key". */
void cr__auth_key_id(const cr__auth_t *a, uint8_t out[CR__AUTH_KEYID_LEN]);

/* HMAC-SHA256 under the purpose key derived for `label` over the
 * concatenation of n parts. Returns 0 or -EIO. */
int cr__auth_mac(const cr__auth_t *a, const char *label, const void *const *parts,
                 const size_t *lens, int n, uint8_t out[CR__AUTH_MAC_LEN]);
/* Constant-time comparison of two MACs: 1 equal, 0 not. */
int cr__auth_mac_eq(const uint8_t *x, const uint8_t *y, size_t len);

/* Fills buf with cryptographically random bytes. Returns 0 or -EIO. */
int cr__auth_random(void *buf, size_t len);

/* ---- handshake --------------------------------------------------------
 * client -> server  HELLO      magic ver type=1 flags key_id nonce_c        (48 B)
 * server -> client  CHALLENGE  magic ver type=2 flags key_id nonce_s mac_s  (80 B)
 * client -> server  PROOF      magic ver type=3 flags mac_c                 (40 B)
 * server -> client  RESULT     magic ver type=4 flags status(i32) 0(u32)    (16 B)
 * mac_s = HMAC(K_hs, "S" ctx nonce_c nonce_s), mac_c = HMAC(K_hs, "C" ctx
 * nonce_c nonce_s): the server proves itself first (the client gives up on
 * a server without the key before proving anything), then the client.
 * All fields little-endian; magic "CRAU", version 1. */
#define CR__AUTH_MAGIC 0x55415243u /* "CRAU" */
#define CR__AUTH_VERSION 1
#define CR__AUTH_HELLO_LEN 48
#define CR__AUTH_CHALLENGE_LEN 80
#define CR__AUTH_PROOF_LEN 40
#define CR__AUTH_RESULT_LEN 16
#define CR__AUTH_MSG_MAX 80

enum cr__auth_msg_type {
    CR__AUTH_HELLO = 1,
    CR__AUTH_CHALLENGE = 2,
    CR__AUTH_PROOF = 3,
    CR__AUTH_RESULT = 4,
};

typedef struct cr__auth_msg {
    uint8_t type;
    uint16_t flags;
    uint8_t key_id[CR__AUTH_KEYID_LEN];
    uint8_t nonce[CR__AUTH_NONCE_LEN];
    uint8_t mac[CR__AUTH_MAC_LEN];
    int32_t status; /* RESULT */
} cr__auth_msg_t;

/* Length of a message of this type, 0 for an unknown type. */
size_t cr__auth_msg_len(uint8_t type);
/* Parses exactly one message from buf[0..len): len must equal the length of
 * its type. Returns 0, or -EBADMSG (bad magic/version/type/length/reserved
 * bytes). Fuzzed by fuzz_auth.c. */
int cr__auth_msg_parse(const uint8_t *buf, size_t len, cr__auth_msg_t *m);

/* One side's handshake state (the caller's memory; no allocation). */
typedef struct cr__auth_hs {
    int step;
    char ctx[16]; /* context label, e.g. "rpc", "te" */
    uint8_t nonce_c[CR__AUTH_NONCE_LEN], nonce_s[CR__AUTH_NONCE_LEN];
} cr__auth_hs_t;

/* Client: starts, writes HELLO (CR__AUTH_HELLO_LEN bytes) into out. */
int cr__auth_hs_client_hello(const cr__auth_t *a, cr__auth_hs_t *hs, const char *ctx,
                             uint8_t *out);
/* Server: checks HELLO in[0..len), writes CHALLENGE into out. Returns 0,
 * -EBADMSG, -EACCES (another key: the key ids differ). */
int cr__auth_hs_server_challenge(const cr__auth_t *a, cr__auth_hs_t *hs, const char *ctx,
                                 const uint8_t *in, size_t len, uint8_t *out);
/* Client: checks CHALLENGE (the server's MAC), writes PROOF into out.
 * Returns 0, -EBADMSG, -EACCES (the server does not hold the key). */
int cr__auth_hs_client_proof(const cr__auth_t *a, cr__auth_hs_t *hs, const uint8_t *in,
                             size_t len, uint8_t *out);
/* Server: checks PROOF. Returns 0 (the peer is a member), -EBADMSG, -EACCES. */
int cr__auth_hs_server_verify(const cr__auth_t *a, cr__auth_hs_t *hs, const uint8_t *in,
                              size_t len);
/* Writes RESULT(status) into out. */
void cr__auth_hs_result(int32_t status, uint8_t *out);

/* Whole handshakes on a blocking stream socket, each message bounded by
 * timeout_ms. Return 0 (peer authenticated), -EACCES (peer refused or
 * failed), -EBADMSG, -ETIMEDOUT, -ECONNRESET or -errno. The server sends
 * RESULT so that a refused client learns why instead of seeing a reset. */
int cr__auth_client_fd(const cr__auth_t *a, int fd, const char *ctx, int timeout_ms);
int cr__auth_server_fd(const cr__auth_t *a, int fd, const char *ctx, int timeout_ms);

/* ---- HTTP --------------------------------------------------------------
 * Header "X-Crescent-Auth: v1:<unix seconds>:<nonce hex 32>:<mac hex 64>",
 * mac = HMAC(K_http, method \n target \n seconds \n nonce \n sha256(body)),
 * target = the request target exactly as sent (path and query). */
#define CR__AUTH_HTTP_HEADER "X-Crescent-Auth"
#define CR__AUTH_HTTP_MAX 128    /* bytes of the header value incl. NUL */
#define CR__AUTH_HTTP_WINDOW_S 60 /* accepted clock skew + replay window */

/* Signs a request. target: "/path?query" (a full URL is accepted: scheme
 * and authority are skipped). Writes the header value into out. Returns 0
 * or -EINVAL/-EIO. */
int cr__auth_http_sign(const cr__auth_t *a, const char *method, const char *target,
                       const void *body, size_t len, char out[CR__AUTH_HTTP_MAX]);
/* Same with a given time and nonce (tests). */
int cr__auth_http_sign_at(const cr__auth_t *a, const char *method, const char *target,
                          const void *body, size_t len, uint64_t ts, const uint8_t nonce[16],
                          char out[CR__AUTH_HTTP_MAX]);
/* Verifies a header value (NULL = missing). now_s: unix seconds. Returns 0,
 * -EACCES (missing, bad MAC, outside the window, replayed), -EBADMSG
 * (malformed) or -EBUSY (genuine, but the bounded replay cache has no room
 * to remember its nonce: refused rather than forgetting a live one; the
 * caller answers "busy, retry"). Records the nonce. */
int cr__auth_http_verify(cr__auth_t *a, const char *hdr, const char *method, const char *target,
                         const void *body, size_t len, uint64_t now_s);
/* Parses the header value's fields; 0 or -EBADMSG. Fuzzed. */
int cr__auth_http_parse(const char *hdr, uint64_t *ts, uint8_t nonce[16],
                        uint8_t mac[CR__AUTH_MAC_LEN]);

/* Hex helpers: encode writes 2*len chars + NUL; decode needs exactly 2*len
 * hex chars and returns 0 or -EBADMSG. */
void cr__auth_hex(const uint8_t *in, size_t len, char *out);
int cr__auth_unhex(const char *in, size_t hexlen, uint8_t *out);

/* Logs a loud warning when `what` listens on host (NULL/"" = any) beyond
 * loopback and a is NULL (no credentials). Returns 1 if it warned. */
int cr__auth_warn_open(const cr__auth_t *a, const char *what, const char *host);

/* The one line every daemon prints at start (after "<daemon>: ", to
 * stderr) saying its security mode, from whether a cluster key and TLS
 * certificates are configured (docs/security.md):
 *   "security: TLS on (mutual certificates), cluster key on"
 *   "security: TLS on (mutual certificates), no cluster key"
 *   "security: cluster key on, no TLS"
 *   "security: none (no cluster key, no TLS)"
 * Returns a static string. */
const char *cr__auth_mode_line(int key, int tls);

#endif
