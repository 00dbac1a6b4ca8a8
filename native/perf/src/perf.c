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
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int koord_perf_open(uint32_t type, uint64_t config, int pid, int cpu, int group_fd, unsigned long flags)
{
    struct perf_event_attr attr;
    long fd;

    memset(&attr, 0, sizeof(attr));
    attr.size = sizeof(attr);
    attr.type = type;
    attr.config = config;
    attr.disabled = 1;
    attr.inherit = 1;
    attr.exclude_hv = 1;
    attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    fd = syscall(SYS_perf_event_open, &attr, pid, cpu, group_fd, flags);
    if (fd < 0)
        return -errno;
    return (int)fd;
}

int koord_perf_enable(int fd)
{
    if (ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) < 0)
        return -errno;
    return 0;
}

int koord_perf_disable(int fd)
{
    if (ioctl(fd, PERF_EVENT_IOC_DISABLE, 0) < 0)
        return -errno;
    return 0;
}

int koord_perf_read(int fd, uint64_t *value, uint64_t *enabled, uint64_t *running)
{
    uint64_t buf[3];
    ssize_t n;

    do {
        n = read(fd, buf, sizeof(buf));
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    if (n != (ssize_t)sizeof(buf))
        return -EIO;
    *value = buf[0];
    *enabled = buf[1];
    *running = buf[2];
    return 0;
}

int koord_perf_close(int fd)
{
    if (close(fd) < 0)
        return -errno;
    return 0;
}
