"""libdsv4 from Python: a thin ctypes binding of the C ABI (include/dsv4/dsv4.h, dsv4_paged.h).

    import dsv4
    with dsv4.Context(device="cpu") as ctx:
        plan = dsv4.Plan(ctx, num_heads=64, topk=128, max_tokens=4,
                         swa_cache=dict(layout=dsv4.KvLayout.BF16, block_size=64))
        plan.run(q=q, swa_cache=cache, indices=indices, out=out)

Tensors are `Tensor` objects or anything `as_tensor` accepts (buffer protocol, numpy via
__array_interface__, CPU DLPack producers). Every failing call raises Dsv4Error.
"""
import ctypes
import dataclasses
import threading

from . import _lib
from ._constants import (API_VERSION, DTypeCode, DeviceType, ExportFormat, IndexFormat,
                         KvCacheFlag, KvLayout, LogLevel, Mode, PlanFlag, Status)
from ._lib import Dsv4Error, load_library
from ._tensor import (DType, Tensor, as_device, as_dtype, as_tensor, bfloat16, float8_e4m3fn,
                      float16, float32, float64, int8, int16, int32, int64, uint8, uint16,
                      uint32, uint64)

__all__ = [
    "API_VERSION", "BackendInfo", "Context", "ContextInfo", "DType", "DTypeCode", "DeviceInfo",
    "DeviceType", "Dsv4Error", "ExportFormat", "IndexFormat", "KvCacheDesc", "KvCacheFlag",
    "KvLayout",
    "KvLayoutInfo", "LogLevel", "Mode", "Plan", "PlanFlag", "PlanInfo", "Status", "Tensor",
    "as_device", "as_dtype", "as_tensor", "bfloat16", "enumerate_backends", "export_indices",
    "float16", "float32", "float64", "float8_e4m3fn", "int8", "int16", "int32", "int64",
    "kv_layout_info", "kv_write", "load_library", "device_info", "status_string", "uint8",
    "uint16", "uint32", "uint64", "version", "version_number",
]


def version():
    """The loaded library's version string, e.g. "0.1.0"."""
    return _lib.lib().dsv4_get_version_string().decode()


def version_number():
    """major*10000 + minor*100 + patch of the loaded library."""
    return _lib.lib().dsv4_get_version()


def status_string(status):
    return _lib.lib().dsv4_status_string(status).decode()


def _text(raw):
    return raw.decode(errors="replace")


# -------------------------------------- plain-data results --------------------------------------
@dataclasses.dataclass(frozen=True)
class BackendInfo:
    name: str
    available: bool
    score: int
    device_type: int
    device_count: int
    module_abi: int
    path: str
    status: str


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    device_type: int
    device_id: int
    compute_units: int
    memory_bytes: int
    name: str


@dataclasses.dataclass(frozen=True)
class ContextInfo:
    device: tuple
    num_threads: int
    backend: str
    path: str
    reason: str


@dataclasses.dataclass(frozen=True)
class PlanInfo:
    mode: int
    num_heads: int
    head_dim_qk: int
    workspace_bytes: int
    backend: str
    kernel: str


@dataclasses.dataclass(frozen=True)
class KvLayoutInfo:
    layout: int
    head_dim_qk: int
    head_dim_v: int
    bytes_per_token: int
    min_block_stride_bytes: int


@dataclasses.dataclass
class KvCacheDesc:
    """dsv4_kv_cache_desc. block_stride_bytes 0 = the layout's minimum."""
    layout: int
    block_size: int
    block_stride_bytes: int = 0
    kv_scale: float = 1.0


def _fill_cache_desc(target, spec, name):
    """Sets a CKvCacheDesc from a KvCacheDesc or a dict of its field names (others kept)."""
    fields = dataclasses.asdict(spec) if isinstance(spec, KvCacheDesc) else dict(spec)
    for key, value in fields.items():
        if key not in ("layout", "block_size", "block_stride_bytes", "kv_scale"):
            raise TypeError("%s: unknown cache field %r" % (name, key))
        setattr(target, key, value)


# -------------------------------------------- context -------------------------------------------
def _ctx_options(device="cpu", backend=None, module_dir=None, num_threads=0, log_level=-1):
    lib = _lib.lib()
    options = _lib.init_struct(_lib.CCtxOptions, lib.dsv4_ctx_options_init)
    options.api_version = API_VERSION
    options.device = _lib.CDevice(*as_device(device))
    options.backend = backend.encode() if backend else None
    options.module_dir = str(module_dir).encode() if module_dir else None
    options.num_threads = num_threads
    options.log_level = log_level
    return options


def enumerate_backends(module_dir=None):
    """Every backend module the loader finds (same search as Context), as BackendInfo."""
    lib = _lib.lib()
    options = _ctx_options(module_dir=module_dir)
    count = ctypes.c_int32(0)
    lib.dsv4_enumerate_backends(ctypes.byref(options), None, 0, ctypes.byref(count))
    while True:
        capacity = count.value
        infos = (_lib.CBackendInfo * capacity)()
        for info in infos:
            info.struct_size = ctypes.sizeof(_lib.CBackendInfo)
        lib.dsv4_enumerate_backends(ctypes.byref(options), infos, capacity, ctypes.byref(count))
        if count.value <= capacity:  # a module may appear between the two calls
            break
    return [BackendInfo(_text(i.name), bool(i.available), i.score, i.device_type,
                        i.device_count, i.module_abi, _text(i.path), _text(i.status))
            for i in infos[:count.value]]


