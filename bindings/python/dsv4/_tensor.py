"""Tensors for the C ABI: a dsv4_tensor (== DLTensor) borrowed, never copied, from

* a raw pointer (`Tensor(pointer, shape, dtype, strides, device)`);
* a buffer-protocol or `__array_interface__` object (numpy, array.array, bytes);
* a DLPack producer on any device (`__dlpack__` / `__dlpack_device__`: torch, CuPy, JAX, numpy),
  legacy ("dltensor") and versioned ("dltensor_versioned") capsules;
* a `__cuda_array_interface__` object, versions 2 and 3 (CuPy, Numba, ...);
* a torch tensor, read directly (its data pointer, sizes and strides) without a DLPack export.

Device tensors are ordered against the caller's stream by the DLPack stream protocol (the producer
makes `stream` wait for its pending work) or, for `__cuda_array_interface__` v3, by the run's
stream waiting for the producer's `stream` (see _device.py). Nothing here synchronises the host.
"""
import collections
import ctypes
import sys
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
    "bfloat16": bfloat16, "bf16": bfloat16, "float16": float16, "fp16": float16,
    "half": float16, "float32": float32, "f32": float32, "float64": float64,
    "float8_e4m3fn": float8_e4m3fn, "e4m3": float8_e4m3fn, "int8": int8, "int16": int16,
    "int32": int32, "int64": int64, "uint8": uint8, "uint16": uint16, "uint32": uint32,
    "uint64": uint64,
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

# DLPack device types whose producers take a stream in __dlpack__(stream=...).
STREAM_DEVICES = (DeviceType.CUDA, DeviceType.ROCM, DeviceType.CUDA_MANAGED)
_HOST_DEVICES = (DeviceType.CPU, DeviceType.CUDA_HOST)


def as_dtype(spec):
    """A DType from a DType / (code, bits[, lanes]) tuple / name ("bfloat16", "int32", ...) /
    torch dtype."""
    if isinstance(spec, str):
        try:
            return _DTYPE_NAMES[spec.lower()]
        except KeyError:
            raise ValueError("unknown dtype name %r" % spec) from None
    if isinstance(spec, CDType):
        return DType(spec.code, spec.bits, spec.lanes)
    if type(spec).__module__ == "torch":
        return _torch_dtype(spec)
    return DType(*spec)


def as_device(spec):
    """(device_type, device_id) from "cpu" / "cuda:1" / a DeviceType / a (type, id) tuple / a
    torch.device."""
    if isinstance(spec, str):
        name, _, ordinal = spec.partition(":")
        try:
            return (DeviceType[name.upper()], int(ordinal or 0))
        except KeyError:
            raise ValueError("unknown device %r" % spec) from None
    if isinstance(spec, int):
        return (int(spec), 0)
    if type(spec).__module__ == "torch":
        return _torch_device(spec)
    device_type, device_id = spec
    return (int(device_type), int(device_id))


def device_name(device):
    """"cuda:1"-style text of a (type, id) pair, for messages."""
    device_type, device_id = device
    try:
        return "%s:%d" % (DeviceType(device_type).name.lower(), device_id)
    except ValueError:
        return "device type %d:%d" % (device_type, device_id)


def _product(values):
    result = 1
    for v in values:
        result *= v
    return result


_I64_ARRAYS = {}


def _int64_array(values):
    """A ctypes int64 array holding `values` (the array types are cached by length)."""
    n = len(values)
    array_type = _I64_ARRAYS.get(n)
    if array_type is None:
        array_type = _I64_ARRAYS[n] = ctypes.c_int64 * n
    return array_type(*values)


