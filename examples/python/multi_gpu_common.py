"""What the multi-GPU examples (tensor_parallel.py, context_parallel.py) share: the process group
(torch.distributed over NCCL, NVLink multicast off), decode steps of FlashMLA's CONFIG1 / CONFIG2
sizes built identically on every rank, CUDA-event timing, and the JSON record.

A step (spec 8, perf/targets.md): b requests decoding s_q = 2 tokens (MTP) at the end of a
65536-token context, FP8 584 B caches (vLLM's fp8_ds_mla, blocks of 64), per token the 128 SWA
positions of its window plus the C4A indexer's top-k compressed entries (CONFIG1: 64 heads,
top-k 512; CONFIG2: 128 heads, top-k 1024) out of the request's 16384, and a sink per head.
Every rank builds the same values from the seed (CPU generators), so no rank ships data to another.
"""
import json
import os
import statistics
import sys

import torch

import dsv4

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bindings", "python", "tests"))
import reference  # noqa: E402,F401  (the spec 2.4 comparison rule, for the checks)

CONFIGS = {"CONFIG1": dict(heads=64, topk=512), "CONFIG2": dict(heads=128, topk=1024)}
S_Q = 2
D = 512
WINDOW = 128
BLOCK = 64
CONTEXT = 65536
ENTRIES = CONTEXT // 4       # compressed entries of a request (C4A)
SWA_SPAN = 192               # SWA positions kept per request: the last 192 (>= WINDOW + S_Q - 1)
POOL = 16384                 # distinct cache rows (kv_write'n), reused over all requests
LAYOUT = dsv4.KvLayout.FP8_V4_584B
WARMUP, REPS = 5, 20
RUN_AHEAD_CYCLES = 100_000_000  # ~50 ms of torch.cuda._sleep at the H200's ~2 GHz


def init_distributed():
    """(rank, world size, device) of this process under torchrun, NCCL's NVLink multicast off."""
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # always off on these machines
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    if world > 1:
        torch.distributed.init_process_group("nccl", device_id=device)
    return rank, world, device


def barrier(world):
    if world > 1:
        torch.distributed.barrier()


def cache_desc():
    info = dsv4.kv_layout_info(LAYOUT, BLOCK)
    return dsv4.KvCacheDesc(LAYOUT, BLOCK, info.min_block_stride_bytes)


class Step:
    """One decode step's values, the same on every rank: q [b, S_Q, H, 512], sink [H], and per
    token its SWA positions and top-k compressed entries (request-local)."""

    def __init__(self, config, batch, seed, device):
        spec = CONFIGS[config]
        self.config, self.batch, self.heads, self.topk = config, batch, spec["heads"], spec["topk"]
        self.device = device
        gen = torch.Generator().manual_seed(seed)
        self.q = (torch.randn(batch, S_Q, self.heads, D, generator=gen) * 0.5).bfloat16() \
            .to(device)
        self.sink = (torch.rand(self.heads, generator=gen) * 3 - 1).to(device)
        self.pool = (torch.randn(POOL, D, generator=gen) * 0.5).to(device)
        # Positions CONTEXT - S_Q + s; SWA offsets within the request's last SWA_SPAN positions.
        last = torch.arange(S_Q) + (SWA_SPAN - S_Q)            # offset of each token's position
        self.swa_offsets = (last.view(S_Q, 1) - WINDOW + 1 + torch.arange(WINDOW)) \
            .expand(batch, S_Q, WINDOW).contiguous()            # [b, S_Q, WINDOW] ascending
        scores = torch.rand(batch * S_Q, ENTRIES, generator=gen)
        self.entries = scores.topk(self.topk, dim=1).indices.view(batch, S_Q, self.topk) \
            .to(torch.int32)                                   # indexer order: by score

    def rows(self, request, kind, index):
        """Pool rows holding request's SWA offset / compressed entry `index` (any shape)."""
        salt = 1 if kind == "swa" else 2
        return (index.long() * 7919 + request.long() * 104729 + salt * 15485863) % POOL

    def write_cache(self, ctx, kind, requests, indices, slots, capacity):
        """A cache of `capacity` slots holding (request, index) rows at `slots` (1-D tensors)."""
        desc = cache_desc()
        blocks = (capacity + BLOCK - 1) // BLOCK
        cache = torch.zeros(blocks, desc.block_stride_bytes, dtype=torch.uint8, device=self.device)
        chunk = 1 << 18
        for start in range(0, slots.numel(), chunk):
            part = slice(start, start + chunk)
            values = self.pool[self.rows(requests[part], kind, indices[part]).to(self.device)]
            dsv4.kv_write(ctx, desc, values, slots[part].to(self.device, torch.int32), cache)
        return cache


