# cython: language_level=3
"""Batch reader and parsers for cgroup and procfs files (accelerator; twin: koordlet.system.cgroup.pyio).

Two ways to read many small files with the GIL released:

* ``read_dirs``: one-shot; each directory is opened once (O_DIRECTORY), each file with
  openat() under it. A failure is reported per file as a positive errno in place of its
  bytes, so one vanished cgroup never breaks a batch.
* ``FileCache.batch(requests).read()``: the hot path of the collectors. The request list
  is compiled once (paths, kinds, keys as C arrays); each file is opened once and kept;
  every later read is a pread() at offset 0, parsed in C (an integer, chosen keys of a
  "key value" file, a PSI file, or the per-node fields of memory.numa_stat lines) and
  built as a tuple, or directly as the NamedTuple the request names. A failure is an
  ``OSError`` in place of the value and drops the kept descriptor (a removed cgroup
  answers ENODEV). ``FileCache.read(requests)`` is the same for a one-off list.

A read that returns less than the space left in the buffer is taken as end of file: the
kernel's seq_file and kernfs readers fill the user buffer unless they reach the end.
Python decides what an errno means (koordlet.system.errors).
"""

cimport cython
from cpython cimport array
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from libc.errno cimport errno, EINTR
from libc.stdint cimport int64_t
from libc.math cimport NAN
from libc.stdlib cimport malloc, free, realloc, calloc
from libc.string cimport memchr, memcpy, memset
from posix.fcntl cimport O_RDONLY, O_CLOEXEC, open as c_open
from posix.unistd cimport close, read, pread

import array as _array
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

#: empty arrays of doubles and of int64, the templates of the arrays built here
cdef array.array _DOUBLES = _array.array("d")
cdef array.array _INT64S = _array.array("q")

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


cdef extern from *:
    """
    /* An empty instance of n items of a tuple subclass (a NamedTuple), allocated the way
     * CPython's own tuple_subtype_new does; the caller fills every item. */
    static PyObject *koord_record_alloc(PyObject *type, Py_ssize_t n)
    {
        PyTypeObject *t = (PyTypeObject *)type;
        return t->tp_alloc(t, n);
    }
    """
    object koord_record_alloc(object record, Py_ssize_t n)

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object op)


cdef object _values(int64_t *values, unsigned char *present, Py_ssize_t n, object record):
    """The tuple (or ``record`` instance) built in place: no intermediate list, and no
    second object when the caller wants a NamedTuple (one is built per file read).

    It holds ints and None only, so it can never be part of a reference cycle: it is
    left out of the cyclic GC's lists at once, as CPython does for such tuples on their
    first collection (and never for tuple subclasses). A read builds thousands of them.
    """
    cdef Py_ssize_t i
    cdef object out = PyTuple_New(n) if record is None else koord_record_alloc(record, n)
    cdef object item
    for i in range(n):
        item = values[i] if present[i] else None
        Py_INCREF(item)
        PyTuple_SET_ITEM(out, i, item)
    PyObject_GC_UnTrack(out)
    return out


cdef Py_ssize_t _record_width(object record, dict seen) except -1:
    """The field count of a request's record class, checked once per class and batch."""
    width = seen.get(record)
    if width is not None:
        return width
    if (not isinstance(record, type) or not issubclass(record, tuple) or record is tuple
            or record.__basicsize__ != tuple.__basicsize__ or not hasattr(record, "_fields")):
        raise TypeError(f"a request's record must be a NamedTuple class, not {record!r}")
    width = len(record._fields)
    seen[record] = width
    return width


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
        return _values(values, present, n, None)
    finally:
        free(ckeys); free(klens); free(values); free(present)


