#!/usr/bin/env python3
"""Runs clang-format over the project's C, C++, CUDA and HIP sources (the files git tracks).

  scripts/format.py           rewrites every file in place
  scripts/format.py --check   lists the files that differ and exits 1 (the clang_format ctest)
"""
import argparse
import os
import subprocess
import sys

SUFFIXES = (".c", ".h", ".cpp", ".hpp", ".cc", ".cu", ".cuh", ".cl", ".hip")


def tracked_sources(root):
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True, capture_output=True).stdout
    return [f for f in out.decode().split("\0") if f.endswith(SUFFIXES)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--check", action="store_true", help="report, do not rewrite")
    parser.add_argument("--clang-format", default="clang-format", help="clang-format executable")
    args = parser.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    files = tracked_sources(root)
    if not files:
        sys.exit("no tracked sources found (not a git checkout?)")
    if not args.check:
        subprocess.run([args.clang_format, "-i", *files], cwd=root, check=True)
        return 0
    bad = []
    for f in files:
        with open(os.path.join(root, f), "rb") as fh:
            original = fh.read()
        formatted = subprocess.run([args.clang_format, f], cwd=root, check=True,
                                   capture_output=True).stdout
        if formatted != original:
            bad.append(f)
    for f in bad:
        print(f"not clang-format clean: {f}")
    if bad:
        print(f"{len(bad)} file(s); run `make format` (scripts/format.py)")
        return 1
    print(f"{len(files)} files clang-format clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