class Tensor:
    """A borrowed tensor: data pointer, shape, dtype, strides (in elements, None = compact
    row-major), device. `owner` is kept alive with the tensor (the memory's real owner, or the
    DLPack capsule). `stream` is the stream the producer's data is ready on when it said so
    (__cuda_array_interface__ v3); None otherwise. `source` is the framework object it came from
    (None for raw pointers and buffers)."""

    __slots__ = ("shape", "strides", "dtype", "device", "owner", "readonly", "stream", "source",
                 "_shape", "_strides", "c")

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
        self.stream = None
        self.source = None
        self._shape = _int64_array(self.shape)
        self._strides = None if self.strides is None else _int64_array(self.strides)
        self.c = CTensor(data or None, CDevice(*self.device), len(self.shape),
                         CDType(*self.dtype), self._shape, self._strides, byte_offset)

    @property
    def data(self):
        return self.c.data or 0

    @property
    def pointer(self):
        """Address of the first element (data + byte_offset)."""
        return self.data + self.c.byte_offset

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
            found, itemsize = _typestr_dtype(interface["typestr"])
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
        return _borrow(data, readonly, itemsize, found, full_shape, byte_strides, owner, dtype,
                       shape, (DeviceType.CPU, 0))

    @classmethod
    def from_cuda_array_interface(cls, obj, dtype=None, shape=None, device=None):
        """Borrows a __cuda_array_interface__ (v2, v3) object. Its device is the pointer's (asked
        of the CUDA driver) unless `device` is given; its v3 `stream` is kept in `.stream` (the
        run's stream then waits for it)."""
        interface = obj.__cuda_array_interface__
        version = interface.get("version", 0)
        if version < 2:
            raise ValueError("__cuda_array_interface__ version %r: need 2 or 3" % version)
        if interface.get("mask") is not None:
            raise ValueError("masked __cuda_array_interface__ arrays are not supported")
        data, readonly = interface["data"]
        found, itemsize = _typestr_dtype(interface["typestr"])
        full_shape = tuple(interface["shape"])
        if device is None:
            from . import _device
            device = _device.pointer_device(data) if data else (DeviceType.CUDA, 0)
        tensor = _borrow(data, readonly, itemsize, found, full_shape, interface.get("strides"),
                         obj, dtype, shape, as_device(device))
        stream = interface.get("stream") if version >= 3 else None
        if stream == 0:
            raise ValueError("__cuda_array_interface__ stream 0 is disallowed (v3)")
        tensor.stream = stream
        tensor.source = obj
        return tensor

    @classmethod
    def from_dlpack(cls, obj, stream=None, dtype=None):
        """Borrows a DLPack producer's tensor. `stream` is the backend-native stream (an int;
        None = the legacy default stream) the caller will use it on: device producers make it
        wait for their pending work (DLPack stream protocol). A versioned capsule is asked for
        first (max_version 1.x), a legacy one otherwise. The capsule is not renamed (we do not
        take ownership): it stays alive with the tensor, and its destructor releases the
        producer's memory. `dtype` reinterprets elements of the same width."""
        device_type = int(obj.__dlpack_device__()[0]) if hasattr(obj, "__dlpack_device__") \
            else DeviceType.CPU
        capsule = _export_dlpack(obj, device_type, stream)
        if _api.PyCapsule_IsValid(capsule, _VERSIONED):
            address = _api.PyCapsule_GetPointer(capsule, _VERSIONED)
            managed = _DLManagedTensorVersioned.from_address(address)
            if managed.version.major != _DLPACK_MAJOR:
                raise ValueError("DLPack major version %d: this binding reads version %d" %
                                 (managed.version.major, _DLPACK_MAJOR))
            flags = managed.flags
            view = managed.dl_tensor
        else:
            view = CTensor.from_address(_api.PyCapsule_GetPointer(capsule, b"dltensor"))
            flags = 0
        ndim = view.ndim
        shape = [view.shape[i] for i in range(ndim)]
        strides = [view.strides[i] for i in range(ndim)] if view.strides else None
        found = as_dtype(view.dtype)
        if dtype is not None:
            dtype = as_dtype(dtype)
            if dtype.bits != found.bits:
                raise ValueError("a DLPack tensor of %d-bit elements cannot be read as %r" %
                                 (found.bits, dtype))
            found = dtype
        tensor = cls(view.data, shape, found, strides,
                     (view.device.device_type, view.device.device_id), view.byte_offset,
                     owner=capsule, readonly=bool(flags & (_FLAG_READ_ONLY | _FLAG_IS_COPIED)))
        tensor.source = obj
        return tensor


