"""Tensors for the C ABI: a dsv4_tensor (== DLTensor) built from a raw pointer, from any object
exposing the buffer protocol or __array_interface__ (numpy), or from a DLPack producer (CPU)."""
import collections
import ctypes
import weakref

from ._constants import DTypeCode, DeviceType
from ._lib import CDevice, CDType, CTensor

DType = collections.namedtuple("DType", "code bits lanes")
DType.__new__.__defaults__ = (1,)

bfloat16 = DType(DTypeCode.BFLOAT, 16)
float16 = DType(DTypeCode.FLOAT, 16)
float32 = DType(DTypeCode.FLOAT, 32)
float64 = DType(DTypeCode.FLOAT, 64)
float8_e4m3fn = DType(DTypeCode.FLOAT8_E4M3FN, 8)
int8, int16, int32, int64 = (DType(DTypeCode.INT, b) for b in (8, 16, 32, 64))
uint8, uint16, uint32, uint64 = (DType(DTypeCode.UINT, b) for b in (8, 16, 32, 64))

_DTYPE_NAMES = {
    "bfloat16": bfloat16, "bf16": bfloat16, "float16": float16, "float32": float32,
    "f32": float32, "float64": float64, "float8_e4m3fn": float8_e4m3fn, "e4m3": float8_e4m3fn,
    "int8": int8, "int16": int16, "int32": int32, "int64": int64, "uint8": uint8,
    "uint16": uint16, "uint32": uint32, "uint64": uint64,
}
# Struct-module format characters (buffer protocol) and array-interface kinds -> dtype code.
_FORMAT_CODES = {"f": DTypeCode.FLOAT, "d": DTypeCode.FLOAT, "e": DTypeCode.FLOAT,
                 "b": DTypeCode.INT, "h": DTypeCode.INT, "i": DTypeCode.INT, "l": DTypeCode.INT,
                 "q": DTypeCode.INT, "n": DTypeCode.INT, "B": DTypeCode.UINT,
                 "H": DTypeCode.UINT, "I": DTypeCode.UINT, "L": DTypeCode.UINT,
                 "Q": DTypeCode.UINT, "N": DTypeCode.UINT, "c": DTypeCode.UINT,
                 "?": DTypeCode.UINT}
_KIND_CODES = {"f": DTypeCode.FLOAT, "i": DTypeCode.INT, "u": DTypeCode.UINT,
               "b": DTypeCode.UINT}


def as_dtype(spec):
    """A DType from a DType / (code, bits[, lanes]) tuple / name ("bfloat16", "int32", ...)."""
    if isinstance(spec, str):
        try:
            return _DTYPE_NAMES[spec.lower()]
        except KeyError:
            raise ValueError("unknown dtype name %r" % spec) from None
    if isinstance(spec, CDType):
        return DType(spec.code, spec.bits, spec.lanes)
    return DType(*spec)


def as_device(spec):
    """(device_type, device_id) from "cpu" / "cuda:1" / a DeviceType / a (type, id) tuple."""
    if isinstance(spec, str):
        name, _, ordinal = spec.partition(":")
        try:
            return (DeviceType[name.upper()], int(ordinal or 0))
        except KeyError:
            raise ValueError("unknown device %r" % spec) from None
    if isinstance(spec, int):
        return (int(spec), 0)
    device_type, device_id = spec
    return (int(device_type), int(device_id))


def _product(values):
    result = 1
    for v in values:
        result *= v
    return result