def parse_psi(bytes data):
    """(some avg10, avg60, avg300, total, full avg10, avg60, avg300, total); averages in
    hundredths; the four ``full`` values are None when the file has no ``full`` line."""
    cdef int64_t values[8]
    cdef unsigned char present[8]
    if koord_parse_psi(data, len(data), values, present) != 0:
        raise _malformed()
    return _values(values, present, 8, None)


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
    ``batch`` compiles a request list once for callers that read the same files every
    tick; ``read`` is a one-off batch.
    """

    cdef dict _fds
    cdef readonly Py_ssize_t max_open
    #: bumped on every change of _fds, so that a Batch knows when to look its files up again
    cdef Py_ssize_t _generation

    def __cinit__(self, Py_ssize_t max_open=4096):
        self._fds = {}
        self.max_open = max_open
        self._generation = 0

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
        self._generation += 1

    def retain(self, paths):
        """Close the descriptors of files not in ``paths`` (an iterable of bytes)."""
        keep = set(paths)
        for path in [p for p in self._fds if p not in keep]:
            close(<int>self._fds.pop(path))
            self._generation += 1

    def batch(self, requests):
        """The requests (see ``read``) compiled once into a :class:`Batch` to read many times."""
        cdef Batch batch = Batch.__new__(Batch)
        batch._compile(self, requests)
        return batch

    def read(self, requests, list failed=None, list lacking=None):
        """Read each ``(path: bytes, kind: int, keys: tuple | None[, record])`` request.

        Returns one entry per request: bytes (KIND_RAW), an int (KIND_INT), a tuple
        (KIND_KEYS, KIND_PSI, KIND_NODES), or an ``OSError`` carrying the errno (EBADMSG
        when the content does not parse). A KIND_KEYS or KIND_PSI request may name a
        NamedTuple class of as many fields as values (``record``): its value is built as
        an instance of that class. The index of each request that failed is appended to
        ``failed`` when given, so a caller need not scan the result for errors, and that
        of each KIND_KEYS request whose file lacks one of its keys (a None in its tuple)
        to ``lacking``.
        """
        return self.batch(requests).read(failed, lacking)


cdef class Batch:
    """A request list compiled once (paths, kinds, keys, records as C arrays, descriptors
    looked up in the cache) and read with one call per tick.

    Reading takes the kept descriptors of the cache it came from: those it opens are kept
    there, and those that fail are dropped there, as by ``FileCache.read``.
    """

    cdef FileCache _cache
    #: the requests, as given
    cdef readonly tuple requests
    cdef Py_ssize_t _n
    cdef Py_ssize_t _total_values
    cdef bint _has_raw
    cdef bint _has_nodes
    #: the cache's generation the descriptors below were looked up at (-1: never)
    cdef Py_ssize_t _generation
    #: the objects the C arrays point into: path bytes, key tuples; and each record or None
    cdef list _paths
    cdef list _keys
    cdef list _records
    cdef int *_fds
    cdef int *_kinds
    cdef const char **_cpaths
    cdef Py_ssize_t *_val_off
    cdef Py_ssize_t *_key_off
    cdef Py_ssize_t *_nkeys
    cdef const char **_ckeys
    cdef size_t *_klens

    def __cinit__(self):
        self._generation = -1

    def __dealloc__(self):
        free(self._fds); free(self._kinds); free(self._cpaths); free(self._val_off)
        free(self._key_off); free(self._nkeys); free(self._ckeys); free(self._klens)

    def __len__(self):
        return self._n

    cdef int _compile(self, FileCache cache, requests) except -1:
        cdef tuple reqs = tuple(requests)
        cdef Py_ssize_t n = len(reqs)
        cdef Py_ssize_t i, j, total_keys = 0, total_values = 0, width
        cdef tuple request, keys
        cdef bytes key
        cdef int kind
        cdef dict widths = {}
        self._cache = cache
        self.requests = reqs
        self._n = n
        for i in range(n):
            request = <tuple?>reqs[i]
            if len(request) != 3 and len(request) != 4:
                raise ValueError(f"a request is (path, kind, keys[, record]), not {request!r}")
            kind = request[1]
            if kind == K_KEYS or kind == K_NODES:
                total_keys += len(<tuple?>request[2])
        self._fds = <int *>malloc((n + 1) * sizeof(int))
        self._kinds = <int *>malloc((n + 1) * sizeof(int))
        self._cpaths = <const char **>malloc((n + 1) * sizeof(char *))
        self._val_off = <Py_ssize_t *>malloc((n + 1) * sizeof(Py_ssize_t))
        self._key_off = <Py_ssize_t *>malloc((n + 1) * sizeof(Py_ssize_t))
        self._nkeys = <Py_ssize_t *>calloc(n + 1, sizeof(Py_ssize_t))
        self._ckeys = <const char **>malloc((total_keys + 1) * sizeof(char *))
        self._klens = <size_t *>malloc((total_keys + 1) * sizeof(size_t))
        if (self._fds == NULL or self._kinds == NULL or self._cpaths == NULL or self._val_off == NULL
                or self._key_off == NULL or self._nkeys == NULL or self._ckeys == NULL
                or self._klens == NULL):
            raise MemoryError()
        self._paths = [None] * n
        self._keys = [None] * n
        self._records = [None] * n
        total_keys = 0
        for i in range(n):
            request = <tuple>reqs[i]
            key = <bytes?>request[0]
            self._paths[i] = key
            self._cpaths[i] = key
            kind = request[1]
            self._kinds[i] = kind
            self._fds[i] = -1
            self._val_off[i] = total_values
            self._key_off[i] = total_keys
            if kind == K_RAW:
                self._has_raw = True
            elif kind == K_NODES:
                self._has_nodes = True
            if kind == K_KEYS or kind == K_NODES:
                keys = <tuple>request[2]
                self._keys[i] = keys
                self._nkeys[i] = len(keys)
                for j in range(self._nkeys[i]):
                    key = <bytes?>keys[j]
                    self._ckeys[total_keys + j] = key
                    self._klens[total_keys + j] = len(key)
                total_keys += self._nkeys[i]
                width = self._nkeys[i]
                total_values += width * (NODE_STRIDE if kind == K_NODES else 1)
            elif kind == K_PSI:
                width = 8
                total_values += 8
            else:
                width = 1
                total_values += 1
            if len(request) == 4 and request[3] is not None:
                if kind != K_KEYS and kind != K_PSI:
                    raise TypeError("only KIND_KEYS and KIND_PSI values are built as records")
                if _record_width(request[3], widths) != width:
                    raise TypeError(f"{request[3].__name__} does not have the {width} fields of {request!r}")
                self._records[i] = request[3]
        self._total_values = total_values
        self._val_off[n] = total_values
        return 0

    cdef int _lookup(self) except -1:
        """Take the cache's kept descriptor of each path (or -1) as of its generation now."""
        cdef FileCache cache = self._cache
        cdef dict kept = cache._fds
        cdef Py_ssize_t i
        for i in range(self._n):
            self._fds[i] = kept.get(self._paths[i], -1)
        self._generation = cache._generation
        return 0

    def read(self, list failed=None, list lacking=None):
        """Read and parse every request, as ``FileCache.read`` does; see there."""
        return self._run(failed, lacking, None, None)

    def read_values(self, list failed=None, list lacking=None):
        """Read and parse every request as :meth:`read` does, without building a value per
        request: ``(values, present, errors)``, the parsed integers of every request one
        after another (KIND_INT one, KIND_KEYS one per key, KIND_PSI eight) as an
        ``array('q')``, ``present`` a byte per value (1 where it was read; 0 for an absent
        key, a PSI file without a ``full`` line, and every value of a request that failed,
        whose values are 0), and ``errors`` the ``OSError`` of each failed request (None
        for the others). KIND_RAW and KIND_NODES requests are refused (TypeError)."""
        if self._has_raw or self._has_nodes:
            raise TypeError("read_values reads KIND_INT, KIND_KEYS and KIND_PSI requests only")
        cdef array.array values = array.clone(_INT64S, self._total_values, False)
        cdef bytearray present = bytearray(self._total_values)
        errors = self._run(failed, lacking, values, present)
        return values, bytes(present), errors

    cdef list _run(self, list failed, list lacking, array.array into, bytearray flags):
        """Read and parse every request: the value of each (or its OSError) in a list; with
        ``into``, the values go there and their presence to ``flags``, and the list holds
        only the errors."""
        cdef FileCache cache = self._cache
        cdef Py_ssize_t n = self._n
        cdef Py_ssize_t i
        cdef Py_ssize_t cap = SCRATCH, length = 0
        cdef int *fds
        cdef int *errs
        cdef int64_t *values
        cdef unsigned char *present
        cdef char **raw = NULL
        cdef Py_ssize_t *raw_len
        cdef char *scratch
        cdef int *kinds = self._kinds
        cdef const char **cpaths = self._cpaths
        cdef Py_ssize_t *val_off = self._val_off
        cdef Py_ssize_t *key_off = self._key_off
        cdef Py_ssize_t *nkeys = self._nkeys
        cdef const char **ckeys = self._ckeys
        cdef size_t *klens = self._klens
        cdef int fd, err, kind, can_keep
        cdef bint kept
        cdef bytes path
        cdef dict cached = cache._fds
        cdef list paths = self._paths
        cdef list records = self._records
        cdef list out = [None] * n
        if n == 0:
            return out
        if self._generation != cache._generation:
            self._lookup()
        # per call (a batch may be read by two threads at once): the descriptors this read
        # uses, what each file gave, and a scratch buffer
        fds = <int *>malloc(n * sizeof(int))
        errs = <int *>malloc(n * sizeof(int))
        raw_len = <Py_ssize_t *>malloc(n * sizeof(Py_ssize_t))
        values = <int64_t *>malloc((self._total_values + 1) * sizeof(int64_t))
        present = <unsigned char *>malloc(self._total_values + 1)
        scratch = <char *>malloc(cap)
        if self._has_raw:
            raw = <char **>calloc(n, sizeof(char *))
        try:
            if (fds == NULL or errs == NULL or raw_len == NULL or values == NULL or present == NULL
                    or scratch == NULL or (self._has_raw and raw == NULL)):
                raise MemoryError()
            memcpy(fds, self._fds, n * sizeof(int))
            can_keep = len(cached) < cache.max_open
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
                kept = self._fds[i] >= 0
                if err != 0 or raw_len[i] == 0:
                    path = <bytes>paths[i]
                    if (err == EBADMSG_ or err == 0) and not _os.path.exists(path):
                        # the file was removed under a kept descriptor (the kernel says ENODEV
                        # for a removed cgroup; other filesystems keep serving the old inode)
                        err = ENOENT_
                    if err != 0:
                        out[i] = OSError(err, _os.strerror(err), _os.fsdecode(path))
                        if failed is not None:
                            failed.append(i)
                        if into is not None:  # no value of a failed request counts
                            memset(&values[val_off[i]], 0, (val_off[i + 1] - val_off[i]) * sizeof(int64_t))
                            memset(&present[val_off[i]], 0, val_off[i + 1] - val_off[i])
                        if fd >= 0 and err != EBADMSG_:
                            # the file is gone or broken: drop it (once, if it is listed twice)
                            if not kept:
                                close(fd)
                            elif cached.get(path) == fd:
                                del cached[path]
                                cache._generation += 1
                                close(fd)
                            continue
                kind = kinds[i]
                if err != 0:
                    pass
                elif into is not None:
                    if kind == K_INT:
                        present[val_off[i]] = 1
                    elif kind == K_KEYS and lacking is not None and memchr(&present[val_off[i]], 0, nkeys[i]) != NULL:
                        lacking.append(i)
                elif kind == K_INT:
                    out[i] = values[val_off[i]]
                elif kind == K_KEYS:
                    out[i] = _values(&values[val_off[i]], &present[val_off[i]], nkeys[i], records[i])
                    if lacking is not None and memchr(&present[val_off[i]], 0, nkeys[i]) != NULL:
                        lacking.append(i)
                elif kind == K_PSI:
                    out[i] = _values(&values[val_off[i]], &present[val_off[i]], 8, records[i])
                elif kind == K_NODES:
                    out[i] = _nodes(&values[val_off[i]], nkeys[i])
                else:
                    out[i] = PyBytes_FromStringAndSize(raw[i], raw_len[i])
                if fd >= 0 and not kept:
                    path = <bytes>paths[i]
                    if can_keep and len(cached) < cache.max_open and path not in cached:
                        cached[path] = fd
                        cache._generation += 1
                    else:
                        close(fd)
            if into is not None:
                for i in range(self._total_values):
                    if not present[i]:
                        values[i] = 0  # what an absent key's or full line's slot holds
                memcpy(into.data.as_voidptr, values, self._total_values * sizeof(int64_t))
                memcpy(<char *>flags, present, self._total_values)
            return out
        finally:
            if raw != NULL:
                for i in range(n):
                    free(raw[i])
            free(raw)
            free(fds); free(errs); free(raw_len); free(values); free(present); free(scratch)


