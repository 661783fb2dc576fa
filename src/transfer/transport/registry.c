/* The transports built into the engine, in order of preference: a segment
 * is carried by the first enabled transport whose can_reach() accepts its
 * descriptor (the same-host one first, then the network).
 *
 * Adding a transport: a folder src/transfer/transport/<name>/ whose sources
 * define `const struct cr_xfer_transport_ops cr__xfer_<name>_ops` (see
 * transport.h for the contract), and one X(<name>) line below. This is the
 * only file outside the transports' folders that names them (scripts/test.sh
 * checks it). */
#include "transfer/transport/transport.h"

#define CR__XFER_TRANSPORTS(X)                                                                 \
    X(shm)                                                                                     \
    X(tcp)

#define DECLARE(name) extern const struct cr_xfer_transport_ops cr__xfer_##name##_ops;
#define ENTRY(name) &cr__xfer_##name##_ops,
CR__XFER_TRANSPORTS(DECLARE)

const struct cr_xfer_transport_ops *const cr__xfer_transport_registry[] = {
    CR__XFER_TRANSPORTS(ENTRY)};
const size_t cr__xfer_transport_registry_len =
    sizeof cr__xfer_transport_registry / sizeof cr__xfer_transport_registry[0];

_Static_assert(sizeof cr__xfer_transport_registry / sizeof cr__xfer_transport_registry[0] <=
                   CR__XFER_MAX_TRANSPORTS,
               "raise CR__XFER_MAX_TRANSPORTS");
