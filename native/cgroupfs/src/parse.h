/*
 * Parsers for the small text files the koordlet reads every tick (cgroup knobs and
 * statistics, PSI, /proc key-value files). Pure functions over a byte buffer: no
 * allocation, no I/O, safe to call without the GIL. Each returns 0 or EBADMSG when
 * the content does not have the expected shape; Python turns that into
 * MalformedContentError. The pure-Python twins live in koordlet/system/cgroup/pyio.py.
 */
#ifndef KOORD_PARSE_H
#define KOORD_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* Number of values koord_parse_psi fills: some avg10/avg60/avg300 (hundredths), some
 * total, then the same four for "full". */
#define KOORD_PSI_VALUES 8

/* One integer, the first token of the buffer: "123\n", "-1", "max" (-> -1). */
int koord_parse_int(const char *buf, size_t len, int64_t *out);

/* "key value" lines (cpu.stat, memory.stat, /proc/meminfo with "Key:" keys). For every
 * wanted key, the integer after the first occurrence of that key; present[i] says
 * whether it was found. Lines of other keys are skipped without being parsed. */
int koord_parse_keys(const char *buf, size_t len, const char *const *keys, const size_t *keylens,
                     int nkeys, int64_t *values, unsigned char *present);

/* "some avg10=1.00 avg60=0.50 avg300=0.10 total=123" and the optional "full ..." line.
 * Averages are returned in hundredths (the kernel prints two decimals). The "some"
 * line is required; present[4..7] are 0 when there is no "full" line. */
int koord_parse_psi(const char *buf, size_t len, int64_t *values, unsigned char *present);

/* Most NUMA nodes koord_parse_nodes reports for one line. */
#define KOORD_MAX_NODES 64

/* The "N<node>=<value>" fields of the first line that starts with key (memory.numa_stat:
 * v1 "hierarchical_total=<sum> N0=.. N1=..", v2 "anon N0=.. N1=.."); the line's first token
 * is skipped. pairs receives node, value, node, value, ...; *count is the number of
 * fields, or -1 when no line starts with key. EBADMSG for a field of another shape or
 * more than max fields. */
int koord_parse_nodes(const char *buf, size_t len, const char *key, size_t keylen, int max, int64_t *pairs,
                      int *count);

#endif
