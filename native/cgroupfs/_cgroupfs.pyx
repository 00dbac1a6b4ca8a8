# cython: language_level=3
"""Batch reader and parsers for cgroup and procfs files (accelerator; twin: koordlet.system.cgroup.pyio).

Two ways to read many small files with the GIL released:

* ``read_dirs``: one-shot; each directory is opened once (O_DIRECTORY), each file with
  openat() under it. A failure is reported per file as a positive errno in place of its
  bytes, so one vanished cgroup never breaks a batch.
* ``FileCache.read``: the hot path of the collectors. Each file is opened once and kept;
  every later read is a pread() at offset 0, parsed in C (an integer, chosen keys of a
  "key value" file, a PSI file, or the per-node fields of memory.numa_stat lines). A failure is an ``OSError`` in place of the value and
  drops the kept descriptor (a removed cgroup answers ENODEV).

A read that returns less than the space left in the buffer is taken as end of file: the
kernel's seq_file and kernfs readers fill the user buffer unless they reach the end.
Python decides what an errno means (koordlet.system.errors).
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.errno cimport errno, EINTR
from libc.stdint cimport int64_t
from libc.stdlib cimport malloc, free, realloc, calloc
from libc.string cimport memcpy
from posix.fcntl cimport O_RDONLY, O_CLOEXEC, open as c_open
from posix.unistd cimport close, read, pread

import os as _os

cdef extern from "<fcntl.h>" nogil:
    int openat(int dirfd, const char *pathname, int flags)
    int O_DIRECTORY

cdef extern from "parse.h" nogil:
    int KOORD_PSI_VALUES
    int koord_parse_int(const char *buf, size_t len, int64_t *out)
    int koord_parse_keys(const char *buf, size_t len, const char *const *keys, const size_t *keylens,
                         int nkeys, int64_t *values, unsigned char *present)
    int koord_parse_psi(const char *buf, size_t len, int64_t *values, unsigned char *present)
    int KOORD_MAX_NODES
    int koord_parse_nodes(const char *buf, size_t len, const char *key, size_t keylen, int max,
                          int64_t *pairs, int *count)

cdef enum:
    CHUNK = 4096
    SCRATCH = 16384
    ENOENT_ = 2
    ENOMEM_ = 12
    EBADMSG_ = 74

cdef enum:
    K_RAW = 0
    K_INT = 1
    K_KEYS = 2
    K_PSI = 3
    K_NODES = 4

#: what FileCache.read returns for a request: the bytes, one integer, a tuple of
#: integers (None where a key is absent), the eight PSI values (None where absent), or
#: for each key the ((node, value), ...) fields of its memory.numa_stat line (None
#: where no line starts with it)
KIND_RAW = K_RAW
KIND_INT = K_INT
KIND_KEYS = K_KEYS
KIND_PSI = K_PSI
KIND_NODES = K_NODES

#: int64 slots of one key of a K_NODES request: the field count, then node, value pairs
cdef Py_ssize_t NODE_STRIDE = 1 + 2 * KOORD_MAX_NODES


cdef int _read_all(int fd, char **out, Py_ssize_t *out_len) noexcept nogil:
    """Read fd to EOF into a malloc'd buffer; returns 0 or an errno."""
    cdef Py_ssize_t cap = CHUNK
    cdef Py_ssize_t size = 0
    cdef Py_ssize_t n
    cdef char *buf = <char *>malloc(cap)
    cdef char *grown
    if buf == NULL:
        return ENOMEM_
    while True:
        if size == cap:
            cap *= 2
            grown = <char *>realloc(buf, cap)
            if grown == NULL:
                free(buf)
                return ENOMEM_
            buf = grown
        n = read(fd, buf + size, cap - size)
        if n < 0:
            if errno == EINTR:
                continue
            n = errno
            free(buf)
            return <int>n
        if n == 0:
            break
        size += n
    out[0] = buf
    out_len[0] = size
    return 0


