#!/usr/bin/env python3
"""Regenerates the figures of docs/reliability.md from recorded runs.

  scripts/reliability_report.py [--from DIR ...] [--check]

Records live in docs/reliability/runs.jsonl, one JSON object per run:
  {"kind": "fuzz", "target", "cases", "seconds", "crashes", "date", "commit"}   (scripts/fuzz.py)
  {"kind": "ctest", "suite": "asan"|"tsan"|"plain", "tests", "failures", "seconds",
   "alloc_failures", "concurrency_tests", "date"}            (from a build's ctest JUnit file)
  {"kind": "compute-sanitizer", "tool", "errors", "tests", ...}   (scripts/gpu/sanitize.sh)
--from DIR adds the records found in DIR (a build directory: fuzz-runs.jsonl, ctest-junit.xml;
or a sanitize.sh output directory: sanitize.jsonl), skipping ones already recorded. The loader
scenario count is read from the tests' sources. The block between the figures markers of
docs/reliability.md is rewritten; --check only reports whether it is up to date (exit 1 if not).
"""
import argparse
import glob
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
RUNS = os.path.join(ROOT, "docs", "reliability", "runs.jsonl")
DOC = os.path.join(ROOT, "docs", "reliability.md")
BEGIN, END = "<!-- figures:begin (scripts/reliability_report.py) -->", "<!-- figures:end -->"


def load_runs():
    if not os.path.exists(RUNS):
        return []
    with open(RUNS) as f:
        return [json.loads(line) for line in f if line.strip()]


def junit_record(path):
    """One ctest JUnit file -> a ctest record (suite named after the build directory)."""
    root = ET.parse(path).getroot()
    build = os.path.basename(os.path.dirname(os.path.abspath(path)))
    suite = "asan" if "asan" in build else "tsan" if "tsan" in build else "fuzz" if "fuzz" in build else "plain"
    out = "".join(tc.findtext("system-out") or "" for tc in root.iter("testcase"))
    names = [tc.get("name") for tc in root.iter("testcase")]
    return {
        "kind": "ctest",
        "suite": suite,
        "tests": int(root.get("tests", 0)),
        "failures": int(root.get("failures", 0)),
        "seconds": round(sum(float(tc.get("time", 0)) for tc in root.iter("testcase"))),
        "alloc_failures": sum(int(n) for n in re.findall(r"alloc sweep: (\d+) failures injected", out)),
        "concurrency_tests": len(re.findall(r"\[       OK \] Concurrency\.", out)),
        "fuzz_cases": sum(int(n) for n in re.findall(r"stat::number_of_executed_units:\s*(\d+)", out)),
        "timestamp": root.get("timestamp", ""),
        "date": root.get("timestamp", "")[:10],
        "tests_named": len(names),
    }


def collect(dirs):
    found = []
    for d in dirs:
        for name in ("fuzz-runs.jsonl", "sanitize.jsonl"):
            p = os.path.join(d, name)
            if os.path.exists(p):
                with open(p) as f:
                    found += [json.loads(line) for line in f if line.strip()]
        for p in glob.glob(os.path.join(d, "ctest-junit*.xml")):
            found.append(junit_record(p))
    return found


def loader_scenarios():
    """Fake module variants, non-module files and loader test cases, from the test sources."""
    cmake = open(os.path.join(ROOT, "tests", "loader", "CMakeLists.txt")).read()
    test = open(os.path.join(ROOT, "tests", "loader", "loader_test.cpp")).read()
    modules = len(re.findall(r"^fake_module\(", cmake, re.M))
    files = len(re.findall(r'write_file\("libdsv4-', test)) + test.count("mkdir(") + test.count("symlink(")
    cases = len(re.findall(r"^TEST(?:_P)?\(", test, re.M)) + len(re.findall(r"FaultCase\{", test))
    return modules, files, cases