# Columns: the parsed values of a batch turned into the float columns the collectors store
# (array('d'), NaN where there is no value, with the count of those). Each keeps the
# arithmetic of its Python twin exactly: integers are combined exactly (int64 where they
# fit, Python ints where not) and converted to a double once, as Python's int / float do.

cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object value, int *overflow) except? -1
    double PyLong_AsDouble(object value) except? -1.0

cdef extern from *:
    bint __builtin_add_overflow(int64_t a, int64_t b, int64_t *out) nogil

#: integers below this convert to a double exactly (53-bit significand)
cdef int64_t _EXACT = (<int64_t>1) << 53


cdef inline bint _fits(object value, int64_t *out) except -1:
    """``value`` as an int64 when it is an int that fits (what the parsers build); False
    sends the caller to Python arithmetic."""
    cdef int overflow = 0
    if type(value) is not int:
        return False
    out[0] = PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow == 0


cdef inline double _as_double(object value) except? -1.0:
    return PyLong_AsDouble(value) if type(value) is int else float(value)


cdef inline object _item(object cell, Py_ssize_t index):
    if isinstance(cell, tuple):
        if index >= PyTuple_GET_SIZE(cell):
            raise IndexError(f"a cell of {PyTuple_GET_SIZE(cell)} values has no value {index}")
        return <object>PyTuple_GET_ITEM(cell, index)
    return cell[index]