def as_tensor(obj, dtype=None, shape=None, stream=None):
    """A Tensor from a Tensor, a torch tensor, a __cuda_array_interface__ object, a buffer /
    __array_interface__ object or a DLPack producer (in that order of preference). `stream`: the
    int stream handle a DLPack device producer is exported for (see Tensor.from_dlpack)."""
    if isinstance(obj, Tensor):
        if dtype is not None or shape is not None:
            raise TypeError("a Tensor is already typed; build a new one to reinterpret it")
        return obj
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return from_torch(obj, dtype, shape)
    if hasattr(obj, "__cuda_array_interface__"):
        return Tensor.from_cuda_array_interface(obj, dtype, shape)
    if hasattr(obj, "__array_interface__") or _has_buffer(obj):
        return Tensor.from_buffer(obj, dtype, shape)
    if hasattr(obj, "__dlpack__"):
        if shape is not None:
            raise TypeError("shape= does not apply to DLPack tensors: reshape in the producer")
        return Tensor.from_dlpack(obj, stream, dtype)
    raise TypeError("%s is neither a Tensor, a buffer, a __cuda_array_interface__ object nor a "
                    "DLPack producer" % type(obj).__name__)


# --------------------------------------------- torch --------------------------------------------
_TORCH_DTYPES = {}


def _torch_dtype(dtype):
    if not _TORCH_DTYPES:
        torch = sys.modules["torch"]
        names = {"bfloat16": bfloat16, "float16": float16, "float32": float32,
                 "float64": float64, "float8_e4m3fn": float8_e4m3fn, "int8": int8,
                 "int16": int16, "int32": int32, "int64": int64, "uint8": uint8, "bool": uint8}
        for name, value in names.items():
            if hasattr(torch, name):  # float8 types exist from torch 2.1
                _TORCH_DTYPES[getattr(torch, name)] = value
    try:
        return _TORCH_DTYPES[dtype]
    except KeyError:
        raise TypeError("torch dtype %s has no libdsv4 equivalent" % dtype) from None


def _torch_device(device):
    if device.type == "cpu":
        return (DeviceType.CPU, 0)
    if device.type == "cuda":
        torch = sys.modules["torch"]
        kind = DeviceType.ROCM if getattr(torch.version, "hip", None) else DeviceType.CUDA
        return (kind, device.index if device.index is not None else torch.cuda.current_device())
    if device.type == "xpu":
        return (DeviceType.ONEAPI, device.index or 0)
    raise TypeError("torch device %s has no libdsv4 equivalent" % device)


def from_torch(tensor, dtype=None, shape=None):
    """A Tensor over a torch tensor's memory (no copy, no DLPack export). `dtype` reinterprets
    elements of the same width (use tensor.view(dtype) in torch for anything else)."""
    if shape is not None:
        raise TypeError("shape= does not apply to torch tensors: reshape them in torch")
    found = _torch_dtype(tensor.dtype)
    if dtype is not None:
        dtype = as_dtype(dtype)
        if dtype.bits != found.bits:
            raise ValueError("a torch %s tensor cannot be read as %r" % (tensor.dtype, dtype))
        found = dtype
    result = Tensor(tensor.data_ptr(), tensor.shape, found, tensor.stride(),
                    _torch_device(tensor.device), 0, owner=tensor)
    result.source = tensor
    return result


# Descriptors of torch tensors by geometry: a run copies one and sets its data pointer instead of
# building a dsv4_tensor (the host cost of a run with many tensors). Entries hold no tensor.
_TORCH_DESCRIPTORS = {}
_TORCH_DESCRIPTORS_MAX = 4096


