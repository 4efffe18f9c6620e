#!/usr/bin/env python3
"""Checks the source tree's layering (a ctest):

1. #include edges between the folders of src/ form no cycle, and each folder includes only the
   folders below it: api -> core -> loader -> base (cli uses the public headers only).
2. Nothing in src/, backends/, include/ or reference/ includes a file from tests/, and no CMake file
   there names tests/ or a test-support target (the installed library, modules and CLI never build
   test code).
"""
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SOURCE_SUFFIXES = (".c", ".h", ".cpp", ".hpp", ".cu", ".cuh", ".cl", ".hip")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)
# The src/ folders in layering order: each may include only those after it.
SRC_LAYERS = ["api", "core", "loader", "base"]
SRC_ALLOWED = {layer: set(SRC_LAYERS[i + 1:]) for i, layer in enumerate(SRC_LAYERS)}
SRC_ALLOWED["cli"] = set()
PRODUCT_DIRS = ["src", "backends", "include", "reference"]
TEST_TARGETS = re.compile(r"\b(dsv4_testsupport|dsv4_test_device_main|GTest::)")


def files_under(top, suffixes):
    for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
        for name in names:
            if name.endswith(suffixes):
                yield os.path.join(dirpath, name)


def rel(path):
    return os.path.relpath(path, ROOT)


def main():
    problems = []
    edges = {}
    for path in files_under("src", SOURCE_SUFFIXES):
        folder = rel(path).split(os.sep)[1]
        text = open(path, encoding="utf-8", errors="replace").read()
        for inc in INCLUDE.findall(text):
            target = inc.split("/")[0] if "/" in inc else None
            if target in SRC_ALLOWED and target != folder:
                edges.setdefault(folder, set()).add(target)
                if target not in SRC_ALLOWED.get(folder, set()):
                    problems.append(f"{rel(path)} includes {inc}: src/{folder} may not use src/{target}")
    # A cycle would need an edge against the order above; report any cycle explicitly as well.
    def visit(node, stack):
        for nxt in edges.get(node, ()):
            if nxt in stack:
                problems.append("include cycle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            else:
                visit(nxt, stack + [nxt])
    for start in list(edges):
        visit(start, [start])
    for top in PRODUCT_DIRS:
        for path in files_under(top, SOURCE_SUFFIXES):
            text = open(path, encoding="utf-8", errors="replace").read()
            for inc in INCLUDE.findall(text):
                if inc.startswith("tests/") or "/tests/" in inc:
                    problems.append(f"{rel(path)} includes test code: {inc}")
        for path in files_under(top, ("CMakeLists.txt", ".cmake")):
            for n, line in enumerate(open(path, encoding="utf-8"), 1):
                code = line.split("#", 1)[0]
                if "tests/" in code or TEST_TARGETS.search(code):
                    problems.append(f"{rel(path)}:{n} builds or links test code: {line.strip()}")
    for p in sorted(set(problems)):
        print(p)
    if problems:
        return 1
    print("layering ok: " + " -> ".join(SRC_LAYERS) + "; no product code uses tests/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
