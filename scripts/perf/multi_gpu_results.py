#!/usr/bin/env python3
"""Converts the records of the multi-GPU examples (DIR/multi_gpu.json, written by
scripts/gpu/multi_gpu.sh from examples/python/tensor_parallel.py and context_parallel.py) into one
Google Benchmark JSON file, the form scripts/perf/make_performance.py reads from bench/results/.

  python3 scripts/perf/multi_gpu_results.py DIR/multi_gpu.json DIR/multi-gpu.json
          [--device TEXT] [--date DATE] [--commit SHA] [--command TEXT] [--source TEXT]
          [--note TEXT ...]

scripts/gpu/multi_gpu.sh runs it after every run (DIR/multi-gpu.json); a run's multi_gpu.json from
before that can be converted by hand with the run's facts given as options.

One entry per record, named multi_gpu/<example>/<config>/b:<b>/gpus:<ranks>, e.g.
multi_gpu/tensor_parallel/CONFIG1/b:64/gpus:2:
  real_time, time_unit "us"    step_us: the step (attention, exchange and, for context parallel,
                               merge), the largest of the ranks' medians
  counters                     attention_us, exchange_us, merge_us (context parallel only),
                               single_gpu_attention_us, heads, heads_per_rank (tensor parallel
                               only), passed (1 when the example's checks passed, else 0)
  label                        the kernel the plan chose on rank 0
There is no cpu_time: the examples time the GPU only. Each record's remaining fields (the checks,
the per-rank medians) stay in multi_gpu.json.

The context block: backend "multi-gpu", device (default: probed through torch and nvidia-smi),
date (default: now), commit (default: $DSV4_COMMIT, else git), command, method (how the examples
measure), and source and notes where given.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
EXAMPLES = ("tensor_parallel", "context_parallel")
COUNTERS = ("attention_us", "exchange_us", "merge_us", "single_gpu_attention_us", "heads",
            "heads_per_rank")
METHOD = ("examples/python/multi_gpu_common.py: CUDA events on torch's current stream around each "
          "part of a step (libdsv4 attention; NCCL all_gather of the results; for context "
          "parallel, dsv4_merge), L2 flushed (a 256 MiB buffer written) before each step, 5 "
          "warm-up steps, median of 20 per rank, the 20 enqueued by the host while a sleep "
          "kernel holds the GPU (so the intervals are device time, without the host's gaps); each column is the largest of the ranks' medians, "
          "taken column by column, so the step need not equal the sum of its parts; the 1-GPU "
          "attention is rank 0's run of all heads over the whole context with the sink, timed "
          "the same way in the same run")


def entry(record):
    """The Google Benchmark entry of one example record."""
    name = "multi_gpu/%s/%s/b:%d/gpus:%d" % (record["example"], record["config"], record["b"],
                                             record["world"])
    out = dict(name=name, run_name=name, run_type="iteration", repetitions=1, repetition_index=0,
               threads=1, real_time=record["step_us"], time_unit="us")
    for key in COUNTERS:
        if key in record:
            out[key] = record[key]
    out["passed"] = 1 if record.get("passed") else 0
    if record.get("kernel"):
        out["label"] = record["kernel"]
    return out


def order(record):
    example = record["example"]
    return (EXAMPLES.index(example) if example in EXAMPLES else len(EXAMPLES), example,
            record["config"], record["b"], record["world"])


def convert(records, context):
    """Google Benchmark JSON ({"context": ..., "benchmarks": [...]}) of the examples' records;
    `context` holds at least device, date, commit and command (backend and method are added)."""
    full = dict(backend="multi-gpu")
    full.update(context)
    full.setdefault("method", METHOD)
    return {"context": full, "benchmarks": [entry(r) for r in sorted(records, key=order)]}


def probe_device(records):
    """"N × <GPU> (one host; driver ..., torch ..., NCCL ...[, NVLink multicast off])" from torch
    and nvidia-smi, or the records' GPU name where torch has no GPU here."""
    gpu = next((r["gpu"] for r in records if r.get("gpu")), "?")
    try:
        import torch

        count = torch.cuda.device_count()
        if not count:
            raise RuntimeError("no GPU")
        gpu = torch.cuda.get_device_name(0)
        facts = []
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                     "--format=csv,noheader"], capture_output=True, text=True,
                                    check=True).stdout.split()[0]
            facts.append("driver " + driver)
        except (OSError, subprocess.CalledProcessError, IndexError):
            pass
        facts.append("torch " + torch.__version__)
        try:
            facts.append("NCCL " + ".".join(str(v) for v in torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001  (torch without NCCL)
            pass
        if os.environ.get("NCCL_NVLS_ENABLE") == "0":
            facts.append("NVLink multicast off: NCCL_NVLS_ENABLE=0")
        return "%d × %s (one host; %s)" % (count, gpu, ", ".join(facts))
    except Exception:  # noqa: BLE001  (no torch, or no GPU where this runs)
        return "%s (not probed: no GPU where the records were converted)" % gpu


def commit():
    if os.environ.get("DSV4_COMMIT"):
        return os.environ["DSV4_COMMIT"]
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("records", help="multi_gpu.json: the list of the examples' records")
    parser.add_argument("output", help="the Google Benchmark JSON file to write")
    parser.add_argument("--device", help="the machine (default: probed)")
    parser.add_argument("--date", help="when it ran (default: now, UTC)")
    parser.add_argument("--commit", help="the libdsv4 commit measured (default: $DSV4_COMMIT, git)")
    parser.add_argument("--command", default="scripts/gpu/multi_gpu.sh DIR")
    parser.add_argument("--source", help="where the records come from, when not this run")
    parser.add_argument("--note", action="append", default=[], help="a note (repeatable)")
    args = parser.parse_args()
    with open(args.records) as f:
        records = json.load(f)
    if not records:
        sys.exit("%s: no records (did the examples run?)" % args.records)
    context = dict(
        device=args.device or probe_device(records),
        date=args.date or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        commit=args.commit or commit(), command=args.command)
    if args.source:
        context["source"] = args.source
    if args.note:
        context["notes"] = args.note
    with open(args.output, "w") as f:
        json.dump(convert(records, context), f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote %s: %d entries" % (args.output, len(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
