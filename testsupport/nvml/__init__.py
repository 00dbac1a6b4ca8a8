"""A fake NVIDIA driver library for tests: build ``libnvidia-ml.so.1`` from C and point NVML at it.

``fake_nvml.c`` implements the NVML entry points that NVIDIA's ``nvidia-ml-py`` (``pynvml``)
resolves for GPU discovery and usage, with NVML's symbol names, struct layouts, return codes,
init reference counting and buffer protocols. It answers from a text file that
:func:`write_config` renders from a :class:`FakeNVML` and that the library re-reads at every
``nvmlInit*`` call from the path in ``$FAKE_NVML_CONFIG`` (the format is documented at the top of
the C file). The real binding then runs unchanged, without a GPU.

Two ways to make pynvml load it:

* in this process, :func:`preload` opens the built file by its full path with ``RTLD_GLOBAL``
  and forgets whatever pynvml had loaded; pynvml's own ``CDLL("libnvidia-ml.so.1")`` then
  resolves, through the dynamic loader, to the object already loaded under that soname;
* in a child process, :func:`environ` puts the build directory first on ``LD_LIBRARY_PATH``.

Once preloaded, the fake stays in the process (a shared object is never really unloaded):
with ``$FAKE_NVML_CONFIG`` unset it reports a driver ``fake`` with no GPUs.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CONFIG_ENV",
    "NOT_AVAILABLE",
    "SONAME",
    "BuildError",
    "FakeError",
    "FakeGPU",
    "FakeNVML",
    "FakeProcess",
    "FakeSample",
    "build",
    "compile_shared",
    "compiler",
    "environ",
    "forget",
    "preload",
    "render",
    "use",
    "write_config",
]

SONAME = "libnvidia-ml.so.1"
CONFIG_ENV = "FAKE_NVML_CONFIG"
#: NVML's "value not available" for a process's used memory (pynvml turns it into None)
NOT_AVAILABLE = 2**64 - 1
SOURCE = Path(__file__).with_name("fake_nvml.c")

GiB = 1 << 30


class BuildError(RuntimeError):
    """The C compiler is missing or rejected the source."""


@dataclass(frozen=True)
class FakeProcess:
    """A compute process on a GPU; ``used_memory=None`` is NVML's "not available"."""

    pid: int
    used_memory: int | None


@dataclass(frozen=True)
class FakeSample:
    """One process-utilisation sample (``timestamp`` in CPU microseconds)."""

    pid: int
    timestamp: int
    sm_util: int
    mem_util: int = 0


@dataclass(frozen=True)
class FakeGPU:
    name: str
    uuid: str
    minor: int
    bus_id: str  # legacy form, "0000:3B:00.0"
    memory_total: int = 80 * GiB
    memory_used: int = 0
    memory_free: int | None = None  # None: total - used
    mig_current: int = 0
    mig_pending: int = 0
    util_gpu: int = 0
    util_memory: int = 0
    pci_device_id: int = 0x20B510DE
    processes: tuple[FakeProcess, ...] = ()
    samples: tuple[FakeSample, ...] = ()


@dataclass(frozen=True)
class FakeError:
    """Make ``function`` (an NVML symbol name) return ``code``; ``device`` -1 means any device."""

    function: str
    code: int
    device: int = -1


@dataclass(frozen=True)
class FakeNVML:
    gpus: tuple[FakeGPU, ...] = ()
    driver_version: str = "550.54.15"
    #: non-zero: every nvmlInit* call returns this code (9 = NVML_ERROR_DRIVER_NOT_LOADED)
    init_error: int = 0
    errors: tuple[FakeError, ...] = ()


def _field(value: object) -> str:
    text = str(value)
    if any(c in text for c in "\t\r\n"):
        raise ValueError(f"a fake NVML field cannot hold a tab or newline: {text!r}")
    return text


def _record(*fields: object) -> str:
    return "\t".join(_field(f) for f in fields)


def render(config: FakeNVML) -> str:
    """The configuration file's text (one TAB-separated record per line)."""
    lines = [_record("driver", config.driver_version)]
    for gpu in config.gpus:
        free = gpu.memory_total - gpu.memory_used if gpu.memory_free is None else gpu.memory_free
        lines.append(
            _record(
                "gpu",
                gpu.name,
                gpu.uuid,
                gpu.minor,
                gpu.memory_total,
                gpu.memory_used,
                free,
                gpu.bus_id,
                gpu.mig_current,
                gpu.mig_pending,
                gpu.util_gpu,
                gpu.util_memory,
                gpu.pci_device_id,
            )
        )
        for proc in gpu.processes:
            used = NOT_AVAILABLE if proc.used_memory is None else proc.used_memory
            lines.append(_record("process", proc.pid, used))
        for sample in gpu.samples:
            lines.append(_record("sample", sample.pid, sample.timestamp, sample.sm_util, sample.mem_util))
    errors = list(config.errors)
    if config.init_error:
        errors += [FakeError(f, config.init_error) for f in ("nvmlInitWithFlags", "nvmlInit_v2")]
    lines += [_record("error", e.function, e.code, e.device) for e in errors]
    return "\n".join(lines) + "\n"


def write_config(config: FakeNVML, path: Path) -> Path:
    path.write_text(render(config))
    return path


def compiler() -> str | None:
    """The system C compiler (``cc``, else ``gcc``), or None."""
    return shutil.which("cc") or shutil.which("gcc")


def compile_shared(source: Path, output: Path, soname: str) -> Path:
    """Compile one C file into a shared object with the given soname, atomically."""
    cc = compiler()
    if cc is None:
        raise BuildError("no C compiler (cc or gcc) on PATH")
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.")
    os.close(fd)
    command = [
        cc,
        "-shared",
        "-fPIC",
        "-O2",
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-fvisibility=hidden",
        f"-Wl,-soname,{soname}",
        "-o",
        partial,
        str(source),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        os.unlink(partial)
        raise BuildError(f"{' '.join(command)} failed:\n{done.stderr}")
    os.replace(partial, output)
    return output


def build(dest_dir: Path) -> Path:
    """Compile the fake into ``dest_dir/libnvidia-ml.so.1`` and return its path."""
    return compile_shared(SOURCE, dest_dir / SONAME, SONAME)


def forget() -> None:
    """Make pynvml forget the library it loaded, its function pointers and its init count."""
    import pynvml

    with pynvml.libLoadLock:
        pynvml.nvmlLib = None
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlLib_refcount = 0


def preload(library: Path) -> ctypes.CDLL:
    """Load the fake into this process so that pynvml's next load finds it by its soname.

    If another ``libnvidia-ml.so.1`` (a real driver's) was already loaded here, the soname
    would resolve to that one; pynvml is then handed the fake directly.
    """
    import pynvml

    handle = ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
    forget()
    pynvml._LoadNvmlLibrary()
    if pynvml.nvmlLib._handle != handle._handle:
        with pynvml.libLoadLock:
            pynvml.nvmlLib = handle
    return handle


def use(library: Path, config: FakeNVML, config_path: Path) -> ctypes.CDLL:
    """Preload the fake and configure it (sets ``$FAKE_NVML_CONFIG`` in this process)."""
    handle = preload(library)
    os.environ[CONFIG_ENV] = str(write_config(config, config_path))
    return handle


def environ(library: Path, config_path: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment in which a child process's pynvml loads the fake with this configuration."""
    env = dict(os.environ if base is None else base)
    search = [str(library.parent)] + [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
    env["LD_LIBRARY_PATH"] = ":".join(search)
    env[CONFIG_ENV] = str(config_path)
    return env
