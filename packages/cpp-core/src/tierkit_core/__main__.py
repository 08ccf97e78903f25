"""``python -m tierkit_core --includes | --cmakedir``, as pybind11 offers."""

from __future__ import annotations

import argparse

from tierkit_core import get_cmake_dir, get_include


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tierkit_core")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--includes", action="store_true", help="print -I<include dir>")
    group.add_argument("--cmakedir", action="store_true", help="print the CMake config dir")
    args = parser.parse_args()
    print(f"-I{get_include()}" if args.includes else get_cmake_dir())


if __name__ == "__main__":
    main()
