"""Tensor import without a GPU: DLPack (legacy and versioned capsules, the stream protocol, device
producers), __cuda_array_interface__ v2/v3, torch CPU tensors, numpy; and bad input rejected with
an exception naming the argument before anything is written."""
import ctypes
import unittest

import torch

try:
    import numpy as np
except ImportError:  # (the GPU machines' pip torch may come without it)
    np = None

import cases
import dsv4
from dsv4 import _device, _lib

_CAPSULE_LEGACY = b"dltensor"
_CAPSULE_VERSIONED = b"dltensor_versioned"
_new_capsule = ctypes.PyDLL(None).PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", _lib.CTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):
    _fields_ = [("version", _Version), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", _lib.CTensor)]


class Producer:
    """A DLPack 1.x producer over a torch CPU tensor's memory that claims any device and
    records the keyword arguments of every export; max_version= gets a versioned capsule with the
    given flags."""

    versioned = True

    def __init__(self, tensor, device=(dsv4.DeviceType.CPU, 0), flags=0, major=1):
        self.tensor = tensor
        self.device = device
        self.flags, self.major = flags, major
        self.shape = (ctypes.c_int64 * tensor.dim())(*tensor.shape)
        self.strides = (ctypes.c_int64 * tensor.dim())(*tensor.stride())
        self.calls = []
        self.exported = []

    def __dlpack_device__(self):
        return self.device

    def _view(self):
        return _lib.CTensor(self.tensor.data_ptr(), _lib.CDevice(*self.device), self.tensor.dim(),
                            _lib.CDType(*dsv4.as_dtype(self.tensor.dtype)), self.shape,
                            self.strides, 0)

    def __dlpack__(self, stream=None, **kwargs):
        if "max_version" in kwargs and not self.versioned:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        self.calls.append(dict(kwargs, stream=stream))
        if "max_version" in kwargs:
            managed = _ManagedVersioned(_Version(self.major, 1), None, None, self.flags,
                                        self._view())
            name = _CAPSULE_VERSIONED
        else:
            managed = _Managed(self._view(), None, None)
            name = _CAPSULE_LEGACY
        self.exported.append(managed)  # outlives the capsule (no deleter)
        return _new_capsule(ctypes.addressof(managed), name, None)


class LegacyProducer(Producer):
    """A DLPack 0.x producer (the binding remembers such types and stops asking them for
    versioned capsules)."""
    versioned = False


class ArrayInterface:
    """A __cuda_array_interface__ object over host memory (tests give the device explicitly)."""

    def __init__(self, tensor, version=3, stream=None, typestr=None, **extra):
        self.tensor = tensor
        itemsize = tensor.element_size()
        self.__cuda_array_interface__ = dict(
            data=(tensor.data_ptr(), False), shape=tuple(tensor.shape),
            strides=tuple(s * itemsize for s in tensor.stride()),
            typestr=typestr or "<f4", version=version, **extra)
        if version >= 3:
            self.__cuda_array_interface__["stream"] = stream


class DLPackTest(unittest.TestCase):
    def test_versioned_capsule_is_read_and_its_flags_kept(self):
        data = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, ::2]
        producer = Producer(data, flags=1)  # DLPACK_FLAG_BITMASK_READ_ONLY
        tensor = dsv4.Tensor.from_dlpack(producer)
        self.assertEqual((tensor.shape, tensor.strides, tensor.dtype, tensor.data),
                         ((3, 2), (4, 2), dsv4.float32, data.data_ptr()))
        self.assertTrue(tensor.readonly)
        self.assertEqual(producer.calls, [dict(max_version=(1, 1), stream=None)])
        self.assertTrue(dsv4.Tensor.from_dlpack(Producer(data, flags=2)).readonly)  # IS_COPIED
        with self.assertRaisesRegex(ValueError, "major version 2"):
            dsv4.Tensor.from_dlpack(Producer(data, major=2))

    def test_legacy_producers_are_asked_without_max_version(self):
        data = torch.zeros(2, 3, dtype=torch.bfloat16)
        producer = LegacyProducer(data)
        tensor = dsv4.Tensor.from_dlpack(producer)
        self.assertEqual((tensor.shape, tensor.dtype, tensor.readonly),
                         ((2, 3), dsv4.bfloat16, False))
        self.assertEqual(producer.calls, [dict(stream=None)])

    def test_stream_protocol_values(self):
        data = torch.zeros(4, dtype=torch.int32)
        for device, stream, expected in (((dsv4.DeviceType.CUDA, 0), 0xABC0, 0xABC0),
                                         ((dsv4.DeviceType.CUDA, 1), None, 1),  # legacy
                                         ((dsv4.DeviceType.CUDA, 0), 0, 1),
                                         ((dsv4.DeviceType.ROCM, 0), None, 0),
                                         ((dsv4.DeviceType.ROCM, 0), 0x50, 0x50)):
            producer = Producer(data, device)
            tensor = dsv4.Tensor.from_dlpack(producer, stream=stream)
            self.assertEqual(producer.calls[-1]["stream"], expected, (device, stream))
            self.assertEqual(tensor.device, device)
        producer = Producer(data, (dsv4.DeviceType.ONEAPI, 0))
        dsv4.Tensor.from_dlpack(producer, stream=0x99)  # no stream protocol defined: none given
        self.assertEqual(producer.calls, [dict(max_version=(1, 1), stream=None)])

    @unittest.skipIf(np is None, "numpy is not installed")
    def test_numpy_producer(self):
        array = np.arange(6, dtype=np.int32).reshape(2, 3)
        tensor = dsv4.Tensor.from_dlpack(array)
        self.assertEqual((tensor.shape, tensor.dtype, tensor.data),
                         ((2, 3), dsv4.int32, array.ctypes.data))

    def test_torch_cpu_producer(self):
        source = torch.zeros(3, 5, dtype=torch.bfloat16)[:, 1:4]
        tensor = dsv4.Tensor.from_dlpack(source)
        self.assertEqual((tensor.shape, tensor.strides, tensor.dtype, tensor.pointer),
                         ((3, 3), (5, 1), dsv4.bfloat16, source.data_ptr()))
        direct = dsv4.as_tensor(source)  # torch tensors are read without an export
        self.assertEqual((direct.shape, direct.strides, direct.dtype, direct.pointer),
                         (tensor.shape, tensor.strides, tensor.dtype, tensor.pointer))
        self.assertEqual(dsv4.as_tensor(source, dtype="uint16").dtype, dsv4.uint16)
        with self.assertRaises(ValueError):
            dsv4.as_tensor(source, dtype="uint8")  # another width: view it in torch


