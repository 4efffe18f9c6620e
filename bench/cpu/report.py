#!/usr/bin/env python3
"""Turns one CPU benchmark run (bench/cpu/bench_all.sh) into its report: each shape's roofline
min(peak, gather bandwidth x FLOP per gathered byte), libdsv4 against it and against plain PyTorch,
the issue-59 targets, the JSON files scripts/perf/make_performance.py reads and a PNG plot.

Output files (Google Benchmark's JSON shape, one per thread count; the docs generator makes one
table of each): bench/results/cpu.json for the most threads, cpu-<n>thread.json for the others.
Their benchmarks are
  BM_decode_fp8 / BM_decode_bf16 /tokens:T/heads:H/keys:K/threads:N   libdsv4; counters GFLOP
      (per second), roofline_GFLOP, of_roofline, torch_GFLOP, vs_torch
  BM_torch_fp8 / BM_torch_bf16 /...                                   plain PyTorch; GFLOP
  BM_roofline_fp8 / BM_roofline_bf16 /...                             the roofline as a time; GFLOP
and the context block carries the ceilings (peak GFLOP/s, gather GB/s per row size) as `ceilings`
and as notes.
"""
import argparse
import json
import os
import re
import sys

ROW_BYTES = {"fp8": 584, "bf16": 1024}
CACHE_NAMES = {"fp8": "FP8 584 B", "bf16": "bf16"}


CEILINGS = ("BM_peak", "BM_gather")


def medians(path):
    """{run name: entry} of a Google Benchmark JSON: median aggregates, else the entries; for the
    ceilings (BM_peak, BM_gather) the "max" aggregate where there is one, since a ceiling is the
    best the machine showed and the kernels must not be judged against a slow moment of it."""
    with open(path) as f:
        data = json.load(f)
    out, best = {}, {}
    for e in data["benchmarks"]:
        name = e.get("run_name", e["name"])
        if e.get("run_type") == "aggregate":
            if e.get("aggregate_name") == "max" and name.startswith(CEILINGS):
                best[name] = e
            if e.get("aggregate_name") != "median":
                continue
        out[name] = e
    out.update(best)
    return data.get("context", {}), out


def params(name):
    return dict(p.split(":", 1) for p in name.split("/") if ":" in p)