def device_info(backend, index=0, module_dir=None):
    """DeviceInfo of device `index` of the named backend module."""
    info = _lib.out_struct(_lib.CDeviceInfo)
    _lib.lib().dsv4_get_device_info(ctypes.byref(_ctx_options(module_dir=module_dir)),
                                    backend.encode(), index, ctypes.byref(info))
    return DeviceInfo(info.device_type, info.device_id, info.compute_units, info.memory_bytes,
                      _text(info.name))


class _Closable:
    """Context-manager and finaliser behaviour of the handle-owning classes (they define close())."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None):
            try:
                self.close()
            except Exception:  # interpreter shutdown: the library may already be gone
                pass


class Context(_Closable):
    """A dsv4_ctx: one backend on one device. `log` is an optional callable(level, message)
    receiving the library's log lines (it must be thread-safe)."""

    def __init__(self, device="cpu", backend=None, num_threads=0, module_dir=None,
                 log_level=-1, log=None):
        lib = _lib.lib()
        options = _ctx_options(device, backend, module_dir, num_threads, log_level)
        self._log_fn = None
        if log is not None:
            self._log_fn = _lib.LOG_FN(lambda level, message, _: log(level, _text(message)))
            options.log_fn = self._log_fn
        self.device = as_device(device)
        # The handles of live plans (not the Plan objects, so no cycle): close() destroys them
        # first, whatever order the garbage collector finalises a Context and its Plans in.
        self._plan_handles = {}
        self._handle = ctypes.c_void_p()
        lib.dsv4_ctx_create(ctypes.byref(options), ctypes.byref(self._handle))

    @property
    def handle(self):
        if not self._handle:
            raise ValueError("the context is closed")
        return self._handle

    @property
    def info(self):
        info = _lib.out_struct(_lib.CCtxInfo)
        _lib.lib().dsv4_ctx_get_info(self.handle, ctypes.byref(info))
        return ContextInfo((info.device.device_type, info.device.device_id), info.num_threads,
                           _text(info.backend), _text(info.path), _text(info.reason))

    def close(self):
        """Destroys the plans created from this context, then the context. Idempotent."""
        for plan_handle in list(self._plan_handles.values()):
            _destroy_plan(plan_handle)
        self._plan_handles.clear()
        if self._handle:
            _lib.lib().dsv4_ctx_destroy(self._handle)
            self._handle = ctypes.c_void_p()



# --------------------------------------------- plan ---------------------------------------------
class _Call:
    """Builds the tensor pointers of one call and keeps every Tensor alive until it returns."""

    def __init__(self):
        self.keep = []

    def pointer(self, name, value, writable=False):
        tensor = as_tensor(value)
        if writable and tensor.readonly:
            raise ValueError("%s: the buffer is read-only but libdsv4 writes it" % name)
        self.keep.append(tensor)
        return ctypes.pointer(tensor.c)


_RUN_OUTPUTS = ("out", "lse", "max_logits")


def _fill_run_args(call, args, tensors):
    for name, value in tensors.items():
        if name not in _lib.RUN_TENSORS:
            raise TypeError("unknown tensor argument %r" % name)
        if value is not None:
            setattr(args, name, call.pointer(name, value, name in _RUN_OUTPUTS))


def _stream(stream):
    return None if stream is None else ctypes.c_void_p(int(stream))


def _destroy_plan(handle):
    if handle:
        _lib.lib().dsv4_plan_destroy(handle)
        handle.value = None


