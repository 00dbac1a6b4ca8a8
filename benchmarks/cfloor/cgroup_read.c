/*
 * The C floor for benchmarks/cgroup_read.py: the same work as the koordlet's native
 * reader with no Python in between. Reads a list of "<kind> <path>" lines on stdin
 * (kind: i = integer, m = memory.stat keys, t = cpu.stat throttling keys, p = PSI), opens
 * every file once, then for each run preads each file from offset 0 and parses it with the
 * project's own parsers (native/cgroupfs/src/parse.c). Prints the CPU milliseconds of each
 * run.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "parse.h"

#define MAX_FILES 65536
#define BUF_SIZE 16384

static const char *const MEMORY_KEYS[] = {"total_inactive_anon", "total_active_anon", "total_unevictable",
                                          "total_inactive_file", "total_active_file"};
static const char *const THROTTLE_KEYS[] = {"nr_periods", "nr_throttled", "throttled_time"};

static double cpu_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    static int fds[MAX_FILES];
    static char kinds[MAX_FILES];
    static char buf[BUF_SIZE];
    size_t memory_lens[5], throttle_lens[3];
    char line[4096];
    int n = 0, runs = argc > 1 ? atoi(argv[1]) : 10;
    int64_t sink = 0;

    for (int k = 0; k < 5; k++)
        memory_lens[k] = strlen(MEMORY_KEYS[k]);
    for (int k = 0; k < 3; k++)
        throttle_lens[k] = strlen(THROTTLE_KEYS[k]);
    while (n < MAX_FILES && fgets(line, sizeof(line), stdin)) {
        line[strcspn(line, "\n")] = '\0';
        if (strlen(line) < 3)
            continue;
        kinds[n] = line[0];
        fds[n] = open(line + 2, O_RDONLY | O_CLOEXEC);
        if (fds[n] < 0) {
            perror(line + 2);
            return 1;
        }
        n++;
    }
    for (int r = 0; r < runs; r++) {
        double start = cpu_ms();
        for (int i = 0; i < n; i++) {
            int64_t values[8];
            unsigned char present[8];
            ssize_t len = pread(fds[i], buf, sizeof(buf), 0);

            if (len < 0)
                return 1;
            if (kinds[i] == 'i')
                koord_parse_int(buf, (size_t)len, values);
            else if (kinds[i] == 'p')
                koord_parse_psi(buf, (size_t)len, values, present);
            else if (kinds[i] == 'm')
                koord_parse_keys(buf, (size_t)len, MEMORY_KEYS, memory_lens, 5, values, present);
            else
                koord_parse_keys(buf, (size_t)len, THROTTLE_KEYS, throttle_lens, 3, values, present);
            sink += values[0];
        }
        printf("%.6f\n", cpu_ms() - start);
    }
    return sink == -42; /* keep the work observable */
}