class Tensor:
    """A borrowed tensor: data pointer, shape, dtype, strides (in elements, None = compact
    row-major), device. `owner` is kept alive with the tensor (the memory's real owner)."""

    def __init__(self, data, shape, dtype, strides=None, device="cpu", byte_offset=0,
                 owner=None, readonly=False):
        self.shape = tuple(int(s) for s in shape)
        self.strides = None if strides is None else tuple(int(s) for s in strides)
        if self.strides is not None and len(self.strides) != len(self.shape):
            raise ValueError("strides %r do not match shape %r" % (self.strides, self.shape))
        self.dtype = as_dtype(dtype)
        self.device = as_device(device)
        self.owner = owner
        self.readonly = readonly
        ndim = len(self.shape)
        self._shape = (ctypes.c_int64 * ndim)(*self.shape)
        self._strides = None if self.strides is None else (ctypes.c_int64 * ndim)(*self.strides)
        self.c = CTensor(data or None, CDevice(*self.device), ndim, CDType(*self.dtype),
                         self._shape, self._strides, byte_offset)

    @property
    def data(self):
        return self.c.data or 0

    @property
    def nbytes(self):
        """Bytes spanned from the first to one past the last element."""
        if 0 in self.shape:
            return 0
        strides = self.strides or _compact_strides(self.shape)
        last = sum((s - 1) * abs(st) for s, st in zip(self.shape, strides))
        return (last + 1) * self.dtype.bits // 8

    def __repr__(self):
        return "Tensor(data=0x%x, shape=%r, dtype=%r, strides=%r, device=%r)" % (
            self.data, self.shape, self.dtype, self.strides, self.device)

    @classmethod
    def from_buffer(cls, obj, dtype=None, shape=None):
        """Borrows the memory of a buffer-protocol or __array_interface__ object (no copy).
        `dtype` reinterprets the elements (bfloat16 from uint16 storage); `shape` reshapes a
        C-contiguous buffer (its byte size must match)."""
        interface = getattr(obj, "__array_interface__", None)
        if interface is not None:
            data, readonly = interface["data"]
            typestr = interface["typestr"]
            itemsize = int(typestr[2:])
            found = (DType(_KIND_CODES[typestr[1]], itemsize * 8)
                     if typestr[1] in _KIND_CODES else None)
            full_shape = tuple(interface["shape"])
            byte_strides = interface.get("strides")
            data += interface.get("offset", 0)
            owner = obj
        else:
            view = _BufferView(obj)
            data, readonly, itemsize = view.buf, view.readonly, view.itemsize
            code = _FORMAT_CODES.get(view.format.lstrip("@=<>!")[-1:])
            found = DType(code, itemsize * 8) if code is not None else None
            full_shape, byte_strides, owner = view.shape, view.strides, view
        return cls._borrow(data, readonly, itemsize, found, full_shape, byte_strides, owner,
                           dtype, shape)

    @classmethod
    def _borrow(cls, data, readonly, itemsize, found, full_shape, byte_strides, owner, dtype,
                shape):
        compact = _compact_strides(full_shape, itemsize)
        contiguous = byte_strides is None or _same_strides(full_shape, byte_strides, compact)
        dtype = as_dtype(dtype) if dtype is not None else found
        if dtype is None:
            raise TypeError("cannot infer the dtype of this buffer: pass dtype=")
        if shape is not None or dtype.bits != itemsize * 8:
            if not contiguous:
                raise ValueError("reshaping or reinterpreting needs a C-contiguous buffer")
            shape = tuple(shape) if shape is not None else (
                _product(full_shape) * itemsize * 8 // dtype.bits,)
            if _product(shape) * dtype.bits != _product(full_shape) * itemsize * 8:
                raise ValueError("shape %r of %s does not cover the buffer's %d bytes" %
                                 (shape, dtype, _product(full_shape) * itemsize))
            return cls(data, shape, dtype, None, "cpu", 0, owner, bool(readonly))
        strides = None
        if not contiguous:
            if any(s % itemsize for s in byte_strides):
                raise ValueError("byte strides %r are not multiples of the item size %d" %
                                 (tuple(byte_strides), itemsize))
            strides = [s // itemsize for s in byte_strides]
        return cls(data, full_shape, dtype, strides, "cpu", 0, owner, bool(readonly))

    @classmethod
    def from_dlpack(cls, obj):
        """Borrows a CPU DLPack producer's tensor through its legacy "dltensor" capsule (DLPack
        0.6 .. 1.x `__dlpack__()` without max_version). The capsule is not renamed: it stays
        alive with the tensor, and its destructor releases the producer's memory."""
        if hasattr(obj, "__dlpack_device__"):
            device_type, _ = obj.__dlpack_device__()
            if int(device_type) not in (DeviceType.CPU, DeviceType.CUDA_HOST):
                raise TypeError("DLPack import is for host memory; wrap device memory with "
                                "Tensor(pointer, shape, dtype, strides, device)")
        capsule = obj.__dlpack__()
        managed = CTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
        ndim = managed.ndim
        shape = [managed.shape[i] for i in range(ndim)]
        strides = [managed.strides[i] for i in range(ndim)] if managed.strides else None
        return cls(managed.data, shape, as_dtype(managed.dtype),
                   strides, (managed.device.device_type, managed.device.device_id),
                   managed.byte_offset, owner=capsule)


def as_tensor(obj, dtype=None, shape=None):
    """A Tensor from a Tensor, a buffer / __array_interface__ object or a DLPack producer."""
    if isinstance(obj, Tensor):
        if dtype is not None or shape is not None:
            raise TypeError("a Tensor is already typed; build a new one to reinterpret it")
        return obj
    if hasattr(obj, "__array_interface__") or _has_buffer(obj):
        return Tensor.from_buffer(obj, dtype, shape)
    if hasattr(obj, "__dlpack__"):
        return Tensor.from_dlpack(obj)
    raise TypeError("%s is neither a Tensor, a buffer nor a DLPack producer" % type(obj).__name__)


def _has_buffer(obj):
    try:
        memoryview(obj).release()
        return True
    except TypeError:
        return False


def _compact_strides(shape, unit=1):
    strides, step = [], unit
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def _same_strides(shape, a, b):
    # Strides of extent-1 dimensions are irrelevant to the layout.
    return all(x == y or n == 1 for n, x, y in zip(shape, a, b))


# ------------------------------ CPython buffer protocol via ctypes ------------------------------
class _PyBuffer(ctypes.Structure):  # Py_buffer (stable layout since Python 3.3)
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int),
                ("ndim", ctypes.c_int), ("format", ctypes.c_char_p),
                ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
                ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
                ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)), ("internal", ctypes.c_void_p)]


_PYBUF_RECORDS_RO = 0x001C  # PyBUF_STRIDES | PyBUF_FORMAT
_api = ctypes.pythonapi
_api.PyObject_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_api.PyObject_GetBuffer.restype = ctypes.c_int
_api.PyBuffer_Release.argtypes = [ctypes.POINTER(_PyBuffer)]
_api.PyBuffer_Release.restype = None
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p


def _capsule_pointer(capsule, name):
    return _api.PyCapsule_GetPointer(capsule, name)  # raises ValueError on a wrong name


class _BufferView:
    """A held buffer export (the exporter cannot resize or free its memory while it lives)."""

    def __init__(self, obj):
        view = _PyBuffer()
        _api.PyObject_GetBuffer(obj, ctypes.byref(view), _PYBUF_RECORDS_RO)
        self._release = weakref.finalize(self, _api.PyBuffer_Release, ctypes.byref(view))
        self._view = view
        self.buf = view.buf or 0
        self.readonly = bool(view.readonly)
        self.itemsize = view.itemsize
        self.format = (view.format or b"B").decode()
        self.shape = tuple(view.shape[i] for i in range(view.ndim)) if view.ndim else ()
        self.strides = (tuple(view.strides[i] for i in range(view.ndim))
                        if view.strides else None)
