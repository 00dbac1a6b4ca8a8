/*
 * Parsers for cgroup, PSI and /proc text files; see parse.h for the contracts.
 */
#include "parse.h"

#include <errno.h>
#include <string.h>

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* An optionally signed decimal at *pos; advances *pos past it. The token must end at
 * whitespace or at the end of the buffer. */
static int parse_decimal(const char *buf, size_t len, size_t *pos, int64_t *out)
{
    size_t i = *pos;
    int negative = 0;
    uint64_t acc = 0;
    uint64_t limit = (uint64_t)INT64_MAX;

    if (i < len && buf[i] == '-') {
        negative = 1;
        limit += 1; /* |INT64_MIN| */
        i++;
    }
    if (i >= len || !is_digit(buf[i]))
        return EBADMSG;
    for (; i < len && is_digit(buf[i]); i++) {
        uint64_t digit = (uint64_t)(buf[i] - '0');
        if (acc > (limit - digit) / 10)
            return EBADMSG; /* does not fit in int64 */
        acc = acc * 10 + digit;
    }
    if (i < len && !is_space(buf[i]))
        return EBADMSG;
    *pos = i;
    if (negative)
        *out = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
    else
        *out = (int64_t)acc;
    return 0;
}

int koord_parse_int(const char *buf, size_t len, int64_t *out)
{
    size_t i = 0;

    while (i < len && is_space(buf[i]))
        i++;
    if (len - i >= 3 && memcmp(buf + i, "max", 3) == 0 && (len - i == 3 || is_space(buf[i + 3]))) {
        *out = -1;
        return 0;
    }
    return parse_decimal(buf, len, &i, out);
}

int koord_parse_keys(const char *buf, size_t len, const char *const *keys, const size_t *keylens,
                     int nkeys, int64_t *values, unsigned char *present)
{
    size_t line = 0;
    int k;
    int found = 0;

    for (k = 0; k < nkeys; k++) {
        present[k] = 0;
        values[k] = 0;
    }
    while (line < len && found < nkeys) {
        const char *nl = memchr(buf + line, '\n', len - line);
        size_t end = nl ? (size_t)(nl - buf) : len;
        size_t key_end = line;

        while (key_end < end && buf[key_end] != ' ' && buf[key_end] != '\t')
            key_end++;
        for (k = 0; k < nkeys; k++) {
            size_t pos;

            if (present[k] || keylens[k] != key_end - line || memcmp(buf + line, keys[k], keylens[k]) != 0)
                continue;
            pos = key_end;
            while (pos < end && (buf[pos] == ' ' || buf[pos] == '\t'))
                pos++;
            if (parse_decimal(buf, end, &pos, &values[k]) != 0)
                return EBADMSG;
            present[k] = 1;
            found++;
            break;
        }
        line = end + 1;
    }
    return 0;
}

/* "12.34" -> 1234; digits after the second decimal are accepted and dropped. */
static int parse_hundredths(const char *buf, size_t len, size_t *pos, int64_t *out)
{
    size_t i = *pos;
    int64_t whole = 0;
    int64_t frac = 0;
    int digits = 0;

    if (i >= len || !is_digit(buf[i]))
        return EBADMSG;
    for (; i < len && is_digit(buf[i]); i++) {
        if (whole > (INT64_MAX / 100 - 9) / 10)
            return EBADMSG;
        whole = whole * 10 + (buf[i] - '0');
    }
    if (i < len && buf[i] == '.') {
        i++;
        if (i >= len || !is_digit(buf[i]))
            return EBADMSG;
        for (; i < len && is_digit(buf[i]); i++) {
            if (digits < 2)
                frac = frac * 10 + (buf[i] - '0');
            digits++;
        }
    }
    if (i < len && !is_space(buf[i]))
        return EBADMSG;
    for (; digits < 2; digits++)
        frac *= 10;
    *out = whole * 100 + frac;
    *pos = i;
    return 0;
}

