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
import functools
import itertools
import sys
import threading
import weakref

from . import _lib
from ._constants import (API_VERSION, DTypeCode, DeviceType, ExportFormat, IndexFormat,
                         KvCacheFlag, KvLayout, LogLevel, Mode, PlanFlag, Status)
from ._lib import Dsv4Error, load_library
from . import _device, _tensor
from ._tensor import (DType, Tensor, as_device, as_dtype, as_tensor, bfloat16, device_name,
                      float8_e4m3fn, float16, float32, float64, int8, int16, int32, int64, uint8,
                      uint16, uint32, uint64)

__all__ = [
    "API_VERSION", "BackendInfo", "Context", "ContextInfo", "DType", "DTypeCode", "DeviceInfo",
    "DeviceType", "Dsv4Error", "ExportFormat", "IndexFormat", "KvCacheDesc", "KvCacheFlag",
    "KvLayout", "KvLayoutInfo", "LogLevel", "Mode", "Plan", "PlanFlag", "PlanInfo", "Status",
    "Tensor", "as_device", "as_dtype", "as_tensor", "bfloat16", "device_info",
    "enumerate_backends", "export_indices", "float16", "float32", "float64", "float8_e4m3fn",
    "int8", "int16", "int32", "int64", "kv_layout_info", "kv_write", "load_library", "merge",
    "plan_by_id", "status_string", "uint8", "uint16", "uint32", "uint64", "version",
    "version_number",
]


def version():
    """The loaded library's version string, e.g. "0.2.0"."""
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
    """dsv4_kv_cache_desc. block_stride_bytes 0 = the layout's minimum; flags: KvCacheFlag."""
    layout: int
    block_size: int
    block_stride_bytes: int = 0
    kv_scale: float = 1.0
    flags: int = 0


def _fill_cache_desc(target, spec, name):
    """Sets a CKvCacheDesc from a KvCacheDesc or a dict of its field names (others kept)."""
    fields = dataclasses.asdict(spec) if isinstance(spec, KvCacheDesc) else dict(spec)
    for key, value in fields.items():
        if key not in ("layout", "block_size", "block_stride_bytes", "kv_scale", "flags"):
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
        self._torch_merge = _TorchFastPath(self.device, _lib.CMergeArgs, "dsv4_merge_args_init",
                                           _fill_merge_args)

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

    def _merge(self, tensors, stream=None):
        """merge() with the tensors as a dict (framework ops call this)."""
        lib = _lib.lib()
        if stream is None and _torch_tensor_type is not None:
            found = self._torch_merge.args(tensors)
            if found is not None:
                args, current = found
                args.stream = current or None
                lib.dsv4_merge(self.handle, ctypes.byref(args))
                return
        args = _new_args(_lib.CMergeArgs, lib.dsv4_merge_args_init)
        call = _Call(self.device, stream, tensors)
        _fill_merge_args(call, args, tensors)
        args.stream = call.stream or None
        lib.dsv4_merge(self.handle, ctypes.byref(args))

    def close(self):
        """Destroys the plans created from this context, then the context. Idempotent."""
        for plan_handle in list(self._plan_handles.values()):
            _destroy_plan(plan_handle)
        self._plan_handles.clear()
        if self._handle:
            _lib.lib().dsv4_ctx_destroy(self._handle)
            self._handle = ctypes.c_void_p()



# --------------------------------------------- plan ---------------------------------------------
_GPU_DEVICES = (DeviceType.CUDA, DeviceType.ROCM, DeviceType.CUDA_MANAGED)


_torch_tensor_type = None  # torch.Tensor once torch is imported (see _Call)


