#include "common/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int cr__cfg_parse_size(const char *text, uint64_t *out)
{
    if (!text || !*text)
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || v < 0 || !isfinite(v))
        return -EINVAL;
    while (*end == ' ')
        end++;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 0: break;
    case 'B': mul = 1; end++; break;
    case 'K': mul = 1024.0; end++; break;
    case 'M': mul = 1024.0 * 1024; end++; break;
    case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: return -EINVAL;
    }
    if (mul > 1) {
        if (*end == 'i' || *end == 'I')
            end++;
        if (*end == 'b' || *end == 'B')
            end++;
    }
    if (*end)
        return -EINVAL;
    double r = v * mul;
    if (r >= 18446744073709551615.0)
        return -EINVAL;
    *out = (uint64_t)r;
    return 0;
}

int cr__cfg_parse_value(cr__cfg_type_t type, const char *text, void *dst)
{
    char *end;
    if (!text)
        text = "";
    switch (type) {
    case CR__CFG_STR: {
        size_t l = strlen(text);
        if (l >= CR__CFG_STR_MAX)
            return -EINVAL;
        memcpy(dst, text, l + 1);
        return 0;
    }
    case CR__CFG_INT: {
        errno = 0;
        long long v = strtoll(text, &end, 0);
        if (errno || end == text || *end)
            return -EINVAL;
        *(int64_t *)dst = v;
        return 0;
    }
    case CR__CFG_DOUBLE: {
        errno = 0;
        double v = strtod(text, &end);
        if (errno || end == text || *end || !isfinite(v))
            return -EINVAL;
        *(double *)dst = v;
        return 0;
    }
    case CR__CFG_BOOL:
        if (!strcasecmp(text, "true") || !strcmp(text, "1") || !strcasecmp(text, "yes") ||
            !strcasecmp(text, "on"))
            *(int *)dst = 1;
        else if (!strcasecmp(text, "false") || !strcmp(text, "0") || !strcasecmp(text, "no") ||
                 !strcasecmp(text, "off") || !*text)
            *(int *)dst = 0;
        else
            return -EINVAL;
        return 0;
    case CR__CFG_SIZE: {
        uint64_t v;
        if (cr__cfg_parse_size(text, &v))
            return -EINVAL;
        *(uint64_t *)dst = v;
        return 0;
    }
    }
    return -EINVAL;
}

static const cr__cfg_opt_t *find_opt(const cr__cfg_opt_t *t, size_t n, const char *name,
                                     size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(t[i].name) == len && !strncmp(t[i].name, name, len))
            return &t[i];
    /* accept dashes for underscores: --rpc-port == --rpc_port */
    for (size_t i = 0; i < n; i++) {
        if (strlen(t[i].name) != len)
            continue;
        size_t k = 0;
        for (; k < len; k++) {
            char a = t[i].name[k], b = name[k];
            if (a != b && !(a == '_' && b == '-'))
                break;
        }
        if (k == len)
            return &t[i];
    }
    return NULL;
}

static int set_opt(const cr__cfg_opt_t *o, const char *val, void *dst, const char *src, char *err,
                   size_t errlen)
{
    if (cr__cfg_parse_value(o->type, val, (char *)dst + o->offset)) {
        snprintf(err, errlen, "invalid value '%s' for %s (from %s)", val ? val : "", o->name, src);
        return -EINVAL;
    }
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

static int load_file(const cr__cfg_opt_t *t, size_t n, void *dst, const char *path, char *err,
                     size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot open config file %s: %s", path, strerror(errno));
        return -EINVAL;
    }
    char line[1024];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *h = strchr(line, '#');
        if (h)
            *h = 0;
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, errlen, "%s:%d: expected name = value", path, lineno);
            rc = -EINVAL;
            break;
        }
        *eq = 0;
        char *name = trim(s), *val = trim(eq + 1);
        const cr__cfg_opt_t *o = find_opt(t, n, name, strlen(name));
        if (!o) {
            snprintf(err, errlen, "%s:%d: unknown option '%s'", path, lineno, name);
            rc = -EINVAL;
            break;
        }
        if ((rc = set_opt(o, val, dst, path, err, errlen)))
            break;
    }
    fclose(f);
    return rc;
}

int cr__cfg_parse(const cr__cfg_opt_t *t, size_t n, void *dst, int argc, char **argv, int first,
                  const char *env_prefix, const char **positional, size_t positional_cap,
                  size_t *n_positional, char *err, size_t errlen)
{
    size_t npos = 0;
    for (size_t i = 0; i < n; i++)
        if (set_opt(&t[i], t[i].defval, dst, "default", err, errlen))
            return -EINVAL;
    /* config file first, so env and flags override it */
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "--config=", 9)) {
            if (load_file(t, n, dst, a + 9, err, errlen))
                return -EINVAL;
        } else if (!strcmp(a, "--config") && i + 1 < argc) {
            if (load_file(t, n, dst, argv[i + 1], err, errlen))
                return -EINVAL;
        }
    }
    if (env_prefix) {
        for (size_t i = 0; i < n; i++) {
            char envname[128];
            int l = snprintf(envname, sizeof envname, "%s", env_prefix);
            for (const char *p = t[i].name; *p && l < (int)sizeof envname - 1; p++)
                envname[l++] = (char)toupper((unsigned char)*p);
            envname[l] = 0;
            const char *v = getenv(envname);
            if (v && set_opt(&t[i], v, dst, envname, err, errlen))
                return -EINVAL;
        }
    }
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] == 0) {
            if (!positional || npos >= positional_cap) {
                snprintf(err, errlen, "unexpected argument '%s'", a);
                return -EINVAL;
            }
            positional[npos++] = a;
            continue;
        }
        const char *name = a + 1 + (a[1] == '-');
        if (!strcmp(name, "help") || !strcmp(name, "h"))
            return 1;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        if (len == 6 && !strncmp(name, "config", 6)) {
            if (!eq)
                i++;
            continue;
        }
        const cr__cfg_opt_t *o = find_opt(t, n, name, len);
        if (!o) {
            snprintf(err, errlen, "unknown option '%.*s' (see --help)", (int)len, name);
            return -EINVAL;
        }
        const char *val;
        if (eq)
            val = eq + 1;
        else if (o->type == CR__CFG_BOOL &&
                 (i + 1 >= argc || cr__cfg_parse_value(CR__CFG_BOOL, argv[i + 1], &(int){0})))
            val = "true";
        else if (i + 1 < argc)
            val = argv[++i];
        else {
            snprintf(err, errlen, "option '%s' needs a value", o->name);
            return -EINVAL;
        }
        if (set_opt(o, val, dst, "command line", err, errlen))
            return -EINVAL;
    }
    if (n_positional)
        *n_positional = npos;
    return 0;
}

void cr__cfg_usage(FILE *out, const char *prog, const char *summary, const cr__cfg_opt_t *t,
                   size_t n)
{
    static const char *tn[] = {"string", "int", "float", "bool", "size"};
    fprintf(out, "usage: %s [--config FILE] [options]\n%s\n\noptions:\n", prog,
            summary ? summary : "");
    for (size_t i = 0; i < n; i++)
        fprintf(out, "  --%-32s %s (%s, default: %s)\n", t[i].name, t[i].help, tn[t[i].type],
                t[i].defval && *t[i].defval ? t[i].defval : "none");
}