/* One "some ..." or "full ..." line from pos to end into values[0..3]. */
static int parse_psi_line(const char *buf, size_t end, size_t pos, int64_t *values)
{
    static const char *const names[4] = {"avg10=", "avg60=", "avg300=", "total="};
    static const size_t lens[4] = {6, 6, 7, 6};
    unsigned char seen[4] = {0, 0, 0, 0};
    int f;

    while (pos < end) {
        size_t tok_end;

        while (pos < end && (buf[pos] == ' ' || buf[pos] == '\t'))
            pos++;
        if (pos >= end)
            break;
        for (f = 0; f < 4; f++) {
            if (end - pos >= lens[f] && memcmp(buf + pos, names[f], lens[f]) == 0)
                break;
        }
        if (f == 4) { /* a field a newer kernel added: skip it */
            while (pos < end && buf[pos] != ' ' && buf[pos] != '\t')
                pos++;
            continue;
        }
        tok_end = pos + lens[f];
        if (f == 3) {
            if (end - tok_end == 0 || buf[tok_end] == '-' ||
                parse_decimal(buf, end, &tok_end, &values[3]) != 0)
                return EBADMSG;
        } else if (parse_hundredths(buf, end, &tok_end, &values[f]) != 0) {
            return EBADMSG;
        }
        seen[f] = 1;
        pos = tok_end;
    }
    return seen[0] && seen[1] && seen[2] && seen[3] ? 0 : EBADMSG;
}

int koord_parse_psi(const char *buf, size_t len, int64_t *values, unsigned char *present)
{
    size_t line = 0;
    int i;

    for (i = 0; i < KOORD_PSI_VALUES; i++) {
        values[i] = 0;
        present[i] = 0;
    }
    while (line < len) {
        const char *nl = memchr(buf + line, '\n', len - line);
        size_t end = nl ? (size_t)(nl - buf) : len;
        int base = -1;

        if (end - line >= 5 && memcmp(buf + line, "some ", 5) == 0)
            base = 0;
        else if (end - line >= 5 && memcmp(buf + line, "full ", 5) == 0)
            base = 4;
        if (base >= 0) {
            if (parse_psi_line(buf, end, line + 5, values + base) != 0)
                return EBADMSG;
            for (i = 0; i < 4; i++)
                present[base + i] = 1;
        }
        line = end + 1;
    }
    return present[0] ? 0 : EBADMSG;
}

int koord_parse_nodes(const char *buf, size_t len, const char *key, size_t keylen, int max, int64_t *pairs,
                      int *count)
{
    size_t line = 0;

    *count = -1;
    while (line < len) {
        const char *nl = memchr(buf + line, '\n', len - line);
        size_t end = nl ? (size_t)(nl - buf) : len;
        size_t pos = line;
        int n = 0;

        if (end - line < keylen || memcmp(buf + line, key, keylen) != 0) {
            line = end + 1;
            continue;
        }
        while (pos < end && buf[pos] != ' ' && buf[pos] != '\t')
            pos++; /* the first token: "total=<sum>" or "anon" */
        for (;;) {
            int64_t node = 0;
            size_t digits;

            while (pos < end && (buf[pos] == ' ' || buf[pos] == '\t'))
                pos++;
            if (pos >= end)
                break;
            if (buf[pos] != 'N' || n >= max)
                return EBADMSG;
            for (digits = ++pos; pos < end && is_digit(buf[pos]) && pos - digits < 9; pos++)
                node = node * 10 + (buf[pos] - '0');
            if (pos == digits || pos >= end || buf[pos] != '=')
                return EBADMSG;
            pos++;
            if (pos >= end || buf[pos] == '-' || parse_decimal(buf, end, &pos, &pairs[2 * n + 1]) != 0)
                return EBADMSG;
            pairs[2 * n] = node;
            n++;
        }
        *count = n;
        return 0;
    }
    return 0;
}