@cython.boundscheck(False)
@cython.wraparound(False)
def sum_column(list cells, Py_ssize_t count):
    """(column, missing): the sum of the first ``count`` values of each cell as a float;
    NaN where the cell or one of those values is None."""
    cdef Py_ssize_t k, i, n = len(cells), missing = 0
    cdef array.array out = array.clone(_DOUBLES, n, False)
    cdef double *column = out.data.as_doubles
    cdef object cell, value, exact
    cdef int64_t part, total, added
    cdef bint fast
    for k in range(n):
        cell = cells[k]
        if cell is None:
            column[k] = NAN
            missing += 1
            continue
        total, fast, exact = 0, True, 0
        for i in range(count):
            value = _item(cell, i)
            if value is None:
                break
            if fast and _fits(value, &part) and not __builtin_add_overflow(total, part, &added):
                total = added
                continue
            if fast:  # from here on in Python ints
                fast, exact = False, total
            exact = exact + value
        else:
            column[k] = <double>total if fast else _as_double(exact)
            continue
        column[k] = NAN
        missing += 1
    return out, missing


@cython.boundscheck(False)
@cython.wraparound(False)
def growth_column(list current, list previous, double elapsed, double unit):
    """(column, missing): ``(c - p) / elapsed / unit`` for each pair of counters; NaN where
    either is None or the counter went back (``c < p``)."""
    cdef Py_ssize_t k, n = len(current), missing = 0
    if len(previous) != n:
        raise ValueError(f"{n} counters for {len(previous)} previous ones")
    if elapsed == 0 or unit == 0:
        raise ZeroDivisionError("a rate over no time or in no unit")
    cdef array.array out = array.clone(_DOUBLES, n, False)
    cdef double *column = out.data.as_doubles
    cdef object c, p
    cdef int64_t ci, pi
    for k in range(n):
        c, p = current[k], previous[k]
        if c is None or p is None:
            column[k] = NAN
            missing += 1
        elif _fits(c, &ci) and _fits(p, &pi) and pi >= 0 and ci >= 0:
            if ci < pi:
                column[k] = NAN
                missing += 1
            else:
                column[k] = <double>(ci - pi) / elapsed / unit
        elif c < p:
            column[k] = NAN
            missing += 1
        else:
            column[k] = _as_double(c - p) / elapsed / unit
    return out, missing


