# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The scheduler's fused filter/score kernel: controlplane.scheduler.kernel.twin in C.

Every function mirrors its twin line for line (same integer arithmetic, Go's truncating
division, the same xorshift64* tie-break sequence); the table arrives as the flat
row-major buffers of controlplane.scheduler.kernel.table.NodeTable.
"""

from libc.limits cimport LLONG_MAX, LLONG_MIN
from libc.math cimport fabs, log, round, sqrt
from libc.stdlib cimport free, malloc
from libc.string cimport memset

DEF MAX_NODE_SCORE = 100
DEF LEAST_ALLOCATED = 0
DEF MOST_ALLOCATED = 1
DEF MAX_EXTRAS = 16
DEF MAX_PARTS = 256
DEF MAX_DOMAINS = 64
# Extra.normalize (controlplane.scheduler.kernel.twin)
DEF DEFAULT_NORMALIZE = 0
DEF MIN_MAX = 1
DEF SPREAD = 2
DEF NO_NORMALIZE = 3


cdef inline unsigned long long _next(unsigned long long[:] state) noexcept nogil:
    cdef unsigned long long x = state[0]
    x ^= x >> 12
    x ^= x << 25
    x ^= x >> 27
    state[0] = x
    return (x * 2685821657736338717ULL) >> 33


cdef inline bint _ignored(const unsigned char* ignored, Py_ssize_t length, Py_ssize_t i) noexcept nogil:
    return i < length and ignored[i] != 0


cdef inline long long _broken_linear(long long p, const long long[:] xs, const long long[:] ys) noexcept nogil:
    cdef Py_ssize_t k
    cdef Py_ssize_t n = xs.shape[0]
    for k in range(n):
        if p <= xs[k]:
            if k == 0:
                return ys[0]
            # C division truncates toward zero, as Go's does
            return ys[k - 1] + (ys[k] - ys[k - 1]) * (p - xs[k - 1]) / (xs[k] - xs[k - 1])
    if ys.shape[0]:
        return ys[ys.shape[0] - 1]
    return 0


cdef inline long long _fit_resource(int strategy, long long requested, long long capacity,
                                    const long long[:] xs, const long long[:] ys) noexcept nogil:
    cdef long long utilization
    if strategy == LEAST_ALLOCATED:
        if requested > capacity:
            return 0
        return (capacity - requested) * MAX_NODE_SCORE / capacity
    if strategy == MOST_ALLOCATED:
        if requested > capacity:
            requested = capacity
        return requested * MAX_NODE_SCORE / capacity
    if requested > capacity:
        utilization = MAX_NODE_SCORE
    else:
        utilization = requested * MAX_NODE_SCORE / capacity
    return _broken_linear(utilization, xs, ys)


cdef class Kernel:
    """One table's buffers and one score configuration, bound for many ``find`` calls. It
    holds buffer views, so the table drops its binding before it resizes a buffer."""

    cdef const long long[:] alloc
    cdef const long long[:] req
    cdef const long long[:] nonzero
    cdef const long long[:] pods_alloc
    cdef const long long[:] pods
    cdef const unsigned char[:] scalar
    cdef Py_ssize_t width
    cdef int strategy
    cdef const long long[:] fit_weights
    cdef const long long[:] xs
    cdef const long long[:] ys
    cdef const unsigned char[:] balanced
    cdef long long fit_plugin_weight, balanced_plugin_weight

    def __init__(self, table, cfg):
        self.alloc = table.alloc
        self.req = table.req
        self.nonzero = table.nonzero
        self.pods_alloc = table.pods_alloc
        self.pods = table.pods
        self.scalar = table.scalar
        self.width = len(table.resources)
        self.strategy = cfg.strategy
        self.fit_weights = cfg.fit_weights
        self.xs = cfg.shape_utilization
        self.ys = cfg.shape_score
        self.balanced = cfg.balanced
        self.fit_plugin_weight = cfg.fit_plugin_weight
        self.balanced_plugin_weight = cfg.balanced_plugin_weight

    cdef inline bint _fits(self, Py_ssize_t i, const long long[:] req) noexcept nogil:
        cdef Py_ssize_t r, base = i * self.width
        cdef Py_ssize_t m = self.width if self.width < req.shape[0] else req.shape[0]
        cdef long long want
        if self.pods[i] + 1 > self.pods_alloc[i]:
            return False
        for r in range(m):
            want = req[r]
            if want > 0 and want > self.alloc[base + r] - self.req[base + r]:
                return False
        return True

    cdef long long _fit_score(self, Py_ssize_t i, const long long[:] req, const long long[:] nz) noexcept nogil:
        cdef Py_ssize_t r, base = i * self.width
        cdef Py_ssize_t m = self.width if self.width < self.fit_weights.shape[0] else self.fit_weights.shape[0]
        cdef long long weight, want, capacity, requested, part
        cdef long long total = 0, weights = 0
        for r in range(m):
            weight = self.fit_weights[r]
            want = req[r] if r < req.shape[0] else 0
            if weight == 0 or (want == 0 and self.scalar[r]):
                continue
            capacity = self.alloc[base + r]
            if capacity == 0:
                continue
            if r < 2:
                requested = self.nonzero[2 * i + r] + nz[r]
            else:
                requested = self.req[base + r] + want
            part = _fit_resource(self.strategy, requested, capacity, self.xs, self.ys)
            if self.strategy == LEAST_ALLOCATED or self.strategy == MOST_ALLOCATED or part > 0:
                total += part * weight
                weights += weight
        if weights == 0:
            return 0
        if self.strategy == LEAST_ALLOCATED or self.strategy == MOST_ALLOCATED:
            return total / weights
        return <long long>(<double>total / <double>weights + 0.5)

    cdef long long _balanced(self, Py_ssize_t i, const long long[:] req) noexcept nogil:
        cdef Py_ssize_t r, base = i * self.width
        cdef Py_ssize_t m = self.width if self.width < self.balanced.shape[0] else self.balanced.shape[0]
        cdef long long want, capacity
        cdef double fraction, first = 0.0, second = 0.0, total = 0.0, squares = 0.0, mean, std = 0.0
        cdef int count = 0
        cdef bint requests_any = False
        cdef double fractions[64]
        for r in range(m):
            if not self.balanced[r]:
                continue
            want = req[r] if r < req.shape[0] else 0
            if want:
                requests_any = True
            if want == 0 and self.scalar[r]:
                continue
            capacity = self.alloc[base + r]
            if capacity == 0:
                continue
            fraction = <double>(self.req[base + r] + want) / <double>capacity
            if fraction > 1:
                fraction = 1.0
            if count < 64:
                fractions[count] = fraction
            count += 1
        if not requests_any:
            return -1
        if count == 2:
            std = fabs((fractions[0] - fractions[1]) / 2)
        elif count > 2:
            for r in range(count if count < 64 else 64):
                total += fractions[r]
            mean = total / count
            for r in range(count if count < 64 else 64):
                squares += (fractions[r] - mean) * (fractions[r] - mean)
            std = sqrt(squares / count)
        return <long long>((1 - std) * MAX_NODE_SCORE)

    def score(self, Py_ssize_t i, pod):
        """(fit, balanced) of row ``i``, as the twin's ``score``."""
        cdef const long long[:] req = pod.req
        cdef const long long[:] nz = pod.nonzero
        return self._fit_score(i, req, nz), self._balanced(i, req)

    def find(self, pod, const unsigned char[:] mask, Py_ssize_t start, Py_ssize_t want,
             unsigned long long[:] state, extras=None):
        """(chosen row or -1, feasible, processed, best total) over the rows of ``mask`` (0 =
        rejected by another filter), as the twin's ``find`` (``extras``: its ``Extra``s)."""
        if extras:
            return self._find_normalized(pod, mask, start, want, state, extras)
        cdef const long long[:] req = pod.req
        cdef const long long[:] nz = pod.nonzero
        cdef Py_ssize_t j, i, chosen = -1, feasible = 0, processed = 0
        cdef long long best = -1, total, balanced
        cdef unsigned long long ties = 0
        cdef Py_ssize_t n = mask.shape[0]
        with nogil:
            for j in range(n):
                if feasible >= want:
                    break
                i = (start + j) % n
                processed += 1
                if not mask[i] or not self._fits(i, req):
                    continue
                feasible += 1
                balanced = self._balanced(i, req)
                if balanced < 0:
                    balanced = 0
                total = self._fit_score(i, req, nz) * self.fit_plugin_weight + balanced * self.balanced_plugin_weight
                if total > best:
                    chosen = i
                    best = total
                    ties = 1
                elif total == best:
                    ties += 1
                    if _next(state) % ties == 0:
                        chosen = i
        return chosen, feasible, processed, best

    def _find_normalized(self, pod, const unsigned char[:] mask, Py_ssize_t start, Py_ssize_t want,
                         unsigned long long[:] state, extras):
        cdef const long long[:] req = pod.req
        cdef const long long[:] nz = pod.nonzero
        cdef Py_ssize_t n = mask.shape[0]
        cdef int nextra = len(extras), nparts = 0, ndomains = 0, x, p, q
        cdef const unsigned char* part_ptr[MAX_PARTS]
        cdef Py_ssize_t part_len[MAX_PARTS]
        cdef long long part_weight[MAX_PARTS]
        cdef int part_owner[MAX_PARTS]
        cdef const long long* dom_ids[MAX_DOMAINS]
        cdef Py_ssize_t dom_ids_len[MAX_DOMAINS]
        cdef const long long* dom_values[MAX_DOMAINS]
        cdef Py_ssize_t dom_values_len[MAX_DOMAINS]
        cdef long long dom_skew[MAX_DOMAINS]
        cdef bint dom_by_row[MAX_DOMAINS]
        cdef long long dom_absent[MAX_DOMAINS]
        cdef int dom_owner[MAX_DOMAINS]
        cdef double dom_weight[MAX_DOMAINS]
        cdef long long extra_weight[MAX_EXTRAS]
        cdef long long highest[MAX_EXTRAS]
        cdef long long lowest[MAX_EXTRAS]
        cdef int extra_mode[MAX_EXTRAS]
        cdef bint extra_reverse[MAX_EXTRAS]
        cdef const unsigned char* ignored_ptr[MAX_EXTRAS]
        cdef Py_ssize_t ignored_len[MAX_EXTRAS]
        cdef const unsigned char[:] view
        cdef const long long[:] ids_view
        cdef const long long[:] values_view
        if nextra > MAX_EXTRAS:
            raise ValueError(f"at most {MAX_EXTRAS} normalized score plug-ins")
        views = []  # keeps the buffers alive while their pointers are used
        for x, extra in enumerate(extras):
            extra_weight[x] = extra.weight
            extra_reverse[x] = extra.reverse
            extra_mode[x] = extra.normalize
            if extra_mode[x] == MIN_MAX:
                highest[x] = LLONG_MIN
            else:
                highest[x] = 0
            lowest[x] = LLONG_MAX
            view = extra.ignored
            views.append(view)
            ignored_len[x] = view.shape[0]
            ignored_ptr[x] = &view[0] if view.shape[0] else NULL
            for part, weight in extra.parts:
                if nparts >= MAX_PARTS:
                    raise ValueError(f"at most {MAX_PARTS} score parts")
                view = part
                views.append(view)
                part_len[nparts] = view.shape[0]
                part_ptr[nparts] = &view[0] if view.shape[0] else NULL
                part_weight[nparts] = weight
                part_owner[nparts] = x
                nparts += 1
            for domains in extra.domains:
                if ndomains >= MAX_DOMAINS:
                    raise ValueError(f"at most {MAX_DOMAINS} score domain lookups")
                ids_view = domains.ids
                values_view = domains.values
                views.append(ids_view)
                views.append(values_view)
                dom_ids_len[ndomains] = ids_view.shape[0]
                dom_ids[ndomains] = &ids_view[0] if ids_view.shape[0] else NULL
                dom_values_len[ndomains] = values_view.shape[0]
                dom_values[ndomains] = &values_view[0] if values_view.shape[0] else NULL
                dom_skew[ndomains] = domains.max_skew
                dom_by_row[ndomains] = domains.by_row
                dom_absent[ndomains] = domains.absent
                dom_owner[ndomains] = x
                ndomains += 1
        cdef Py_ssize_t size = want if want < n else n
        if size < 1:
            size = 1
        cdef Py_ssize_t seen_size = 1
        for q in range(ndomains):
            if extra_mode[dom_owner[q]] == SPREAD and not dom_by_row[q] and dom_values_len[q] > seen_size:
                seen_size = dom_values_len[q]
        cdef Py_ssize_t* rows = <Py_ssize_t*>malloc(size * sizeof(Py_ssize_t))
        cdef long long* base = <long long*>malloc(size * sizeof(long long))
        cdef long long* raw = <long long*>malloc(size * (nextra if nextra else 1) * sizeof(long long))
        cdef unsigned char* seen = <unsigned char*>malloc(seen_size)
        if rows == NULL or base == NULL or raw == NULL or seen == NULL:
            free(rows)
            free(base)
            free(raw)
            free(seen)
            raise MemoryError()
        cdef Py_ssize_t j, i, k, found = 0, processed = 0, chosen = -1, domains_size
        cdef long long balanced, total, best = -1, score, domain, r, diff
        cdef unsigned long long ties = 0
        cdef double spread
        try:
            with nogil:
                for j in range(n):
                    if found >= want:
                        break
                    i = (start + j) % n
                    processed += 1
                    if not mask[i] or not self._fits(i, req):
                        continue
                    balanced = self._balanced(i, req)
                    if balanced < 0:
                        balanced = 0
                    rows[found] = i
                    base[found] = (self._fit_score(i, req, nz) * self.fit_plugin_weight
                                   + balanced * self.balanced_plugin_weight)
                    for x in range(nextra):
                        raw[found * nextra + x] = 0
                    for p in range(nparts):
                        if i < part_len[p] and part_ptr[p][i]:
                            raw[found * nextra + part_owner[p]] += part_weight[p]
                    for q in range(ndomains):
                        if extra_mode[dom_owner[q]] == SPREAD:
                            continue
                        domain = dom_ids[q][i] if i < dom_ids_len[q] else -1
                        if 0 <= domain < dom_values_len[q]:
                            raw[found * nextra + dom_owner[q]] += dom_values[q][domain]
                    for x in range(nextra):
                        if extra_mode[x] == SPREAD:
                            continue
                        if raw[found * nextra + x] > highest[x]:
                            highest[x] = raw[found * nextra + x]
                        if raw[found * nextra + x] < lowest[x]:
                            lowest[x] = raw[found * nextra + x]
                    found += 1
                # PodTopologySpread: each domain lookup's weight is log(number of distinct
                # domains among the window's scored rows + 2), so its raw scores wait for the window
                for q in range(ndomains):
                    x = dom_owner[q]
                    if extra_mode[x] != SPREAD:
                        continue
                    domains_size = 0
                    if dom_by_row[q]:
                        for k in range(found):
                            if not _ignored(ignored_ptr[x], ignored_len[x], rows[k]):
                                domains_size += 1
                    else:
                        memset(seen, 0, dom_values_len[q])
                        for k in range(found):
                            if _ignored(ignored_ptr[x], ignored_len[x], rows[k]):
                                continue
                            domain = dom_ids[q][rows[k]] if rows[k] < dom_ids_len[q] else -1
                            if domain < 0:
                                domain = dom_absent[q]
                            if 0 <= domain < dom_values_len[q] and not seen[domain]:
                                seen[domain] = 1
                                domains_size += 1
                    dom_weight[q] = log(<double>(domains_size + 2))
                for x in range(nextra):
                    if extra_mode[x] != SPREAD:
                        continue
                    for k in range(found):
                        if _ignored(ignored_ptr[x], ignored_len[x], rows[k]):
                            continue
                        spread = 0.0
                        for q in range(ndomains):
                            if dom_owner[q] != x:
                                continue
                            domain = dom_ids[q][rows[k]] if rows[k] < dom_ids_len[q] else -1
                            if domain < 0:
                                continue
                            if dom_by_row[q]:
                                domain = rows[k]
                            r = dom_values[q][domain] if 0 <= domain < dom_values_len[q] else 0
                            spread += <double>r * dom_weight[q] + <double>(dom_skew[q] - 1)
                        r = <long long>round(spread)
                        raw[k * nextra + x] = r
                        if r > highest[x]:
                            highest[x] = r
                        if r < lowest[x]:
                            lowest[x] = r
                for k in range(found):
                    total = base[k]
                    for x in range(nextra):
                        r = raw[k * nextra + x]
                        if extra_mode[x] == SPREAD:
                            if _ignored(ignored_ptr[x], ignored_len[x], rows[k]):
                                score = 0
                            elif highest[x] == 0:
                                score = MAX_NODE_SCORE
                            else:
                                score = MAX_NODE_SCORE * (highest[x] + lowest[x] - r) / highest[x]
                        elif extra_mode[x] == NO_NORMALIZE:
                            score = r
                        elif extra_mode[x] == MIN_MAX:
                            diff = highest[x] - lowest[x]
                            if diff > 0:
                                score = <long long>(<double>MAX_NODE_SCORE * (<double>(r - lowest[x]) / <double>diff))
                            else:
                                score = 0
                        elif highest[x] == 0:
                            score = MAX_NODE_SCORE if extra_reverse[x] else 0
                        else:
                            score = MAX_NODE_SCORE * r / highest[x]
                            if extra_reverse[x]:
                                score = MAX_NODE_SCORE - score
                        total += extra_weight[x] * score
                    if total > best:
                        chosen = rows[k]
                        best = total
                        ties = 1
                    elif total == best:
                        ties += 1
                        if _next(state) % ties == 0:
                            chosen = rows[k]
        finally:
            free(rows)
            free(base)
            free(raw)
            free(seen)
        return chosen, found, processed, best

    def fit_mask(self, pod, const unsigned char[:] mask, unsigned char[:] out):
        """Sets ``out[i]`` to 1 for the rows of ``mask`` NodeResourcesFit's filter passes, as
        the twin's ``fit_mask``."""
        cdef const long long[:] req = pod.req
        cdef Py_ssize_t i
        cdef Py_ssize_t n = mask.shape[0] if mask.shape[0] < out.shape[0] else out.shape[0]
        with nogil:
            for i in range(n):
                out[i] = 1 if mask[i] and self._fits(i, req) else 0

    def diagnose(self, pod, const unsigned char[:] mask, long long[:] counts):
        """Adds to ``counts`` (code 0 "Too many pods", 1 + column "Insufficient <resource>")
        every reason of every row of ``mask``, as the twin's ``diagnose``."""
        cdef const long long[:] req = pod.req
        cdef Py_ssize_t i, r, base
        cdef Py_ssize_t m = self.width if self.width < req.shape[0] else req.shape[0]
        cdef long long want
        cdef Py_ssize_t n = mask.shape[0]
        with nogil:
            for i in range(n):
                if not mask[i]:
                    continue
                if self.pods[i] + 1 > self.pods_alloc[i]:
                    counts[0] += 1
                base = i * self.width
                for r in range(m):
                    want = req[r]
                    if want > 0 and want > self.alloc[base + r] - self.req[base + r]:
                        counts[1 + r] += 1