class CudaArrayInterfaceTest(unittest.TestCase):
    def test_versions_strides_streams(self):
        base = torch.zeros(4, 6)
        view = base[::2, 1:]
        cuda = (dsv4.DeviceType.CUDA, 1)
        tensor = dsv4.Tensor.from_cuda_array_interface(ArrayInterface(view, stream=7),
                                                       device=cuda)
        self.assertEqual((tensor.shape, tensor.strides, tensor.dtype, tensor.device,
                          tensor.stream, tensor.data),
                         ((2, 5), (12, 1), dsv4.float32, cuda, 7, view.data_ptr()))
        v2 = dsv4.Tensor.from_cuda_array_interface(ArrayInterface(base, version=2), device=cuda)
        self.assertIsNone(v2.stream)
        halves = dsv4.Tensor.from_cuda_array_interface(
            ArrayInterface(torch.zeros(2, 8, dtype=torch.int16), typestr="<u2"), "bfloat16",
            device=cuda)
        self.assertEqual((halves.dtype, halves.shape), (dsv4.bfloat16, (2, 8)))
        for bad in (dict(stream=0), dict(version=1), dict(mask=object())):
            with self.assertRaises(ValueError, msg=bad):
                dsv4.Tensor.from_cuda_array_interface(ArrayInterface(base, **bad), device=cuda)


class StreamTest(unittest.TestCase):
    def test_stream_handles(self):
        class TorchLike:
            cuda_stream = 0x1000

        class CupyLike:
            ptr = 0x2000

        class Protocol:
            def __cuda_stream__(self):
                return (0, 0x3000)

        for stream, handle in ((None, 0), (5, 5), (ctypes.c_void_p(0x40), 0x40),
                               (TorchLike(), 0x1000), (CupyLike(), 0x2000), (Protocol(), 0x3000)):
            self.assertEqual(_device.stream_handle(stream), handle)
        with self.assertRaisesRegex(TypeError, "stream"):
            _device.stream_handle("default")


