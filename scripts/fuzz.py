#!/usr/bin/env python3
"""Runs the libFuzzer targets of fuzz/ (built by `make fuzz-build`) for a chosen time each.

  scripts/fuzz.py [--build build-fuzz] [--seconds 600] [--jobs 1] [--record FILE] [target ...]

Each target fuzzes from its working corpus (<build>/fuzz-corpus/<target>, kept between runs) plus
the committed seeds (fuzz/corpus/<target>) and found inputs (fuzz/regressions/<target>); a crash
leaves its input in <build>/fuzz-artifacts/<target>/ and makes the script exit 1 after the other
targets have run. --record appends one JSON line per target (cases, seconds, crashes, commit) to
FILE, which scripts/reliability_report.py sums into docs/reliability.md.
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
TARGETS = ["fuzz_plan", "fuzz_run", "fuzz_paged_index", "fuzz_export", "fuzz_kv_write", "fuzz_merge"]


def commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_one(build, target, seconds, revision):
    binary = os.path.join(build, "bin", target)
    work = os.path.join(build, "fuzz-corpus", target)
    artifacts = os.path.join(build, "fuzz-artifacts", target) + "/"
    os.makedirs(work, exist_ok=True)
    os.makedirs(artifacts, exist_ok=True)
    dirs = [work] + [d for d in (os.path.join(ROOT, "fuzz", sub, target)
                                 for sub in ("corpus", "regressions")) if os.path.isdir(d)]
    cmd = [binary, f"-max_total_time={seconds}", "-timeout=20", "-rss_limit_mb=4096",
           "-print_final_stats=1", f"-artifact_prefix={artifacts}"] + dirs
    started = datetime.datetime.now(datetime.timezone.utc)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    with open(os.path.join(build, f"{target}.log"), "w") as f:
        f.write(log)
    cases = re.search(r"stat::number_of_executed_units:\s*(\d+)", log)
    elapsed = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
    crash = re.search(r"Test unit written to (\S+)", log)
    return {
        "kind": "fuzz",
        "target": target,
        "date": started.strftime("%Y-%m-%d"),
        "commit": revision,
        "seconds": round(elapsed),
        "cases": int(cases.group(1)) if cases else 0,
        "crashes": 0 if proc.returncode == 0 else 1,
        "artifact": crash.group(1) if crash else "",
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build-fuzz"))
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--jobs", type=int, default=1, help="targets run at once")
    parser.add_argument("--record", help="append one JSON line per target to this file")
    parser.add_argument("targets", nargs="*", default=TARGETS)
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    revision = commit()  # what `make fuzz` just built
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda t: run_one(build, t, args.seconds, revision), args.targets))
    for r in results:
        verdict = f"CRASH, input in {r['artifact']}" if r["crashes"] else "clean"
        print(f"{r['target']:18} {r['cases']:>10} cases in {r['seconds']:>6} s: {verdict}")
    if args.record:
        with open(args.record, "a") as f:
            for r in results:
                f.write(json.dumps(r, sort_keys=True) + "\n")
    return 1 if any(r["crashes"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
