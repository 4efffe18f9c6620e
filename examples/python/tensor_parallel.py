#!/usr/bin/env python3
"""Tensor-parallel DeepSeek-V4 decode attention on torch.distributed + NCCL: the heads (64 or 128)
split over the ranks, each rank running libdsv4 on its own GPU and torch's stream there with its
slice of q and of the sink (head offset rank * H / N), the outputs gathered (all_gather) and
checked against a single-GPU run of all heads and, on a sample of tokens, against the float64
reference (spec 2.4 rule). Prints one JSON record per case:
per-rank attention time, the NCCL gather time separately, and the single-GPU time measured in the
same run (CUDA events, L2 flushed, median of 20).

    torchrun --standalone --nproc-per-node N examples/python/tensor_parallel.py [--out DIR]
             [--configs CONFIG1,CONFIG2] [--batches 64,256]

(N = 1 times the 1-GPU case alone; scripts/gpu/multi_gpu.sh runs N = 1, 2, 4.)
"""
import argparse
import sys

import torch

import dsv4.torch as dt
import multi_gpu_common as common


def run_case(config, batch, args, rank, world, device, flush):
    step = common.Step(config, batch, args.seed, device)
    ctx = dt.context(device)
    heads = step.heads // world
    if heads * world != step.heads:
        raise SystemExit("%d heads do not split over %d ranks" % (step.heads, world))
    first = rank * heads
    full = common.full_caches(step, ctx)
    swa_cache, swa_indices, cmp_cache, cmp_indices = full
    plan = common.full_plan(ctx, step, heads)
    q = step.q[:, :, first:first + heads].contiguous()
    sink = step.sink[first:first + heads].contiguous()
    out = torch.empty(batch, common.S_Q, heads, common.D, dtype=torch.bfloat16, device=device)
    lse = torch.empty(batch, common.S_Q, heads, device=device)
    gathered = torch.empty((world,) + tuple(out.shape), dtype=out.dtype, device=device)
    gathered_lse = torch.empty((world,) + tuple(lse.shape), device=device)
    timer = common.Timer()
    for rep in common.timed_steps():
        common.flush_l2(flush)
        start = common.event()
        dt.attention(plan, q, swa_cache, swa_indices, extra_cache=cmp_cache,
                     extra_indices=cmp_indices, attn_sink=sink, out=out, lse=lse)
        attended = common.event()
        if world > 1:
            torch.distributed.all_gather_into_tensor(gathered, out)
            torch.distributed.all_gather_into_tensor(gathered_lse, lse)
        else:
            gathered[0].copy_(out)
            gathered_lse[0].copy_(lse)
        done = common.event()
        if rep >= common.WARMUP:
            timer.interval("attention_us", start, attended)
            timer.interval("exchange_us", attended, done)
            timer.interval("step_us", start, done)
    per_rank = common.gather_timings(world, timer.medians(), device)
    record = dict(example="tensor_parallel", config=config, b=batch, s_q=common.S_Q,
                  heads=step.heads, heads_per_rank=heads, world=world,
                  gpu=torch.cuda.get_device_name(device), kernel=plan.info.kernel,
                  per_rank=per_rank,
                  attention_us=max(r["attention_us"] for r in per_rank),
                  exchange_us=max(r["exchange_us"] for r in per_rank),
                  step_us=max(r["step_us"] for r in per_rank))
    common.barrier(world)
    if rank == 0:  # the single-GPU run of every head, timed and compared here
        single_plan = common.full_plan(ctx, step)
        single_out = torch.empty(batch, common.S_Q, step.heads, common.D, dtype=torch.bfloat16,
                                 device=device)
        single_lse = torch.empty(batch, common.S_Q, step.heads, device=device)
        single = common.Timer()
        for rep in common.timed_steps():
            common.flush_l2(flush)
            start = common.event()
            dt.attention(single_plan, step.q, swa_cache, swa_indices, extra_cache=cmp_cache,
                         extra_indices=cmp_indices, attn_sink=step.sink, out=single_out,
                         lse=single_lse)
            if rep >= common.WARMUP:
                single.interval("attention_us", start, common.event())
        record["single_gpu_attention_us"] = single.medians()["attention_us"]
        record["attention_ratio_to_single_gpu"] = \
            record["attention_us"] / record["single_gpu_attention_us"]
        # [N, b, S_Q, H/N, ...] -> [b, S_Q, H, ...]: rank k's heads are k * H/N .. (k+1) * H/N.
        gathered_out = gathered.permute(1, 2, 0, 3, 4).reshape(single_out.shape)
        gathered_lse = gathered_lse.permute(1, 2, 0, 3).reshape(single_lse.shape)
        record["check"], record["passed"] = common.check(step, full, gathered_out, gathered_lse,
                                                         single_out, single_lse)
        common.emit(record, args.out, "tensor_parallel")
    common.barrier(world)
    return record.get("passed", True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="directory for tensor_parallel.jsonl")
    parser.add_argument("--configs", default="CONFIG1,CONFIG2")
    parser.add_argument("--batches", default="64,256")
    parser.add_argument("--seed", type=int, default=55)
    args = parser.parse_args()
    rank, world, device = common.init_distributed()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    ok = True
    for config in args.configs.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            ok = run_case(config, batch, args, rank, world, device, flush) and ok
    if world > 1:
        torch.distributed.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
