/* Test-only interface of the store client: hooks that let a test stop a
 * client at the points where the stale-read and put-deadline contracts
 * matter (between the master's answer and the data transfer), or lose a
 * master's answer after it acted (a commit sent again). Production
 * code never sets them, and the library reads no environment variable
 * for them: a test calls cr__store_set_test_hooks() on its own client.
 */
#ifndef CR_STORE_CLIENT_TEST_HOOKS_H
#define CR_STORE_CLIENT_TEST_HOOKS_H

#include "crescent/store.h"

typedef struct cr__store_test_hooks {
    /* After PutStart's reply, before any write; status is the first key's
     * PutStart result. Runs in the calling thread (it may sleep). */
    void (*after_put_start)(void *user, int status);
    /* After GetReplicaList's reply, before any read (it may sleep). */
    void (*after_get_replicas)(void *user);
    /* After a pipelined PUT_COMMIT's answer came (ops.c, a reserved
     * batch's commits): nonzero drops the answer, as if the connection had
     * failed after the master applied the commit; the client then sends it
     * again the ordinary way. */
    int (*commit_answer_lost)(void *user);
    void *user;
} cr__store_test_hooks_t;

/* Installs hooks (copied; NULL clears them). Call before the client is
 * used by other threads. */
void cr__store_set_test_hooks(cr_store_t *s, const cr__store_test_hooks_t *hooks);

/* Timeouts the client's TE waited out on peers that did not answer (a
 * transfer's stall, a descriptor refresh): how many times a frozen node
 * was waited on (transfer/engine_info.h, cr__xfer_timeouts_waited). */
uint64_t cr__store_test_timeouts_waited(const cr_store_t *s);

#endif
