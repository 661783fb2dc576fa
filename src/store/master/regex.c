/* RemoveByRegex: removes the complete objects whose key matches a POSIX
 * extended regular expression (Mooncake's remove_by_regex). The pattern is
 * compiled before the master lock is taken; the scan walks the LRU list of
 * complete objects (pending puts and upsert shadows are never on it). */
#include "store/master/master_priv.h"

#include <regex.h>
#include <stdlib.h>
#include <string.h>

int cr__master_remove_by_regex(cr__master_t *m, const char *pattern, int force, uint64_t now,
                               uint64_t *count)
{
    *count = 0;
    pthread_mutex_lock(&m->mu);
    CNT(m, rpc_remove_by_regex_total)++;
    pthread_mutex_unlock(&m->mu);
    if (!pattern || !*pattern || strlen(pattern) > CR__RPC_KEY_MAX)
        return CR_E_INVALID_PARAMS;
    regex_t re;
    if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB))
        return CR_E_INVALID_PARAMS;
    char key[CR__RPC_KEY_MAX + 1];
    uint64_t n = 0;
    pthread_mutex_lock(&m->mu);
    obj_t *o = m->lru.next;
    while (o != &m->lru) {
        obj_t *next = o->next;
        if (force || o->until_ms <= now) {
            memcpy(key, obj_key(o), o->key_len);
            key[o->key_len] = 0;
            if (regexec(&re, key, 0, NULL, 0) == 0) {
                cr__m_obj_delete(m, o, cr__m_obj_release_ms(m, o, now), now);
                n++;
            }
        }
        o = next;
    }
    CNT(m, removed_objects_total) += n;
    pthread_mutex_unlock(&m->mu);
    regfree(&re);
    *count = n;
    return 0;
}