class _Call:
    """The tensors of one call, borrowed on the call's device and stream and kept alive until it
    returns. The stream is the one given, else the producer's current stream (the first torch /
    CuPy tensor's framework, a __cuda_array_interface__ v3 `stream`), else the default stream;
    device producers are ordered before it (DLPack stream protocol, events for torch tensors under
    another stream and for __cuda_array_interface__ streams). No host synchronisation."""

    def __init__(self, device, stream, tensors):
        """tensors: name -> value (None values are skipped)."""
        global _torch_tensor_type
        self.device = device
        self.keep = []
        self.framework = None
        for value in tensors.values():
            if value is not None:
                self.framework = _device.framework_of(value)
                if self.framework:
                    break
        if self.framework == "torch" and _torch_tensor_type is None:
            _torch_tensor_type = sys.modules["torch"].Tensor
        gpu = device[0] in _GPU_DEVICES
        if stream is not None:
            self.stream = _device.stream_handle(stream)
            if gpu and any(_device.framework_of(v) == "torch" for v in tensors.values()):
                _device.torch_order_before(device[1], self.stream)
        elif gpu and self.framework:
            self.stream = _device.current_stream(self.framework, device[1])
        else:
            self.stream = self._interface_stream(tensors.values()) if gpu else 0

    @staticmethod
    def _interface_stream(values):
        for value in values:
            interface = getattr(value, "__cuda_array_interface__", None)
            if interface is not None and interface.get("version", 0) >= 3 and \
                    interface.get("stream"):
                return int(interface["stream"])
        return 0

    def tensor(self, name, value):
        if hasattr(value, "__dlpack_device__") and not isinstance(value, Tensor) and \
                _device.framework_of(value) != "torch":
            # Checked before the export, which would order the producer before our stream.
            self._check_device(name, as_device(tuple(value.__dlpack_device__())))
        try:
            tensor = as_tensor(value, stream=self.stream)
        except (TypeError, ValueError) as error:
            raise type(error)("%s: %s" % (name, error)) from None
        self._check_device(name, tensor.device)
        if tensor.stream is not None and (tensor.stream or 1) != (self.stream or 1):
            # (0 and 1 both name the legacy default stream.)
            _device.cuda_stream_wait(self.device[1], self.stream, tensor.stream)
        self.keep.append(tensor)
        return tensor

    def pointer(self, name, value, writable=False):
        if type(value) is _torch_tensor_type:  # the hot path: no Tensor object
            c, device, entry = _tensor.torch_descriptor(value)
            if device != self.device:
                self._check_device(name, device)
            self.keep.append(entry)
            return ctypes.pointer(c)
        tensor = self.tensor(name, value)
        if writable and tensor.readonly:
            raise ValueError("%s: the buffer is read-only but libdsv4 writes it" % name)
        return ctypes.pointer(tensor.c)

    def _check_device(self, name, device):
        if tuple(device) != tuple(self.device):
            raise ValueError("%s: the tensor is on %s but the context's device is %s" %
                             (name, device_name(device), device_name(self.device)))


_RUN_OUTPUTS = frozenset(("out", "lse", "max_logits"))
_RUN_TENSORS = frozenset(_lib.RUN_TENSORS)
_MERGE_OUTPUTS = frozenset(("out", "lse"))
_MERGE_TENSORS = frozenset(_lib.MERGE_TENSORS)
_templates = {}


def _new_args(cls, init_function):
    """A fresh args struct as its _init function sets it (copied from a cached first init)."""
    template = _templates.get(cls)
    if template is None:
        template = _templates[cls] = _lib.init_struct(cls, init_function)
    return cls.from_buffer_copy(template)


def _fill_args(call, args, tensors, names, outputs):
    """Sets the struct's tensor fields from `tensors` (names checked against `names`; those in
    `outputs` must be writable)."""
    for name, value in tensors.items():
        if name not in names:
            raise TypeError("unknown tensor argument %r" % name)
        if value is not None:
            setattr(args, name, call.pointer(name, value, name in outputs))


_fill_run_args = functools.partial(_fill_args, names=_RUN_TENSORS, outputs=_RUN_OUTPUTS)
_fill_merge_args = functools.partial(_fill_args, names=_MERGE_TENSORS, outputs=_MERGE_OUTPUTS)


