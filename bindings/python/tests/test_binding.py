#!/usr/bin/python3
"""Tests of the dsv4 Python binding (stdlib only): struct layouts against the C pins, one explicit
CPU decode against a pure-Python reference, the error path, and a paged C128A index export.

    DSV4_LIBRARY=build/lib/libdsv4.so.0 PYTHONPATH=bindings/python python3 -m unittest test_binding
DSV4_TEST_SEED=<n> replays a seed.
"""
import array
import ctypes
import gc
import math
import os
import random
import re
import struct
import sys
import unittest

import dsv4
from dsv4 import _lib

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SEED = int(os.environ.get("DSV4_TEST_SEED") or random.SystemRandom().randrange(1 << 31))
BF16_NAN = 0x7FC0


def to_bf16(value):
    """float -> bf16 bits, round to nearest even (finite inputs)."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def from_bf16(bits):
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


# FlashMLA's decode data scale, as cases.kv_values / cases.q_values draw it with torch (which this
# stdlib-only test cannot import): spec 2.4's tolerances, and the bound below, assume it (a kernel
# rounding P to bf16 before P.V, like the AMX one, errs beyond them on larger values).
def kv_value(rng):
    return max(-1.0, min(1.0, rng.gauss(0.0, 1.0) / 10.0))


def q_value(rng):
    return max(-1.0, min(1.0, rng.gauss(0.0, 1.0)))


# A minimal DLPack producer (legacy "dltensor" capsule) built with ctypes, standing in for numpy /
# torch, which the stdlib-only test cannot import.
class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _lib.CTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_CAPSULE_NAME = b"dltensor"  # must outlive every capsule: a module constant
ctypes.pythonapi.PyCapsule_New.restype = ctypes.py_object
ctypes.pythonapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
ctypes.pythonapi.PyCapsule_IsValid.restype = ctypes.c_int
ctypes.pythonapi.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]


class DLPackProducer:
    """Exports a ctypes-addressable buffer; keeps every managed tensor it hands out alive."""

    def __init__(self, buffer, shape, dtype):
        self.buffer = buffer
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.dtype = dtype
        self.exported = []

    def __dlpack_device__(self):
        return (dsv4.DeviceType.CPU, 0)

    def __dlpack__(self, stream=None):
        managed = _DLManagedTensor()
        managed.dl_tensor = _lib.CTensor(ctypes.addressof(self.buffer), _lib.CDevice(1, 0),
                                         len(self.shape), _lib.CDType(*self.dtype), self.shape,
                                         None, 0)
        self.exported.append(managed)
        return ctypes.pythonapi.PyCapsule_New(ctypes.addressof(managed), _CAPSULE_NAME, None)


class ArrayInterface:
    """An object exposing only __array_interface__ (what numpy offers), over a ctypes array."""

    def __init__(self, buffer, shape, typestr):
        self.buffer = buffer
        self.__array_interface__ = {"data": (ctypes.addressof(buffer), False),
                                    "shape": tuple(shape), "typestr": typestr, "version": 3}


class LayoutTest(unittest.TestCase):
    def test_struct_layouts_match_the_c_pins(self):
        with open(os.path.join(REPO, "tests", "abi", "layout_asserts.c")) as source:
            text = source.read()
        sizes = dict(re.findall(r"PIN_SIZE\((dsv4_\w+), (\d+)\);", text))
        offsets = re.findall(r"PIN_OFFSET\((dsv4_\w+), (\w+), (\d+)\);", text)
        sizes.pop("dsv4_backend_iface", None)  # the module ABI is not part of the binding
        self.assertEqual(set(sizes), set(_lib.STRUCTS), "pinned structs vs mirrored structs")
        for name, size in sizes.items():
            self.assertEqual(ctypes.sizeof(_lib.STRUCTS[name]), int(size), name)
        checked = 0
        for name, field, offset in offsets:
            if name in _lib.STRUCTS:
                self.assertEqual(getattr(_lib.STRUCTS[name], field).offset, int(offset),
                                 "%s.%s" % (name, field))
                checked += 1
        self.assertGreater(checked, 100)

    def test_every_exported_function_is_declared(self):
        with open(os.path.join(REPO, "tests", "abi", "exported_symbols.txt")) as listing:
            exported = {line.strip() for line in listing if line.strip()[:1] not in ("", "#")}
        self.assertEqual(exported, set(_lib.SIGNATURES))

    def test_constants_match_the_header(self):
        text = ""
        for header in ("dsv4_types.h", "dsv4.h", "dsv4_paged.h"):
            with open(os.path.join(REPO, "include", "dsv4", header)) as source:
                text += source.read()
        tables = {"DSV4_STATUS_": dsv4.Status, "DSV4_DEVICE_": dsv4.DeviceType,
                  "DSV4_DTYPE_CODE_": dsv4.DTypeCode, "DSV4_KV_LAYOUT_": dsv4.KvLayout,
                  "DSV4_LOG_": dsv4.LogLevel, "DSV4_MODE_": dsv4.Mode,
                  "DSV4_INDEX_": dsv4.IndexFormat, "DSV4_EXPORT_": dsv4.ExportFormat,
                  "DSV4_PLAN_FLAG_": dsv4.PlanFlag, "DSV4_KV_CACHE_FLAG_": dsv4.KvCacheFlag}
        found = 0
        for name, value in re.findall(r"#define (DSV4_\w+) \(?(?:\(dsv4_status\))?(\d+)u?\)?",
                                      text):
            for prefix, table in tables.items():
                if name.startswith(prefix):
                    self.assertEqual(table[name[len(prefix):]], int(value), name)
                    found += 1
        self.assertEqual(found, sum(len(t.__members__) for t in tables.values()))
        self.assertEqual(dsv4.API_VERSION, (dsv4.version_number() // 10000) << 16 |
                         (dsv4.version_number() // 100 % 100))


class TensorTest(unittest.TestCase):
    def test_buffer_strides_are_converted_to_elements(self):
        base = array.array("i", range(12))
        view = memoryview(base).cast("B").cast("i", (4, 3))[1::2]  # rows 1 and 3
        tensor = dsv4.Tensor.from_buffer(view)
        self.assertEqual((tensor.shape, tensor.strides, tensor.dtype), ((2, 3), (6, 1),
                                                                       dsv4.int32))
        self.assertEqual(tensor.data, ctypes.addressof(ctypes.c_int.from_buffer(base, 12)))
        tensor = dsv4.Tensor.from_buffer(memoryview(base).cast("B").cast("i", (3, 4))[::2])
        self.assertEqual((tensor.shape, tensor.strides), ((2, 4), (8, 1)))
        with self.assertRaises(ValueError):
            dsv4.Tensor.from_buffer(view, dtype=dsv4.uint8)  # reinterpreting needs contiguity

    def test_reinterpret_and_readonly(self):
        tensor = dsv4.Tensor.from_buffer(bytes(16), dtype="float32", shape=(2, 2))
        self.assertTrue(tensor.readonly)
        self.assertEqual((tensor.shape, tensor.dtype), ((2, 2), dsv4.float32))
        with self.assertRaises(ValueError):
            dsv4.Tensor.from_buffer(bytes(16), dtype="float32", shape=(3,))
        with self.assertRaises(TypeError):
            dsv4.as_tensor(object())

    def test_dlpack_capsule_is_borrowed_not_consumed(self):
        data = (ctypes.c_uint16 * 6)(*range(6))
        tensor = dsv4.Tensor.from_dlpack(DLPackProducer(data, (2, 3), dsv4.bfloat16))
        self.assertEqual((tensor.data, tensor.shape, tensor.dtype),
                         (ctypes.addressof(data), (2, 3), dsv4.bfloat16))
        self.assertEqual(ctypes.pythonapi.PyCapsule_IsValid(tensor.owner, b"dltensor"), 1)


class DecodeTest(unittest.TestCase):
    H, D, T, BLOCK, BLOCKS, KEYS, WIDTH = 2, 512, 2, 8, 3, 10, 12

    def setUp(self):
        self.rng = random.Random(SEED)
        self.ctx = dsv4.Context(device="cpu", backend="cpu", num_threads=2)
        self.addCleanup(self.ctx.close)
        self.tag = " (DSV4_TEST_SEED=%d)" % SEED

    def test_backends_and_version(self):
        self.assertRegex(dsv4.version(), r"^\d+\.\d+\.\d+$")
        cpu = [b for b in dsv4.enumerate_backends() if b.name == "cpu"]
        self.assertTrue(cpu and cpu[0].available, dsv4.enumerate_backends())
        self.assertEqual(self.ctx.info.backend, "cpu")
        info = dsv4.kv_layout_info(dsv4.KvLayout.FP8_V4_584B, 2)
        self.assertEqual((info.bytes_per_token, info.min_block_stride_bytes), (584, 1728))

    def test_explicit_decode_matches_python_reference(self):
        H, D, T, BLOCK, BLOCKS, KEYS, WIDTH = (self.H, self.D, self.T, self.BLOCK, self.BLOCKS,
                                               self.KEYS, self.WIDTH)
        rng = self.rng
        # bf16 cache written by kv_write from fp32 rows; unreferenced rows stay NaN.
        cache = array.array("H", [BF16_NAN]) * (BLOCKS * BLOCK * D)
        slots = rng.sample(range(BLOCKS * BLOCK), KEYS)
        values = array.array("f", [kv_value(rng) for _ in range(KEYS * D)])
        dsv4.kv_write(self.ctx, dsv4.KvCacheDesc(dsv4.KvLayout.BF16, BLOCK),
                      dsv4.Tensor.from_buffer(values, shape=(KEYS, D)), array.array("i", slots),
                      dsv4.Tensor.from_buffer(cache, dtype="bfloat16", shape=(BLOCKS, BLOCK, D)))
        keys = {}
        for n, slot in enumerate(slots):
            row = [to_bf16(v) for v in values[n * D:(n + 1) * D]]
            self.assertEqual(list(cache[slot * D:(slot + 1) * D]), row, "kv_write slot %d%s" %
                             (slot, self.tag))
            keys[slot] = [from_bf16(v) for v in row]
        self.assertEqual(cache.count(BF16_NAN), (BLOCKS * BLOCK - KEYS) * D)

        plan = dsv4.Plan(self.ctx, num_heads=H, topk=WIDTH, max_tokens=T,
                         swa_cache=dsv4.KvCacheDesc(dsv4.KvLayout.BF16, BLOCK))
        self.assertEqual(plan.info.num_heads, H)
        q = (ctypes.c_uint16 * (T * H * D))(*[to_bf16(q_value(rng)) for _ in range(T * H * D)])
        sink = [rng.uniform(-1.0, 2.0) for _ in range(H)]
        rows = []
        for t in range(T):  # valid slots, a -1 and slots past the length cut-off
            row = rng.sample(slots, KEYS - 2 * t) + [-1] * (WIDTH - KEYS + 2 * t)
            rng.shuffle(row)
            rows.append(row)
        lengths = [WIDTH, WIDTH - 3]
        out = array.array("H", [0]) * (T * H * D)
        lse = (ctypes.c_float * (T * H))()
        max_logits = array.array("f", [0.0]) * (T * H)
        plan.run(q=DLPackProducer(q, (T, H, D), dsv4.bfloat16),
                 swa_cache=dsv4.Tensor.from_buffer(cache, dtype="bfloat16",
                                                   shape=(BLOCKS, BLOCK, D)),
                 attn_sink=dsv4.Tensor.from_buffer(struct.pack("<%df" % H, *sink),
                                                   dtype="float32"),
                 indices=dsv4.Tensor.from_buffer(array.array("i", sum(rows, [])),
                                                 shape=(T, WIDTH)),
                 lengths=array.array("i", lengths),
                 out=dsv4.Tensor.from_buffer(out, dtype="bfloat16", shape=(T, H, D)),
                 lse=ArrayInterface(lse, (T, H), "<f4"),
                 max_logits=dsv4.Tensor.from_buffer(max_logits, shape=(T, H)))

        scale = 1.0 / math.sqrt(D)
        for t in range(T):
            valid = [s for s in rows[t][:lengths[t]] if s >= 0]
            for h in range(H):
                qv = [from_bf16(q[(t * H + h) * D + d]) for d in range(D)]
                logits = [scale * math.fsum(a * b for a, b in zip(qv, keys[s])) for s in valid]
                top = max(logits)
                weights = [math.exp(x - top) for x in logits]
                ref_lse = top + math.log(math.fsum(weights))
                where = "token %d head %d%s" % (t, h, self.tag)
                self.assertAlmostEqual(lse[t * H + h], ref_lse, delta=1e-3 * (1 + abs(ref_lse)),
                                       msg="lse " + where)
                self.assertAlmostEqual(max_logits[t * H + h], top, delta=1e-3 * (1 + abs(top)),
                                       msg="max_logits " + where)
                factor = 1.0 / (1.0 + math.exp(sink[h] - ref_lse)) / math.fsum(weights)
                for d in range(D):
                    ref = factor * math.fsum(w * keys[s][d] for w, s in zip(weights, valid))
                    got = from_bf16(out[(t * H + h) * D + d])
                    self.assertLessEqual(abs(got - ref), max(1e-2 * abs(ref), 1e-3),
                                         "out[%d] %s" % (d, where))

    def test_log_callback_receives_the_library_lines(self):
        lines = []
        with dsv4.Context(backend="cpu", log_level=dsv4.LogLevel.DEBUG,
                          log=lambda level, message: lines.append((level, message))):
            pass
        self.assertTrue(any("cpu" in message for _, message in lines), lines)
        self.assertTrue(all(dsv4.LogLevel.ERROR <= level <= dsv4.LogLevel.DEBUG
                            for level, _ in lines), lines)

    def test_errors_name_the_argument(self):
        with self.assertRaises(dsv4.Dsv4Error) as caught:
            dsv4.Plan(self.ctx, num_heads=0)
        error = caught.exception
        self.assertEqual(error.status, dsv4.Status.INVALID_ARGUMENT)
        self.assertEqual(error.function, "dsv4_plan_create")
        self.assertIn("num_heads", error.message)

        plan = dsv4.Plan(self.ctx, num_heads=2, topk=4, max_tokens=1,
                         swa_cache=dict(layout=dsv4.KvLayout.BF16, block_size=4))
        q = array.array("H", [0]) * (1 * 3 * 512)  # 3 heads for a 2-head plan
        out = array.array("H", [0]) * (1 * 3 * 512)
        with self.assertRaises(dsv4.Dsv4Error) as caught:
            plan.run(q=dsv4.Tensor.from_buffer(q, dtype="bf16", shape=(1, 3, 512)),
                     swa_cache=dsv4.Tensor.from_buffer(bytearray(4 * 1024), dtype="bf16",
                                                       shape=(1, 4, 512)),
                     indices=dsv4.Tensor.from_buffer(array.array("i", [0] * 4), shape=(1, 4)),
                     out=dsv4.Tensor.from_buffer(out, dtype="bf16", shape=(1, 3, 512)))
        self.assertIn(caught.exception.status,
                      (dsv4.Status.PLAN_MISMATCH, dsv4.Status.INVALID_ARGUMENT))
        self.assertIn("q", caught.exception.message)
        with self.assertRaises(TypeError):
            dsv4.Plan(self.ctx, no_such_option=1)
        with self.assertRaises(ValueError):  # libdsv4 would write into immutable bytes
            plan.run(out=dsv4.Tensor.from_buffer(bytes(1024), dtype="bf16", shape=(1, 1, 512)))


class LifetimeTest(unittest.TestCase):
    def test_plans_are_destroyed_before_their_context_in_any_gc_order(self):
        for _ in range(10):  # a cycle makes the collector finalise Context and Plan together
            ctx = dsv4.Context(backend="cpu")
            cycle = [dsv4.Plan(ctx, num_heads=2, swa_cache=dict(layout=1, block_size=4)), ctx]
            cycle.append(cycle)
            del ctx, cycle
            gc.collect()
        ctx = dsv4.Context(backend="cpu")
        first = dsv4.Plan(ctx, num_heads=2, swa_cache=dict(layout=1, block_size=4))
        second = dsv4.Plan(ctx, num_heads=2, swa_cache=dict(layout=1, block_size=4))
        first.close()
        ctx.close()  # destroys `second` first
        with self.assertRaises(ValueError):
            second.workspace_size
        second.close()


class PagedExportTest(unittest.TestCase):
    """A C128A step, window 4, SWA blocks of 64, compressed blocks of 2 entries (256 tokens):
    r0 decode at p=299, r1 decode at p=1, r2 prefill at p=255,256, then one padding token."""

    T, W, WIDTH, H, D = 5, 4, 128, 2, 512  # WIDTH = round_up(ceil(300 / 128), 128)

    def setUp(self):
        self.ctx = dsv4.Context(device="cpu", backend="cpu")
        self.addCleanup(self.ctx.close)
        bf16 = dsv4.KvLayout.BF16
        self.plan = dsv4.Plan(self.ctx, mode=dsv4.Mode.PAGED, num_heads=self.H, max_tokens=8,
                              swa_cache=dict(layout=bf16, block_size=64),
                              extra_cache=dict(layout=bf16, block_size=2), compress_ratio=128,
                              window=self.W, max_model_len=300, max_requests=4,
                              max_swa_blocks_per_request=8, max_cmp_blocks_per_request=4,
                              compressed_block_tokens=256)
        # Caches: NaN everywhere (only the slots the lists reference are filled by a test).
        self.swa_cache = array.array("H", [BF16_NAN]) * (12 * 64 * 512)
        self.cmp_cache = array.array("H", [BF16_NAN]) * (6 * 2 * 512)

        def int32(values, shape):
            return dsv4.Tensor.from_buffer(array.array("i", values), shape=shape)

        self.batch = dict(
            query_start_loc=array.array("i", [0, 1, 2, 4]),
            seq_lens=array.array("i", [300, 2, 257]),
            swa_block_table=int32([0, 1, 2, 3, 9, 7, 0, 0, 0, 0, 0, 0, 0, 11, 2], (3, 5)),
            cmp_block_table=int32([5, 0, 0, 0, 3, 0], (3, 2)),
            slot_mapping=array.array("i", [619, 449, 767, 128, -1]),
            swa_cache=dsv4.Tensor.from_buffer(self.swa_cache, dtype="bf16", shape=(12, 64, 512)),
            extra_cache=dsv4.Tensor.from_buffer(self.cmp_cache, dtype="bf16", shape=(6, 2, 512)))

    def test_c128a_flashmla_export(self):
        T, W, WIDTH = self.T, self.W, self.WIDTH
        swa_out = array.array("i", [777]) * (T * (W + 2))  # 2 spare columns must become -1
        swa_len = array.array("i", [777]) * T
        cmp_out = array.array("i", [777]) * (T * WIDTH)
        cmp_len = array.array("i", [777]) * T
        dsv4.export_indices(
            self.plan, dsv4.ExportFormat.FLASHMLA, **self.batch,
            swa_indices=dsv4.Tensor.from_buffer(swa_out, shape=(T, W + 2)),
            swa_lengths=swa_len,
            cmp_indices=dsv4.Tensor.from_buffer(cmp_out, shape=(T, WIDTH)),
            cmp_lengths=cmp_len)

        # SWA: positions max(p-3,0)..p through the SWA table (slot = block * 64 + p % 64).
        swa_expected = [[616, 617, 618, 619],   # r0 p=299: block col 4 -> 9, entries 40..43
                        [448, 449, -1, -1],     # r1 p=1: col 0 -> 7
                        [764, 765, 766, 767],   # r2 p=255: col 3 -> 11, entries 60..63
                        [765, 766, 767, 128],   # r2 p=256: ... then col 4 -> 2, entry 0
                        [-1, -1, -1, -1]]       # padding
        self.assertEqual([list(swa_out[t * (W + 2):(t + 1) * (W + 2)]) for t in range(T)],
                         [row + [-1, -1] for row in swa_expected])
        self.assertEqual(list(swa_len), [4, 2, 4, 4, 0])
        # C128A: entries 0 .. (p+1)//128 - 1 through the compressed table (2 entries per block).
        cmp_expected = [[10, 11], [], [6, 7], [6, 7], []]
        self.assertEqual([list(cmp_out[t * WIDTH:(t + 1) * WIDTH]) for t in range(T)],
                         [row + [-1] * (WIDTH - len(row)) for row in cmp_expected])
        self.assertEqual(list(cmp_len), [2, 0, 2, 2, 0])

    def test_c128a_paged_run_equals_explicit_run_over_the_exported_lists(self):
        T, W, WIDTH, H, D = self.T, self.W, self.WIDTH, self.H, self.D
        rng = random.Random(SEED)
        for cache, slots in ((self.swa_cache, (616, 617, 618, 619, 448, 449, 764, 765, 766, 767,
                                               128)), (self.cmp_cache, (10, 11, 6, 7))):
            for slot in slots:
                cache[slot * D:(slot + 1) * D] = array.array(
                    "H", [to_bf16(kv_value(rng)) for _ in range(D)])
        swa_idx, swa_len = array.array("i", [0]) * (T * W), array.array("i", [0]) * T
        cmp_idx, cmp_len = array.array("i", [0]) * (T * WIDTH), array.array("i", [0]) * T
        dsv4.export_indices(self.plan, **self.batch,
                            swa_indices=dsv4.Tensor.from_buffer(swa_idx, shape=(T, W)),
                            swa_lengths=swa_len, cmp_lengths=cmp_len,
                            cmp_indices=dsv4.Tensor.from_buffer(cmp_idx, shape=(T, WIDTH)))
        q = array.array("H", [to_bf16(q_value(rng)) for _ in range(T * H * D)])
        common = dict(q=dsv4.Tensor.from_buffer(q, dtype="bf16", shape=(T, H, D)),
                      attn_sink=array.array("f", [rng.uniform(-1, 2) for _ in range(H)]),
                      swa_cache=self.batch["swa_cache"], extra_cache=self.batch["extra_cache"])
        results = []
        for mode in ("paged", "explicit"):
            out = array.array("H", [0x1234]) * (T * H * D)
            lse = array.array("f", [0.0]) * (T * H)
            outputs = dict(out=dsv4.Tensor.from_buffer(out, dtype="bf16", shape=(T, H, D)),
                           lse=dsv4.Tensor.from_buffer(lse, shape=(T, H)))
            if mode == "paged":
                batch = {k: v for k, v in self.batch.items() if not k.endswith("cache")}
                self.plan.run(**common, **outputs, **batch)
            else:
                explicit = dsv4.Plan(self.ctx, num_heads=H, max_tokens=T, topk=W,
                                     extra_topk=WIDTH,
                                     swa_cache=dict(layout=dsv4.KvLayout.BF16, block_size=64),
                                     extra_cache=dict(layout=dsv4.KvLayout.BF16, block_size=2))
                explicit.run(**common, **outputs,
                             indices=dsv4.Tensor.from_buffer(swa_idx, shape=(T, W)),
                             lengths=swa_len, extra_lengths=cmp_len,
                             extra_indices=dsv4.Tensor.from_buffer(cmp_idx, shape=(T, WIDTH)))
            results.append((out, lse))
        (paged_out, paged_lse), (explicit_out, explicit_lse) = results
        self.assertEqual(list(paged_out), list(explicit_out), "seed %d" % SEED)
        self.assertEqual(list(paged_lse), list(explicit_lse), "seed %d" % SEED)
        self.assertTrue(all(math.isfinite(v) for v in paged_lse[:4 * H]))
        self.assertEqual(list(paged_lse[4 * H:]), [math.inf] * H)  # the padding token
        self.assertEqual(list(paged_out[4 * H * D:]), [0] * (H * D))


if __name__ == "__main__":
    print("dsv4 binding test, seed", SEED, file=sys.stderr)
    unittest.main(verbosity=2)
