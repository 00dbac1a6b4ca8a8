"""``python -m benchmarks [--quick] [NAME ...]``: run benchmarks, write JSON, print headlines.

A benchmark is a module ``benchmarks/<name>.py`` defining ``run(quick: bool) -> Result``;
they run in name order.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path

_NOT_BENCHMARKS = {"harness"}


def available() -> list[str]:
    here = str(Path(__file__).resolve().parent)
    names = [m.name for m in pkgutil.iter_modules([here]) if not m.name.startswith("_")]
    return sorted(n for n in names if n not in _NOT_BENCHMARKS)


def main(argv: list[str] | None = None) -> int:
    names = available()
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of {', '.join(names)})")
    parser.add_argument(
        "--quick", action="store_true", help="short smoke run; results are not representative"
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in names]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    for name in args.names or names:
        module = importlib.import_module(f"benchmarks.{name}")
        result = module.run(quick=args.quick)
        path = result.write()
        print(f"{name}: wrote {path}")
        print(result.headline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
