#!/usr/bin/env python3
"""Host overhead of libdsv4 runs from Python with torch CUDA tensors (issue 55: <= 20 us per run;
under CUDA graph replay, none). A tiny decode: CONFIG1 at b = 2 (64 heads, s_q = 2, FP8 584 B
caches, 128 SWA + 512 compressed candidates per token).

Measured, each over >= 1000 calls, as microseconds of host time per call (median of batches of
BATCH calls; a batch is issued without synchronising and short enough that the GPU's launch queue
never fills, so the host is what is timed):
  ctypes_floor      dsv4_run through ctypes with a prebuilt argument struct (C + ctypes only)
  plan_run          dsv4.Plan.run(q=..., out=..., ...) with torch tensors
  torch_given       dsv4.torch.attention with out / lse given
  torch_alloc       dsv4.torch.attention allocating out / lse
  torch_merge       dsv4.torch.merge of two such runs' (out, lse) with the sink, out / lse given
  graph_replay      torch.cuda.CUDAGraph.replay() of one captured run, and per run of a graph
                    of GRAPH_RUNS captured runs (the host cost a run leaves under replay)
and the GPU time per run (CUDA events, back to back). Prints one JSON object per repetition;
--json writes them as Google Benchmark JSON (what scripts/perf/make_performance.py reads from
bench/results/, e.g. python-h200-host.json): one entry per repetition and form, named
cuda/host/python/<form>/b:2, with the median over the repetitions as the aggregate, and the
counters gpu_us_per_call and target_us.

    PYTHONPATH=bindings/python DSV4_LIBRARY=build/lib/libdsv4.so.0 \\
        python3 bench/python/bench_overhead.py [--calls 2000] [--repeat 1] [--json out.json]
"""
import argparse
import ctypes
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

import torch

import dsv4
import dsv4.torch as dt
from dsv4 import _lib

BATCH = 100
GRAPH_RUNS = 100
HEADS, S_Q, B, D = 64, 2, 2, 512
SWA_WIDTH, CMP_WIDTH, BLOCK = 128, 512, 64


def build(device):
    ctx = dt.context(device)
    layout = dsv4.KvLayout.FP8_V4_584B
    stride = dsv4.kv_layout_info(layout, BLOCK).min_block_stride_bytes
    desc = dsv4.KvCacheDesc(layout, BLOCK, stride)
    gen = torch.Generator(device=device).manual_seed(55)
    caches = []
    for blocks in (64, 256):  # 4096 SWA rows, 16384 compressed entries
        cache = torch.zeros(blocks, desc.block_stride_bytes, dtype=torch.uint8, device=device)
        rows = torch.randn(blocks * BLOCK, D, device=device, generator=gen) * 0.5
        dsv4.kv_write(ctx, desc, rows, torch.arange(blocks * BLOCK, dtype=torch.int32,
                                                   device=device), cache)
        caches.append(cache)
    tokens = B * S_Q
    tensors = dict(
        q=(torch.randn(B, S_Q, HEADS, D, device=device, generator=gen) * 0.5).bfloat16(),
        swa_cache=caches[0], extra_cache=caches[1],
        indices=torch.randint(0, 64 * BLOCK, (B, S_Q, SWA_WIDTH), dtype=torch.int32,
                              device=device, generator=gen),
        extra_indices=torch.randint(0, 256 * BLOCK, (B, S_Q, CMP_WIDTH), dtype=torch.int32,
                                    device=device, generator=gen),
        attn_sink=torch.randn(HEADS, device=device, generator=gen),
        out=torch.empty(B, S_Q, HEADS, D, dtype=torch.bfloat16, device=device),
        lse=torch.empty(B, S_Q, HEADS, device=device))
    plan = dsv4.Plan(ctx, num_heads=HEADS, max_tokens=tokens, topk=SWA_WIDTH,
                     extra_topk=CMP_WIDTH, swa_cache=desc, extra_cache=desc)
    return plan, tensors


