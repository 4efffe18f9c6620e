#!/usr/bin/env python3
"""Generates docs/performance.md (with its plots in docs/img/) and the figures table of
docs/cuda-backend.md from the benchmarks' JSON output.

  python3 scripts/perf/make_performance.py           rewrites docs/performance.md, docs/img/*.png and
                                                     the block of docs/cuda-backend.md between
                                                     "<!-- figures: <results file> -->" and
                                                     "<!-- end of figures -->"
  python3 scripts/perf/make_performance.py --check   regenerates both pages in memory and fails
                                                     (exit 1, with a diff) if either differs from
                                                     the data or a plot is missing: the
                                                     performance_page ctest

Input: every bench/results/*.json, each one run of one benchmark in Google Benchmark's JSON format
(`--benchmark_format=json` or `--benchmark_out=<file> --benchmark_out_format=json`). Each file becomes
one table of the page, whatever wrote it: a new run replaces its file, and the page follows.

The file's `context` block must say where the figures come from; the page prints it above the table:
  backend   "cpu" or "cuda" (else taken from the benchmark names: "cuda/..." or "BM_decode_...")
  device    the machine, e.g. "NVIDIA H200 (132 SMs, 60 MB L2, driver 580.159.04, CUDA 13.0)"
  date      when it ran (Google Benchmark writes an ISO date-time; the page keeps the date)
  commit    the libdsv4 commit that was measured
  command   the command that produced the file
  source, method, notes (a list)   optional: printed as given (e.g. "transcribed from ...")

Each entry of `benchmarks` is a Google Benchmark result: name, real_time, time_unit ("ns", "us",
"ms", "s") and its user counters as plain keys beside them. Entries with run_type "aggregate" are
used when present (the "median" one of each run_name); otherwise the median over the iterations
entries of a run_name. Entries with error_occurred are listed as errors.

Benchmark names are "/"-separated: plain parts name the case, "key:value" parts are its parameters
(Google Benchmark's ArgNames form), and a trailing real_time / manual_time / process_time is ignored.

CPU (bench/cpu/bench_decode_cpu.cpp through bench/cpu/bench_all.sh and bench/cpu/report.py; one
file per thread count, context key `threads`):
  BM_decode_fp8/tokens:8/heads:64/keys:640/threads:2   FP8 584 B cache; BM_decode_bf16/...: bf16
  BM_torch_fp8/..., BM_torch_bf16/...                  plain PyTorch on the same shape and cache
  BM_roofline_fp8/..., BM_roofline_bf16/...            the shape's roofline, as a time
  counter GFLOP                                        GFLOP/s (Google Benchmark's rate counter)

CUDA (the GPU benchmark; what the page expects from it):
  cuda/CONFIG1/b:64                          FlashMLA's decode case CONFIG1..CONFIG4 (FP8 584 B
                                             cache, s_q = 2, b requests) with their own head counts
  cuda/CONFIG1/heads:8/b:64                  the same case with 8 (16, 32, 64) heads
  cuda/CONFIG1/cache:bf16/b:64               the same case over a bf16 cache
  cuda/prefill/heads:64/topk:512/s_kv:8192   sparse prefill (bf16 KV, s_q 4096)
  real_time                                  the case's time (manual time from CUDA events)
  counter flashmla_us                        FlashMLA's time for the same case (optional)
  counter torch_us                           plain PyTorch's time for the same shape (optional)
  counter TFLOPs                             2 * heads * attended keys * (512 + 512) / time, in
                                             TFLOP/s (optional)
  counter gather_us                          a gather of just the rows the case reads (optional)
  Other counters are ignored. The small-head rows are compared with cuda/CONFIG1/heads:64/b:N, or
  with cuda/CONFIG1/b:N where that is absent (the same shape).

Several GPUs (examples/python/tensor_parallel.py and context_parallel.py through
scripts/gpu/multi_gpu.sh, converted by scripts/perf/multi_gpu_results.py; context backend
"multi-gpu"; one file per host):
  multi_gpu/tensor_parallel/CONFIG1/b:64/gpus:2    an example (tensor_parallel, context_parallel),
                                                   a step of FlashMLA's CONFIG1 / CONFIG2 size, b
                                                   requests, on 1, 2 or 4 GPUs (ranks)
  real_time                                        the step (attention + exchange [+ merge])
  counter attention_us                             libdsv4's attention on a rank
  counter exchange_us                              the NCCL all_gather (a copy on 1 GPU)
  counter merge_us                                 dsv4_merge of the partials (context parallel)
  counter single_gpu_attention_us                  all heads over the whole context on one GPU,
                                                   timed in the same run
  counter passed                                   1 when the example's checks passed, else 0
  The attention ratio is attention_us / single_gpu_attention_us. Other counters are ignored.

The plots need matplotlib (Debian: python3-matplotlib); --check does not.
"""
import argparse
import difflib
import glob
import json
import os
import re
import statistics
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RESULTS = os.path.join("bench", "results")
PAGE = os.path.join("docs", "performance.md")
BACKEND_DOC = os.path.join("docs", "cuda-backend.md")
IMG = os.path.join("docs", "img")
TIME_SUFFIXES = ("real_time", "manual_time", "process_time")
TO_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
# Google Benchmark's own keys of a result entry; every other key is a user counter.
STANDARD_KEYS = {
    "name", "family_index", "per_family_instance_index", "run_name", "run_type", "repetitions",
    "repetition_index", "threads", "iterations", "real_time", "cpu_time", "time_unit",
    "aggregate_name", "aggregate_unit", "label", "error_occurred", "error_message",
}
CPU_CACHES = {"BM_decode_fp8": "FP8 584 B cache", "BM_decode_bf16": "bf16 cache",
              "BM_roofline_fp8": "roofline, FP8", "BM_roofline_bf16": "roofline, bf16",
              "BM_torch_fp8": "plain PyTorch, FP8", "BM_torch_bf16": "plain PyTorch, bf16"}


