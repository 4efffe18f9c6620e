#!/usr/bin/env python3
"""ABI hygiene of libdsv4.so (stdlib only).

  check_exports.py symbols <lib> <exported_symbols.txt> <public header>...
      every defined dynamic symbol starts with dsv4_, and the set of exported symbols equals both
      exported_symbols.txt and the functions declared DSV4_API in the public headers.
  check_exports.py soname <lib> <expected soname>
"""
import re
import subprocess
import sys


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True,
                         text=True).stdout
    names = set()
    bad = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        kind, name = parts[-2], parts[-1].split("@")[0]
        if kind == "A":  # version node (DSV4_0), not a symbol
            continue
        if not name.startswith("dsv4_"):
            bad.append("%s %s" % (kind, name))
        names.add(name)
    return names, bad


def declared(headers):
    names = set()
    for header in headers:
        text = re.sub(r"/\*.*?\*/", "", open(header).read(), flags=re.S)
        names |= set(re.findall(r"DSV4_API\b[^;{]*?\b(dsv4_\w+)\)?\s*\((?!dsv4_\w+\))", text))
    return names


def listed(path):
    return {line.strip() for line in open(path) if line.strip() and not line.startswith("#")}


def check_symbols(lib, symbols_file, headers):
    names, bad = exported(lib)
    ok = True
    if bad:
        print("symbols outside the dsv4_ namespace are exported:\n  " + "\n  ".join(sorted(bad)))
        ok = False
    for label, other in (("exported_symbols.txt", listed(symbols_file)), ("the public headers", declared(headers))):
        missing, extra = other - names, names - other
        if missing:
            print("in %s but not exported: %s" % (label, " ".join(sorted(missing))))
            ok = False
        if extra:
            print("exported but not in %s: %s" % (label, " ".join(sorted(extra))))
            ok = False
    print("%d exported symbols checked" % len(names))
    return ok


def check_soname(lib, expected):
    out = subprocess.run(["readelf", "-d", lib], check=True, capture_output=True, text=True).stdout
    found = re.findall(r"Library soname: \[([^\]]+)\]", out)
    print("SONAME: %s" % (found[0] if found else "(none)"))
    return found == [expected]


def main(argv):
    if len(argv) >= 5 and argv[1] == "symbols":
        return 0 if check_symbols(argv[2], argv[3], argv[4:]) else 1
    if len(argv) == 4 and argv[1] == "soname":
        return 0 if check_soname(argv[2], argv[3]) else 1
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