class _TorchFastPath:
    """The host's fast path of one C call (dsv4_run of a plan, dsv4_merge of a context) for plain
    torch tensors on the producer's current stream: the argument struct of a geometry (names,
    shapes, strides, dtypes, devices) is filled once per thread by the general path's checks
    (_Call), then reused with each call's data pointers. The per-tensor reads below are what
    the path costs: torch's shape, stride, dtype, device and data_ptr accessors."""

    def __init__(self, device, struct, init_name, fill):
        """fill(call, args, tensors) sets and checks the tensors."""
        self.device = device
        self._struct, self._init_name, self._fill = struct, init_name, fill
        self._entries = threading.local()

    def args(self, tensors, prepare=None):
        """(argument struct, current stream handle or None on the host) for these tensors, or
        None when a value is neither a plain torch tensor nor None. prepare(args), if given,
        sets the rest of a new entry's struct (passed per call: held here, a plan's bound
        method would keep the plan alive in a cycle)."""
        geometry, pointers = [], []
        for name, value in tensors.items():
            if value is not None:
                if type(value) is not _torch_tensor_type:
                    return None
                geometry.append((name, value.shape, value.stride(), value.dtype, value.device))
                pointers.append(value.data_ptr())
        key = tuple(geometry)
        entry = self._entries.__dict__.get(key)
        if entry is None:
            entry = self._entry(key, tensors, prepare)
        args, views, current_stream, _ = entry
        for view, pointer in zip(views, pointers):
            view.data = pointer or None
        return args, (current_stream(self.device[1]) if current_stream is not None else None)

    def _entry(self, key, tensors, prepare):
        """The cached call of one geometry: (argument struct, its tensor structs in `key`'s
        order, the current-stream function on a GPU (None on the host), what the struct points
        at). Entries are the thread's own (a host workspace is per thread)."""
        cache = self._entries.__dict__
        if len(cache) >= 64:
            cache.clear()
        call = _Call(self.device, None, tensors)  # validates names and devices
        args = _new_args(self._struct, getattr(_lib.lib(), self._init_name))
        self._fill(call, args, tensors)
        views = [getattr(args, name).contents for name, *_ in key]
        if prepare is not None:
            prepare(args)
        current_stream = None
        if self.device[0] in _GPU_DEVICES:
            current_stream = _device.current_stream_function(call.framework)
        cache[key] = entry = (args, views, current_stream, call.keep)
        return entry


def _destroy_plan(handle):
    if handle:
        _lib.lib().dsv4_plan_destroy(handle)
        handle.value = None


_plan_ids = itertools.count(1)
_live_plans = weakref.WeakValueDictionary()


def plan_by_id(plan_id):
    """The live Plan whose `id` this is (framework ops carry plans as integers)."""
    found = _live_plans.get(plan_id)
    if found is None:
        raise ValueError("plan: no live dsv4 plan has id %d" % plan_id)
    return found


