"""cffi (API mode) builder for koordlet._native._perf: perf_event_open and counter reads.

Run by setup.py through ``cffi_modules``; the compiled module is private and imported
only by koordlet.system.perf. Its pure-Python twin is ``_CtypesBackend`` there: the same
syscalls through libc's ``syscall()``, used when ``KOORDLET_NO_EXTENSIONS=1`` is set or this
module does not load (koordlet.system.native decides).
"""

from cffi import FFI

# setup.py runs from the project root; setuptools wants relative source paths.
SRC = "native/perf/src"

ffibuilder = FFI()
ffibuilder.cdef(
    """
    #define PERF_TYPE_HARDWARE ...
    #define PERF_TYPE_SOFTWARE ...
    #define PERF_COUNT_HW_CPU_CYCLES ...
    #define PERF_COUNT_HW_INSTRUCTIONS ...
    #define PERF_COUNT_SW_CPU_CLOCK ...
    #define PERF_COUNT_SW_TASK_CLOCK ...
    #define PERF_FLAG_FD_CLOEXEC ...
    #define PERF_FLAG_PID_CGROUP ...

    int koord_perf_open(uint32_t type, uint64_t config, int pid, int cpu, int group_fd, unsigned long flags,
                        uint64_t read_format, int inherit);
    long koord_perf_read_u64(int fd, uint64_t *buf, size_t count);
    int koord_perf_close(int fd);
    """
)
ffibuilder.set_source(
    "koordlet._native._perf",
    '#include <linux/perf_event.h>\n#include "perf.h"\n',
    sources=[f"{SRC}/perf.c"],
    include_dirs=[SRC],
    extra_compile_args=["-O2", "-Wall", "-Wextra"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