def to_ms(e):
    return e["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[e.get("time_unit", "ns")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gbench", required=True)
    ap.add_argument("--torch", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--plot")
    ap.add_argument("--device", default="?")
    ap.add_argument("--commit", default="?")
    ap.add_argument("--command", default="?")
    ap.add_argument("--load", nargs=2, default=["?", "?"])
    a = ap.parse_args()

    context, runs = medians(a.gbench)
    torch_context, torch_runs = medians(a.torch)
    peak, gather, label = {}, {}, ""
    for name, e in runs.items():
        p = params(name)
        if name.startswith("BM_peak"):
            peak[int(p["threads"])] = e["GFLOP"] * 1e-9 if e["GFLOP"] > 1e6 else e["GFLOP"]
            label = e.get("label", label)
        elif name.startswith("BM_gather"):  # the best prefetch distance
            key = (int(p["row_bytes"]), int(p["threads"]))
            rate = e["GBps"] * 1e-9 if e["GBps"] > 1e6 else e["GBps"]
            gather[key] = max(rate, gather.get(key, 0.0))
    # Google Benchmark reports rate counters per second; GFLOP and GBps already hold 1e-9 units.
    torch = {}
    for name, e in torch_runs.items():
        cache = re.match(r"BM_torch_(\w+?)/", name).group(1)
        p = params(name)
        torch[(cache, int(p["tokens"]), int(p["heads"]), int(p["keys"]), int(p["threads"]))] = e

    rows, per_threads = [], {}
    for name, e in runs.items():
        m = re.match(r"BM_decode_(\w+?)/", name)
        if not m:
            continue
        cache = m.group(1)
        p = params(name)
        t, h, k, n = (int(p[x]) for x in ("tokens", "heads", "keys", "threads"))
        if e.get("error_occurred"):
            print(f"{name}: error {e.get('error_message')}")
            continue
        ours = e["GFLOP"]
        bw = gather[(ROW_BYTES[cache], n)]
        roof = min(peak[n], bw * 2048.0 * h / ROW_BYTES[cache])
        te = torch.get((cache, t, h, k, n))
        theirs = te["GFLOP"] if te else None
        flop = 2.0 * h * k * t * 1024
        e = dict(e)
        e.update(roofline_GFLOP=roof, of_roofline=ours / roof)
        if theirs:
            e.update(torch_GFLOP=theirs, vs_torch=ours / theirs)
        entries = per_threads.setdefault(n, [])
        entries.append(e)
        shape = f"tokens:{t}/heads:{h}/keys:{k}/threads:{n}"
        entries.append({"name": f"BM_roofline_{cache}/{shape}", "run_name": f"BM_roofline_{cache}/{shape}",
                        "run_type": "iteration", "iterations": 1, "real_time": flop / (roof * 1e9) * 1e3,
                        "time_unit": "ms", "GFLOP": roof})
        if te:
            entries.append(dict(te))
        if cache == "bf16":
            target = theirs is None or ours >= theirs
            need = "≥ 1.0× PyTorch"
        else:
            want = 2.0 if h <= 64 else 1.4
            target = theirs is None or ours >= want * theirs
            need = f"≥ {want}× PyTorch"
        rows.append((n, cache, t, h, k, ours, roof, theirs, ours / roof >= 0.7 and target, need))

    rows.sort(key=lambda r: (r[0], r[1], r[3], r[2]))
    print(f"\npeak ({label}): " + ", ".join(f"{n} thread(s) {g:.0f} GFLOP/s" for n, g in sorted(peak.items())))
    print("random-row gather: " + ", ".join(f"{b} B x {n} thread(s) {g:.1f} GB/s" for (b, n), g in sorted(gather.items())))
    print(f"load average before / after: {a.load[0]} / {a.load[1]}\n")
    print(f"{'thr':>3} {'cache':>5} {'shape':>16} {'ours':>8} {'roofline':>8} {'of roof':>7} {'torch':>7} {'vs torch':>8}  targets")
    for n, cache, t, h, k, ours, roof, theirs, ok, need in rows:
        ratio = f"{ours / theirs:.2f}×" if theirs else "—"
        print(f"{n:3d} {cache:>5} {t:>4}x{h:>3}x{k:>5} {ours:8.1f} {roof:8.1f} {ours / roof:6.0%} "
              f"{theirs or 0:7.1f} {ratio:>8}  {'ok' if ok else 'MISSED'} (≥ 70% roofline, {need})")

    os.makedirs(a.out_dir, exist_ok=True)
    most = max(per_threads) if per_threads else 0
    for n, entries in per_threads.items():
        ctx = dict(context)
        notes = [
            f"Peak ({label}, {n} thread(s)): {peak[n]:.0f} GFLOP/s; random-row gather, {n} thread(s): "
            + ", ".join(f"{b} B rows {gather[(b, n)]:.1f} GB/s" for b in (584, 1024))
            + " (each the best repetition and prefetch distance, 4, 16 or 64 rows; rows from a pool"
            " of at least 1 GiB and 4x the last-level cache).",
            "Roofline per shape = min(peak, gather bandwidth × FLOP per gathered byte) "
            "(2048 · heads FLOP per 584 B / 1024 B row); PyTorch "
            f"{torch_context.get('torch', '?')}, bench/cpu/torch_cpu.py.",
            f"Load average before / after the run: {a.load[0]} / {a.load[1]}.",
        ]
        ctx.update(backend="cpu", device=a.device, commit=a.commit, command=a.command,
                   threads=n, notes=notes,
                   ceilings={"peak_GFLOP": peak[n],
                             "gather_GBps": {str(b): gather[(b, n)] for b in (584, 1024)}})
        name = "cpu.json" if n == most else f"cpu-{n}thread.json"
        with open(os.path.join(a.out_dir, name), "w") as f:
            json.dump({"context": ctx, "benchmarks": entries}, f, indent=1)
            f.write("\n")
        print(f"wrote {os.path.join(a.out_dir, name)}")
    if a.plot:
        plot(rows, a, peak, label)


def plot(rows, a, peak, label):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib (Debian: python3-matplotlib): plot skipped")
        return
    counts = sorted({r[0] for r in rows})
    fig, axes = plt.subplots(1, len(counts), figsize=(6.5 * len(counts), 4.6), squeeze=False)
    for ax, n in zip(axes[0], counts):
        shapes = sorted({(r[2], r[3], r[4]) for r in rows if r[0] == n}, key=lambda s: (s[1], s[0]))
        xs = list(range(len(shapes)))
        for cache, marker in (("fp8", "o"), ("bf16", "s")):
            get = {(r[2], r[3], r[4]): r for r in rows if r[0] == n and r[1] == cache}
            pts = [get.get(s) for s in shapes]
            ax.plot(xs, [p[6] if p else None for p in pts], "--", marker=marker, color="gray",
                    label=f"roofline, {CACHE_NAMES[cache]}", alpha=0.7)
            ax.plot(xs, [p[5] if p else None for p in pts], "-", marker=marker,
                    color="tab:blue" if cache == "fp8" else "tab:green", label=f"libdsv4, {CACHE_NAMES[cache]}")
            ax.plot(xs, [p[7] if p else None for p in pts], ":", marker=marker,
                    color="tab:red" if cache == "fp8" else "tab:orange", label=f"PyTorch, {CACHE_NAMES[cache]}")
        ax.axhline(peak[n], color="black", linewidth=0.8)
        ax.annotate(f"peak {peak[n]:.0f}", (xs[-1], peak[n]), textcoords="offset points",
                    xytext=(0, 4), ha="right", fontsize=8)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{t}×{h}×{k}" for t, h, k in shapes], fontsize=8)
        ax.set_xlabel("tokens × heads × keys")
        ax.set_ylabel("GFLOP/s")
        ax.set_title(f"{n} thread(s)", fontsize=10)
        ax.set_ylim(0, peak[n] * 1.15)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"CPU decode: libdsv4 vs roofline and plain PyTorch ({label} peak)\n"
                 f"{a.device}, commit {a.commit}, load {a.load[0]} → {a.load[1]}", fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(a.plot), exist_ok=True)
    fig.savefig(a.plot, dpi=110, metadata={"Software": None})
    print(f"wrote {a.plot}")


if __name__ == "__main__":
    sys.exit(main())
