/* One configuration table shared by command-line flags, environment variables
 * and config files (see ../shared/CONVENTIONS.md "Config is one table").
 *
 * A tool declares a table of cr__cfg_opt_t describing the fields of its own
 * config struct; cr__cfg_parse() fills the struct from, in increasing
 * priority: defaults, a config file (--config FILE, lines "name = value",
 * '#' comments), environment variables (<ENVPREFIX><NAME upper-cased>), and
 * flags (--name=value, --name value, -name=value; bare --flag sets a bool to
 * true). Strings are copied into fixed char arrays inside the struct
 * (CR__CFG_STR fields are char[CR__CFG_STR_MAX]); no allocation.
 */
#ifndef CR_COMMON_CONFIG_H
#define CR_COMMON_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CR__CFG_STR_MAX 256

typedef enum {
    CR__CFG_STR,    /* char[CR__CFG_STR_MAX] */
    CR__CFG_INT,    /* int64_t */
    CR__CFG_DOUBLE, /* double */
    CR__CFG_BOOL,   /* int (0/1); accepts true/false/1/0/yes/no */
    CR__CFG_SIZE,   /* uint64_t; accepts 4096, 64KB, 64KiB, 1.5GB, 512MB (K=1024) */
} cr__cfg_type_t;

typedef struct cr__cfg_opt {
    const char *name;   /* flag name without dashes, e.g. "rpc_port" */
    const char *defval; /* default as text, parsed like a flag; NULL = zero/empty */
    const char *help;
    cr__cfg_type_t type;
    size_t offset; /* offsetof(config struct, field) */
} cr__cfg_opt_t;

/* Parses a value of the given type into dst. Returns 0 or -EINVAL. */
int cr__cfg_parse_value(cr__cfg_type_t type, const char *text, void *dst);

/* Parses a human-readable size ("512MB", "1GiB", "4096"). Returns 0 or -EINVAL. */
int cr__cfg_parse_size(const char *text, uint64_t *out);

/* Fills *dst (the config struct) as described above. argv[first..argc) are
 * the arguments to parse. Non-flag arguments are an error unless positional is
 * non-NULL, in which case they are collected there (pointers into argv, at
 * most positional_cap; *n_positional set). Returns 0 on success, 1 for
 * --help or -h (the caller then prints cr__cfg_usage to stdout and exits 0),
 * -EINVAL with a message in err on error (unknown flag, bad value). */
int cr__cfg_parse(const cr__cfg_opt_t *table, size_t n, void *dst, int argc, char **argv,
                  int first, const char *env_prefix, const char **positional,
                  size_t positional_cap, size_t *n_positional, char *err, size_t errlen);

/* Prints "--name (type, default X): help" for each option. */
void cr__cfg_usage(FILE *out, const char *prog, const char *summary, const cr__cfg_opt_t *table,
                   size_t n);

#endif