class Result:
    """One benchmark case: its name split into parts and parameters, its time and counters."""

    def __init__(self, name, time_us, counters, label="", error=""):
        self.name = name
        parts = [p for p in name.split("/") if p not in TIME_SUFFIXES]
        self.parts = [p for p in parts if ":" not in p]
        self.params = dict(p.split(":", 1) for p in parts if ":" in p)
        self.us = time_us
        self.counters = counters
        self.label = label
        self.error = error

    def param(self, key, default=None):
        value = self.params.get(key)
        return default if value is None else int(value) if value.isdigit() else value


def load(path):
    """(context, [Result]) of one Google Benchmark JSON file."""
    with open(path) as f:
        data = json.load(f)
    entries = data.get("benchmarks", [])
    by_run = {}
    for e in entries:
        by_run.setdefault(e.get("run_name", e["name"]), []).append(e)
    results = []
    for run_name, runs in by_run.items():
        medians = [e for e in runs
                   if e.get("run_type") == "aggregate" and e.get("aggregate_name") == "median"]
        iterations = [e for e in runs if e.get("run_type", "iteration") == "iteration"]
        errors = [e for e in runs if e.get("error_occurred")]
        if errors:
            results.append(Result(run_name, None, {}, error=errors[0].get("error_message", "error")))
            continue
        chosen = medians or iterations
        if not chosen:
            continue
        times = [e["real_time"] * TO_US[e.get("time_unit", "ns")] for e in chosen]
        counters = {}
        for key in chosen[0]:
            if key not in STANDARD_KEYS and isinstance(chosen[0][key], (int, float)):
                counters[key] = statistics.median(e[key] for e in chosen if key in e)
        results.append(Result(run_name, statistics.median(times), counters, chosen[0].get("label", "")))
    return data.get("context", {}), results


def backend_of(context, results):
    if context.get("backend"):
        return context["backend"]
    if results and results[0].parts and results[0].parts[0] == "cuda":
        return "cuda"
    return "cpu"


def fmt_us(us):
    return "—" if us is None else f"{us:.1f}"


def fmt_ms(us):
    return "—" if us is None else f"{us / 1000:.1f} ms"


def fmt_ratio(x):
    return "—" if x is None else f"{x:.2f}×" if x < 10 else f"{x:.1f}×"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def source_lines(context):
    date = str(context.get("date", "?"))[:10]
    lines = [
        f"- Device: {context.get('device', context.get('host_name', '?'))}",
        f"- Date: {date}; commit: `{context.get('commit', '?')}`",
        f"- Command: `{context.get('command', '?')}`",
    ]
    if context.get("load_avg"):  # Google Benchmark's: the machine's load when the run started
        lines.append("- Load average when it started: " +
                     ", ".join(f"{x:.2f}" for x in context["load_avg"]))
    for key in ("source", "method"):
        if context.get(key):
            lines.append(f"- {key.capitalize()}: {context[key]}")
    for note in context.get("notes", []):
        lines.append(f"- {note}")
    return lines


# ---------------------------------------------------------------------------------------------- CPU


def cpu_section(context, results):
    """One row per shape (tokens × heads × keys), one column per cache layout."""
    families = []
    shapes = {}
    for r in results:
        family = r.parts[0] if r.parts else r.name
        if family not in families:
            families.append(family)
        key = (r.param("tokens", 0), r.param("heads", 0), r.param("keys", 0))
        shapes.setdefault(key, {})[family] = r
    families.sort(key=lambda f: (list(CPU_CACHES).index(f) if f in CPU_CACHES else len(CPU_CACHES), f))
    rows = []
    for key in sorted(shapes, key=lambda k: (k[1], k[0], k[2])):
        cells = [" × ".join(str(v) for v in key)]
        for family in families:
            r = shapes[key].get(family)
            if r is None:
                cells.append("—")
            elif r.error:
                cells.append(f"error: {r.error}")
            else:
                gflops = r.counters.get("GFLOP")
                rate = f"{gflops:.0f}" if gflops and gflops >= 10 else f"{gflops:.1f}" if gflops else ""
                cells.append(fmt_ms(r.us) + (f" ({rate} GFLOP/s)" if rate else ""))
        rows.append(cells)
    header = ["tokens × heads × keys"] + [CPU_CACHES.get(f, f) for f in families]
    return table(header, rows)


# --------------------------------------------------------------------------------------------- CUDA


def cuda_case(r):
    """The bench's own case label: "CONFIG1 h8 b=64", "CONFIG2 bf16 b=2", "prefill h64 topk 512 ..."."""
    words = list(r.parts[1:] if r.parts and r.parts[0] == "cuda" else r.parts)
    for key, value in r.params.items():
        if key == "b":
            continue
        words.append(f"h{value}" if key == "heads" else value if key == "cache" else f"{key} {value}")
    if "b" in r.params:
        words.append(f"b={r.params['b']}")
    return " ".join(words)


