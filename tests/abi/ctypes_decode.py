#!/usr/bin/python3
"""Python ctypes smoke test of the C ABI (stdlib only): load libdsv4 with RTLD_LOCAL, declare the
structs and signatures by hand, run one decode with a bf16 cache written from Python, and compare
with a pure-Python float64 reference.

    ctypes_decode.py <path to libdsv4.so.0> [seed]
"""
import ctypes
import math
import os
import random
import struct
import sys

H, D, T, BLOCK, BLOCKS, KEYS, WIDTH = 4, 512, 2, 16, 2, 24, 32
LAYOUT_BF16 = 1
CPU = 1
INT, FLOAT, BFLOAT = 0, 2, 4


class Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", Device), ("ndim", ctypes.c_int32),
                ("dtype", DType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class CtxOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("api_version", ctypes.c_uint32),
                ("device", Device), ("backend", ctypes.c_char_p), ("module_dir", ctypes.c_char_p),
                ("num_threads", ctypes.c_int32), ("log_level", ctypes.c_int32),
                ("log_fn", ctypes.c_void_p), ("log_user_data", ctypes.c_void_p)]


class KvCacheDesc(ctypes.Structure):
    _fields_ = [("layout", ctypes.c_uint32), ("block_size", ctypes.c_int32),
                ("block_stride_bytes", ctypes.c_int64), ("kv_scale", ctypes.c_float),
                ("reserved", ctypes.c_uint32)]


class PlanOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("mode", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("num_heads", ctypes.c_int32), ("head_dim_qk", ctypes.c_int32),
                ("head_dim_v", ctypes.c_int32), ("softmax_scale", ctypes.c_float), ("q_dtype", DType),
                ("q_scale", ctypes.c_float), ("max_tokens", ctypes.c_int32), ("swa_cache", KvCacheDesc),
                ("extra_cache", KvCacheDesc), ("index_format", ctypes.c_uint32), ("topk", ctypes.c_int32),
                ("extra_topk", ctypes.c_int32), ("compress_ratio", ctypes.c_int32),
                ("window", ctypes.c_int32), ("index_topk", ctypes.c_int32),
                ("decode_threshold", ctypes.c_int32), ("max_model_len", ctypes.c_int64),
                ("max_requests", ctypes.c_int32), ("max_swa_blocks_per_request", ctypes.c_int32),
                ("max_cmp_blocks_per_request", ctypes.c_int32),
                ("compressed_block_tokens", ctypes.c_int32)]


TENSOR_ARGS = ["q", "swa_cache", "extra_cache", "attn_sink", "out", "lse", "max_logits", "indices",
               "indptr", "lengths", "extra_indices", "extra_indptr", "extra_lengths", "query_start_loc",
               "seq_lens", "swa_block_table", "cmp_block_table", "slot_mapping", "topk_indices"]


