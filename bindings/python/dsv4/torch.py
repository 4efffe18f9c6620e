"""libdsv4 for PyTorch: functions that take and return torch tensors.

    import dsv4.torch as dt
    plan = dt.plan("cuda:0", num_heads=64, topk=128, max_tokens=64,
                   swa_cache=dict(layout=dsv4.KvLayout.FP8_V4_584B, block_size=64))
    out, lse = dt.attention(plan, q, swa_cache, indices, lengths=lengths, attn_sink=sink)

Every function runs on torch's current stream of the plan's device (or `stream=`, a
torch.cuda.Stream or handle, which then waits for torch's current stream), allocates `out` (bf16,
q's shape with 512 as last dim) and `lse` (fp32, q's shape without its last dim) when they are not
given, and uses the plan's workspace for that stream (allocated once, as a torch uint8 tensor; call
`plan.workspace(stream)` before a CUDA graph capture so that the capture allocates nothing). The
calls enqueue work and never synchronise, so they can be captured in torch.cuda.graph.

On torch >= 2.4 the calls go through the custom op `torch.ops.dsv4.run` (torch.library.custom_op,
with a fake kernel), so torch.compile traces them; older torch (Debian's 1.13) calls the same
implementation directly (HAS_CUSTOM_OP is False).
"""
import contextlib
import itertools
import threading
import weakref
from typing import Optional

import torch

from . import Context, Plan, _lib

__all__ = ["HAS_CUSTOM_OP", "attention", "context", "paged_attention", "plan", "run"]

HEAD_DIM_V = 512
HAS_CUSTOM_OP = hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_fake")

# ------------------------------------ contexts and plans ----------------------------------------
_contexts = {}
_contexts_lock = threading.Lock()


