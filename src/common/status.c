/* The one table of status strings (see include/crescent/common.h). */
#include "crescent/common.h"

#include <errno.h>
#include <string.h>

#include "common/status.h"

#define CR_STR_(x) #x
#define CR_STR(x) CR_STR_(x)

#define STORE_ROW(name, value, text) {value, #name, #name ": " text},
static const struct {
    int code;
    const char *name, *text;
} store_errors[] = {CR_STORE_ERRC_MAP(STORE_ROW)};
#undef STORE_ROW

static int store_index(int status)
{
    for (size_t i = 0; i < sizeof store_errors / sizeof store_errors[0]; i++)
        if (store_errors[i].code == status)
            return (int)i;
    return -1;
}

const char *cr_strerror(int status)
{
    if (status == 0)
        return "OK";
    int i = store_index(status);
    if (i >= 0)
        return store_errors[i].text;
    if (status < 0 && status > -512)
        return strerror(-status); /* glibc: static table for known errnos */
    return "unknown status";
}

const char *cr_err_name(int status)
{
    if (status == 0)
        return "OK";
    int i = store_index(status);
    if (i >= 0)
        return store_errors[i].name;
    if (status < 0 && status > -512) {
        const char *n = strerrorname_np(-status); /* glibc >= 2.32: static */
        if (n)
            return n;
    }
    return "UNKNOWN";
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
    case ENETRESET:
    case ECONNABORTED: return -ECONNRESET;
    default: return -err;
    }
}
