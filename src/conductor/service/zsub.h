/* ZMQ SUB side of crescent-conductor (internal): one thread owns one ZMQ
 * context and every SUB socket (ZMQ sockets are not thread-safe), polls them
 * together with an eventfd that carries add/remove commands from the HTTP
 * threads, and hands each received message to a callback.
 *
 * Message framing accepted (vLLM ZmqEventPublisher sends the first):
 *   3 frames: [topic, seq (8 bytes, big-endian), payload]
 *   2 frames: [seq (8 bytes), payload] or [topic, payload]
 *   1 frame : [payload]
 * Anything else is counted as a bad frame and dropped. Each socket has
 * ZMQ_MAXMSGSIZE set, so an oversized message closes that connection (ZMQ
 * reconnects) instead of being buffered.
 */
#ifndef CR_CONDUCTOR_SERVICE_ZSUB_H
#define CR_CONDUCTOR_SERVICE_ZSUB_H

#include <stddef.h>
#include <stdint.h>

typedef struct cr__zsub cr__zsub_t;

/* Called on the ZMQ thread for every message of a subscribed slot.
 * has_seq/seq: the publisher's sequence number when the framing carries one.
 * payload is valid during the call only. bad_frame: 1 when the framing was
 * not recognised (payload NULL then). */
typedef void (*cr__zsub_msg_fn)(void *user, uint32_t slot, uint32_t gen, int has_seq,
                                uint64_t seq, const void *payload, size_t len, int bad_frame);

/* Starts the thread. max_msg bounds one message (ZMQ_MAXMSGSIZE), hwm is
 * the receive high-water mark, replay_timeout_ms how long a replay may hold
 * live batches (0 = 2000). Returns 0 and *out, or -errno. */
int cr__zsub_start(cr__zsub_msg_fn fn, void *user, size_t max_msg, int hwm,
                   unsigned replay_timeout_ms, cr__zsub_t **out);

/* Subscribes slot (tagged gen) to endpoint (all topics). replay_endpoint
 * (NULL or "" = none) is the publisher's ROUTER replay socket (vLLM
 * ZmqEventPublisher): when a sequence number is skipped the thread asks it
 * for the missed batches ([empty, start seq]) and holds live messages (at
 * most 1024 / 64 MiB, replay_timeout_ms) until the end marker, so the callback still sees
 * batches in sequence order. Synchronous: returns once the thread created
 * and connected the sockets. Returns 0, -EINVAL (bad endpoint; message in
 * err), -EEXIST (slot in use with the same gen) or -errno. */
int cr__zsub_add(cr__zsub_t *z, uint32_t slot, uint32_t gen, const char *endpoint,
                 const char *replay_endpoint, char *err, size_t errlen);

/* Closes the socket of slot if it was added with gen; no callback for it is
 * made after this returns. Returns 0 or -ENOENT (no socket of that gen).
 * Generations make add/remove races harmless: an add with a newer gen
 * replaces a socket left over from an older one, and a late remove of an
 * older gen does not touch the newer socket. */
int cr__zsub_remove(cr__zsub_t *z, uint32_t slot, uint32_t gen);

/* Stops the thread and closes every socket. NULL is a no-op. */
void cr__zsub_stop(cr__zsub_t *z);

#endif