@cython.boundscheck(False)
@cython.wraparound(False)
def ratio_column(list current, list previous, Py_ssize_t base, Py_ssize_t part):
    """(column, missing): of two counters per cell, how much ``part`` grew for each unit
    ``base`` grew (``Δpart / Δbase``, 0.0 when ``base`` did not grow); NaN where either
    cell or one of the four counters is None, or one of the two counters went back."""
    cdef Py_ssize_t k, n = len(current), missing = 0
    if len(previous) != n:
        raise ValueError(f"{n} cells for {len(previous)} previous ones")
    cdef array.array out = array.clone(_DOUBLES, n, False)
    cdef double *column = out.data.as_doubles
    cdef object c, p, cb, pb, cp, pp
    cdef int64_t cbi, pbi, cpi, ppi
    for k in range(n):
        c, p = current[k], previous[k]
        if c is None or p is None:
            column[k] = NAN
            missing += 1
            continue
        cb, pb, cp, pp = _item(c, base), _item(p, base), _item(c, part), _item(p, part)
        if cb is None or pb is None or cp is None or pp is None:
            column[k] = NAN
            missing += 1
        elif (_fits(cb, &cbi) and _fits(pb, &pbi) and _fits(cp, &cpi) and _fits(pp, &ppi)
                and pbi >= 0 and ppi >= 0 and cbi < _EXACT and cpi < _EXACT):
            if cbi < pbi or cpi < ppi:
                column[k] = NAN
                missing += 1
            else:
                column[k] = <double>(cpi - ppi) / <double>(cbi - pbi) if cbi > pbi else 0.0
        elif cb < pb or cp < pp:
            column[k] = NAN
            missing += 1
        else:
            column[k] = (cp - pp) / (cb - pb) if cb > pb else 0.0
    return out, missing


