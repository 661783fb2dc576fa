/* cr__seg_host_id: the identity of "this host" as same-host transports see it.
 *
 * Format (ASCII, fits CR__HOST_ID_MAX with room to spare):
 *     "<machine>/<boot>/net:<inode>/pid:<inode>"
 * machine = /etc/machine-id (falls back to /var/lib/dbus/machine-id, then to
 *           the boot id when neither exists, e.g. minimal containers);
 * boot    = /proc/sys/kernel/random/boot_id (a reboot is another host: the
 *           pids in an old descriptor mean nothing after it);
 * net/pid = inode numbers of /proc/self/ns/net and /proc/self/ns/pid. Two
 *           processes in different network namespaces are different hosts
 *           (multi-host tests model hosts as namespaces), and a pid is only
 *           meaningful inside its pid namespace, which process_vm_readv needs.
 * Only [0-9A-Za-z-] survive from the files, so the id is safe in JSON and
 * in logs. Missing pieces are written as "-" rather than failing: two hosts
 * that both lack a piece still differ in the others, and a same-host
 * transport additionally probes the peer before it is chosen.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transfer/segment_desc.h"

/* Reads the first line of path into out (cap bytes incl. NUL), keeping only
 * [0-9A-Za-z-]. Returns the number of characters kept (0 on failure). */
static size_t host_id_read_token(const char *path, char *out, size_t cap)
{
    char raw[128];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, raw, sizeof raw - 1);
    close(fd);
    if (n <= 0)
        return 0;
    size_t k = 0;
    for (ssize_t i = 0; i < n && raw[i] != '\n' && k + 1 < cap; i++) {
        char c = raw[i];
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            c == '-')
            out[k++] = c;
    }
    out[k] = '\0';
    return k;
}

static unsigned long long host_id_ns_inode(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return 0;
    return (unsigned long long)st.st_ino;
}

void cr__seg_host_id(char buf[CR__HOST_ID_MAX])
{
    char machine[64], boot[64];
    size_t nb = host_id_read_token("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
    if (!host_id_read_token("/etc/machine-id", machine, sizeof machine) &&
        !host_id_read_token("/var/lib/dbus/machine-id", machine, sizeof machine)) {
        if (nb)
            memcpy(machine, boot, nb + 1);
        else
            strcpy(machine, "-");
    }
    if (!nb)
        strcpy(boot, "-");
    /* At most 48 + 1 + 40 + 5 + 20 + 5 + 20 + NUL = 140 < CR__HOST_ID_MAX;
     * real machine/boot ids are 32 and 36 characters. */
    snprintf(buf, CR__HOST_ID_MAX, "%.48s/%.40s/net:%llu/pid:%llu", machine, boot,
             host_id_ns_inode("/proc/self/ns/net"), host_id_ns_inode("/proc/self/ns/pid"));
}
