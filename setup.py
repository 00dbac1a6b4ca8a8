"""Compiled extensions only; everything else lives in pyproject.toml.

Sources are under native/; the built modules are private (koordlet._native.*, imported
only by koordlet.system; controlplane.scheduler._native.*, imported only by
controlplane.scheduler.kernel), and each accelerator keeps a pure-Python twin.

``KOORDLET_NO_EXTENSIONS=1`` at build time builds none of them, so a host without a C
compiler installs the package; the koordlet then runs on the twins (``koordlet
--version`` says so), as it does with the same variable set at run time.
"""

import os

from setuptools import Extension, setup


def extensions_disabled() -> bool:
    # the values koordlet.system.native.extensions_disabled accepts (that module cannot be
    # imported here: the build runs before the package is installed)
    return os.environ.get("KOORDLET_NO_EXTENSIONS", "").strip().lower() in ("1", "true", "yes", "on")


if extensions_disabled():
    setup()
else:
    from Cython.Build import cythonize

    # Warnings in our own C are fixed, not silenced (the build log must stay clean under -Wall).
    WARNINGS = ["-Wall"]

    setup(
        ext_modules=cythonize(
            [
                Extension(
                    "koordlet._native._cgroupfs",
                    sources=["native/cgroupfs/_cgroupfs.pyx", "native/cgroupfs/src/parse.c"],
                    include_dirs=["native/cgroupfs/src"],
                    extra_compile_args=["-O2", *WARNINGS],
                ),
                Extension(
                    "controlplane.scheduler._native._kernel",
                    sources=["native/schedkernel/_kernel.pyx"],
                    extra_compile_args=["-O2", *WARNINGS],
                ),
            ],
            compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False},
        ),
        cffi_modules=["native/perf/build_perf.py:ffibuilder"],
    )