def context(device="cuda", backend=None, **options):
    """The dsv4.Context of a torch device (one per device, backend and options, kept for the
    process). `device`: a torch.device or its text ("cuda", "cuda:1", "cpu")."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    key = (str(device), backend, tuple(sorted(options.items())))
    with _contexts_lock:
        found = _contexts.get(key)
        if found is None:
            found = _contexts[key] = Context(device=device, backend=backend, **options)
    return found


def plan(device="cuda", backend=None, **options):
    """A dsv4.Plan on context(device, backend); `options` are dsv4_plan_options fields."""
    return Plan(context(device, backend), **options)


# Plans reachable from the custom op by an integer id (ops take no Python objects).
_plans = weakref.WeakValueDictionary()
_plan_ids = itertools.count(1)


def _plan_id(p):
    plan_id = getattr(p, "_torch_op_id", None)
    if plan_id is None:
        plan_id = p._torch_op_id = next(_plan_ids)
        _plans[plan_id] = p
    return plan_id


# ------------------------------------------- the op ---------------------------------------------
# The op's tensors after q, in dsv4_run_args order. The op takes no workspace: the plan's own for
# the stream is scratch memory (Plan.workspace / Plan.set_workspace), invisible to torch.
_INPUTS = ("swa_cache", "extra_cache", "attn_sink", "indices", "indptr", "lengths",
           "extra_indices", "extra_indptr", "extra_lengths", "query_start_loc", "seq_lens",
           "swa_block_table", "cmp_block_table", "slot_mapping", "topk_indices")


def _run_tensors(plan_id, tensors):
    target = _plans.get(plan_id)
    if target is None:
        raise ValueError("plan: no live dsv4 plan has id %d" % plan_id)
    target.run(**tensors)


# Two ops, so that no mutated argument is optional (torch.library handles those poorly): run
# writes out and lse, run_max_logits also max_logits.
def _run(plan_id: int, q: torch.Tensor, swa_cache: Optional[torch.Tensor],
         extra_cache: Optional[torch.Tensor], attn_sink: Optional[torch.Tensor],
         indices: Optional[torch.Tensor], indptr: Optional[torch.Tensor],
         lengths: Optional[torch.Tensor], extra_indices: Optional[torch.Tensor],
         extra_indptr: Optional[torch.Tensor], extra_lengths: Optional[torch.Tensor],
         query_start_loc: Optional[torch.Tensor], seq_lens: Optional[torch.Tensor],
         swa_block_table: Optional[torch.Tensor], cmp_block_table: Optional[torch.Tensor],
         slot_mapping: Optional[torch.Tensor], topk_indices: Optional[torch.Tensor],
         out: torch.Tensor, lse: torch.Tensor) -> None:
    tensors = dict(zip(_INPUTS, (swa_cache, extra_cache, attn_sink, indices, indptr, lengths,
                                 extra_indices, extra_indptr, extra_lengths, query_start_loc,
                                 seq_lens, swa_block_table, cmp_block_table, slot_mapping,
                                 topk_indices)))
    _run_tensors(plan_id, dict(tensors, q=q, out=out, lse=lse))


def _run_max_logits(plan_id: int, q: torch.Tensor, swa_cache: Optional[torch.Tensor],
                    extra_cache: Optional[torch.Tensor], attn_sink: Optional[torch.Tensor],
                    indices: Optional[torch.Tensor], indptr: Optional[torch.Tensor],
                    lengths: Optional[torch.Tensor], extra_indices: Optional[torch.Tensor],
                    extra_indptr: Optional[torch.Tensor], extra_lengths: Optional[torch.Tensor],
                    query_start_loc: Optional[torch.Tensor], seq_lens: Optional[torch.Tensor],
                    swa_block_table: Optional[torch.Tensor],
                    cmp_block_table: Optional[torch.Tensor], slot_mapping: Optional[torch.Tensor],
                    topk_indices: Optional[torch.Tensor], out: torch.Tensor, lse: torch.Tensor,
                    max_logits: torch.Tensor) -> None:
    tensors = dict(zip(_INPUTS, (swa_cache, extra_cache, attn_sink, indices, indptr, lengths,
                                 extra_indices, extra_indptr, extra_lengths, query_start_loc,
                                 seq_lens, swa_block_table, cmp_block_table, slot_mapping,
                                 topk_indices)))
    _run_tensors(plan_id, dict(tensors, q=q, out=out, lse=lse, max_logits=max_logits))


def _no_output(*args, **kwargs):
    return None


if HAS_CUSTOM_OP:
    _run_op = torch.library.custom_op("dsv4::run", mutates_args=("out", "lse"))(_run)
    _run_op.register_fake(_no_output)
    _run_max_logits_op = torch.library.custom_op(
        "dsv4::run_max_logits", mutates_args=("out", "lse", "max_logits"))(_run_max_logits)
    _run_max_logits_op.register_fake(_no_output)
else:
    _run_op, _run_max_logits_op = _run, _run_max_logits


# ----------------------------------------- functions --------------------------------------------
def _stream_context(stream, device):
    """Makes `stream` torch's current stream for the call (None: torch's current stream)."""
    if stream is None or device.type != "cuda":
        return contextlib.nullcontext()
    if not isinstance(stream, torch.cuda.Stream):
        from ._device import stream_handle
        stream = torch.cuda.ExternalStream(stream_handle(stream), device=device)
    return torch.cuda.stream(stream)


def _outputs(q, out, lse):
    if out is None:
        out = torch.empty(q.shape[:-1] + (HEAD_DIM_V,), dtype=torch.bfloat16, device=q.device)
    if lse is None:
        lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    return out, lse


def run(plan, q, out=None, lse=None, max_logits=None, stream=None, **tensors):
    """One run of `plan` with torch tensors; tensors are dsv4_run_args names. Returns
    (out, lse), allocated when not given (max_logits is written only when given)."""
    for name in tensors:
        if name not in _INPUTS:
            raise TypeError("unknown tensor argument %r" % name)
    inputs = [tensors.get(name) for name in _INPUTS]
    with _stream_context(stream, q.device):
        # Allocated on the stream that then writes them (torch's caching allocator is per stream).
        out, lse = _outputs(q, out, lse)
        if max_logits is None:
            _run_op(_plan_id(plan), q, *inputs, out, lse)
        else:
            _run_max_logits_op(_plan_id(plan), q, *inputs, out, lse, max_logits)
    return out, lse


def attention(plan, q, swa_cache, indices=None, lengths=None, extra_cache=None,
              extra_indices=None, extra_lengths=None, attn_sink=None, indptr=None,
              extra_indptr=None, out=None, lse=None, max_logits=None, stream=None):
    """Explicit mode: `indices` [T, topk] (or CSR `indptr` + flat `indices`) into `swa_cache`,
    optional `extra_indices` into `extra_cache`, optional per-token `lengths`. Returns (out, lse)."""
    return run(plan, q, out, lse, max_logits, stream, swa_cache=swa_cache, indices=indices,
               lengths=lengths, extra_cache=extra_cache, extra_indices=extra_indices,
               extra_lengths=extra_lengths, attn_sink=attn_sink, indptr=indptr,
               extra_indptr=extra_indptr)


def paged_attention(plan, q, swa_cache, query_start_loc, seq_lens, swa_block_table,
                    slot_mapping, extra_cache=None, cmp_block_table=None, topk_indices=None,
                    attn_sink=None, out=None, lse=None, max_logits=None, stream=None):
    """Paged mode: the batch description vLLM holds (README "Paged mode"). Returns (out, lse)."""
    return run(plan, q, out, lse, max_logits, stream, swa_cache=swa_cache,
               query_start_loc=query_start_loc, seq_lens=seq_lens,
               swa_block_table=swa_block_table, slot_mapping=slot_mapping,
               extra_cache=extra_cache, cmp_block_table=cmp_block_table,
               topk_indices=topk_indices, attn_sink=attn_sink)
