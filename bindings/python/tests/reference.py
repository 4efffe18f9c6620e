"""The independent float64 reference (reference/: spec sections 2-4) and FlashMLA's comparison rule
(reference/compare_rule.h) for the Python tests and examples, through ctypes on the test-only
library libdsv4_pyref.so (bindings/python/tests/reference_shim.cpp, built with the tests).

The library is $DSV4_PYREF_LIBRARY (ctest sets it), else found in a build directory of the
repository (build*/bindings/python/). Arrays are torch tensors (moved to the host) or anything
torch.as_tensor takes; results are float64 / int32 CPU tensors.
"""
import ctypes
import glob
import math
import os

import torch

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
HEAD_DIM_V = 512


class _Cache(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("layout", ctypes.c_uint32),
                ("block_size", ctypes.c_int64), ("block_stride_bytes", ctypes.c_int64),
                ("num_blocks", ctypes.c_int64), ("kv_scale", ctypes.c_double)]


class _List(ctypes.Structure):
    _fields_ = [("indices", ctypes.c_void_p), ("width", ctypes.c_int64),
                ("lengths", ctypes.c_void_p)]


class _PagedConfig(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int64) for name in (
        "compress_ratio", "window", "swa_block_size", "cmp_block_size", "index_topk",
        "decode_threshold", "max_model_len")]


class _PagedBatch(ctypes.Structure):
    _fields_ = [("num_tokens", ctypes.c_int64), ("num_requests", ctypes.c_int64),
                ("query_start_loc", ctypes.c_void_p), ("seq_lens", ctypes.c_void_p),
                ("swa_block_table", ctypes.c_void_p), ("swa_bt_cols", ctypes.c_int64),
                ("cmp_block_table", ctypes.c_void_p), ("cmp_bt_cols", ctypes.c_int64),
                ("slot_mapping", ctypes.c_void_p), ("topk_indices", ctypes.c_void_p)]


class _CompareResult(ctypes.Structure):
    _fields_ = [("passed", ctypes.c_int32), ("elements", ctypes.c_int64),
                ("failures", ctypes.c_int64), ("first_failure", ctypes.c_int64),
                ("first_got", ctypes.c_double), ("first_want", ctypes.c_double),
                ("max_abs_err", ctypes.c_double), ("max_rel_err", ctypes.c_double),
                ("cos_diff", ctypes.c_double)]


def _find_library():
    path = os.environ.get("DSV4_PYREF_LIBRARY")
    if path:
        return path
    found = sorted(glob.glob(os.path.join(REPO, "build*", "bindings", "python",
                                          "libdsv4_pyref.so")), key=os.path.getmtime)
    if not found:
        raise OSError("libdsv4_pyref.so not found: build the tests (cmake --build build) or set "
                      "DSV4_PYREF_LIBRARY")
    return found[-1]


_lib = ctypes.CDLL(_find_library())
_lib.dsv4_pyref_tolerance.argtypes = [ctypes.c_int32] + [ctypes.POINTER(ctypes.c_double)] * 3
_lib.dsv4_pyref_attention.argtypes = [
    ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_double,
    ctypes.c_void_p, ctypes.POINTER(_Cache), ctypes.POINTER(_Cache), ctypes.POINTER(_List),
    ctypes.POINTER(_List), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p,
    ctypes.c_size_t]
_lib.dsv4_pyref_cmp_width.argtypes = [ctypes.POINTER(_PagedConfig)]
_lib.dsv4_pyref_cmp_width.restype = ctypes.c_int64
_lib.dsv4_pyref_paged_lists.argtypes = [
    ctypes.POINTER(_PagedConfig), ctypes.POINTER(_PagedBatch)] + [ctypes.c_void_p] * 4 + [
    ctypes.c_char_p, ctypes.c_size_t]
_lib.dsv4_pyref_compare.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                    ctypes.c_double, ctypes.c_double, ctypes.c_double,
                                    ctypes.POINTER(_CompareResult)]


def _tolerance(which):
    values = [ctypes.c_double() for _ in range(3)]
    if _lib.dsv4_pyref_tolerance(which, *[ctypes.byref(v) for v in values]):
        raise ValueError("no tolerance %d" % which)
    return tuple(v.value for v in values)


# Spec 2.4: (abs_tol, rel_tol, cos_tol; < 0: no cosine check).
DECODE_OUT, DECODE_LSE, PREFILL_OUT, PREFILL_LSE = (_tolerance(i) for i in range(4))


def host(array, dtype=None):
    """A contiguous CPU tensor copy of `array` in `dtype` (torch dtype; bf16 / fp16 -> float64
    exactly; float8 and other one-byte float types as their bytes when no dtype is asked)."""
    array = torch.as_tensor(array).detach().cpu()
    if dtype is None and array.is_floating_point() and array.element_size() == 1:
        array = array.view(torch.uint8)
    return array.to(dtype or array.dtype).contiguous()


def _pointer(array):
    return array.data_ptr() if array is not None else None


class Cache:
    """A KV cache for the reference: its bytes (host copy) and geometry."""

    def __init__(self, tensor, layout, block_size, kv_scale=1.0):
        raw = torch.as_tensor(tensor).detach().cpu().contiguous()
        self.num_blocks = raw.shape[0]
        self.block_stride_bytes = raw.numel() * raw.element_size() // max(self.num_blocks, 1)
        self.bytes = raw.view(torch.uint8).reshape(-1)
        self.layout, self.block_size, self.kv_scale = int(layout), block_size, kv_scale

    def c(self):
        return _Cache(self.bytes.data_ptr(), self.layout, self.block_size,
                      self.block_stride_bytes, self.num_blocks, self.kv_scale)


