/* Declarations shared by the cffi cdef and perf.c; see perf.c. */
#ifndef KOORD_PERF_H
#define KOORD_PERF_H

#include <stddef.h>
#include <stdint.h>

int koord_perf_open(uint32_t type, uint64_t config, int pid, int cpu, int group_fd, unsigned long flags,
                    uint64_t read_format, int inherit);
long koord_perf_read_u64(int fd, uint64_t *buf, size_t count);
int koord_perf_close(int fd);

#endif