def figures(runs):
    lines = []
    fuzz = [r for r in runs if r["kind"] == "fuzz"]
    lines.append("| fuzz target | runs | cases | hours | crashes found |")
    lines.append("|---|---:|---:|---:|---:|")
    targets = sorted({r["target"] for r in fuzz})
    for t in targets:
        rs = [r for r in fuzz if r["target"] == t]
        lines.append(f"| `{t}` | {len(rs)} | {sum(r['cases'] for r in rs):,} | "
                     f"{sum(r['seconds'] for r in rs) / 3600:.2f} | {sum(r['crashes'] for r in rs)} |")
    smoke = sum(r.get("fuzz_cases", 0) for r in runs if r["kind"] == "ctest")
    lines.append(f"| all | {len(fuzz)} | {sum(r['cases'] for r in fuzz):,} | "
                 f"{sum(r['seconds'] for r in fuzz) / 3600:.2f} | {sum(r['crashes'] for r in fuzz)} |")
    lines.append("")
    lines.append(f"Smoke runs recorded from ctest (`make test`'s fuzz_smoke.*): {smoke:,} cases.")
    lines.append("")
    lines.append("| suite | runs | tests per run | failed runs | allocation failures injected | "
                 "concurrency tests run |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for suite, label in (("plain", "`make test` (ctest)"), ("asan", "ASan + UBSan (`make test-asan`)"),
                         ("tsan", "TSan (`make test-tsan`)"), ("fuzz", "fuzz smoke (`make fuzz-smoke`)")):
        rs = [r for r in runs if r["kind"] == "ctest" and r["suite"] == suite]
        if not rs:
            continue
        lines.append(f"| {label} | {len(rs)} | {max(r['tests'] for r in rs)} | "
                     f"{sum(1 for r in rs if r['failures'])} | {sum(r.get('alloc_failures', 0) for r in rs):,} | "
                     f"{sum(r.get('concurrency_tests', 0) for r in rs)} |")
    gpu = [r for r in runs if r["kind"] == "compute-sanitizer"]
    lines.append("")
    if gpu:
        lines.append("| compute-sanitizer tool | runs | errors reported | GPUs |")
        lines.append("|---|---:|---:|---|")
        for tool in sorted({r["tool"] for r in gpu}):
            rs = [r for r in gpu if r["tool"] == tool]
            lines.append(f"| {tool} | {len(rs)} | {sum(r['errors'] or 0 for r in rs)} | "
                         f"{', '.join(sorted({r.get('gpu', '?') for r in rs}))} |")
    else:
        lines.append("compute-sanitizer: no run recorded yet (`scripts/gpu/sanitize.sh` on a GPU "
                     "machine, then `--from gpu-out/sanitize`).")
    modules, files, cases = loader_scenarios()
    lines.append("")
    lines.append(f"Loader scenarios (tests/loader): {modules} fake module variants, {files} files that are "
                 f"no module or a misnamed one, {cases} test cases over them.")
    dates = sorted(r.get("date", "") for r in runs if r.get("date"))
    if dates:
        lines.append(f"Records: {len(runs)} runs, {dates[0]} to {dates[-1]} (docs/reliability/runs.jsonl).")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="dirs", action="append", default=[],
                        help="a build or sanitize.sh output directory whose records to add")
    parser.add_argument("--check", action="store_true", help="exit 1 if the figures are stale")
    args = parser.parse_args()
    runs = load_runs()
    known = {json.dumps(r, sort_keys=True) for r in runs}
    added = [r for r in collect(args.dirs) if json.dumps(r, sort_keys=True) not in known]
    if added and not args.check:
        os.makedirs(os.path.dirname(RUNS), exist_ok=True)
        with open(RUNS, "a") as f:
            for r in added:
                f.write(json.dumps(r, sort_keys=True) + "\n")
        runs += added
    doc = open(DOC).read()
    start, stop = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    new = doc[:start] + "\n" + figures(runs) + doc[stop:]
    if args.check:
        if new != doc:
            print("docs/reliability.md figures are stale: run scripts/reliability_report.py")
            return 1
        return 0
    with open(DOC, "w") as f:
        f.write(new)
    print(f"{len(added)} new records; {len(runs)} in all; docs/reliability.md updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
