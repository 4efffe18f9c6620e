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

On torch >= 2.4 the calls are the custom ops `torch.ops.dsv4.run` / `run_max_logits`
(torch.library, with fake kernels), so torch.compile traces them. In plain eager code (not being
compiled, no torch function or dispatch mode active, plain tensors) they call the ops' kernel
directly: the dispatcher's trip would cost more host time than the run itself. Older torch
(Debian's 1.13) always calls the kernel directly (HAS_CUSTOM_OP is False).
"""
import contextlib
import threading

import torch

from . import Context, Plan, plan_by_id

__all__ = ["HAS_CUSTOM_OP", "attention", "context", "merge", "paged_attention", "plan", "run"]

HEAD_DIM_V = 512
HAS_CUSTOM_OP = hasattr(torch.library, "register_fake")  # torch >= 2.4

# ------------------------------------ contexts and plans ----------------------------------------
_contexts = {}
_contexts_lock = threading.Lock()
_device_contexts = {}  # torch.device with its index -> its default-backend context


def context(device="cuda", backend=None, **options):
    """The dsv4.Context of a torch device (one per device, backend and options, kept for the
    process). `device`: a torch.device or its text ("cuda", "cuda:1", "cpu")."""
    if backend is None and not options:  # a tensor's device: one lookup
        found = _device_contexts.get(device)
        if found is not None:
            return found
    given = device
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    key = (str(device), backend, tuple(sorted(options.items())))
    with _contexts_lock:
        found = _contexts.get(key)
        if found is None:
            found = _contexts[key] = Context(device=device, backend=backend, **options)
        if backend is None and not options and isinstance(given, torch.device) and \
                (given.type != "cuda" or given.index is not None):
            _device_contexts[given] = found
    return found


def plan(device="cuda", backend=None, **options):
    """A dsv4.Plan on context(device, backend); `options` are dsv4_plan_options fields."""
    return Plan(context(device, backend), **options)


# ------------------------------------------- the op ---------------------------------------------
# The op's tensors after q, in dsv4_run_args order. The op takes no workspace: the plan's own for
# the stream is scratch memory (Plan.workspace / Plan.set_workspace), invisible to torch.
_INPUTS = ("swa_cache", "extra_cache", "attn_sink", "indices", "indptr", "lengths",
           "extra_indices", "extra_indptr", "extra_lengths", "query_start_loc", "seq_lens",
           "swa_block_table", "cmp_block_table", "slot_mapping", "topk_indices")
_OUTPUTS = ("out", "lse", "max_logits")
_INPUT_NAMES = frozenset(_INPUTS)
_ARGUMENTS = _INPUTS + _OUTPUTS


def _named(q, tensors):
    """tensors = _INPUTS, then out, lse[, max_logits]: those given (not None) by name, in one
    order for every call."""
    named = {"q": q}
    for name, value in zip(_ARGUMENTS, tensors):
        if value is not None:
            named[name] = value
    return named


def _run(plan_id, q, *tensors):
    """The ops' kernel (every device)."""
    plan_by_id(plan_id)._run(_named(q, tensors))


def _no_output(*args, **kwargs):
    return None


def _schema(name, outputs):
    """Two ops, so that no mutated argument is optional: run writes out and lse, run_max_logits
    also max_logits."""
    written = ["Tensor(%s!) %s" % (alias, output) for alias, output in zip("abc", outputs)]
    return "%s(int plan, Tensor q, %s, %s) -> ()" % (
        name, ", ".join("Tensor? " + n for n in _INPUTS), ", ".join(written))


def _merge(out_parts, lse_parts, attn_sink, out, lse):
    """The merge op's kernel (every device)."""
    context(out_parts.device)._merge(dict(out_parts=out_parts, lse_parts=lse_parts,
                                          attn_sink=attn_sink, out=out, lse=lse))


_MERGE_SCHEMA = ("merge(Tensor out_parts, Tensor lse_parts, Tensor? attn_sink, Tensor(a!) out, "
                 "Tensor(b!) lse) -> ()")


# Registered with torch.library.Library (define + one kernel for every device + a fake kernel for
# torch.compile) rather than torch.library.custom_op, whose autograd wrapper costs host time.
if HAS_CUSTOM_OP:
    _library = torch.library.Library("dsv4", "FRAGMENT")
    for _name, _outputs in (("run", _OUTPUTS[:2]), ("run_max_logits", _OUTPUTS)):
        _library.define(_schema(_name, _outputs))
        _library.impl(_name, _run, "CompositeExplicitAutograd")
        torch.library.register_fake("dsv4::" + _name, _no_output, lib=_library)
    _library.define(_MERGE_SCHEMA)
    _library.impl("merge", _merge, "CompositeExplicitAutograd")
    torch.library.register_fake("dsv4::merge", _no_output, lib=_library)
    _run_op, _run_max_logits_op = torch.ops.dsv4.run, torch.ops.dsv4.run_max_logits
    _merge_op = torch.ops.dsv4.merge
    _C, _is_compiling = torch._C, torch.compiler.is_compiling
else:
    _run_op = _run_max_logits_op = _merge_op = None


def _eager(q):
    """True where the op would reach its kernel with these very tensors: eager code, no mode
    that intercepts ops, q a plain tensor (a subclass such as a fake or functional tensor goes
    through the op). torch.compile's tracer sees is_compiling() as True, so it records the op."""
    return not (_is_compiling() or _C._is_torch_function_mode_enabled() or
                _C._len_torch_dispatch_stack()) and type(q) is torch.Tensor


# ----------------------------------------- functions --------------------------------------------
def _stream_context(stream, device):
    """Makes `stream` torch's current stream for the call."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    if not isinstance(stream, torch.cuda.Stream):
        from ._device import stream_handle
        stream = torch.cuda.ExternalStream(stream_handle(stream), device=device)
    return torch.cuda.stream(stream)


def run(plan, q, out=None, lse=None, max_logits=None, stream=None, **tensors):
    """One run of `plan` with torch tensors; tensors are dsv4_run_args names. Returns
    (out, lse), allocated when not given (max_logits is written only when given)."""
    for name in tensors:
        if name not in _INPUT_NAMES:
            raise TypeError("unknown tensor argument %r" % name)
    inputs = [tensors.get(name) for name in _INPUTS]
    if stream is None:
        return _call(plan, q, inputs, out, lse, max_logits)
    with _stream_context(stream, q.device):
        # Allocated on the stream that then writes them (torch's caching allocator is per stream).
        return _call(plan, q, inputs, out, lse, max_logits)


def _call(plan, q, inputs, out, lse, max_logits):
    if out is None:
        out = torch.empty(q.shape[:-1] + (HEAD_DIM_V,), dtype=torch.bfloat16, device=q.device)
    if lse is None:
        lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    if not HAS_CUSTOM_OP or _eager(q):
        plan._run(_named(q, (*inputs, out, lse, max_logits)))
    elif max_logits is None:
        _run_op(plan.id, q, *inputs, out, lse)
    else:
        _run_max_logits_op(plan.id, q, *inputs, out, lse, max_logits)
    return out, lse


def attention(plan, q, swa_cache, indices=None, lengths=None, extra_cache=None,
              extra_indices=None, extra_lengths=None, attn_sink=None, indptr=None,
              extra_indptr=None, out=None, lse=None, max_logits=None, stream=None):
    """Explicit mode: `indices` [T, topk] (or CSR `indptr` + flat `indices`) into `swa_cache`,
    optional `extra_indices` into `extra_cache`, optional per-token `lengths`. Returns
    (out, lse)."""
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


def merge(out_parts, lse_parts, attn_sink=None, out=None, lse=None, stream=None):
    """Spec 12.2: the result over the union of P disjoint key sets from their partial results,
    out_parts [P, ..., H, 512] and lse_parts [P, ..., H] (runs without the sink), the sink [H]
    applied once. Returns (out, lse), allocated when not given (bf16, fp32)."""
    if stream is None:
        return _merge_call(out_parts, lse_parts, attn_sink, out, lse)
    with _stream_context(stream, out_parts.device):
        return _merge_call(out_parts, lse_parts, attn_sink, out, lse)


def _merge_call(out_parts, lse_parts, attn_sink, out, lse):
    if out is None:
        out = torch.empty(out_parts.shape[1:], dtype=torch.bfloat16, device=out_parts.device)
    if lse is None:
        lse = torch.empty(lse_parts.shape[1:], dtype=torch.float32, device=lse_parts.device)
    args = (out_parts, lse_parts, attn_sink, out, lse)
    if out_parts.dim() > 4:  # [P, ..., H, 512]: the token dimensions as one, dsv4_merge's T
        args = (out_parts.flatten(1, -3), lse_parts.flatten(1, -2), attn_sink,
                _tokens_view(out, 2, "out"), _tokens_view(lse, 1, "lse"))
    if not HAS_CUSTOM_OP or _eager(out_parts):
        _merge(*args)
    else:
        _merge_op(*args)
    return out, lse


def _tokens_view(tensor, inner, name):
    """An output's leading (token) dimensions as one, keeping its `inner` last ones: a view,
    since the merge writes it in place."""
    try:
        return tensor.view((-1,) + tuple(tensor.shape[tensor.dim() - inner:]))
    except RuntimeError as error:
        raise ValueError("%s: its token dimensions cannot be viewed as one (%s)" %
                         (name, error)) from None