class Plan(_Closable):
    """An immutable dsv4_plan. Keyword options are dsv4_plan_options field names; swa_cache and
    extra_cache take a KvCacheDesc or a dict of its fields; q_dtype and out_dtype any dtype spec. `id` is an
    integer naming the plan for plan_by_id (unique in the process)."""

    def __init__(self, ctx, **options):
        lib = _lib.lib()
        c_options = _lib.init_struct(_lib.CPlanOptions, lib.dsv4_plan_options_init)
        fields = {name for name, _ in _lib.CPlanOptions._fields_} - {"struct_size"}
        for key, value in options.items():
            if key not in fields:
                raise TypeError("Plan() got an unknown option %r" % key)
            if key in ("swa_cache", "extra_cache"):
                _fill_cache_desc(getattr(c_options, key), value, key)
            elif key in ("q_dtype", "out_dtype"):
                setattr(c_options, key, _lib.CDType(*as_dtype(value)))
            else:
                setattr(c_options, key, value)
        self.ctx = ctx
        self.device = ctx.device
        self._handle = ctypes.c_void_p()  # shared with ctx._plan_handles; nulled when destroyed
        lib.dsv4_plan_create(ctx.handle, ctypes.byref(c_options), ctypes.byref(self._handle))
        ctx._plan_handles[id(self._handle)] = self._handle
        self.id = next(_plan_ids)
        _live_plans[self.id] = self
        size = ctypes.c_size_t(0)
        lib.dsv4_plan_get_workspace_size(self._handle, ctypes.byref(size))
        self._workspace_size = size.value  # the plan is immutable
        self._host_workspaces = threading.local()
        self._torch_path = _TorchFastPath(self.device, _lib.CRunArgs, "dsv4_run_args_init",
                                          _fill_run_args)
        # stream handle -> (framework tensor, its data pointer): runs read the pointer, no export
        self._device_workspaces = {}
        self._lock = threading.Lock()

    @property
    def handle(self):
        if not self._handle:
            raise ValueError("the plan is closed")
        return self._handle

    @property
    def workspace_size(self):
        self.handle  # raises once closed
        return self._workspace_size

    @property
    def info(self):
        info = _lib.out_struct(_lib.CPlanInfo)
        _lib.lib().dsv4_plan_get_info(self.handle, ctypes.byref(info))
        return PlanInfo(info.mode, info.num_heads, info.head_dim_qk, info.workspace_bytes,
                        _text(info.backend), _text(info.kernel))

    def _host_workspace(self):
        # One per thread: concurrent runs of a plan need distinct workspaces.
        size = self._workspace_size
        buffer = getattr(self._host_workspaces, "buffer", None)
        if buffer is None:
            buffer = self._host_workspaces.buffer = ctypes.create_string_buffer(max(size, 1))
        return ctypes.cast(buffer, ctypes.c_void_p), size

    def workspace(self, stream=None, framework=None):
        """The workspace this plan uses on `stream` when run without workspace=: allocated once
        per (plan, stream) through `framework` ("torch" or "cupy"; None: the one imported) on
        the plan's device, on first use. Call it before a CUDA graph capture so that the capture
        allocates nothing."""
        if self.device[0] == DeviceType.CPU:
            return None
        key = _device.stream_handle(stream)
        with self._lock:
            found = self._device_workspaces.get(key)
            if found is None:
                space = _device.allocate_bytes(framework, self.device, self._workspace_size)
                tensor = _Call(self.device, key, dict(workspace=space)).tensor("workspace", space)
                found = self._device_workspaces[key] = (space, tensor.pointer)
        return found[0]

    def set_workspace(self, workspace, stream=None):
        """Makes runs on `stream` that pass no workspace= use `workspace` (a tensor on the plan's
        GPU of at least workspace_size bytes, kept alive by the plan) instead of one the plan
        allocates. CPU plans use a host buffer per thread."""
        if self.device[0] == DeviceType.CPU:
            raise ValueError("workspace: CPU plans use a host buffer per thread")
        tensor = _Call(self.device, stream, dict(workspace=workspace)).tensor("workspace",
                                                                               workspace)
        if tensor.nbytes < self._workspace_size:
            raise ValueError("workspace: %d bytes but the plan needs %d" %
                             (tensor.nbytes, self._workspace_size))
        key = _device.stream_handle(stream)
        with self._lock:
            self._device_workspaces[key] = (workspace, tensor.pointer)

    def run(self, workspace=None, workspace_bytes=None, stream=None, **tensors):
        """One dsv4_run. Tensor keywords are dsv4_run_args field names (q, swa_cache, out,
        indices, ...): Tensors, torch tensors, DLPack producers, __cuda_array_interface__ or
        buffer objects on the plan's device. stream: a stream handle or object (None: the
        producer's current stream, see _Call). workspace: None (the plan's own: a host buffer per
        thread on CPU, one torch / CuPy tensor per stream on a GPU), a pointer with
        workspace_bytes, or a tensor on the plan's device."""
        self._run(tensors, workspace, workspace_bytes, stream)

    def _run(self, tensors, workspace=None, workspace_bytes=None, stream=None):
        """run() with the tensors as a dict (no keyword repacking: framework ops call this)."""
        if workspace is None and stream is None and _torch_tensor_type is not None and \
                self._run_torch(tensors):
            return
        lib = _lib.lib()
        args = _new_args(_lib.CRunArgs, lib.dsv4_run_args_init)
        call = _Call(self.device, stream, tensors)
        _fill_run_args(call, args, tensors)
        if workspace is None:
            args.workspace, args.workspace_bytes = self._own_workspace(call.stream, call.framework)
        elif isinstance(workspace, int):
            args.workspace = workspace
            args.workspace_bytes = workspace_bytes if workspace_bytes is not None else \
                self._workspace_size
        else:
            tensor = call.tensor("workspace", workspace)
            args.workspace = tensor.pointer
            args.workspace_bytes = tensor.nbytes if workspace_bytes is None else workspace_bytes
        args.stream = call.stream or None
        lib.dsv4_run(self.handle, ctypes.byref(args))

    def _own_workspace(self, stream, framework):
        """(pointer, bytes) of the plan's workspace for `stream` (allocated through `framework`
        on first use)."""
        if self.device[0] == DeviceType.CPU:
            return self._host_workspace()
        if not self._workspace_size:
            return None, 0
        found = self._device_workspaces.get(stream)
        if found is None:
            self.workspace(stream, framework)
            found = self._device_workspaces[stream]
        return found[1], self._workspace_size

    def _run_torch(self, tensors):
        """The torch fast path (_TorchFastPath) with the plan's workspace for the stream. False
        when a value is not a plain torch tensor."""
        found = self._torch_path.args(tensors, self._prepare_torch_args)
        if found is None:
            return False
        args, stream = found
        if stream is not None:
            workspace = self._device_workspaces.get(stream)
            args.workspace = workspace[1] if workspace is not None else \
                self._own_workspace(stream, "torch")[0]
            args.stream = stream or None
        _lib.lib().dsv4_run(self.handle, ctypes.byref(args))
        return True

    def _prepare_torch_args(self, args):
        """A new fast-path struct's workspace: its size; on the host, the thread's buffer."""
        args.workspace_bytes = self._workspace_size
        if self.device[0] not in _GPU_DEVICES:
            args.workspace = self._host_workspace()[0]

    def close(self):
        _destroy_plan(self._handle)
        self.ctx._plan_handles.pop(id(self._handle), None)
        self._device_workspaces.clear()


