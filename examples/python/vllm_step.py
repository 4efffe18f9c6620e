#!/usr/bin/env python3
"""One engine step of DeepSeek-V4 attention, built from the metadata vLLM's DeepSeek-V4 backends
hold, through libdsv4's paged mode: a call per layer for an SWA-only, a C4A and a C128A layer,
each checked against the independent float64 reference (spec sections 2-4).

The step is an MTP step (decode_threshold = 2) like README "One mixed step": three decode requests
(query lengths 2, 1, 2), a prefill chunk with a 1200-token prefix, a new 3-token prefill with a
padding token inside it, and the batch padded to a CUDA-graph size. What vLLM holds per step, and
what this example builds the same way:

  query_start_loc [R+1]  exclusive prefix sum of the query lengths (decodes first)
  seq_lens [R]           context + this step's query tokens
  block tables           SWA blocks of 64 tokens; compressed blocks of 256 tokens (C4: 64 entries,
                         C128: 2 entries), one row per request, logical block 0, 1, ...
  slot_mapping [T]       the SWA slot each token's KV was written to this step (-1: padding)
  topk_indices [T, K]    the C4A indexer's request-local compressed indices, -1 padded

    examples/python/vllm_step.py [--device cpu|cuda[:n]] [--heads 16] [--seed n]

Needs the dsv4 package (installed, or PYTHONPATH=bindings/python with DSV4_LIBRARY) and torch;
the check loads the reference from bindings/python/tests (libdsv4_pyref.so, built with the tests).
"""
import argparse
import math
import os
import random
import sys

import torch

import dsv4
import dsv4.torch as dt

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bindings", "python", "tests"))
import cases  # noqa: E402  (FlashMLA's data scale, which the check's tolerances assume)
import reference  # noqa: E402  (the float64 reference, for the check)

D = 512
WINDOW = 128                 # sliding window W
SWA_BLOCK = 64               # tokens per SWA block
CMP_BLOCK_TOKENS = 256       # logical tokens per compressed block
INDEX_TOPK = 512             # C4A top-k (V4-Flash)
MAX_MODEL_LEN = 8192         # C128A width round_up(ceil(8192 / 128), 128) = 128
DECODE_THRESHOLD = 2         # 1 + num_speculative_tokens (MTP)
PADDED_TOKENS = 16           # the CUDA-graph size the step is padded to
LAYOUT = dsv4.KvLayout.FP8_V4_584B  # vLLM's fp8_ds_mla, for both caches
# (query_len, seq_len) per request: decodes first, then prefills.
REQUESTS = [(2, 901), (1, 57), (2, 130), (5, 1205), (3, 3)]
PADDING_INSIDE = 12          # a token row of the last request marked padding (slot -1)