def _list(indices, lengths, tokens):
    indices = host(indices, torch.int32).reshape(tokens, -1)
    lengths = None if lengths is None else host(lengths, torch.int32).reshape(tokens)
    return _List(indices.data_ptr(), indices.shape[1], _pointer(lengths)), (indices, lengths)


def attention(q, main, indices, lengths=None, extra=None, extra_indices=None,
              extra_lengths=None, sink=None, scale=None):
    """Spec 2.2 in float64 over explicit dense lists. q [T, H, d] (or [B, S, H, d]); main / extra
    are Caches. Returns (out [.., H, 512], lse [.., H], max_logits [.., H]) as float64 arrays of
    q's leading shape."""
    qh = host(q, torch.float64)
    lead = tuple(qh.shape[:-1])
    heads, dim = qh.shape[-2], qh.shape[-1]
    tokens = math.prod(lead[:-1])
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    sink = None if sink is None else host(sink, torch.float64).reshape(heads)
    main_list, keep = _list(indices, lengths, tokens)
    extra_list = None
    if extra_indices is not None:
        extra_list, keep_extra = _list(extra_indices, extra_lengths, tokens)
    out = torch.empty(tokens, heads, HEAD_DIM_V, dtype=torch.float64)
    lse = torch.empty(tokens, heads, dtype=torch.float64)
    max_logits = torch.empty(tokens, heads, dtype=torch.float64)
    error = ctypes.create_string_buffer(512)
    main_c = main.c()
    extra_c = extra.c() if extra is not None else None
    if _lib.dsv4_pyref_attention(tokens, heads, dim, qh.data_ptr(), scale, _pointer(sink),
                                 ctypes.byref(main_c),
                                 ctypes.byref(extra_c) if extra_c is not None else None,
                                 ctypes.byref(main_list),
                                 ctypes.byref(extra_list) if extra_list is not None else None,
                                 out.data_ptr(), lse.data_ptr(), max_logits.data_ptr(), error,
                                 len(error)):
        raise ValueError("reference: " + error.value.decode())
    return (out.reshape(lead + (HEAD_DIM_V,)), lse.reshape(lead), max_logits.reshape(lead))


def paged_lists(config, batch):
    """Spec 4: every token's lists from a vLLM-style batch description. config: dict of the
    paged plan fields (compress_ratio, window, swa_block_size, cmp_block_size, index_topk,
    decode_threshold, max_model_len); batch: dict of arrays query_start_loc, seq_lens,
    swa_block_table, cmp_block_table (or None), slot_mapping, topk_indices (or None).
    Returns (swa_indices [T, W], swa_lengths [T], cmp_indices [T, width], cmp_lengths [T])."""
    c = _PagedConfig(**{name: int(config[name]) for name, _ in _PagedConfig._fields_})
    qsl = host(batch["query_start_loc"], torch.int32)
    arrays = {name: None if batch.get(name) is None else host(batch[name], torch.int32)
              for name in ("seq_lens", "swa_block_table", "cmp_block_table", "slot_mapping",
                           "topk_indices")}
    tokens = arrays["slot_mapping"].shape[0]
    cmp_table = arrays["cmp_block_table"]
    b = _PagedBatch(tokens, qsl.shape[0] - 1, qsl.data_ptr(), arrays["seq_lens"].data_ptr(),
                    arrays["swa_block_table"].data_ptr(), arrays["swa_block_table"].shape[1],
                    _pointer(cmp_table), 0 if cmp_table is None else cmp_table.shape[1],
                    arrays["slot_mapping"].data_ptr(), _pointer(arrays["topk_indices"]))
    width = _lib.dsv4_pyref_cmp_width(ctypes.byref(c))
    swa = torch.empty(tokens, c.window, dtype=torch.int32)
    swa_len = torch.empty(tokens, dtype=torch.int32)
    cmp = torch.empty(tokens, width, dtype=torch.int32)
    cmp_len = torch.zeros(tokens, dtype=torch.int32)
    error = ctypes.create_string_buffer(512)
    if _lib.dsv4_pyref_paged_lists(ctypes.byref(c), ctypes.byref(b), swa.data_ptr(),
                                   swa_len.data_ptr(), cmp.data_ptr() if width else None,
                                   cmp_len.data_ptr() if width else None, error, len(error)):
        raise ValueError("reference: " + error.value.decode())
    return swa, swa_len, cmp, cmp_len


class Comparison:
    def __init__(self, result, what):
        self.passed = bool(result.passed)
        self.elements, self.failures = result.elements, result.failures
        self.first_failure = result.first_failure
        self.first_got, self.first_want = result.first_got, result.first_want
        self.max_abs_err, self.max_rel_err = result.max_abs_err, result.max_rel_err
        self.cos_diff = result.cos_diff
        self.what = what

    def __str__(self):
        text = "%s: %d of %d elements out of tolerance, max abs %.3g, max rel %.3g, cos %.3g" % (
            self.what, self.failures, self.elements, self.max_abs_err, self.max_rel_err,
            self.cos_diff)
        if self.failures:
            text += "; first at %d: got %r want %r" % (self.first_failure, self.first_got,
                                                       self.first_want)
        return text


def compare(got, want, tolerance, what="values"):
    """FlashMLA's rule (spec 2.4) over arrays of the same size; a Comparison."""
    got = host(got, torch.float64).reshape(-1)
    want = host(want, torch.float64).reshape(-1)
    if got.numel() != want.numel():
        raise ValueError("%s: %d values vs %d" % (what, got.numel(), want.numel()))
    result = _CompareResult()
    _lib.dsv4_pyref_compare(got.data_ptr(), want.data_ptr(), got.numel(), *tolerance,
                            ctypes.byref(result))
    return Comparison(result, what)
