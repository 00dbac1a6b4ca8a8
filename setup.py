"""Compiled extensions only; everything else lives in pyproject.toml.

Sources are under native/; the built modules are private (koordlet._native.*) and
imported only by koordlet.system, which keeps a pure-Python twin for each accelerator.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

# Warnings in our own C are fixed, not silenced (the build log must stay clean under -Wall).
WARNINGS = ["-Wall"]

extensions = cythonize(
    [
        Extension(
            "koordlet._native._cgroupfs",
            sources=["native/cgroupfs/_cgroupfs.pyx", "native/cgroupfs/src/parse.c"],
            include_dirs=["native/cgroupfs/src"],
            extra_compile_args=["-O2", *WARNINGS],
        ),
    ],
    compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False},
)

setup(
    ext_modules=extensions,
    cffi_modules=["native/perf/build_perf.py:ffibuilder"],
)