def torch_descriptor(tensor):
    """(CTensor for `tensor`, its (type, id) device, the entry owning its shape and strides; keep
    the entry alive while the CTensor is used)."""
    key = (tensor.shape, tensor.stride(), tensor.dtype, tensor.device)
    entry = _TORCH_DESCRIPTORS.get(key)
    if entry is None:
        if len(_TORCH_DESCRIPTORS) >= _TORCH_DESCRIPTORS_MAX:
            _TORCH_DESCRIPTORS.clear()  # (entries in use stay alive through their users)
        entry = Tensor(None, key[0], _torch_dtype(key[2]), key[1], _torch_device(key[3]))
        _TORCH_DESCRIPTORS[key] = entry
    c = CTensor.from_buffer_copy(entry.c)
    c.data = tensor.data_ptr() or None
    return c, entry.device, entry


# ------------------------------------------- helpers --------------------------------------------
def _typestr_dtype(typestr):
    """(DType or None, item size) of a numpy typestr ("<f4", "|u1", ...)."""
    itemsize = int(typestr[2:])
    code = _KIND_CODES.get(typestr[1])
    return (DType(code, itemsize * 8) if code is not None else None), itemsize


def _borrow(data, readonly, itemsize, found, full_shape, byte_strides, owner, dtype, shape,
            device):
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
        return Tensor(data, shape, dtype, None, device, 0, owner, bool(readonly))
    strides = None
    if not contiguous:
        if any(s % itemsize for s in byte_strides):
            raise ValueError("byte strides %r are not multiples of the item size %d" %
                             (tuple(byte_strides), itemsize))
        strides = [s // itemsize for s in byte_strides]
    return Tensor(data, full_shape, dtype, strides, device, 0, owner, bool(readonly))


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


# -------------------------------------------- DLPack --------------------------------------------
_DLPACK_MAJOR = 1
_MAX_VERSION = (1, 1)
_VERSIONED = b"dltensor_versioned"
_FLAG_READ_ONLY = 1 << 0
_FLAG_IS_COPIED = 1 << 1


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", CTensor)]


# Producer types whose __dlpack__ rejects max_version= (DLPack < 1.0: numpy 1.x, torch < 2.4).
_LEGACY_PRODUCERS = weakref.WeakKeyDictionary()


def dlpack_stream_argument(device_type, stream):
    """The `stream` value of __dlpack__ for a run on backend-native `stream` (None/0 = the
    default stream): CUDA counts 1 as the legacy default stream (0 is disallowed), ROCm 0; other
    devices take None."""
    if device_type in (DeviceType.CUDA, DeviceType.CUDA_MANAGED):
        return int(stream) if stream else 1
    if device_type == DeviceType.ROCM:
        return int(stream) if stream else 0
    return None


def _export_dlpack(obj, device_type, stream):
    kwargs = {}
    if device_type in STREAM_DEVICES:
        kwargs["stream"] = dlpack_stream_argument(device_type, stream)
    kind = type(obj)
    if kind not in _LEGACY_PRODUCERS:
        try:
            return obj.__dlpack__(max_version=_MAX_VERSION, **kwargs)
        except TypeError:
            _LEGACY_PRODUCERS[kind] = True
    return obj.__dlpack__(**kwargs)


# ------------------------------ CPython buffer protocol via ctypes ------------------------------
class _PyBuffer(ctypes.Structure):  # Py_buffer (stable layout since Python 3.3)
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int),
                ("ndim", ctypes.c_int), ("format", ctypes.c_char_p),
                ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
                ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
                ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)), ("internal", ctypes.c_void_p)]


_PYBUF_RECORDS_RO = 0x001C  # PyBUF_STRIDES | PyBUF_FORMAT
_api = ctypes.PyDLL(None)  # this interpreter's C API (GIL held; exceptions propagate)
_api.PyObject_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_api.PyObject_GetBuffer.restype = ctypes.c_int
_api.PyBuffer_Release.argtypes = [ctypes.POINTER(_PyBuffer)]
_api.PyBuffer_Release.restype = None
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int


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
