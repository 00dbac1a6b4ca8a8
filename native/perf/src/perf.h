/* Declarations shared by the cffi cdef and perf.c; see perf.c. */
#ifndef KOORD_PERF_H
#define KOORD_PERF_H

#include <stdint.h>

int koord_perf_open(uint32_t type, uint64_t config, int pid, int cpu, int group_fd, unsigned long flags);
int koord_perf_enable(int fd);
int koord_perf_disable(int fd);
int koord_perf_read(int fd, uint64_t *value, uint64_t *enabled, uint64_t *running);
int koord_perf_close(int fd);

#endif