def cuda_group(r):
    """Row order: FlashMLA's FP8 decode cases, head counts, bf16 caches, prefill, the rest."""
    case = r.parts[1] if len(r.parts) > 1 else r.name
    config = re.fullmatch(r"CONFIG(\d+)", case)
    if config and set(r.params) == {"b"}:
        group = (0, int(config.group(1)), 0)
    elif config and set(r.params) == {"heads", "b"}:
        group = (1, r.param("heads"), 0)
    elif config and r.params.get("cache"):
        group = (2, int(config.group(1)), 0)
    elif case == "prefill":
        group = (3, r.param("heads", 0), r.param("topk", 0))
    else:
        return (4, 0, 0, r.name, 0)
    return group + (case, r.param("b", r.param("s_kv", 0)))


def sixty_four_heads(results, r):
    """The 64-head time for a head-count row: CONFIG1/heads:64/b:N, else CONFIG1/b:N."""
    if "heads" not in r.params or r.param("heads") == 64:
        return None
    b = r.params.get("b")
    for params in ({"heads": "64", "b": b}, {"b": b}):
        for x in results:
            if x.parts == r.parts and x.params == params and x.us:
                return x.us
    return None


def cuda_section(context, results):
    results = sorted(results, key=cuda_group)
    has = lambda key: any(key in r.counters for r in results)
    header = ["case", "ours (µs)"]
    if has("flashmla_us"):
        header += ["FlashMLA (µs)", "FlashMLA / ours"]
    if has("torch_us"):
        header += ["plain PyTorch (µs)", "PyTorch / ours"]
    small = any(sixty_four_heads(results, r) for r in results)
    if small:
        header += ["ours / 64 heads"]
    if has("TFLOPs"):
        header += ["TFLOP/s"]
    if has("gather_us"):
        header += ["gather floor (µs)"]
    if has("invariant_ratio"):
        header += ["batch-invariant / ours"]
    rows = []
    for r in results:
        if r.error:
            rows.append([cuda_case(r), f"error: {r.error}"] + [""] * (len(header) - 2))
            continue
        cells = [cuda_case(r), fmt_us(r.us)]
        ratio = lambda key: r.counters[key] / r.us if key in r.counters and r.us else None
        if has("flashmla_us"):
            cells += [fmt_us(r.counters.get("flashmla_us")), fmt_ratio(ratio("flashmla_us"))]
        if has("torch_us"):
            cells += [fmt_us(r.counters.get("torch_us")), fmt_ratio(ratio("torch_us"))]
        if small:
            base = sixty_four_heads(results, r)
            cells.append(fmt_ratio(r.us / base) if base else "")
        if has("TFLOPs"):
            cells.append(f"{r.counters['TFLOPs']:.0f}" if "TFLOPs" in r.counters else "")
        if has("gather_us"):
            cells.append(fmt_us(r.counters.get("gather_us")) if "gather_us" in r.counters else "")
        if has("invariant_ratio"):
            cells.append(fmt_ratio(r.counters.get("invariant_ratio")))
        rows.append(cells)
    return table(header, rows)


def is_host_overhead(results):
    """Whether a results file is a host-overhead benchmark's (every name cuda/host/...): the C one
    (bench/gpu/bench_host_overhead.cpp) or, with cuda/host/python/..., the Python one
    (bench/python/bench_overhead.py)."""
    return bool(results) and all(r.parts[:2] == ["cuda", "host"] for r in results)


def is_python_overhead(results):
    return is_host_overhead(results) and all(r.parts[2:3] == ["python"] for r in results)


def host_section(context, results):
    # A target below one empty launch cannot be met by any run that launches a kernel.
    launch = next((r.us for r in results if not r.error and "empty_launch" in r.parts), None)
    rows, notes = [], []
    for r in results:
        case = " ".join(r.parts[2:]) + "".join(f" {k}={v}" for k, v in r.params.items())
        if r.error:
            rows.append([case, f"error: {r.error}", "", ""])
            continue
        gpu = r.counters.get("gpu_us_per_call")
        target = r.counters.get("target_us")
        rows.append([case, fmt_us(r.us), fmt_us(gpu) if gpu else "",
                     fmt_us(target) if target else ""])
        if target and launch is not None and launch > target:
            notes += ["", f"The {' '.join(r.parts[2:])} target ({fmt_us(target)} µs) is below this "
                      f"host's cost of one empty kernel launch ({fmt_us(launch)} µs): no run that "
                      f"launches a kernel can meet it on this host. The run costs "
                      f"{fmt_us(r.us)} µs, as much as {r.us / launch:.1f} empty launches; "
                      f"replayed from a CUDA graph, the library costs the host nothing (the "
                      f"replay row is the driver's)."]
    return table(["case", "host µs per call", "GPU µs per call", "target (µs)"], rows) + notes