class Plan(_Closable):
    """An immutable dsv4_plan. Keyword options are dsv4_plan_options field names; swa_cache and
    extra_cache take a KvCacheDesc or a dict of its fields; q_dtype any dtype spec."""

    def __init__(self, ctx, **options):
        lib = _lib.lib()
        c_options = _lib.init_struct(_lib.CPlanOptions, lib.dsv4_plan_options_init)
        fields = {name for name, _ in _lib.CPlanOptions._fields_} - {"struct_size"}
        for key, value in options.items():
            if key not in fields:
                raise TypeError("Plan() got an unknown option %r" % key)
            if key in ("swa_cache", "extra_cache"):
                _fill_cache_desc(getattr(c_options, key), value, key)
            elif key == "q_dtype":
                c_options.q_dtype = _lib.CDType(*as_dtype(value))
            else:
                setattr(c_options, key, value)
        self.ctx = ctx
        self._handle = ctypes.c_void_p()  # shared with ctx._plan_handles; nulled when destroyed
        lib.dsv4_plan_create(ctx.handle, ctypes.byref(c_options), ctypes.byref(self._handle))
        ctx._plan_handles[id(self._handle)] = self._handle
        self._workspace = threading.local()

    @property
    def handle(self):
        if not self._handle:
            raise ValueError("the plan is closed")
        return self._handle

    @property
    def workspace_size(self):
        size = ctypes.c_size_t(0)
        _lib.lib().dsv4_plan_get_workspace_size(self.handle, ctypes.byref(size))
        return size.value

    @property
    def info(self):
        info = _lib.out_struct(_lib.CPlanInfo)
        _lib.lib().dsv4_plan_get_info(self.handle, ctypes.byref(info))
        return PlanInfo(info.mode, info.num_heads, info.head_dim_qk, info.workspace_bytes,
                        _text(info.backend), _text(info.kernel))

    def _host_workspace(self):
        # One per thread: concurrent runs of a plan need distinct workspaces.
        size = self.workspace_size
        buffer = getattr(self._workspace, "buffer", None)
        if buffer is None or len(buffer) < size:
            buffer = self._workspace.buffer = ctypes.create_string_buffer(max(size, 1))
        return ctypes.cast(buffer, ctypes.c_void_p), size

    def run(self, workspace=None, workspace_bytes=None, stream=None, **tensors):
        """One dsv4_run. Tensor keywords are dsv4_run_args field names (q, swa_cache, out,
        indices, ...). workspace: None (a host buffer owned by the plan; CPU contexts only), a
        pointer with workspace_bytes, or a Tensor / buffer on the plan's device."""
        lib = _lib.lib()
        args = _lib.init_struct(_lib.CRunArgs, lib.dsv4_run_args_init)
        call = _Call()
        _fill_run_args(call, args, tensors)
        if workspace is None:
            if self.ctx.device[0] != DeviceType.CPU and self.workspace_size:
                raise ValueError("pass workspace= on the plan's device (%d bytes)" %
                                 self.workspace_size)
            args.workspace, args.workspace_bytes = self._host_workspace()
        elif isinstance(workspace, int):
            args.workspace = workspace
            args.workspace_bytes = workspace_bytes if workspace_bytes is not None else \
                self.workspace_size
        else:
            tensor = as_tensor(workspace)
            call.keep.append(tensor)
            args.workspace = tensor.data + tensor.c.byte_offset
            args.workspace_bytes = tensor.nbytes if workspace_bytes is None else workspace_bytes
        args.stream = _stream(stream)
        lib.dsv4_run(self.handle, ctypes.byref(args))

    def close(self):
        _destroy_plan(self._handle)
        self.ctx._plan_handles.pop(id(self._handle), None)



# ----------------------------------- KV writer, export, layouts ---------------------------------
def kv_write(ctx, cache_desc, values, slots, cache, stream=None):
    """dsv4_kv_write: quantises rows `values` [N, d] (bf16/fp32) into `cache` at `slots` [N]
    int32 (negative = skip). cache_desc: KvCacheDesc or dict."""
    lib = _lib.lib()
    args = _lib.init_struct(_lib.CKvWriteArgs, lib.dsv4_kv_write_args_init)
    _fill_cache_desc(args.cache_desc, cache_desc, "cache_desc")
    call = _Call()
    args.values = call.pointer("values", values)
    args.slots = call.pointer("slots", slots)
    args.cache = call.pointer("cache", cache, writable=True)
    args.stream = _stream(stream)
    lib.dsv4_kv_write(ctx.handle, ctypes.byref(args))


def export_indices(plan, format=ExportFormat.FLASHMLA, stream=None, **tensors):
    """dsv4_export_indices: the lists a paged run of `plan` would build. Batch keywords are
    dsv4_run_args names (query_start_loc, seq_lens, swa_block_table, cmp_block_table,
    slot_mapping, topk_indices, swa_cache, extra_cache); outputs are dsv4_export_args names
    (swa_indices, swa_lengths, cmp_indices, ...)."""
    lib = _lib.lib()
    batch = _lib.init_struct(_lib.CRunArgs, lib.dsv4_run_args_init)
    args = _lib.init_struct(_lib.CExportArgs, lib.dsv4_export_args_init)
    call = _Call()
    outputs = {k: v for k, v in tensors.items() if k in _lib.EXPORT_TENSORS}
    _fill_run_args(call, batch, {k: v for k, v in tensors.items() if k not in outputs})
    for name, value in outputs.items():
        if value is not None:
            setattr(args, name, call.pointer(name, value, writable=True))
    args.format = format
    args.batch = ctypes.pointer(batch)
    args.stream = _stream(stream)
    lib.dsv4_export_indices(plan.handle, ctypes.byref(args))


def kv_layout_info(layout, block_size):
    """Byte geometry of a KV layout for `block_size` entries per block."""
    info = _lib.init_struct(_lib.CKvLayoutInfo, _lib.lib().dsv4_kv_layout_info_init)
    _lib.lib().dsv4_kv_layout_get_info(layout, block_size, ctypes.byref(info))
    return KvLayoutInfo(info.layout, info.head_dim_qk, info.head_dim_v, info.bytes_per_token,
                        info.min_block_stride_bytes)
