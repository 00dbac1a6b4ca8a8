/*
 * Thin wrapper over perf_event_open(2) for koordlet (cffi API mode).
 *
 * Each function does one syscall job and reports failure as -errno; the Python
 * wrapper (koordlet.system.perf) turns that into OSError and decides what it means
 * (ENOENT: no PMU for this event, EACCES/EPERM: perf_event_paranoid, ...).
 */
#include "perf.h"

#include <errno.h>
#include <linux/perf_event.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A disabled counter. Cgroup and group leaders are opened with inherit = 0: a cgroup
 * event already counts every task of the cgroup, and group reads need it off. */
int koord_perf_open(uint32_t type, uint64_t config, int pid, int cpu, int group_fd, unsigned long flags,
                    uint64_t read_format, int inherit)
{
    struct perf_event_attr attr;
    long fd;

    memset(&attr, 0, sizeof(attr));
    attr.size = sizeof(attr);
    attr.type = type;
    attr.config = config;
    attr.disabled = group_fd < 0 ? 1 : 0; /* members follow their leader */
    attr.inherit = inherit ? 1 : 0;
    attr.exclude_hv = 1;
    attr.read_format = read_format;
    fd = syscall(SYS_perf_event_open, &attr, pid, cpu, group_fd, flags);
    if (fd < 0)
        return -errno;
    return (int)fd;
}

/* Read up to count u64 values; returns how many were read or -errno. */
long koord_perf_read_u64(int fd, uint64_t *buf, size_t count)
{
    ssize_t n;

    do {
        n = read(fd, buf, count * sizeof(uint64_t));
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    if (n % (ssize_t)sizeof(uint64_t) != 0)
        return -EIO;
    return (long)(n / (ssize_t)sizeof(uint64_t));
}

int koord_perf_close(int fd)
{
    if (close(fd) < 0)
        return -errno;
    return 0;
}
