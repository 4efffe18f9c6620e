"""Streams and device memory of the caller's framework (torch, CuPy) or of the CUDA driver.

The stream of a run is the one given, else the producer's current stream: torch's
torch.cuda.current_stream(device), CuPy's current stream, a __cuda_array_interface__ v3 object's
`stream`, else the legacy default stream (handle 0). Frameworks are looked up in sys.modules,
never imported: a caller holding a torch tensor has imported torch.
"""
import ctypes
import sys
import threading

from ._constants import DeviceType


def stream_handle(stream):
    """The backend-native handle (int, 0 = default stream) of an int, a ctypes pointer, a torch
    stream (.cuda_stream), a CuPy stream (.ptr) or a __cuda_stream__ protocol object."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    if isinstance(stream, ctypes.c_void_p):
        return stream.value or 0
    if hasattr(stream, "__cuda_stream__"):  # CUDA stream protocol: (version, handle)
        return int(stream.__cuda_stream__()[1])
    for attribute in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    raise TypeError("stream: %s is not a stream (int handle, torch.cuda.Stream, cupy stream or "
                    "__cuda_stream__ object)" % type(stream).__name__)


def framework_of(obj):
    """"torch", "cupy" or None: the framework a tensor argument (or the object a dsv4.Tensor was
    made from) belongs to."""
    module = type(obj).__module__.partition(".")[0]
    if module == "dsv4":
        source = getattr(obj, "source", None)
        return framework_of(source) if source is not None else None
    return module if module in ("torch", "cupy") else None


def current_stream(framework, device_id):
    """The framework's current stream handle on device `device_id`."""
    return current_stream_function(framework)(device_id)


def current_stream_function(framework):
    """A function of a device id giving `framework`'s current stream handle there (0 without a
    framework)."""
    if framework == "torch":
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what inductor calls
        if raw is not None:
            return raw
        return lambda device_id: torch.cuda.current_stream(device_id).cuda_stream
    if framework == "cupy":
        cupy = sys.modules["cupy"]

        def cupy_stream(device_id):
            with cupy.cuda.Device(device_id):
                return cupy.cuda.get_current_stream().ptr
        return cupy_stream
    return lambda device_id: 0


def torch_order_before(device_id, stream):
    """Makes `stream` wait for the work torch has enqueued on its current stream of the device,
    as torch's __dlpack__(stream) does (no host sync)."""
    torch = sys.modules["torch"]
    current = torch.cuda.current_stream(device_id)
    if current.cuda_stream == stream:
        return
    event = torch.cuda.Event()
    event.record(current)
    torch.cuda.ExternalStream(stream, device=device_id).wait_event(event)


# --------------------------------------- CUDA driver API ----------------------------------------
_driver = None
_driver_lock = threading.Lock()
_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
_EVENT_DISABLE_TIMING = 2


def _cuda():
    """libcuda.so.1 through ctypes (None when absent: no NVIDIA driver)."""
    global _driver
    with _driver_lock:
        if _driver is None:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
                lib.cuInit(0)
                _driver = lib
            except OSError:
                _driver = False
    return _driver or None


def _check(result, what):
    if result != 0:
        raise RuntimeError("CUDA driver: %s failed (CUresult %d)" % (what, result))


def pointer_device(pointer):
    """(DeviceType.CUDA, ordinal) of a CUDA device pointer, asked of the driver."""
    lib = _cuda()
    if lib is None:
        raise ValueError("a __cuda_array_interface__ pointer without a CUDA driver: pass the "
                         "device explicitly (Tensor.from_cuda_array_interface(obj, device=))")
    ordinal = ctypes.c_int(-1)
    _check(lib.cuPointerGetAttribute(ctypes.byref(ordinal), _POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                     ctypes.c_uint64(pointer)), "cuPointerGetAttribute")
    return (DeviceType.CUDA, ordinal.value)


def cuda_stream_wait(device_id, waiter, producer):
    """Makes stream `waiter` wait for the work enqueued so far on stream `producer` (CUDA
    handles; 1 / 2 are the legacy / per-thread default streams), through an event in the
    device's primary context: the order __cuda_array_interface__ v3 asks of its consumers."""
    lib = _cuda()
    if lib is None:
        raise RuntimeError("__cuda_array_interface__ stream given but no CUDA driver")
    device, context, event = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p()
    _check(lib.cuDeviceGet(ctypes.byref(device), device_id), "cuDeviceGet")
    _check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    try:
        _check(lib.cuCtxPushCurrent_v2(context), "cuCtxPushCurrent")
        try:
            _check(lib.cuEventCreate(ctypes.byref(event), _EVENT_DISABLE_TIMING), "cuEventCreate")
            try:
                _check(lib.cuEventRecord(event, ctypes.c_void_p(producer)), "cuEventRecord")
                _check(lib.cuStreamWaitEvent(ctypes.c_void_p(waiter or None), event, 0),
                       "cuStreamWaitEvent")
            finally:
                lib.cuEventDestroy_v2(event)  # released once the wait has happened
        finally:
            lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    finally:
        lib.cuDevicePrimaryCtxRelease_v2(device)


# ------------------------------------------ workspaces ------------------------------------------
def allocate_bytes(framework, device, size):
    """A `size`-byte uint8 tensor on `device` from the caller's framework (None: torch, else
    CuPy, whichever the process has imported)."""
    device_type, device_id = device
    if framework is None:
        framework = next((name for name in ("torch", "cupy") if name in sys.modules), None)
    if framework == "torch":
        torch = sys.modules["torch"]
        kind = "xpu" if device_type == DeviceType.ONEAPI else "cuda"
        return torch.empty(max(size, 1), dtype=torch.uint8, device="%s:%d" % (kind, device_id))
    if framework == "cupy":
        cupy = sys.modules["cupy"]
        with cupy.cuda.Device(device_id):
            return cupy.empty(max(size, 1), dtype=cupy.uint8)
    raise ValueError("workspace: pass workspace= on the plan's device (%d bytes); the binding "
                     "allocates it through torch or CuPy only" % size)
