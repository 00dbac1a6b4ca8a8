"""Domain errors for host I/O, and the one place where an errno gets its meaning.

C code and the Python twins raise or return plain errnos; :func:`from_errno` turns them
into errors a strategy can act on: a cgroup that vanished (skip it), a file this kernel
does not have (disable the feature), a permission problem, a value the kernel refused,
or a busy resource (retry later).
"""

from __future__ import annotations

import errno as _errno
import os
from pathlib import Path


class HostError(OSError):
    """Base of every host I/O failure; ``errno`` and ``filename`` are kept from the OSError."""

    #: True when retrying later can succeed without a change on our side.
    temporary = False


class CgroupVanishedError(HostError):
    """The cgroup (or process) directory disappeared, typically a pod or container that ended."""


class UnsupportedResourceError(HostError):
    """The directory exists but this kernel or cgroup version has no such file."""


class HostPermissionError(HostError):
    """The agent may not read or write this file (not root, read-only mount, LSM)."""


class InvalidValueError(HostError):
    """The value was refused: by our validation before the kernel saw it, or by the kernel (EINVAL)."""


class ResourceBusyError(HostError):
    """The kernel refused for now (EBUSY/EAGAIN), e.g. a cpuset still used by a child."""

    temporary = True


class MalformedContentError(HostError):
    """A file was read but its content does not parse (truncated, non-numeric, unknown format)."""


_BY_ERRNO: dict[int, type[HostError]] = {
    _errno.EACCES: HostPermissionError,
    _errno.EPERM: HostPermissionError,
    _errno.EROFS: HostPermissionError,
    _errno.EINVAL: InvalidValueError,
    _errno.ERANGE: InvalidValueError,
    _errno.EOVERFLOW: InvalidValueError,
    _errno.ENOSPC: InvalidValueError,
    _errno.EBUSY: ResourceBusyError,
    _errno.EAGAIN: ResourceBusyError,
    _errno.EINTR: ResourceBusyError,
    _errno.ESRCH: CgroupVanishedError,
    _errno.ENODEV: CgroupVanishedError,
    _errno.EOPNOTSUPP: UnsupportedResourceError,
    _errno.ENOTDIR: UnsupportedResourceError,
}


def from_errno(code: int, path: Path | str, *, directory: Path | str | None = None) -> HostError:
    """Classify ``code`` for ``path``; ``directory`` is the cgroup the file belongs to.

    ENOENT is ambiguous: when the directory itself is gone the cgroup vanished,
    otherwise the file is not provided by this kernel.
    """
    message = os.strerror(code)
    if code == _errno.ENOENT:
        parent = Path(directory) if directory is not None else Path(path).parent
        cls: type[HostError] = UnsupportedResourceError if parent.is_dir() else CgroupVanishedError
    else:
        cls = _BY_ERRNO.get(code, HostError)
    return cls(code, message, str(path))


def from_oserror(err: OSError, *, directory: Path | str | None = None) -> HostError:
    if isinstance(err, HostError):
        return err
    path = err.filename if err.filename is not None else (directory or "")
    return from_errno(err.errno or _errno.EIO, path, directory=directory)