def portable_section(context, results):
    """A portable backend's benchmark (bench/hip, bench/intel): µs, rates and the fractions of the
    device's copy bandwidth and FP32 FMA rate measured in the same run, with the kernel taken."""
    rows = []
    for r in results:
        case = r.name.split("/")[0]
        if r.error:
            rows.append([case, f"error: {r.error}", "", "", "", "", ""])
            continue
        c = r.counters
        frac = lambda key: f"{c[key]:.3f}" if key in c else ""
        rows.append([case, fmt_us(r.us), f"{c['GB/s']:.0f}" if "GB/s" in c else "",
                     f"{c['GFLOP/s']:.0f}" if "GFLOP/s" in c else "", frac("copy_frac"),
                     frac("fma_frac"), f"`{r.label}`" if r.label else ""])
    return table(["case", "µs", "GB/s", "GFLOP/s", "of copy bandwidth", "of FP32 FMA rate",
                  "kernel"], rows)


def cuda_series(results):
    """{config: {batch: Result}} of the FP8 decode cases and {heads: {batch: µs}} of CONFIG1's head
    counts."""
    decode, heads = {}, {}
    for r in results:
        group = cuda_group(r)
        if group[0] == 0:
            decode.setdefault(group[3], {})[r.param("b")] = r
        elif group[0] == 1 and group[3] == "CONFIG1":  # (CONFIG2/heads:64 is a TP rank's case)
            heads.setdefault(r.param("heads"), {})[r.param("b")] = r.us
    if 64 not in heads and "CONFIG1" in decode:
        heads[64] = {b: r.us for b, r in decode["CONFIG1"].items()}
    return decode, heads


def cuda_summary(context, results):
    """The compact table docs/cuda-backend.md shows between its figure markers: µs of the FP8
    decode cases (ours / FlashMLA) by batch, the head counts against 64 heads, the bf16 caches, and
    a line each for prefill and plain PyTorch."""
    decode, heads = cuda_series(results)
    bf16 = {}
    for r in results:
        if cuda_group(r)[0] == 2:
            bf16.setdefault(r.param("b"), []).append(r)
    batches = sorted({b for series in decode.values() for b in series})
    def pair(r):
        theirs = r.counters.get("flashmla_us")
        return fmt_us(r.us) + (f" / {fmt_us(theirs)}" if theirs else "")

    rows = []
    for config in sorted(decode):
        heads_of = {"CONFIG1": 64, "CONFIG2": 128, "CONFIG3": 64, "CONFIG4": 128}.get(config)
        label = config + (f" ({heads_of} heads)" if heads_of else "")
        rows.append([label] + [pair(decode[config][b]) if b in decode[config] else "—"
                               for b in batches])
    counts = [h for h in sorted(heads) if h != 64]
    if counts and 64 in heads:
        rows.append([" / ".join(str(h) for h in counts) + " heads, × 64 heads' time"] + [
            " / ".join(f"{heads[h][b] / heads[64][b]:.2f}" for h in counts)
            if all(b in heads[h] for h in counts) and b in heads[64] else "—" for b in batches])
    if bf16:
        configs = sorted({r.parts[1] for rs in bf16.values() for r in rs})
        rows.append([" / ".join(configs) + ", bf16 cache"] + [
            " / ".join(fmt_us(next((r.us for r in bf16.get(b, []) if r.parts[1] == c), None))
                       for c in configs) for b in batches])
    lines = [f"{context.get('device', '?').split(' (')[0]}, commit `{context.get('commit', '?')}`, "
             f"{str(context.get('date', '?'))[:10]}; µs, ours / FlashMLA where it has the case:", ""]
    lines += table(["case"] + [f"b={b}" for b in batches], rows)
    prefill = [r for r in results if cuda_group(r)[0] == 3]
    if prefill:
        lines += ["", "Prefill (bf16, s_q 4096), ours / FlashMLA: " + "; ".join(
            f"{r.param('heads')} heads, s_kv {r.param('s_kv')}: {pair(r)}" for r in prefill) + "."]
    speedups = {}
    for r in results:
        if "torch_us" in r.counters and r.us:
            kind = {2: "bf16", 3: "prefill"}.get(cuda_group(r)[0], "FP8")
            speedups.setdefault(kind, []).append(r.counters["torch_us"] / r.us)
    if speedups:
        lines += ["", "Plain PyTorch takes " + ", ".join(
            f"{min(v):.1f}–{max(v):.1f}× our time ({k})" for k, v in speedups.items()) +
            " on the shapes it was timed on."]
    return lines