def host_us(fn, calls):
    """Median host microseconds per call over batches of BATCH calls (synchronised between
    batches, not inside them)."""
    for _ in range(BATCH):  # warm-up: caches, workspaces, allocator
        fn()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(max(1, calls // BATCH)):
        start = time.perf_counter()
        for _ in range(BATCH):
            fn()
        per_call.append((time.perf_counter() - start) / BATCH * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_call)


def gpu_us(fn, calls):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) * 1e3 / calls


def ctypes_floor(plan, tensors):
    """A callable running dsv4_run on a prebuilt argument struct."""
    args = _lib.init_struct(_lib.CRunArgs, _lib.lib().dsv4_run_args_init)
    keep = []
    for name, value in tensors.items():
        tensor = dsv4.as_tensor(value)
        keep.append(tensor)
        setattr(args, name, ctypes.pointer(tensor.c))
    stream = torch.cuda.current_stream().cuda_stream
    workspace = plan.workspace(stream)
    args.workspace, args.workspace_bytes = workspace.data_ptr(), plan.workspace_size
    args.stream = stream or None
    run, handle, ref = _lib.lib().dsv4_run, plan.handle, ctypes.byref(args)
    return lambda: run(handle, ref), keep


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--repeat", type=int, default=1, help="measure this many times")
    parser.add_argument("--json", help="also write the results here (Google Benchmark JSON)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_overhead: no CUDA device for torch; nothing measured")
        return 0
    device = torch.device(args.device)
    torch.cuda.set_device(device)
    results = [measure(device, args.calls) for _ in range(max(1, args.repeat))]
    for result in results:
        print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as handle:
            command = " ".join(["python3", "bench/python/bench_overhead.py"] + sys.argv[1:])
            json.dump(to_gbench(results, command), handle, indent=1)
            handle.write("\n")
    return 0


# The forms' names in the Google Benchmark JSON, and their targets (issue 55: a run from Python
# with torch CUDA tensors <= 20 us, none under graph replay). dsv4.torch adds the torch.library
# op's dispatch to Plan.run's cost.
FORMS = {"ctypes_floor": None, "plan_run": 20.0, "torch_given": None, "torch_alloc": None,
         "torch_merge": None, "graph_replay": None, "graph_replay_per_run_of_%d" % GRAPH_RUNS: 0.0}


def to_gbench(results, command):
    """Google Benchmark JSON of `results` (one dict per repetition)."""
    first = results[0]
    commit = os.environ.get("DSV4_COMMIT")
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            commit = "unknown"
    context = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "backend": "cuda", "device": first["device"], "commit": commit,
        "command": command,
        "method": "host wall time per call of bursts of %d calls issued without synchronising, "
                  "median of the bursts (%d calls); torch %s, kernel %s; %s" %
                  (first["batch"], first["calls"], first["torch"], first["kernel"], first["case"]),
        "repetitions": len(results),
    }
    entries = []
    for form, target in FORMS.items():
        times = [r["host_us"][form] for r in results]
        gpu_key = "gpu_us_graph_replay" if form.startswith("graph") else \
            "gpu_us_merge" if form == "torch_merge" else "gpu_us"
        gpu = statistics.median(r[gpu_key] for r in results)
        name = "cuda/host/python/%s/b:2" % form
        common = {"run_name": name, "time_unit": "us", "gpu_us_per_call": gpu}
        if target is not None:
            common["target_us"] = target
        for i, t in enumerate(times):
            entries.append(dict(common, name=name, run_type="iteration", repetition_index=i,
                                real_time=t, cpu_time=t, iterations=first["calls"]))
        entries.append(dict(common, name=name + "_median", run_type="aggregate",
                            aggregate_name="median", real_time=statistics.median(times),
                            cpu_time=statistics.median(times), iterations=len(times)))
    return {"context": context, "benchmarks": entries}


def measure(device, calls):
    """One repetition: the host microseconds per call of each form, and the GPU time."""
    plan, tensors = build(device)
    inputs = {k: v for k, v in tensors.items() if k not in ("q", "swa_cache", "out", "lse")}
    q, cache, out, lse = tensors["q"], tensors["swa_cache"], tensors["out"], tensors["lse"]
    floor, keep = ctypes_floor(plan, tensors)
    tokens = B * S_Q  # the merge's [P, T, H, 512]
    parts_out = torch.stack([out, out]).view(2, tokens, HEADS, D)
    parts_lse = torch.stack([lse, lse]).view(2, tokens, HEADS)
    merged_out, merged_lse = torch.empty_like(parts_out[0]), torch.empty_like(parts_lse[0])
    cases = {
        "ctypes_floor": floor,
        "plan_run": lambda: plan.run(**tensors),
        "torch_given": lambda: dt.attention(plan, q, cache, out=out, lse=lse, **inputs),
        "torch_alloc": lambda: dt.attention(plan, q, cache, **inputs),
        "torch_merge": lambda: dt.merge(parts_out, parts_lse, attn_sink=tensors["attn_sink"],
                                        out=merged_out, lse=merged_lse),
    }
    result = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
              "libdsv4": dsv4.version(), "kernel": plan.info.kernel, "calls": calls,
              "batch": BATCH, "case": "CONFIG1 b=2 s_q=2 (64 heads, FP8 584 B, 128 + 512)",
              "host_us": {}, "gpu_us": gpu_us(cases["plan_run"], calls),
              "gpu_us_merge": gpu_us(cases["torch_merge"], calls)}
    for name, fn in cases.items():
        result["host_us"][name] = host_us(fn, calls)

    # Graph replay: one captured run, and GRAPH_RUNS captured runs per replay.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        cases["torch_given"]()  # workspace and argument struct of the capture's stream
    torch.cuda.current_stream().wait_stream(side)
    graphs = {}
    for runs in (1, GRAPH_RUNS):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            for _ in range(runs):
                cases["torch_given"]()
        graphs[runs] = graph
    one = host_us(graphs[1].replay, calls)
    many = host_us(graphs[GRAPH_RUNS].replay, max(BATCH, calls // GRAPH_RUNS))
    result["host_us"]["graph_replay"] = one
    result["host_us"]["graph_replay_per_run_of_%d" % GRAPH_RUNS] = many / GRAPH_RUNS
    result["gpu_us_graph_replay"] = gpu_us(graphs[1].replay, calls)
    del keep
    return result


if __name__ == "__main__":
    sys.exit(main())