# ----------------------------------- KV writer, export, layouts ---------------------------------
def kv_write(ctx, cache_desc, values, slots, cache, stream=None):
    """dsv4_kv_write: quantises rows `values` [N, d] (bf16/fp32) into `cache` at `slots` [N]
    int32 (negative = skip). cache_desc: KvCacheDesc or dict. stream: as in Plan.run."""
    lib = _lib.lib()
    args = _new_args(_lib.CKvWriteArgs, lib.dsv4_kv_write_args_init)
    _fill_cache_desc(args.cache_desc, cache_desc, "cache_desc")
    call = _Call(ctx.device, stream, dict(values=values, slots=slots, cache=cache))
    args.values = call.pointer("values", values)
    args.slots = call.pointer("slots", slots)
    args.cache = call.pointer("cache", cache, writable=True)
    args.stream = call.stream or None
    lib.dsv4_kv_write(ctx.handle, ctypes.byref(args))


def export_indices(plan, format=ExportFormat.FLASHMLA, stream=None, **tensors):
    """dsv4_export_indices: the lists a paged run of `plan` would build. Batch keywords are
    dsv4_run_args names (query_start_loc, seq_lens, swa_block_table, cmp_block_table,
    slot_mapping, topk_indices, swa_cache, extra_cache); outputs are dsv4_export_args names
    (swa_indices, swa_lengths, cmp_indices, ...). stream: as in Plan.run."""
    lib = _lib.lib()
    batch = _new_args(_lib.CRunArgs, lib.dsv4_run_args_init)
    args = _new_args(_lib.CExportArgs, lib.dsv4_export_args_init)
    outputs = {k: v for k, v in tensors.items() if k in _lib.EXPORT_TENSORS}
    inputs = {k: v for k, v in tensors.items() if k not in outputs}
    call = _Call(plan.device, stream, tensors)
    _fill_run_args(call, batch, inputs)
    for name, value in outputs.items():
        if value is not None:
            setattr(args, name, call.pointer(name, value, writable=True))
    args.format = format
    args.batch = ctypes.pointer(batch)
    args.stream = call.stream or None
    lib.dsv4_export_indices(plan.handle, ctypes.byref(args))


def merge(ctx, stream=None, **tensors):
    """dsv4_merge (spec 12.2): out [T, H, 512] / lse [T, H] of the union of P disjoint key sets
    from their partial results out_parts [P, T, H, 512] and lse_parts [P, T, H] (computed without
    the sink), applying attn_sink [H] (optional) once (dsv4.torch.merge also takes other token
    dimensions). Keywords are dsv4_merge_args names; stream as in Plan.run."""
    ctx._merge(tensors, stream)


def kv_layout_info(layout, block_size):
    """Byte geometry of a KV layout for `block_size` entries per block."""
    info = _lib.init_struct(_lib.CKvLayoutInfo, _lib.lib().dsv4_kv_layout_info_init)
    _lib.lib().dsv4_kv_layout_get_info(layout, block_size, ctypes.byref(info))
    return KvLayoutInfo(info.layout, info.head_dim_qk, info.head_dim_v, info.bytes_per_token,
                        info.min_block_stride_bytes)