def plot_cuda(context, results, out_dir, names):
    """The headline comparisons as PNGs (plot_names): decode against FlashMLA and PyTorch, small heads."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    decode, heads = cuda_series(results)
    stamp = f"{context.get('device', '?').split(' (')[0]}, {str(context.get('date', '?'))[:10]}, " \
            f"commit {context.get('commit', '?')}"
    if "decode" in names:
        configs = sorted(decode)
        cols = 2 if len(configs) > 1 else 1
        rows = (len(configs) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(5.6 * cols, 3.9 * rows), squeeze=False)
        for ax in axes.flat[len(configs):]:
            ax.set_visible(False)
        for ax, config in zip(axes.flat, configs):
            series = decode[config]
            batches = sorted(series)
            xs = list(range(len(batches)))
            ax.plot(xs, [series[b].us for b in batches], "o-", color="tab:blue", label="libdsv4")
            for key, style, color, label in (("flashmla_us", "s--", "tab:orange", "FlashMLA"),
                                             ("torch_us", "^:", "tab:red", "plain PyTorch")):
                points = [(x, series[b].counters[key]) for x, b in zip(xs, batches)
                          if key in series[b].counters]
                if points:
                    ax.plot(*zip(*points), style, color=color, label=label)
            # FlashMLA's time over ours above each pair of points: above 1 we are faster.
            for x, b in zip(xs, batches):
                theirs = series[b].counters.get("flashmla_us")
                if theirs:
                    ax.annotate(f"{theirs / series[b].us:.2f}×", (x, max(theirs, series[b].us)),
                                textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8,
                                color="tab:blue", bbox=dict(boxstyle="round,pad=0.15", fc="white",
                                                            ec="none", alpha=0.8))
            heads_of = {"CONFIG1": 64, "CONFIG2": 128, "CONFIG3": 64, "CONFIG4": 128}.get(config)
            ax.set_title(config + (f" ({heads_of} heads)" if heads_of else ""), fontsize=10)
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
            lo, hi = ax.get_ylim()
            ax.set_ylim(lo / 1.3, hi * 1.6)
            ax.set_xticks(xs)
            ax.set_xticklabels([str(b) for b in batches])
            ax.set_xlim(-0.4, len(xs) - 0.6)
            ax.set_xlabel("batch (requests, s_q = 2)")
            ax.set_ylabel("µs per step (log scale)")
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(fontsize=8, loc="upper left")
        fig.suptitle("FP8 decode, time per step; the labels are FlashMLA's time over ours (above 1: "
                     f"faster)\n{stamp}", fontsize=10)
        fig.tight_layout()
        save(fig, out_dir, names["decode"])
        plt.close(fig)
    if "heads" in names:
        counts = sorted(heads)
        batches = sorted(set.intersection(*(set(heads[h]) for h in counts)))
        xs = list(range(len(batches)))
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
        colors = {8: "tab:green", 16: "tab:purple", 32: "tab:brown", 64: "tab:blue"}
        for h in counts:
            left.plot(xs, [heads[h][b] for b in batches], "o-", color=colors.get(h), label=f"{h} heads")
            if h != 64:
                right.plot(xs, [heads[h][b] / heads[64][b] for b in batches], "o-", color=colors.get(h),
                           label=f"{h} heads")
        right.axhline(0.5, color="gray", linestyle="--", linewidth=1)
        right.annotate("target: 0.5×", (xs[0], 0.5), textcoords="offset points", xytext=(0, -12),
                       ha="left", fontsize=8, color="gray")
        left.set_ylabel("µs per step")
        left.set_title("time per step (CONFIG1 shapes, FP8)", fontsize=10)
        right.set_ylabel("time / 64 heads' time")
        right.set_title("against 64 heads", fontsize=10)
        right.set_ylim(0, 1.05)
        for ax in (left, right):
            ax.set_xticks(xs)
            ax.set_xticklabels([str(b) for b in batches])
            ax.set_xlabel("batch (requests, s_q = 2)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(f"Small head counts ({stamp})", fontsize=10)
        fig.tight_layout()
        save(fig, out_dir, names["heads"])
        plt.close(fig)


def save(fig, out_dir, name):
    os.makedirs(out_dir, exist_ok=True)
    fig.savefig(os.path.join(out_dir, name), dpi=110, metadata={"Software": None})


def plot_names(file_name, results):
    """{kind: PNG name} of the plots a CUDA section shows: "<results file>-decode.png" against
    FlashMLA and PyTorch, "<results file>-small-heads.png" for the head counts."""
    stem = os.path.splitext(file_name)[0]
    decode, heads = cuda_series(results)
    names = {}
    if decode:
        names["decode"] = f"{stem}-decode.png"
    if len(heads) > 1 and 64 in heads:
        names["heads"] = f"{stem}-small-heads.png"
    return names


# ---------------------------------------------------------------------------------------- multi-GPU

EXAMPLES = {"tensor_parallel": "tensor parallel", "context_parallel": "context parallel"}
# Issue 55's target: per-rank attention at 2 ranks <= 0.6x the 1-GPU time for 128 heads (CONFIG2),
# b = 256.
MULTI_GPU_TARGET = dict(config="CONFIG2", b=256, gpus=2, ratio=0.6)


def is_multi_gpu(results):
    """Whether a results file is the multi-GPU examples' (every name multi_gpu/...)."""
    return bool(results) and all(r.parts[:1] == ["multi_gpu"] for r in results)


def multi_gpu_key(r):
    example = r.parts[1] if len(r.parts) > 1 else r.name
    config = r.parts[2] if len(r.parts) > 2 else ""
    return (list(EXAMPLES).index(example) if example in EXAMPLES else len(EXAMPLES), example, config,
            r.param("b", 0), r.param("gpus", 0))


def multi_gpu_case(r):
    return f"{r.parts[2] if len(r.parts) > 2 else '?'} b={r.params.get('b', '?')}"


def attention_ratio(r):
    attention, single = r.counters.get("attention_us"), r.counters.get("single_gpu_attention_us")
    return attention / single if attention and single else None