class RunArgs(ctypes.Structure):
    _fields_ = ([("struct_size", ctypes.c_uint32), ("reserved", ctypes.c_uint32)] +
                [(name, ctypes.POINTER(Tensor)) for name in TENSOR_ARGS] +
                [("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t),
                 ("stream", ctypes.c_void_p)])


def bind(lib):
    status = ctypes.c_int32
    signatures = {
        "dsv4_ctx_options_init": (status, [ctypes.POINTER(CtxOptions), ctypes.c_size_t]),
        "dsv4_ctx_create": (status, [ctypes.POINTER(CtxOptions), ctypes.POINTER(ctypes.c_void_p)]),
        "dsv4_ctx_destroy": (None, [ctypes.c_void_p]),
        "dsv4_plan_options_init": (status, [ctypes.POINTER(PlanOptions), ctypes.c_size_t]),
        "dsv4_plan_create": (status, [ctypes.c_void_p, ctypes.POINTER(PlanOptions),
                                      ctypes.POINTER(ctypes.c_void_p)]),
        "dsv4_plan_destroy": (None, [ctypes.c_void_p]),
        "dsv4_plan_get_workspace_size": (status, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]),
        "dsv4_run_args_init": (status, [ctypes.POINTER(RunArgs), ctypes.c_size_t]),
        "dsv4_run": (status, [ctypes.c_void_p, ctypes.POINTER(RunArgs)]),
        "dsv4_last_error_message": (ctypes.c_char_p, []),
        "dsv4_status_string": (ctypes.c_char_p, [status]),
        "dsv4_get_version_string": (ctypes.c_char_p, []),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes


def check(lib, status, what):
    if status != 0:
        raise SystemExit("%s failed: %s: %s" % (what, lib.dsv4_status_string(status).decode(),
                                                 lib.dsv4_last_error_message().decode()))


def to_bf16(value):
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def from_bf16(bits):
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def make_tensor(buffer, shape, code, bits):
    dims = (ctypes.c_int64 * len(shape))(*shape)
    tensor = Tensor(ctypes.cast(buffer, ctypes.c_void_p), Device(CPU, 0), len(shape),
                    DType(code, bits, 1), dims, None, 0)
    return tensor, dims  # keep dims alive with the tensor


def main(argv):
    seed = int(argv[2]) if len(argv) > 2 else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    print("seed", seed)
    lib = ctypes.CDLL(argv[1], mode=os.RTLD_LOCAL)
    bind(lib)
    # The hand-written structs must match the C layout pinned in layout_asserts.c.
    for cls, size in ((Tensor, 48), (CtxOptions, 56), (PlanOptions, 144), (RunArgs, 184)):
        if ctypes.sizeof(cls) != size:
            raise SystemExit("ctypes %s is %d bytes, C has %d" % (cls.__name__, ctypes.sizeof(cls), size))

    options = CtxOptions()
    check(lib, lib.dsv4_ctx_options_init(ctypes.byref(options), ctypes.sizeof(options)), "dsv4_ctx_options_init")
    options.backend = b"cpu"
    ctx = ctypes.c_void_p()
    check(lib, lib.dsv4_ctx_create(ctypes.byref(options), ctypes.byref(ctx)), "dsv4_ctx_create")

    plan_options = PlanOptions()
    check(lib, lib.dsv4_plan_options_init(ctypes.byref(plan_options), ctypes.sizeof(plan_options)), "dsv4_plan_options_init")
    plan_options.num_heads = H
    plan_options.topk = WIDTH
    plan_options.max_tokens = T
    plan_options.swa_cache.layout = LAYOUT_BF16
    plan_options.swa_cache.block_size = BLOCK
    plan_options.swa_cache.block_stride_bytes = 0
    plan = ctypes.c_void_p()
    check(lib, lib.dsv4_plan_create(ctx, ctypes.byref(plan_options), ctypes.byref(plan)),
          "dsv4_plan_create")
    workspace_bytes = ctypes.c_size_t(0)
    check(lib, lib.dsv4_plan_get_workspace_size(plan, ctypes.byref(workspace_bytes)),
          "dsv4_plan_get_workspace_size")
    workspace = ctypes.create_string_buffer(max(workspace_bytes.value, 1))

    # bf16 row cache: slot s at (s // BLOCK) * BLOCK * 1024 + (s % BLOCK) * 1024. Unused rows hold NaN.
    cache = (ctypes.c_uint16 * (BLOCKS * BLOCK * D))(*([0x7FC0] * (BLOCKS * BLOCK * D)))
    slots = rng.sample(range(BLOCKS * BLOCK), KEYS)
    keys = {}
    for slot in slots:
        row = [to_bf16(rng.uniform(-2.0, 2.0)) for _ in range(D)]
        cache[slot * D:(slot + 1) * D] = row
        keys[slot] = [from_bf16(v) for v in row]
    q = (ctypes.c_uint16 * (T * H * D))(*[to_bf16(rng.uniform(-1.0, 1.0)) for _ in range(T * H * D)])
    sink = (ctypes.c_float * H)(*[rng.uniform(-1.0, 2.0) for _ in range(H)])
    rows = []
    for t in range(T):
        row = rng.sample(slots, KEYS - 4 * t) + [-1] * (WIDTH - KEYS + 4 * t)
        rng.shuffle(row)
        rows.append(row)
    indices = (ctypes.c_int32 * (T * WIDTH))(*[v for row in rows for v in row])
    out = (ctypes.c_uint16 * (T * H * D))()
    lse = (ctypes.c_float * (T * H))()

    tensors = {
        "q": make_tensor(q, [T, H, D], BFLOAT, 16),
        "swa_cache": make_tensor(cache, [BLOCKS, BLOCK, D], BFLOAT, 16),
        "attn_sink": make_tensor(sink, [H], FLOAT, 32),
        "out": make_tensor(out, [T, H, D], BFLOAT, 16),
        "lse": make_tensor(lse, [T, H], FLOAT, 32),
        "indices": make_tensor(indices, [T, WIDTH], INT, 32),
    }
    args = RunArgs()
    check(lib, lib.dsv4_run_args_init(ctypes.byref(args), ctypes.sizeof(args)), "dsv4_run_args_init")
    for name, (tensor, _) in tensors.items():
        setattr(args, name, ctypes.pointer(tensor))
    args.workspace = ctypes.cast(workspace, ctypes.c_void_p)
    args.workspace_bytes = workspace_bytes.value
    check(lib, lib.dsv4_run(plan, ctypes.byref(args)), "dsv4_run")

    scale = 1.0 / math.sqrt(D)
    failures = 0
    worst = 0.0
    for t in range(T):
        valid = [s for s in rows[t] if s >= 0]
        for h in range(H):
            qv = [from_bf16(q[(t * H + h) * D + d]) for d in range(D)]
            logits = [scale * sum(a * b for a, b in zip(qv, keys[s])) for s in valid]
            top = max(logits)
            weights = [math.exp(x - top) for x in logits]
            total = sum(weights)
            ref_lse = top + math.log(total)
            sink_factor = 1.0 / (1.0 + math.exp(sink[h] - ref_lse))
            if not abs(lse[t * H + h] - ref_lse) <= 1e-3 + 1e-3 * abs(ref_lse):
                print("lse[%d][%d] = %g, reference %g" % (t, h, lse[t * H + h], ref_lse))
                failures += 1
            for d in range(D):
                ref = sum(w * keys[s][d] for w, s in zip(weights, valid)) / total * sink_factor
                got = from_bf16(out[(t * H + h) * D + d])
                err = abs(got - ref)
                worst = max(worst, err)
                if not (err <= 1e-2 * abs(ref) or err <= 1e-3):
                    if failures < 10:
                        print("out[%d][%d][%d] = %g, reference %g" % (t, h, d, got, ref))
                    failures += 1
    lib.dsv4_plan_destroy(plan)
    lib.dsv4_ctx_destroy(ctx)
    print("libdsv4 %s: %d mismatches, max abs error %.3g (seed %d)" %
          (lib.dsv4_get_version_string().decode(), failures, worst, seed))
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
