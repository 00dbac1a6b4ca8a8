"""``python -m benchmarks [--quick] [NAME ...]``: run benchmarks, write JSON, print headlines."""

from __future__ import annotations

import argparse
import importlib
import sys

#: benchmark module names (benchmarks/<name>.py), in the order ``make bench`` runs them
REGISTRY: tuple[str, ...] = ()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of {', '.join(REGISTRY)})")
    parser.add_argument(
        "--quick", action="store_true", help="short smoke run; results are not representative"
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in REGISTRY]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    for name in args.names or REGISTRY:
        module = importlib.import_module(f"benchmarks.{name}")
        result = module.run(quick=args.quick)
        path = result.write()
        print(f"{name}: wrote {path}")
        print(result.headline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