def multi_gpu_section(context, results, four_gpu_run):
    """One row per example, case and GPU count; then the checks, the steps faster than on one
    GPU, issue 55's target, and whether a 4-GPU run exists (`four_gpu_run`: in any results file)."""
    results = sorted(results, key=multi_gpu_key)
    rows = []
    for r in results:
        example = EXAMPLES.get(r.parts[1], r.parts[1]) if len(r.parts) > 1 else r.name
        gpus = str(r.params.get("gpus", "?"))
        if r.error:
            rows.append([example, multi_gpu_case(r), gpus, f"error: {r.error}"] + [""] * 5)
            continue
        c = r.counters
        failed = " (check failed)" if c.get("passed") == 0 else ""
        rows.append([example, multi_gpu_case(r) + failed, gpus, fmt_us(c.get("attention_us")),
                     fmt_us(c.get("exchange_us")), fmt_us(c.get("merge_us")), fmt_us(r.us),
                     fmt_us(c.get("single_gpu_attention_us")), fmt_ratio(attention_ratio(r))])
    lines = table(["example", "case", "GPUs", "attention µs", "NCCL exchange µs", "merge µs",
                   "step µs", "1-GPU attention µs", "attention ratio"], rows) + [""]
    timed = [r for r in results if not r.error]
    failed = [r for r in timed if r.counters.get("passed") == 0]
    if timed and not failed:
        lines.append(f"Checks: all {len(timed)} cases matched the single-GPU run on every token and "
                     "the float64 reference on the sampled tokens (spec 2.4 rule).")
    elif failed:
        lines.append(f"Checks: {len(failed)} of {len(timed)} cases failed: " + ", ".join(
            f"{EXAMPLES.get(r.parts[1], r.parts[1])} {multi_gpu_case(r)} on {r.params.get('gpus')} GPU(s)"
            for r in failed) + " (the records' `check` in the run's multi_gpu.json).")
    one_gpu = {tuple(multi_gpu_key(r)[:4]): r for r in timed if r.param("gpus") == 1}
    compared = [(r, one_gpu[multi_gpu_key(r)[:4]]) for r in timed
                if r.param("gpus", 1) > 1 and multi_gpu_key(r)[:4] in one_gpu and r.us]
    faster = [(r, base) for r, base in compared if r.us < base.us]
    if compared:
        if faster:
            text = "Steps faster than the same example's step on 1 GPU: " + "; ".join(
                f"{EXAMPLES.get(r.parts[1], r.parts[1])} {multi_gpu_case(r)} on "
                f"{r.params.get('gpus')} GPUs ({fmt_us(r.us)} against {fmt_us(base.us)} µs)"
                for r, base in faster) + "."
            others = len(compared) - len(faster)
            text += f" The other {others} multi-GPU steps are slower." if others else ""
        else:
            text = "Every multi-GPU step is slower than the same example's step on 1 GPU."
        lines += ["", text]
    target = MULTI_GPU_TARGET
    measured = [r for r in timed if len(r.parts) > 2 and r.parts[2] == target["config"] and
                r.param("b") == target["b"] and r.param("gpus") == target["gpus"] and
                attention_ratio(r) is not None]
    lines += ["", f"Target (issue 55): per-rank attention at {target['gpus']} ranks ≤ "
              f"{target['ratio']}× the 1-GPU time for 128 heads, b = {target['b']}. " + (
                  f"Measured ({target['config']} b={target['b']}, {target['gpus']} GPUs): " +
                  ", ".join(f"{EXAMPLES.get(r.parts[1], r.parts[1])} {fmt_ratio(attention_ratio(r))}"
                            f" ({'met' if attention_ratio(r) <= target['ratio'] else 'not met'})"
                            for r in measured) + "."
                  if measured else "Not measured in this run.")]
    if not four_gpu_run:
        counts = sorted({r.param("gpus") for r in results if isinstance(r.param("gpus"), int)})
        lines += ["", "4 GPUs: no run yet. The 4-GPU rows come from `scripts/gpu/multi_gpu.sh` on a "
                  "host with 4 GPUs (it runs each example on 2, 4 and 1 GPU(s) there); none has run, "
                  "so this table has " + " and ".join([f"{n}-" for n in counts[:-1]] +
                                                       [f"{n}-GPU" for n in counts[-1:]]) +
                  " rows only."]
    return lines + [""]


# --------------------------------------------------------------------------------------------- page

INTRO = """\
# Performance

Current figures only, one table per benchmark run. This page is generated by
`scripts/perf/make_performance.py` from the benchmarks' JSON in `bench/results/`: edit the data or
the script, not the page (the `performance_page` ctest fails when they differ). The history of the
figures is in git (`git log -p bench/results/`); experiments that were measured and not kept are in
[tried.md](tried.md).

FLOP = 2 · heads · attended keys · (512 + 512). Timings on shared machines are noisy: compare figures
from one run, side by side. Targets and anchors (FlashMLA, plain PyTorch, hardware ceilings):
`shared/perf/targets.md`.
"""

CPU_TEXT = """\
The CPU module's fast kernel for this CPU (AVX2/FMA, AVX512_BF16 or AMX-BF16, chosen by CPUID; the
exact fp32 reference kernel stays the tests' second opinion): [cpu-backend.md](cpu-backend.md). Each
query token attends to 128 sliding-window rows plus 512 or 1024 compressed rows of its own; every
iteration reads the next rows of a random order of a cache of at least 1 GiB and 4× the last-level
cache, so that the rows come from memory for libdsv4, for PyTorch and for the gather bandwidth
alike; attention sink on, explicit mode. The roofline of a shape is min(peak, gather bandwidth ×
FLOP per gathered byte), with the peak and the bandwidth measured in the same run (their best
repetition; notes above); plain PyTorch runs the same attention (bench/cpu/torch_cpu.py). Plot:
[img/cpu-roofline.png](img/cpu-roofline.png).
"""

