# cython: language_level=3
"""Batch reader for cgroup and procfs files (accelerator; twin: koordlet.system.cgroup.pyio).

One call reads many small files grouped by directory: each directory is opened once
(O_DIRECTORY), each file with openat() under it, and all syscalls run with the GIL
released. A failure is reported per file as a positive errno in place of its bytes, so
one vanished cgroup never breaks a batch; Python decides what an errno means.
"""

from libc.errno cimport errno, EINTR
from libc.stdlib cimport malloc, free, realloc
from posix.fcntl cimport O_RDONLY, O_CLOEXEC
from posix.unistd cimport close, read

cdef extern from "<fcntl.h>" nogil:
    int openat(int dirfd, const char *pathname, int flags)
    int O_DIRECTORY

cdef enum:
    CHUNK = 4096


cdef int _read_all(int fd, char **out, Py_ssize_t *out_len) noexcept nogil:
    """Read fd to EOF into a malloc'd buffer; returns 0 or an errno."""
    cdef Py_ssize_t cap = CHUNK
    cdef Py_ssize_t size = 0
    cdef Py_ssize_t n
    cdef char *buf = <char *>malloc(cap)
    cdef char *grown
    if buf == NULL:
        return 12  # ENOMEM
    while True:
        if size == cap:
            cap *= 2
            grown = <char *>realloc(buf, cap)
            if grown == NULL:
                free(buf)
                return 12
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
    bufs = <char **>malloc(total * sizeof(char *))
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
                bufs[k] = NULL
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
