/*
 * The C floor for benchmarks/cgroup_read.py (K0) and benchmarks/koordlet_tick.py (K1): the
 * same work as the koordlet's readers with no Python in between. Reads a list of
 * "<kind> <path>" lines on stdin and prints the CPU milliseconds of each of argv[1] runs.
 * With argv[1] "serve", the list ends at an empty line, and each further line on stdin
 * asks for one run, answered at once (a benchmark interleaves these with its own work).
 *
 * Every file (kind i = integer, m = memory.stat keys, t = cpu.stat throttling keys,
 * p = PSI, u = memory.numa_stat's total lines, s = /proc/stat, n = a meminfo) is opened
 * once, then preaded from offset 0 on every run, as the native FileCache does (procfs and
 * sysfs regenerate their content on such a read), and parsed: with the project's own
 * parsers (native/cgroupfs/src/parse.c), /proc/stat's every "cpu" line's ten counters, a
 * meminfo's every "Name: value" line's value. Kind d lists a directory (NUMA nodes in
 * sysfs).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "parse.h"

#define MAX_FILES 65536
#define BUF_SIZE 65536

static const char *const MEMORY_KEYS[] = {"total_inactive_anon", "total_active_anon", "total_unevictable",
                                          "total_inactive_file", "total_active_file"};
static const char *const THROTTLE_KEYS[] = {"nr_periods", "nr_throttled", "throttled_time"};
static const char *const NUMA_KEYS[] = {"hierarchical_total=", "total="};

static double cpu_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Sum of the counters of every "cpu" line of /proc/stat. */
static int64_t parse_proc_stat(const char *buf, size_t len)
{
    int64_t sum = 0;
    const char *p = buf, *end = buf + len;

    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL)
            eol = end;
        if (eol - p > 3 && memcmp(p, "cpu", 3) == 0) {
            char *q = (char *)memchr(p, ' ', (size_t)(eol - p));
            for (int f = 0; q != NULL && q < eol && f < 10; f++)
                sum += strtoll(q, &q, 10);
        }
        p = eol + 1;
    }
    return sum;
}

/* Sum of the values of every "Name: value kB" line of a meminfo. */
static int64_t parse_meminfo(const char *buf, size_t len)
{
    int64_t sum = 0;
    const char *p = buf, *end = buf + len;

    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *colon;
        if (eol == NULL)
            eol = end;
        colon = memchr(p, ':', (size_t)(eol - p));
        if (colon != NULL)
            sum += strtoll(colon + 1, NULL, 10);
        p = eol + 1;
    }
    return sum;
}

static int64_t list_dir(const char *path)
{
    DIR *dir = opendir(path);
    struct dirent *entry;
    int64_t n = 0;

    if (dir == NULL)
        return -1;
    while ((entry = readdir(dir)) != NULL)
        n += entry->d_name[0] != '.';
    closedir(dir);
    return n;
}

/* The lengths of MEMORY_KEYS and THROTTLE_KEYS, set once by main. */
static size_t memory_lens[5], throttle_lens[3];

/* One run over every file: its CPU milliseconds. */
static double run(int n, const char *kinds, const int *fds, char *const *paths, int64_t *sink)
{
    static char buf[BUF_SIZE];
    double start = cpu_ms();

    for (int i = 0; i < n; i++) {
        int64_t values[8];
        unsigned char present[8];
        ssize_t len;

        if (kinds[i] == 'd') {
            *sink += list_dir(paths[i]);
            continue;
        }
        len = pread(fds[i], buf, sizeof(buf), 0);
        if (len < 0) {
            perror("pread");
            exit(1);
        }
        values[0] = 0;
        if (kinds[i] == 'i')
            koord_parse_int(buf, (size_t)len, values);
        else if (kinds[i] == 'p')
            koord_parse_psi(buf, (size_t)len, values, present);
        else if (kinds[i] == 'm')
            koord_parse_keys(buf, (size_t)len, MEMORY_KEYS, memory_lens, 5, values, present);
        else if (kinds[i] == 't')
            koord_parse_keys(buf, (size_t)len, THROTTLE_KEYS, throttle_lens, 3, values, present);
        else if (kinds[i] == 'u') {
            int64_t pairs[2 * KOORD_MAX_NODES];
            int count;

            for (int k = 0; k < 2; k++) { /* both lines, as the koordlet asks for both */
                koord_parse_nodes(buf, (size_t)len, NUMA_KEYS[k], strlen(NUMA_KEYS[k]), KOORD_MAX_NODES, pairs,
                                  &count);
                values[0] += count > 0 ? pairs[1] : 0;
            }
        }
        else if (kinds[i] == 's')
            values[0] = parse_proc_stat(buf, (size_t)len);
        else
            values[0] = parse_meminfo(buf, (size_t)len);
        *sink += values[0];
    }
    return cpu_ms() - start;
}

int main(int argc, char **argv)
{
    static int fds[MAX_FILES];
    static char kinds[MAX_FILES];
    static char *paths[MAX_FILES];
    char line[4096];
    int serve = argc > 1 && strcmp(argv[1], "serve") == 0;
    int n = 0, runs = argc > 1 && !serve ? atoi(argv[1]) : 10;
    int64_t sink = 0;

    for (int k = 0; k < 5; k++)
        memory_lens[k] = strlen(MEMORY_KEYS[k]);
    for (int k = 0; k < 3; k++)
        throttle_lens[k] = strlen(THROTTLE_KEYS[k]);
    while (n < MAX_FILES && fgets(line, sizeof(line), stdin)) {
        line[strcspn(line, "\n")] = '\0';
        if (serve && line[0] == '\0')
            break;
        if (strlen(line) < 3)
            continue;
        kinds[n] = line[0];
        fds[n] = -1;
        if (line[0] == 'd') {
            paths[n] = strdup(line + 2);
        } else if ((fds[n] = open(line + 2, O_RDONLY | O_CLOEXEC)) < 0) {
            perror(line + 2);
            return 1;
        }
        n++;
    }
    if (serve) {
        while (fgets(line, sizeof(line), stdin)) {
            printf("%.6f\n", run(n, kinds, fds, paths, &sink));
            fflush(stdout);
        }
    } else {
        for (int r = 0; r < runs; r++)
            printf("%.6f\n", run(n, kinds, fds, paths, &sink));
    }
    return sink == -42; /* keep the work observable */
}
