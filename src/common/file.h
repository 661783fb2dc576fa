/* Files a daemon keeps in a directory an operator names (--ssd_path,
 * --journal_dir, --port_file, ...): never through a symlink planted there,
 * never readable by other users when the contents are private.
 *
 * A root daemon that opens <dir>/<name> with O_CREAT follows a symlink an
 * attacker left under that name and truncates or overwrites its target;
 * these helpers open with O_NOFOLLOW and check what they opened before
 * changing it. */
#ifndef CR_COMMON_FILE_H
#define CR_COMMON_FILE_H

#include <stddef.h>

/* Opens path, creating it with mode 0600 if absent, for state only this
 * process's user may see. flags: O_RDONLY/O_WRONLY/O_RDWR plus any of
 * O_TRUNC, O_EXCL, O_DIRECT (O_CREAT, O_NOFOLLOW and O_CLOEXEC are added).
 * Refused: a symlink (-ELOOP), anything but a regular file (-EINVAL: a
 * FIFO, device or directory), a file with more than one link (-EMLINK: a
 * hard link to a file elsewhere) and a file owned by another uid (-EACCES).
 * O_TRUNC takes effect only after these checks pass. An existing file
 * that group or others may access is narrowed to 0600 (logged as a
 * warning under component comp). Returns the descriptor, or -errno with a
 * one-line reason naming path in err. */
int cr__file_open_private(const char *path, int flags, const char *comp, char *err,
                          size_t errlen);

/* Replaces path with len bytes of data: writes path.tmp (a stale one is
 * removed first; created with O_EXCL so nothing is followed), fsyncs it if
 * sync, and renames it over path. mode is the new file's mode before the
 * umask (0644 for port and ready files that other users may read, 0600
 * for private state). Returns 0 or -errno; path.tmp does not survive a
 * failure. */
int cr__file_write_atomic(const char *path, const void *data, size_t len, int sync,
                          unsigned mode);

#endif