class Step:
    """The batch description of one step, as vLLM's metadata builders hold it (host tensors)."""

    def __init__(self, rng):
        query_lens = [q for q, _ in REQUESTS]
        self.seq_lens = torch.tensor([s for _, s in REQUESTS], dtype=torch.int32)
        self.query_start_loc = torch.tensor([0] + list(_cumsum(query_lens)), dtype=torch.int32)
        self.num_tokens = PADDED_TOKENS
        # Block tables: each request owns shuffled physical blocks. Columns that hold no position
        # a token can see (SWA blocks left behind by the window) hold junk, as freed blocks do.
        swa_cols = max(math.ceil(s / SWA_BLOCK) for s in self.seq_lens.tolist())
        cmp_cols = max(math.ceil(s / CMP_BLOCK_TOKENS) for s in self.seq_lens.tolist())
        self.swa_blocks = len(REQUESTS) * swa_cols + 3
        self.cmp_blocks = len(REQUESTS) * cmp_cols + 3
        swa_pool = rng.sample(range(self.swa_blocks), len(REQUESTS) * swa_cols)
        cmp_pool = rng.sample(range(self.cmp_blocks), len(REQUESTS) * cmp_cols)
        self.swa_block_table = torch.tensor(swa_pool, dtype=torch.int32).view(-1, swa_cols)
        self.cmp_block_table = torch.tensor(cmp_pool, dtype=torch.int32).view(-1, cmp_cols)
        for r, (query_len, seq_len) in enumerate(REQUESTS):
            first_needed = max(0, seq_len - query_len - WINDOW + 1) // SWA_BLOCK
            self.swa_block_table[r, :first_needed] = rng.choice((-1, 10 ** 6))
        # Token rows: request, position; slot_mapping = where this step wrote each token's KV.
        self.positions = []  # (token row, request, position)
        slots = [-1] * self.num_tokens
        for r, (query_len, seq_len) in enumerate(REQUESTS):
            start = int(self.query_start_loc[r])
            for i in range(query_len):
                p = seq_len - query_len + i
                self.positions.append((start + i, r, p))
                slots[start + i] = self.swa_slot(r, p)
        slots[PADDING_INSIDE] = -1
        self.slot_mapping = torch.tensor(slots, dtype=torch.int32)
        # The C4A indexer: request-local compressed indices sorted by a score, -1 padded; a token
        # at p sees (p + 1) // 4 entries.
        self.topk_indices = torch.full((self.num_tokens, INDEX_TOPK), -1, dtype=torch.int32)
        for t, _, p in self.positions:
            visible = (p + 1) // 4
            chosen = rng.sample(range(visible), min(visible, INDEX_TOPK))
            self.topk_indices[t, :len(chosen)] = torch.tensor(chosen, dtype=torch.int32)

    def swa_slot(self, r, p):
        return int(self.swa_block_table[r, p // SWA_BLOCK]) * SWA_BLOCK + p % SWA_BLOCK

    def cmp_slot(self, r, entry, ratio):
        per_block = CMP_BLOCK_TOKENS // ratio
        return int(self.cmp_block_table[r, entry // per_block]) * per_block + entry % per_block

    def batch(self, device):
        return dict(query_start_loc=self.query_start_loc.to(device),
                    seq_lens=self.seq_lens.to(device),
                    swa_block_table=self.swa_block_table.to(device),
                    slot_mapping=self.slot_mapping.to(device))


def _cumsum(values):
    total = 0
    for v in values:
        total += v
        yield total


class Layer:
    """One attention layer's caches, written as vLLM's insert and compressor kernels would have
    (every position a token of this step can see), the rest left 0xFF (NaN)."""

    def __init__(self, ratio, step, ctx, rng, device):
        self.ratio = ratio
        gen = torch.Generator().manual_seed(rng.randrange(1 << 62))
        self.swa_desc = _desc(SWA_BLOCK)
        self.swa_cache = torch.full((step.swa_blocks, self.swa_desc.block_stride_bytes), 0xFF,
                                    dtype=torch.uint8, device=device)
        rows = {}
        for _, r, p in step.positions:
            for q in range(max(0, p - WINDOW + 1), p + 1):
                rows[step.swa_slot(r, q)] = True
        _write(ctx, self.swa_desc, self.swa_cache, sorted(rows), gen, device)
        self.cmp_desc = self.cmp_cache = None
        if ratio > 1:
            self.cmp_desc = _desc(CMP_BLOCK_TOKENS // ratio)
            self.cmp_cache = torch.full((step.cmp_blocks, self.cmp_desc.block_stride_bytes), 0xFF,
                                        dtype=torch.uint8, device=device)
            entries = {}
            for _, r, p in step.positions:
                for c in range((p + 1) // ratio):
                    entries[step.cmp_slot(r, c, ratio)] = True
            _write(ctx, self.cmp_desc, self.cmp_cache, sorted(entries), gen, device)

    def plan_options(self, heads):
        options = dict(mode=dsv4.Mode.PAGED, num_heads=heads, compress_ratio=self.ratio,
                       window=WINDOW, decode_threshold=DECODE_THRESHOLD, swa_cache=self.swa_desc,
                       max_tokens=PADDED_TOKENS, max_requests=len(REQUESTS),
                       max_swa_blocks_per_request=64, max_cmp_blocks_per_request=64)
        if self.ratio > 1:
            options.update(extra_cache=self.cmp_desc, compressed_block_tokens=CMP_BLOCK_TOKENS,
                           index_topk=INDEX_TOPK, max_model_len=MAX_MODEL_LEN)
        return options


def _desc(block_size):
    info = dsv4.kv_layout_info(LAYOUT, block_size)
    return dsv4.KvCacheDesc(LAYOUT, block_size, info.min_block_stride_bytes)


def _write(ctx, desc, cache, slots, gen, device):
    """Post-RoPE KV rows (random here, at FlashMLA's decode scale: cases.kv_values) quantised into
    the cache by libdsv4's vLLM quantiser."""
    values = cases.kv_values(len(slots), gen).to(device)
    dsv4.kv_write(ctx, desc, values, torch.tensor(slots, dtype=torch.int32, device=device), cache)


def check(name, step, layer, q, sink, out, lse):
    """The layer's outputs against the reference over the lists spec section 4 builds."""
    config = dict(compress_ratio=layer.ratio, window=WINDOW, swa_block_size=SWA_BLOCK,
                  cmp_block_size=CMP_BLOCK_TOKENS // layer.ratio if layer.ratio > 1 else 1,
                  index_topk=INDEX_TOPK, decode_threshold=DECODE_THRESHOLD,
                  max_model_len=MAX_MODEL_LEN)
    batch = dict(query_start_loc=step.query_start_loc, seq_lens=step.seq_lens,
                 swa_block_table=step.swa_block_table, slot_mapping=step.slot_mapping,
                 cmp_block_table=step.cmp_block_table if layer.ratio > 1 else None,
                 topk_indices=step.topk_indices if layer.ratio == 4 else None)
    swa, swa_len, cmp, cmp_len = reference.paged_lists(config, batch)
    extra = {}
    if layer.ratio > 1:
        extra = dict(extra=reference.Cache(layer.cmp_cache, LAYOUT, layer.cmp_desc.block_size),
                     extra_indices=cmp, extra_lengths=cmp_len)
    want_out, want_lse, _ = reference.attention(
        q, reference.Cache(layer.swa_cache, LAYOUT, SWA_BLOCK), swa, swa_len, sink=sink, **extra)
    decode_tokens = _decode_tokens()
    ok = True
    for rows, out_tol, lse_tol, kind in ((slice(0, decode_tokens), reference.DECODE_OUT,
                                          reference.DECODE_LSE, "decode"),
                                         (slice(decode_tokens, None), reference.PREFILL_OUT,
                                          reference.PREFILL_LSE, "prefill")):
        for got, want, tol, what in ((out[rows], want_out[rows], out_tol, "out"),
                                     (lse[rows], want_lse[rows], lse_tol, "lse")):
            result = reference.compare(got, want, tol, "%s %s %s" % (name, kind, what))
            print("  " + str(result))
            ok = ok and result.passed
    return ok


def _decode_tokens():
    """The step's leading decode token rows (decodes come first)."""
    return sum(q_len for q_len, _ in REQUESTS if q_len <= DECODE_THRESHOLD)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--heads", type=int, default=16, help="heads per rank (V4-Flash TP=4)")
    parser.add_argument("--seed", type=int, default=random.SystemRandom().randrange(1 << 31))
    args = parser.parse_args()
    device = torch.device(args.device)
    rng = random.Random(args.seed)
    print("vllm_step: device %s, %d heads, seed %d" % (device, args.heads, args.seed))
    ctx = dt.context(device)
    step = Step(rng)
    gen = torch.Generator().manual_seed(args.seed)
    # Values at FlashMLA's scale, which spec 2.4's tolerances (the check's) are calibrated to:
    # decode queries clamp(randn, -1, 1), prefill ones randn/10 + U(-0.05, 0.05) (cases.py).
    decode = _decode_tokens()
    q = torch.cat((cases.q_values((decode, args.heads, D), gen),
                   cases.q_values((step.num_tokens - decode, args.heads, D), gen, prefill=True)))
    sink = torch.rand(args.heads, generator=gen) * 3 - 1
    sink[args.heads // 2] = float("-inf")  # a padded head: no sink
    ok = True
    for name, ratio in (("SWA", 1), ("C4A", 4), ("C128A", 128)):
        layer = Layer(ratio, step, ctx, rng, device)
        plan = dsv4.Plan(ctx, **layer.plan_options(args.heads))
        out, lse = dt.paged_attention(
            plan, q.to(device), layer.swa_cache, **step.batch(device),
            extra_cache=layer.cmp_cache,
            cmp_block_table=step.cmp_block_table.to(device) if ratio > 1 else None,
            topk_indices=step.topk_indices.to(device) if ratio == 4 else None,
            attn_sink=sink.to(device))
        print("%s layer: %s" % (name, plan.info.kernel))
        ok = check(name, step, layer, q, sink, out, lse) and ok
        padding = [t for t in range(step.num_tokens) if int(step.slot_mapping[t]) < 0]
        if not (bool((out[padding] == 0).all()) and bool(torch.isinf(lse[padding]).all())):
            print("  padding rows: expected output 0 and lse +inf")
            ok = False
    print("vllm_step: %s" % ("passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
