#!/usr/bin/env python3
"""Decode-context-parallel DeepSeek-V4 attention on torch.distributed + NCCL: each request's
context is sharded over the ranks (position p's SWA row and compressed entry c live on rank
p % N and c % N, vLLM's interleaved DCP layout), so each rank holds 1/N of every cache. Each rank
runs libdsv4 over the keys it holds, without the sink, for a partial (out, lse); the partials are
exchanged with NCCL (all_gather) and merged by the merge op, which applies the sink once (spec
12.2); the result is checked against a single-GPU run over the whole context and, on a sample of tokens,
against the float64 reference (spec 2.4 rule).
Prints one JSON record per case: per-rank attention, NCCL exchange and merge times separately,
and the single-GPU time measured in the same run (CUDA events, L2 flushed, median of 20).

    torchrun --standalone --nproc-per-node N examples/python/context_parallel.py [--out DIR]
             [--configs CONFIG1,CONFIG2] [--batches 64,256]
"""
import argparse
import sys

import torch

import dsv4.torch as dt
import multi_gpu_common as common


def local_list(global_index, owner, rank, world, per_request, request):
    """The candidates rank holds, moved to the front of each row (their order kept), as local
    slots request * per_request / world + index // world; -1 after them; and their counts."""
    mine = owner == rank
    order = torch.argsort((~mine).to(torch.int8), dim=-1, stable=True)
    local = (request * (per_request // world) + global_index // world).to(torch.int32)
    local = torch.where(mine, local, torch.full_like(local, -1)).gather(-1, order)
    return local, mine.sum(-1).to(torch.int32)


def shard_caches(step, ctx, rank, world):
    """This rank's shards of the SWA and compressed caches, and its lists into them."""
    b = step.batch
    tensors = {}
    for kind, span, index in (("swa", common.SWA_SPAN, step.swa_offsets),
                              ("cmp", common.ENTRIES, step.entries.long())):
        held = torch.arange(rank, span, world)               # the request-local indices held
        requests = torch.arange(b).repeat_interleave(held.numel())
        indices = held.repeat(b)
        slots = requests * (span // world) + indices // world
        cache = step.write_cache(ctx, kind, requests, indices, slots, b * span // world)
        # Positions CONTEXT - SWA_SPAN + offset: CONTEXT - SWA_SPAN is a multiple of world.
        request = torch.arange(b).view(b, 1, 1)
        local, lengths = local_list(index, index % world, rank, world, span, request)
        tensors[kind] = (cache, local.to(step.device), lengths.to(step.device))
    return tensors


def run_case(config, batch, args, rank, world, device, flush):
    step = common.Step(config, batch, args.seed, device)
    ctx = dt.context(device)
    shards = shard_caches(step, ctx, rank, world)
    (swa_cache, swa_local, swa_lengths), (cmp_cache, cmp_local, cmp_lengths) = \
        shards["swa"], shards["cmp"]
    plan = common.full_plan(ctx, step)
    shape = (batch, common.S_Q, step.heads)
    tokens = batch * common.S_Q  # the merge takes [P, T, H, 512] parts
    part_out = torch.empty(shape + (common.D,), dtype=torch.bfloat16, device=device)
    part_lse = torch.empty(shape, device=device)
    parts_out = torch.empty((world,) + tuple(part_out.shape), dtype=torch.bfloat16,
                            device=device)
    parts_lse = torch.empty((world,) + shape, device=device)
    out = torch.empty_like(part_out)
    lse = torch.empty_like(part_lse)
    timer = common.Timer()
    for rep in common.timed_steps():
        common.flush_l2(flush)
        start = common.event()
        dt.attention(plan, step.q, swa_cache, swa_local, lengths=swa_lengths,
                     extra_cache=cmp_cache, extra_indices=cmp_local, extra_lengths=cmp_lengths,
                     out=part_out, lse=part_lse)  # no sink: the merge applies it
        attended = common.event()
        if world > 1:
            torch.distributed.all_gather_into_tensor(parts_out, part_out)
            torch.distributed.all_gather_into_tensor(parts_lse, part_lse)
        else:
            parts_out[0].copy_(part_out)
            parts_lse[0].copy_(part_lse)
        exchanged = common.event()
        dt.merge(parts_out.view(world, tokens, step.heads, common.D),
                 parts_lse.view(world, tokens, step.heads), attn_sink=step.sink,
                 out=out.view(tokens, step.heads, common.D), lse=lse.view(tokens, step.heads))
        done = common.event()
        if rep >= common.WARMUP:
            timer.interval("attention_us", start, attended)
            timer.interval("exchange_us", attended, exchanged)
            timer.interval("merge_us", exchanged, done)
            timer.interval("step_us", start, done)
    per_rank = common.gather_timings(world, timer.medians(), device)
    record = dict(example="context_parallel", config=config, b=batch, s_q=common.S_Q,
                  heads=step.heads, world=world, gpu=torch.cuda.get_device_name(device),
                  kernel=plan.info.kernel, per_rank=per_rank,
                  **{key: max(r[key] for r in per_rank) for key in per_rank[0]})
    del shards, swa_cache, cmp_cache
    common.barrier(world)
    if rank == 0:  # the single-GPU run over the whole context, timed and compared here
        full = common.full_caches(step, ctx)
        swa_full, swa_indices, cmp_full, cmp_indices = full
        single_out = torch.empty_like(out)
        single_lse = torch.empty_like(lse)
        single = common.Timer()
        for rep in common.timed_steps():
            common.flush_l2(flush)
            start = common.event()
            dt.attention(plan, step.q, swa_full, swa_indices, extra_cache=cmp_full,
                         extra_indices=cmp_indices, attn_sink=step.sink, out=single_out,
                         lse=single_lse)
            if rep >= common.WARMUP:
                single.interval("attention_us", start, common.event())
        record["single_gpu_attention_us"] = single.medians()["attention_us"]
        record["check"], record["passed"] = common.check(step, full, out, lse, single_out,
                                                         single_lse)
        common.emit(record, args.out, "context_parallel")
    common.barrier(world)
    return record.get("passed", True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="directory for context_parallel.jsonl")
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