def full_caches(step, ctx):
    """Every request's SWA positions and compressed entries on one GPU: (swa_cache, swa_indices
    [b, S_Q, WINDOW], cmp_cache, cmp_indices [b, S_Q, topk]) with slot = request * span + index."""
    b = step.batch
    requests = torch.arange(b).repeat_interleave(SWA_SPAN)
    offsets = torch.arange(SWA_SPAN).repeat(b)
    swa_cache = step.write_cache(ctx, "swa", requests, offsets, torch.arange(b * SWA_SPAN),
                                 b * SWA_SPAN)
    requests = torch.arange(b).repeat_interleave(ENTRIES)
    entries = torch.arange(ENTRIES).repeat(b)
    cmp_cache = step.write_cache(ctx, "cmp", requests, entries, torch.arange(b * ENTRIES),
                                 b * ENTRIES)
    base = torch.arange(b, dtype=torch.int32).view(b, 1, 1)
    swa_indices = (base * SWA_SPAN + step.swa_offsets).to(torch.int32)
    cmp_indices = base * ENTRIES + step.entries
    return swa_cache, swa_indices.to(step.device), cmp_cache, cmp_indices.to(step.device)


def full_plan(ctx, step, heads=None):
    return dsv4.Plan(ctx, num_heads=heads or step.heads, max_tokens=step.batch * S_Q,
                     topk=WINDOW, extra_topk=step.topk, swa_cache=cache_desc(),
                     extra_cache=cache_desc())


def compare(got, want, tolerance, what):
    """The spec 2.4 rule (reference.compare) as a JSON-able dict."""
    result = reference.compare(got, want, tolerance, what)
    return dict(passed=result.passed, failures=result.failures, elements=result.elements,
                max_abs_err=result.max_abs_err, cos_diff=result.cos_diff)


SAMPLE_REQUESTS = 2


def check(step, full, out, lse, single_out, single_lse):
    """The parallel result against the float64 reference on the first SAMPLE_REQUESTS requests'
    tokens (spec 2.4 decode tolerances), and against the single-GPU run on every token: element
    by element (abs / rel; two GPU results each carry their own bf16 rounding, and a merged one a
    second, so their cosine distance is reported, not bounded)."""
    swa_cache, swa_indices, cmp_cache, cmp_indices = full
    n = SAMPLE_REQUESTS
    blocks = (n * SWA_SPAN + BLOCK - 1) // BLOCK, (n * ENTRIES + BLOCK - 1) // BLOCK
    want = reference.attention(
        step.q[:n], reference.Cache(swa_cache[:blocks[0]], LAYOUT, BLOCK), swa_indices[:n],
        extra=reference.Cache(cmp_cache[:blocks[1]], LAYOUT, BLOCK), extra_indices=cmp_indices[:n],
        sink=step.sink)

    def elementwise(tolerance):
        return tolerance[:2] + (-1.0,)

    result = dict(
        reference_out=compare(out[:n], want[0], reference.DECODE_OUT, "out"),
        reference_lse=compare(lse[:n], want[1], reference.DECODE_LSE, "lse"),
        single_gpu_out=compare(out, single_out, elementwise(reference.DECODE_OUT), "out"),
        single_gpu_lse=compare(lse, single_lse, elementwise(reference.DECODE_LSE), "lse"))
    return result, all(r["passed"] for r in result.values())


class Timer:
    """Medians of CUDA-event intervals on the current stream, by name."""

    def __init__(self):
        self.samples = {}

    def interval(self, name, start, stop):
        self.samples.setdefault(name, []).append((start, stop))

    def medians(self):
        torch.cuda.synchronize()
        return {name: statistics.median(a.elapsed_time(b) * 1e3 for a, b in pairs)
                for name, pairs in self.samples.items()}


def timed_steps():
    """The steps of a timed loop: WARMUP, then REPS timed ones. Before the first timed step the
    GPU is held (torch.cuda._sleep) while the host enqueues the timed steps, so that their
    intervals are device time. Without it, wherever the host is the slower (Python, the NCCL
    calls, the merge), its time shows as idle gaps inside the intervals: an 8 MB merge measured
    103 us that way, 17 us on the device (2 x H200, 2026-11-29)."""
    for rep in range(WARMUP + REPS):
        if rep == WARMUP:
            torch.cuda.synchronize()
            torch.cuda._sleep(RUN_AHEAD_CYCLES)
        yield rep


def event():
    e = torch.cuda.Event(enable_timing=True)
    e.record()
    return e


def flush_l2(buffer):
    """Evicts the caches' rows from L2 between timed steps (as the benchmarks do)."""
    buffer.add_(1)


def gather_timings(world, medians, device):
    """Every rank's medians (a dict of floats, same keys on every rank), on every rank."""
    keys = sorted(medians)
    local = torch.tensor([medians[k] for k in keys], dtype=torch.float64, device=device)
    if world == 1:
        return [medians]
    parts = [torch.empty_like(local) for _ in range(world)]
    torch.distributed.all_gather(parts, local)
    return [dict(zip(keys, p.tolist())) for p in parts]


def emit(record, out_dir, name):
    """Prints a JSON record and appends it to <out_dir>/<name>.jsonl."""
    text = json.dumps(record, sort_keys=True)
    print(text, flush=True)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, name + ".jsonl"), "a") as handle:
            handle.write(text + "\n")