CUDA_TEXT = """\
FlashMLA's DeepSeek-V4 cases: s_q = 2 tokens per request, FP8 584 B cache, a 128-entry window list
on 256-token pages plus a compressed list (CONFIG1: 64 heads, top-k 512; CONFIG2: 128 heads, top-k
1024; CONFIG3 / CONFIG4: as 1 / 2 with page size 2 and per-request lengths, so their times depend on
the drawn lengths). "X / ours" is X's time over ours: above 1 we are faster. "ours / 64 heads" is a
head count's time over the 64-head case of the same run (CONFIG1 shapes). "batch-invariant / ours"
is the same case's time under `DSV4_PLAN_FLAG_BATCH_INVARIANT` over the default plan's. How the
module picks its kernels and where each case is limited: [cuda-backend.md](cuda-backend.md).
"""

HIP_TEXT = """\
The HIP module's portable SIMT kernel, built from the same HIP source by nvcc for the H200
(`DSV4_HIP_ON_NVIDIA`, a test build; on AMD GPUs the same benchmark binary runs as is). The
fractions are of the copy bandwidth and the FP32 FMA rate that the benchmark measures on the same
GPU in the same run. Design, estimates and what has run where: [hip-backend.md](hip-backend.md).
"""

HOST_TEXT = """\
What one call costs the host (bench/gpu/bench_host_overhead.cpp): `dsv4_run` on a planned CONFIG1
b=2 step (argument checks, workspace carving, the launches), the same step replayed from a CUDA
graph, and an empty kernel launch as the driver's floor. The GPU column is the device time per call
over the same bursts.
"""

PYTHON_HOST_TEXT = """\
What one run costs the host from Python with torch CUDA tensors (bench/python/bench_overhead.py),
on the same CONFIG1 b=2 step: `dsv4_run` through ctypes with a prebuilt argument struct (the
floor: the C library's own cost plus one ctypes call), `dsv4.Plan.run` with eight torch tensors,
`dsv4.torch.attention` with `out` / `lse` given and allocating them (in eager code, a direct call
of the `torch.library` custom op's kernel), and CUDA graph replay of one captured run and of 100
(per run). The GPU column is the run's device time, back to back.
"""

MULTI_GPU_TEXT = """\
The Python examples on torch.distributed + NCCL (`examples/python/`, both run by
`scripts/gpu/multi_gpu.sh`), on decode steps of FlashMLA's CONFIG1 / CONFIG2 sizes: b requests of
s_q = 2 tokens at the end of a 65536-token context, FP8 584 B caches, per token the 128 SWA rows of
its window plus its top-k compressed entries (CONFIG1: 64 heads, top-k 512; CONFIG2: 128 heads,
top-k 1024), a sink per head. **Tensor parallel** (`tensor_parallel.py`) splits the heads over the
GPUs: each rank runs libdsv4 with its slice of q and of the sink (sliced by head offset
rank · H / N) over the whole cache, and the outputs are gathered (NCCL all_gather). **Context
parallel** (`context_parallel.py`) shards each request's context (its SWA rows and compressed
entries) over the GPUs: each rank runs libdsv4 over the keys it holds, without the sink, for a
partial (out, lse); the partials are exchanged (NCCL all_gather) and merged by `dsv4_merge`, which
applies the sink once. Each case is checked against a single-GPU run of all heads over the whole
context and, on the first two requests' tokens, against the float64 reference.

µs per step. "attention" is libdsv4's call on a rank; "NCCL exchange" the all_gather (on 1 GPU a
device copy of the same buffers, no NCCL; on several, a rank's interval starts when its own
attention ends, so it includes waiting for the slowest rank); "merge" the `dsv4_merge` of the
partials (context parallel only); "step" all of these; "1-GPU attention" the single-GPU run of all
heads over the whole context; "attention ratio" the per-rank attention over the 1-GPU attention.
Context parallelism is for a context too large for one GPU's memory, which these runs do not
measure.
"""

REGENERATE = """\
## How to regenerate

- CPU, on the machine to be measured, when it is quiet: `make bench-cpu` (= `bench/cpu/bench_all.sh`:
  writes `bench/results/cpu*.json` and `docs/img/cpu-roofline.png`).
- GPU: `scripts/gpu/run.sh <outdir> build bench` on the GPU machine writes `cuda-h200.json` and
  `cuda-h200-host.json` (Google Benchmark JSON with `backend`, `device`, `commit` and `command` in
  its context block) into `<outdir>`; copy them to `bench/results/`. The names and counters the page expects are listed in the docstring of
  `scripts/perf/make_performance.py`.
- Several GPUs: `scripts/gpu/multi_gpu.sh <outdir>` on a host with 2 or 4 GPUs writes
  `multi-gpu.json` (Google Benchmark JSON converted from the examples' `multi_gpu.json` by
  `scripts/perf/multi_gpu_results.py`) into `<outdir>`; copy it to
  `bench/results/multi-gpu-<machine>.json`.
- Python: `scripts/gpu/python_gpu.sh bench` on the GPU machine writes `overhead.json`
  (`bench/python/bench_overhead.py --json`, Google Benchmark JSON); copy it to
  `bench/results/python-h200-host.json`.
- Then `python3 scripts/perf/make_performance.py` (needs python3-matplotlib for the plots) and commit
  the JSON, the page and `docs/img/`. `--check` compares the page with the data without writing.
"""