def read_dirs(list dirs, list names):
    """Read every file of ``names`` under every directory of ``dirs``.

    ``dirs`` and ``names`` are lists of bytes (resolved paths / plain file names).
    Returns one list per directory, one entry per name: ``bytes`` or a positive ``int``
    errno. A directory that cannot be opened yields its errno for all of its names.
    """
    cdef Py_ssize_t nd = len(dirs)
    cdef Py_ssize_t nn = len(names)
    cdef Py_ssize_t total = nd * nn
    cdef Py_ssize_t i, j, k
    cdef int dfd, fd, err
    cdef char **bufs
    cdef Py_ssize_t *lens
    cdef int *errs
    cdef const char **cdirs
    cdef const char **cnames
    cdef list dir_refs = [bytes(d) for d in dirs]
    cdef list name_refs = [bytes(n) for n in names]
    if total == 0:
        return [[] for _ in range(nd)]
    bufs = <char **>calloc(total, sizeof(char *))
    lens = <Py_ssize_t *>malloc(total * sizeof(Py_ssize_t))
    errs = <int *>malloc(total * sizeof(int))
    cdirs = <const char **>malloc(nd * sizeof(char *))
    cnames = <const char **>malloc(nn * sizeof(char *))
    if bufs == NULL or lens == NULL or errs == NULL or cdirs == NULL or cnames == NULL:
        free(bufs); free(lens); free(errs); free(cdirs); free(cnames)
        raise MemoryError()
    for i in range(nd):
        cdirs[i] = <bytes>dir_refs[i]
    for j in range(nn):
        cnames[j] = <bytes>name_refs[j]
    with nogil:
        for i in range(nd):
            dfd = openat(-100, cdirs[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC)  # AT_FDCWD
            err = errno if dfd < 0 else 0
            for j in range(nn):
                k = i * nn + j
                lens[k] = 0
                if dfd < 0:
                    errs[k] = err
                    continue
                fd = openat(dfd, cnames[j], O_RDONLY | O_CLOEXEC)
                if fd < 0:
                    errs[k] = errno
                    continue
                errs[k] = _read_all(fd, &bufs[k], &lens[k])
                close(fd)
            if dfd >= 0:
                close(dfd)
    cdef list result = []
    cdef list row
    try:
        for i in range(nd):
            row = []
            for j in range(nn):
                k = i * nn + j
                if errs[k]:
                    row.append(errs[k])
                else:
                    row.append(bufs[k][:lens[k]])
            result.append(row)
    finally:
        for k in range(total):
            free(bufs[k])
        free(bufs); free(lens); free(errs); free(cdirs); free(cnames)
    return result


cdef object _malformed():
    return OSError(EBADMSG_, _os.strerror(EBADMSG_))


def parse_int(bytes data):
    """The first integer of ``data`` (``max`` is -1); OSError(EBADMSG) when there is none."""
    cdef int64_t value = 0
    if koord_parse_int(data, len(data), &value) != 0:
        raise _malformed()
    return value


cdef tuple _values(int64_t *values, unsigned char *present, Py_ssize_t n):
    """The tuple built in place (no intermediate list: one is built per file read)."""
    cdef Py_ssize_t i
    cdef tuple out = PyTuple_New(n)
    cdef object item
    for i in range(n):
        item = values[i] if present[i] else None
        Py_INCREF(item)
        PyTuple_SET_ITEM(out, i, item)
    return out


cdef tuple _nodes(int64_t *values, Py_ssize_t nkeys):
    """Per key: None (no such line) or ((node, value), ...), from NODE_STRIDE slots each."""
    cdef Py_ssize_t j, f
    cdef int64_t *base
    cdef tuple out = PyTuple_New(nkeys)
    cdef object item
    for j in range(nkeys):
        base = &values[j * NODE_STRIDE]
        if base[0] < 0:
            item = None
        else:
            item = tuple([(base[1 + 2 * f], base[2 + 2 * f]) for f in range(base[0])])
        Py_INCREF(item)
        PyTuple_SET_ITEM(out, j, item)
    return out


cdef int _parse_nodes(const char *buf, size_t length, const char **ckeys, size_t *klens, Py_ssize_t nkeys,
                      int64_t *values) noexcept nogil:
    cdef Py_ssize_t j
    cdef int count, err
    for j in range(nkeys):
        err = koord_parse_nodes(buf, length, ckeys[j], klens[j], KOORD_MAX_NODES,
                                &values[j * NODE_STRIDE + 1], &count)
        values[j * NODE_STRIDE] = count
        if err != 0:
            return err
    return 0


def parse_nodes(bytes data, tuple keys):
    """For each key (bytes), the ``N<node>=<value>`` fields of the first line starting with
    it as ((node, value), ...), or None when there is no such line."""
    cdef Py_ssize_t n = len(keys)
    cdef Py_ssize_t i
    cdef const char **ckeys = <const char **>malloc((n + 1) * sizeof(char *))
    cdef size_t *klens = <size_t *>malloc((n + 1) * sizeof(size_t))
    cdef int64_t *values = <int64_t *>malloc((n + 1) * NODE_STRIDE * sizeof(int64_t))
    try:
        if ckeys == NULL or klens == NULL or values == NULL:
            raise MemoryError()
        for i in range(n):
            ckeys[i] = <bytes>keys[i]
            klens[i] = len(<bytes>keys[i])
        if _parse_nodes(data, len(data), ckeys, klens, n, values) != 0:
            raise _malformed()
        return _nodes(values, n)
    finally:
        free(ckeys); free(klens); free(values)


def parse_keys(bytes data, tuple keys):
    """For each key (bytes), the integer after its first occurrence at a line start, or None."""
    cdef Py_ssize_t n = len(keys)
    cdef Py_ssize_t i
    cdef const char **ckeys = <const char **>malloc((n + 1) * sizeof(char *))
    cdef size_t *klens = <size_t *>malloc((n + 1) * sizeof(size_t))
    cdef int64_t *values = <int64_t *>malloc((n + 1) * sizeof(int64_t))
    cdef unsigned char *present = <unsigned char *>malloc(n + 1)
    cdef int rc
    try:
        if ckeys == NULL or klens == NULL or values == NULL or present == NULL:
            raise MemoryError()
        for i in range(n):
            ckeys[i] = <bytes>keys[i]
            klens[i] = len(<bytes>keys[i])
        rc = koord_parse_keys(data, len(data), ckeys, klens, <int>n, values, present)
        if rc != 0:
            raise _malformed()
        return _values(values, present, n)
    finally:
        free(ckeys); free(klens); free(values); free(present)


def parse_psi(bytes data):
    """(some avg10, avg60, avg300, total, full avg10, avg60, avg300, total); averages in
    hundredths; the four ``full`` values are None when the file has no ``full`` line."""
    cdef int64_t values[8]
    cdef unsigned char present[8]
    if koord_parse_psi(data, len(data), values, present) != 0:
        raise _malformed()
    return _values(values, present, 8)


cdef int _pread_all(int fd, char **buf, Py_ssize_t *cap, Py_ssize_t *out_len) noexcept nogil:
    """pread from offset 0 into *buf (grown as needed) until a short read; 0 or an errno."""
    cdef Py_ssize_t size = 0
    cdef Py_ssize_t n
    cdef char *grown
    while True:
        if size == cap[0]:
            grown = <char *>realloc(buf[0], cap[0] * 2)
            if grown == NULL:
                return ENOMEM_
            buf[0] = grown
            cap[0] *= 2
        n = pread(fd, buf[0] + size, cap[0] - size, size)
        if n < 0:
            if errno == EINTR:
                continue
            return errno
        size += n
        if size < cap[0]:
            break
    out_len[0] = size
    return 0


cdef class FileCache:
    """Kept file descriptors for files read every tick, read and parsed in one call.

    At most ``max_open`` descriptors are kept; beyond that a file is opened, read and
    closed each time. ``retain`` closes those no longer wanted (pods that went away).
    """

    cdef dict _fds
    cdef readonly Py_ssize_t max_open

    def __cinit__(self, Py_ssize_t max_open=4096):
        self._fds = {}
        self.max_open = max_open

    def __dealloc__(self):
        if self._fds is not None:
            for fd in self._fds.values():
                close(<int>fd)

    def __len__(self):
        return len(self._fds)

    def close(self):
        """Close every kept descriptor."""
        for fd in self._fds.values():
            close(<int>fd)
        self._fds.clear()

    def retain(self, paths):
        """Close the descriptors of files not in ``paths`` (an iterable of bytes)."""
        keep = set(paths)
        for path in [p for p in self._fds if p not in keep]:
            close(<int>self._fds.pop(path))

    def read(self, list requests, list failed=None):
        """Read each ``(path: bytes, kind: int, keys: tuple | None)`` request.

        Returns one entry per request: bytes (KIND_RAW), an int (KIND_INT), a tuple
        (KIND_KEYS, KIND_PSI, KIND_NODES), or an ``OSError`` carrying the errno (EBADMSG when the
        content does not parse). The index of each request that failed is appended to
        ``failed`` when given, so a caller need not scan the result for errors.
        """
        cdef Py_ssize_t n = len(requests)
        cdef Py_ssize_t i, j, total_keys = 0, total_values = 0
        cdef Py_ssize_t cap = SCRATCH, length = 0
        cdef int *fds
        cdef int *kinds
        cdef int *errs
        cdef unsigned char *kept
        cdef const char **cpaths
        cdef Py_ssize_t *val_off
        cdef Py_ssize_t *key_off
        cdef Py_ssize_t *nkeys
        cdef const char **ckeys
        cdef size_t *klens
        cdef int64_t *values
        cdef unsigned char *present
        cdef char **raw
        cdef Py_ssize_t *raw_len
        cdef char *scratch
        cdef int fd, err, kind, can_keep
        cdef tuple request, keys
        cdef list path_refs = [None] * n
        cdef list out = [None] * n
        if n == 0:
            return out
        for i in range(n):
            request = <tuple>requests[i]
            kind = request[1]
            if kind == K_KEYS:
                total_keys += len(<tuple>request[2])
                total_values += len(<tuple>request[2])
            elif kind == K_NODES:
                total_keys += len(<tuple>request[2])
                total_values += len(<tuple>request[2]) * NODE_STRIDE
            elif kind == K_PSI:
                total_values += 8
            else:
                total_values += 1
        fds = <int *>malloc(n * sizeof(int))
        kinds = <int *>malloc(n * sizeof(int))
        errs = <int *>calloc(n, sizeof(int))
        kept = <unsigned char *>calloc(n, 1)
        cpaths = <const char **>malloc(n * sizeof(char *))
        val_off = <Py_ssize_t *>malloc(n * sizeof(Py_ssize_t))
        key_off = <Py_ssize_t *>malloc(n * sizeof(Py_ssize_t))
        nkeys = <Py_ssize_t *>calloc(n, sizeof(Py_ssize_t))
        ckeys = <const char **>malloc((total_keys + 1) * sizeof(char *))
        klens = <size_t *>malloc((total_keys + 1) * sizeof(size_t))
        values = <int64_t *>calloc(total_values, sizeof(int64_t))
        present = <unsigned char *>calloc(total_values, 1)
        raw = <char **>calloc(n, sizeof(char *))
        raw_len = <Py_ssize_t *>calloc(n, sizeof(Py_ssize_t))
        scratch = <char *>malloc(cap)
        try:
            if (fds == NULL or kinds == NULL or errs == NULL or kept == NULL or cpaths == NULL
                    or val_off == NULL or key_off == NULL or nkeys == NULL or ckeys == NULL
                    or klens == NULL or values == NULL or present == NULL or raw == NULL
                    or raw_len == NULL or scratch == NULL):
                raise MemoryError()
            total_keys = 0
            total_values = 0
            can_keep = len(self._fds) < self.max_open
            for i in range(n):
                request = <tuple>requests[i]
                path_refs[i] = <bytes>request[0]
                cpaths[i] = <bytes>path_refs[i]
                kinds[i] = request[1]
                fds[i] = self._fds.get(path_refs[i], -1)
                kept[i] = fds[i] >= 0
                val_off[i] = total_values
                key_off[i] = total_keys
                if kinds[i] == K_KEYS or kinds[i] == K_NODES:
                    keys = <tuple>request[2]
                    nkeys[i] = len(keys)
                    for j in range(nkeys[i]):
                        ckeys[total_keys + j] = <bytes>keys[j]
                        klens[total_keys + j] = len(<bytes>keys[j])
                    total_keys += nkeys[i]
                    total_values += nkeys[i] * (NODE_STRIDE if kinds[i] == K_NODES else 1)
                elif kinds[i] == K_PSI:
                    total_values += 8
                else:
                    total_values += 1
            with nogil:
                for i in range(n):
                    fd = fds[i]
                    if fd < 0:
                        fd = c_open(cpaths[i], O_RDONLY | O_CLOEXEC)
                        if fd < 0:
                            errs[i] = errno
                            continue
                        fds[i] = fd
                    err = _pread_all(fd, &scratch, &cap, &length)
                    if err == 0:
                        raw_len[i] = length
                        kind = kinds[i]
                        if kind == K_RAW:
                            raw[i] = <char *>malloc(length + 1)
                            if raw[i] == NULL:
                                err = ENOMEM_
                            else:
                                memcpy(raw[i], scratch, length)
                        elif kind == K_INT:
                            err = koord_parse_int(scratch, length, &values[val_off[i]])
                        elif kind == K_KEYS:
                            err = koord_parse_keys(scratch, length, &ckeys[key_off[i]], &klens[key_off[i]],
                                                   <int>nkeys[i], &values[val_off[i]], &present[val_off[i]])
                        elif kind == K_NODES:
                            err = _parse_nodes(scratch, length, &ckeys[key_off[i]], &klens[key_off[i]],
                                               nkeys[i], &values[val_off[i]])
                        else:
                            err = koord_parse_psi(scratch, length, &values[val_off[i]], &present[val_off[i]])
                    errs[i] = err
            for i in range(n):
                err = errs[i]
                fd = fds[i]
                if (err == EBADMSG_ or (err == 0 and raw_len[i] == 0)) and not _os.path.exists(path_refs[i]):
                    # the file was removed under a kept descriptor (the kernel says ENODEV
                    # for a removed cgroup; other filesystems keep serving the old inode)
                    err = ENOENT_
                if err != 0:
                    out[i] = OSError(err, _os.strerror(err), _os.fsdecode(path_refs[i]))
                    if failed is not None:
                        failed.append(i)
                    if fd >= 0 and err != EBADMSG_:
                        # the file is gone or broken: drop it (once, if it is listed twice)
                        if not kept[i]:
                            close(fd)
                        elif self._fds.get(path_refs[i]) == fd:
                            del self._fds[path_refs[i]]
                            close(fd)
                        continue
                elif kinds[i] == K_RAW:
                    out[i] = PyBytes_FromStringAndSize(raw[i], raw_len[i])
                elif kinds[i] == K_INT:
                    out[i] = values[val_off[i]]
                elif kinds[i] == K_KEYS:
                    out[i] = _values(&values[val_off[i]], &present[val_off[i]], nkeys[i])
                elif kinds[i] == K_NODES:
                    out[i] = _nodes(&values[val_off[i]], nkeys[i])
                else:
                    out[i] = _values(&values[val_off[i]], &present[val_off[i]], 8)
                if fd >= 0 and not kept[i]:
                    if can_keep and len(self._fds) < self.max_open and path_refs[i] not in self._fds:
                        self._fds[path_refs[i]] = fd
                    else:
                        close(fd)
            return out
        finally:
            if raw != NULL:
                for i in range(n):
                    free(raw[i])
            free(fds); free(kinds); free(errs); free(kept); free(cpaths); free(val_off)
            free(key_off); free(nkeys); free(ckeys); free(klens); free(values); free(present)
            free(raw); free(raw_len); free(scratch)