cdef Py_ssize_t _rows(Py_ssize_t n, Py_ssize_t m, Py_ssize_t start, Py_ssize_t step) except -1:
    """The rows of ``step`` values in ``n`` values (and ``m`` flags), checking that
    ``start`` is one of a row's positions."""
    if n != m:
        raise ValueError(f"{n} values for {m} flags")
    if step <= 0 or start < 0 or start >= step or n % step != 0:
        raise ValueError(f"no column at {start} of rows of {step} in {n} values")
    return n // step


@cython.boundscheck(False)
@cython.wraparound(False)
def strided_column(array.array values, bytes present, Py_ssize_t start, Py_ssize_t step, double divisor):
    """(column, missing): of ``values`` (int64) in rows of ``step``, the one at ``start``
    of each row divided by ``divisor``; NaN where its byte of ``present`` is 0."""
    if values.typecode != "q":
        raise TypeError(f"an array of int64 ('q'), not of {values.typecode!r}")
    cdef Py_ssize_t k, pos, rows = _rows(len(values), len(present), start, step), missing = 0
    if divisor == 0:
        raise ZeroDivisionError("a column divided by zero")
    cdef array.array out = array.clone(_DOUBLES, rows, False)
    cdef double *column = out.data.as_doubles
    cdef const int64_t *ints = <const int64_t *>values.data.as_voidptr
    cdef const unsigned char *flags = <const unsigned char *>(<char *>present)
    for k in range(rows):
        pos = start + k * step
        if flags[pos]:
            column[k] = <double>ints[pos] / divisor
        else:
            column[k] = NAN
            missing += 1
    return out, missing


@cython.boundscheck(False)
@cython.wraparound(False)
def flag_column(bytes present, Py_ssize_t start, Py_ssize_t step, Py_ssize_t base):
    """(column, missing): of ``present`` in rows of ``step``, 1.0 where the flag at
    ``start`` of a row is set and 0.0 where not; NaN for the rows whose flag at ``base``
    is not set (no value at all)."""
    cdef Py_ssize_t n = len(present), k, rows = _rows(n, n, start, step), missing = 0
    _rows(n, n, base, step)
    cdef array.array out = array.clone(_DOUBLES, rows, False)
    cdef double *column = out.data.as_doubles
    cdef const unsigned char *flags = <const unsigned char *>(<char *>present)
    for k in range(rows):
        if not flags[base + k * step]:
            column[k] = NAN
            missing += 1
        else:
            column[k] = 1.0 if flags[start + k * step] else 0.0
    return out, missing