def sections(results_dir):
    """[(backend, file name, context, results)] of every results file, CPU first."""
    out = []
    for path in sorted(glob.glob(os.path.join(results_dir, "*.json"))):
        context, results = load(path)
        out.append((backend_of(context, results), os.path.basename(path), context, results))
    order = {"cpu": 0, "cuda": 1, "hip": 2, "multi-gpu": 3}
    return sorted(out, key=lambda s: (order.get(s[0], 2), is_host_overhead(s[3]), s[1]))


PLOT_TEXT = {"decode": "decode time per step against FlashMLA and plain PyTorch",
             "heads": "small head counts against 64 heads"}


def render(root):
    """The page, [(context, results, plot names)] of its CUDA sections, and {results file: summary
    lines} for docs/cuda-backend.md."""
    lines = [INTRO]
    plots = []
    summaries = {}
    every = sections(os.path.join(root, RESULTS))
    four_gpu_run = any(r.param("gpus") == 4 for _, _, _, results in every
                       if is_multi_gpu(results) for r in results)
    anchored = False
    for backend, file_name, context, results in every:
        device = context.get("device", "?")
        if is_multi_gpu(results):
            if not anchored:  # bindings/python/README.md links here
                lines.append('<a id="several-gpus"></a>\n')
                anchored = True
            lines.append(f"## Several GPUs (torch.distributed + NCCL): {device.split(' (')[0]}\n")
        elif backend == "hip":
            lines.append(f"## HIP backend (`libdsv4-hip.so`): {device.split(' (')[0]}\n")
        elif backend == "cuda" and is_python_overhead(results):
            lines.append(f"## Python host overhead per call: {device.split(' (')[0]}\n")
        elif backend == "cuda" and is_host_overhead(results):
            lines.append(f"## CUDA host overhead per call: {device.split(' (')[0]}\n")
        elif backend == "cuda":
            lines.append(f"## CUDA backend (`libdsv4-cuda.so`): {device.split(' (')[0]}\n")
        else:
            threads = f", {context['threads']} thread(s)" if context.get("threads") else ""
            lines.append(f"## CPU backend (`libdsv4-cpu.so`): {device.split(',')[0]}{threads}\n")
        lines += source_lines(context) + [f"- Data: `{RESULTS}/{file_name}`", ""]
        if is_multi_gpu(results):
            lines.append(MULTI_GPU_TEXT)
            lines += multi_gpu_section(context, results, four_gpu_run)
        elif backend == "hip":
            lines.append(HIP_TEXT)
            lines += portable_section(context, results) + [""]
        elif backend == "cuda" and is_python_overhead(results):
            lines.append(PYTHON_HOST_TEXT)
            lines += host_section(context, results) + [""]
        elif backend == "cuda" and is_host_overhead(results):
            lines.append(HOST_TEXT)
            lines += host_section(context, results) + [""]
        elif backend == "cuda":
            lines.append(CUDA_TEXT)
            lines += cuda_section(context, results) + [""]
            names = plot_names(file_name, results)
            lines += [f"![{PLOT_TEXT[kind]}](img/{name})\n" for kind, name in names.items()]
            plots.append((context, results, names))
            summaries[f"{RESULTS}/{file_name}"] = cuda_summary(context, results)
        else:
            lines.append(CPU_TEXT)
            lines += cpu_section(context, results) + [""]
    lines.append(REGENERATE)
    return "\n".join(lines).rstrip("\n") + "\n", plots, summaries


BLOCK = re.compile(r"(<!-- figures: (\S+) -->\n)(.*?)(<!-- end of figures -->)", re.S)


def fill_blocks(text, summaries):
    """`text` with each "<!-- figures: <results file> -->" ... "<!-- end of figures -->" block
    holding that file's summary."""
    def fill(match):
        if match.group(2) not in summaries:
            sys.exit(f"{BACKEND_DOC}: no CUDA results file {match.group(2)}")
        return match.group(1) + "\n".join(summaries[match.group(2)]) + "\n" + match.group(4)
    return BLOCK.sub(fill, text)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare the pages with the data")
    args = parser.parse_args()
    page, plots, summaries = render(ROOT)
    with open(os.path.join(ROOT, BACKEND_DOC)) as f:
        backend_doc = f.read()
    wanted = {PAGE: page, BACKEND_DOC: fill_blocks(backend_doc, summaries)}
    if not args.check:
        for path, text in wanted.items():
            with open(os.path.join(ROOT, path), "w") as f:
                f.write(text)
        for context, results, names in plots:
            plot_cuda(context, results, os.path.join(ROOT, IMG), names)
        print(f"wrote {PAGE}, the figures of {BACKEND_DOC} and "
              f"{len([n for p in plots for n in p[2]])} plots in {IMG}")
        return 0
    stale = False
    for path, text in wanted.items():
        with open(os.path.join(ROOT, path)) as f:
            current = f.read()
        if current != text:
            stale = True
            sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), text.splitlines(True),
                                                       path, path + " (from bench/results)"))
    for name in (n for _, _, names in plots for n in names.values()):
        if not os.path.exists(os.path.join(ROOT, IMG, name)):
            stale = True
            print(f"missing plot: {os.path.join(IMG, name)}")
    if stale:
        print("out of date: run python3 scripts/perf/make_performance.py")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
