/* Safe files in operator-named directories (file.h). */
#include "common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/status.h"

int cr__file_open_private(const char *path, int flags, const char *comp, char *err,
                          size_t errlen)
{
    int trunc = flags & O_TRUNC;
    /* O_NONBLOCK: a FIFO planted under the name must not hang the open */
    int fd = open(path, (flags & ~O_TRUNC) | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK,
                  0600);
    if (fd < 0) {
        int e = errno;
        struct stat ls;
        if (e == EINVAL && lstat(path, &ls) == 0 && !S_ISREG(ls.st_mode)) {
            /* O_DIRECT on a FIFO or device fails before any check below */
            snprintf(err, errlen, "%s is not a regular file: refusing to use it (remove it)",
                     path);
            return -EINVAL;
        }
        if (e == ELOOP)
            snprintf(err, errlen, "%s is a symbolic link: refusing to follow it (remove it)",
                     path);
        else
            snprintf(err, errlen, "cannot open %s: %s", path, strerror(e));
        return cr__status_from_errno(e);
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = CR__ERRNO();
        snprintf(err, errlen, "fstat %s: %s", path, strerror(-rc));
    } else if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        snprintf(err, errlen, "%s is not a regular file: refusing to use it (remove it)", path);
    } else if (st.st_nlink != 1) {
        rc = -EMLINK;
        snprintf(err, errlen,
                 "%s has %ju hard links: refusing to use it (it may be another file's; remove "
                 "it)",
                 path, (uintmax_t)st.st_nlink);
    } else if (st.st_uid != geteuid()) {
        rc = -EACCES;
        snprintf(err, errlen,
                 "%s is owned by uid %u, not by this process's uid %u: refusing to use it "
                 "(remove it or chown it)",
                 path, (unsigned)st.st_uid, (unsigned)geteuid());
    } else if (st.st_mode & 077) {
        if (fchmod(fd, 0600) != 0) {
            rc = CR__ERRNO();
            snprintf(err, errlen, "%s is mode %03o and cannot be narrowed to 0600: %s", path,
                     (unsigned)(st.st_mode & 0777), strerror(-rc));
        } else {
            CR_LOG_WARN(comp, "%s was mode %03o (readable by other users): narrowed to 0600",
                        path, (unsigned)(st.st_mode & 0777));
        }
    }
    if (!rc && trunc && ftruncate(fd, 0) != 0) {
        rc = CR__ERRNO();
        snprintf(err, errlen, "cannot truncate %s: %s", path, strerror(-rc));
    }
    if (!rc && !(flags & O_NONBLOCK)) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
            rc = CR__ERRNO();
            snprintf(err, errlen, "fcntl %s: %s", path, strerror(-rc));
        }
    }
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

int cr__file_write_atomic(const char *path, const void *data, size_t len, int sync,
                          unsigned mode)
{
    char tmp[PATH_MAX + 8];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return -ENAMETOOLONG;
    /* a stale tmp (or anything planted under its name) goes; O_EXCL then
     * creates a new file or fails, it never opens what is there */
    if (unlink(tmp) != 0 && errno != ENOENT)
        return CR__ERRNO();
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, (mode_t)mode);
    if (fd < 0)
        return CR__ERRNO();
    int rc = 0;
    const char *p = data;
    while (len && !rc) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            rc = w < 0 ? CR__ERRNO() : -EIO;
        else
            p += w, len -= (size_t)w;
    }
    if (!rc && sync && fsync(fd) != 0)
        rc = CR__ERRNO();
    if (close(fd) != 0 && !rc)
        rc = CR__ERRNO();
    if (!rc && rename(tmp, path) != 0)
        rc = CR__ERRNO();
    if (rc)
        unlink(tmp);
    return rc;
}