class BadInputTest(unittest.TestCase):
    """Every rejected call leaves out / lse as they were."""

    def setUp(self):
        self.problem = cases.Explicit(cases.seed(11), tokens=3, heads=2, block_size=5, blocks=4,
                                      width=8)
        self.ctx = cases.cpu_context()
        self.addCleanup(self.ctx.close)
        self.plan = dsv4.Plan(self.ctx, **self.problem.plan_options())
        self.inputs = self.problem.tensors()
        self.out = torch.full((3, 2, 512), 7.0, dtype=torch.bfloat16)
        self.lse = torch.full((3, 2), 7.0)

    def rejected(self, error, argument, **changes):
        tensors = dict(self.inputs, out=self.out, lse=self.lse)
        tensors.update(changes)
        with self.assertRaises(error) as caught:
            self.plan.run(**tensors)
        self.assertIn(argument, str(caught.exception))
        self.assertTrue(bool((self.out == 7).all()) and bool((self.lse == 7).all()),
                        "an output was written by a rejected call")
        return caught.exception

    def test_tensor_on_another_device_is_rejected_before_its_export(self):
        for device in ((dsv4.DeviceType.CUDA, 0), (dsv4.DeviceType.ROCM, 1),
                       (dsv4.DeviceType.ONEAPI, 0)):
            producer = Producer(self.inputs["q"], device)
            self.rejected(ValueError, "q", q=producer)
            self.assertEqual(producer.calls, [], "exported for a call that cannot use it")
        self.rejected(ValueError, "lengths", lengths=dsv4.Tensor(
            self.inputs["lengths"].data_ptr(), (3,), "int32", device="cuda:0"))

    def test_wrong_dtype_layout_and_shape(self):
        error = self.rejected(dsv4.Dsv4Error, "q", q=self.inputs["q"].float())
        self.assertIn(error.status, (dsv4.Status.INVALID_ARGUMENT, dsv4.Status.PLAN_MISMATCH))
        self.rejected(dsv4.Dsv4Error, "swa_cache", swa_cache=self.inputs["swa_cache"].float())
        self.rejected(dsv4.Dsv4Error, "indices", indices=self.inputs["indices"].long())
        self.rejected(dsv4.Dsv4Error, "out", out=torch.zeros(3, 2, 512))
        self.rejected(dsv4.Dsv4Error, "lse", lse=torch.zeros(2, 3)[:, :2])

    def test_non_contiguous_last_dimension(self):
        wide = torch.zeros(3, 2, 1024, dtype=torch.bfloat16)
        self.rejected(dsv4.Dsv4Error, "q", q=wide[..., ::2])
        wide_out = torch.full((3, 2, 1024), 7.0, dtype=torch.bfloat16)
        self.rejected(dsv4.Dsv4Error, "out", out=wide_out[..., ::2])
        self.assertTrue(bool((wide_out == 7).all()))

    def test_read_only_output(self):
        producer = Producer(self.out, flags=1)
        self.rejected(ValueError, "out", out=producer)

    def test_array_interface_without_driver_names_the_argument(self):
        if _device._cuda() is not None:
            self.skipTest("a CUDA driver is present (GPU tests cover this)")
        self.rejected(ValueError, "q", q=ArrayInterface(self.inputs["q"].view(torch.int16),
                                                        typestr="<i2"))

    def test_workspace_rules(self):
        with self.assertRaisesRegex(ValueError, "workspace"):
            self.plan.set_workspace(torch.zeros(16, dtype=torch.uint8))
        # A CPU plan takes a host workspace tensor as well.
        space = torch.zeros(max(self.plan.workspace_size, 1), dtype=torch.uint8)
        self.plan.run(**self.inputs, out=self.out, lse=self.lse, workspace=space)
        cases.check(self, self.out, self.lse, self.problem.reference(),
                    self.problem.describe())


if __name__ == "__main__":
    unittest.main()
