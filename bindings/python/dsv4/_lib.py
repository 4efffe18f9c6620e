"""ctypes mirror of the libdsv4 C ABI: struct layouts, function signatures, library loading.

Every ctypes.Structure below copies its C struct field by field (order and types); the sizes and
offsets are checked against the pins of tests/abi/layout_asserts.c by the binding's tests.
"""
import ctypes
import ctypes.util
import os
import sys
import sysconfig
import threading

from ._constants import Status

_c = ctypes
_status = _c.c_int32
_size_t = _c.c_size_t


# ----------------------------------------- dsv4_types.h -----------------------------------------
class CDevice(_c.Structure):
    _fields_ = [("device_type", _c.c_int32), ("device_id", _c.c_int32)]


class CDType(_c.Structure):
    _fields_ = [("code", _c.c_uint8), ("bits", _c.c_uint8), ("lanes", _c.c_uint16)]


class CTensor(_c.Structure):
    """dsv4_tensor == DLPack's DLTensor."""
    _fields_ = [("data", _c.c_void_p), ("device", CDevice), ("ndim", _c.c_int32),
                ("dtype", CDType), ("shape", _c.POINTER(_c.c_int64)),
                ("strides", _c.POINTER(_c.c_int64)), ("byte_offset", _c.c_uint64)]


class CKvCacheDesc(_c.Structure):
    _fields_ = [("layout", _c.c_uint32), ("block_size", _c.c_int32),
                ("block_stride_bytes", _c.c_int64), ("kv_scale", _c.c_float),
                ("flags", _c.c_uint32)]


class CKvLayoutInfo(_c.Structure):
    _fields_ = [("struct_size", _c.c_uint32), ("layout", _c.c_uint32),
                ("head_dim_qk", _c.c_int32), ("head_dim_v", _c.c_int32),
                ("bytes_per_token", _c.c_int32), ("reserved", _c.c_int32),
                ("min_block_stride_bytes", _c.c_int64)]


# ------------------------------------------- dsv4.h ---------------------------------------------
LOG_FN = _c.CFUNCTYPE(None, _c.c_int32, _c.c_char_p, _c.c_void_p)


class CCtxOptions(_c.Structure):
    _fields_ = [("struct_size", _c.c_uint32), ("api_version", _c.c_uint32),
                ("device", CDevice), ("backend", _c.c_char_p), ("module_dir", _c.c_char_p),
                ("num_threads", _c.c_int32), ("log_level", _c.c_int32), ("log_fn", LOG_FN),
                ("log_user_data", _c.c_void_p)]


class CBackendInfo(_c.Structure):
    _fields_ = [("struct_size", _c.c_uint32), ("available", _c.c_int32), ("score", _c.c_int32),
                ("device_type", _c.c_int32), ("device_count", _c.c_int32),
                ("module_abi", _c.c_uint32), ("name", _c.c_char * 32), ("path", _c.c_char * 512),
                ("status", _c.c_char * 256)]


class CDeviceInfo(_c.Structure):
    _fields_ = [("struct_size", _c.c_uint32), ("device_type", _c.c_int32),
                ("device_id", _c.c_int32), ("compute_units", _c.c_int32),
                ("memory_bytes", _c.c_int64), ("name", _c.c_char * 128)]


class CCtxInfo(_c.Structure):
    _fields_ = [("struct_size", _c.c_uint32), ("device", CDevice), ("num_threads", _c.c_int32),
                ("backend", _c.c_char * 32), ("path", _c.c_char * 512),
                ("reason", _c.c_char * 256)]


class CPlanOptions(_c.Structure):
    _fields_ = [("struct_size", _c.c_uint32), ("mode", _c.c_uint32), ("flags", _c.c_uint32),
                ("num_heads", _c.c_int32), ("head_dim_qk", _c.c_int32),
                ("head_dim_v", _c.c_int32), ("softmax_scale", _c.c_float), ("q_dtype", CDType),
                ("q_scale", _c.c_float), ("max_tokens", _c.c_int32),
                ("swa_cache", CKvCacheDesc), ("extra_cache", CKvCacheDesc),
                ("index_format", _c.c_uint32), ("topk", _c.c_int32), ("extra_topk", _c.c_int32),
                ("compress_ratio", _c.c_int32), ("window", _c.c_int32),
                ("index_topk", _c.c_int32), ("decode_threshold", _c.c_int32),
                ("max_model_len", _c.c_int64), ("max_requests", _c.c_int32),
                ("max_swa_blocks_per_request", _c.c_int32),
                ("max_cmp_blocks_per_request", _c.c_int32),
                ("compressed_block_tokens", _c.c_int32), ("out_dtype", CDType)]


class CPlanInfo(_c.Structure):
    _fields_ = [("struct_size", _c.c_uint32), ("mode", _c.c_uint32), ("num_heads", _c.c_int32),
                ("head_dim_qk", _c.c_int32), ("workspace_bytes", _c.c_uint64),
                ("backend", _c.c_char * 32), ("kernel", _c.c_char * 128)]


# Tensor fields of dsv4_run_args, in declaration order (out/lse/max_logits are written).
RUN_TENSORS = ("q", "swa_cache", "extra_cache", "attn_sink", "out", "lse", "max_logits",
               "indices", "indptr", "lengths", "extra_indices", "extra_indptr", "extra_lengths",
               "query_start_loc", "seq_lens", "swa_block_table", "cmp_block_table",
               "slot_mapping", "topk_indices")


class CRunArgs(_c.Structure):
    _fields_ = ([("struct_size", _c.c_uint32), ("reserved", _c.c_uint32)] +
                [(name, _c.POINTER(CTensor)) for name in RUN_TENSORS] +
                [("workspace", _c.c_void_p), ("workspace_bytes", _size_t),
                 ("stream", _c.c_void_p)])


class CKvWriteArgs(_c.Structure):
    _fields_ = [("struct_size", _c.c_uint32), ("reserved", _c.c_uint32),
                ("cache_desc", CKvCacheDesc), ("values", _c.POINTER(CTensor)),
                ("slots", _c.POINTER(CTensor)), ("cache", _c.POINTER(CTensor)),
                ("stream", _c.c_void_p)]


# Tensor fields of dsv4_merge_args, in declaration order (out and lse are written).
MERGE_TENSORS = ("out_parts", "lse_parts", "attn_sink", "out", "lse")


class CMergeArgs(_c.Structure):
    _fields_ = ([("struct_size", _c.c_uint32), ("reserved", _c.c_uint32)] +
                [(name, _c.POINTER(CTensor)) for name in MERGE_TENSORS] +
                [("stream", _c.c_void_p)])


# ---------------------------------------- dsv4_paged.h ------------------------------------------
EXPORT_TENSORS = ("swa_indices", "swa_lengths", "swa_indptr", "cmp_indices", "cmp_lengths",
                  "cmp_indptr", "combined_indices", "combined_lengths")


class CExportArgs(_c.Structure):
    _fields_ = ([("struct_size", _c.c_uint32), ("format", _c.c_uint32),
                 ("batch", _c.POINTER(CRunArgs))] +
                [(name, _c.POINTER(CTensor)) for name in EXPORT_TENSORS] +
                [("stream", _c.c_void_p)])


# C type name -> mirror, for the layout tests.
STRUCTS = {
    "dsv4_device": CDevice, "dsv4_dtype": CDType, "dsv4_tensor": CTensor,
    "dsv4_kv_cache_desc": CKvCacheDesc, "dsv4_kv_layout_info": CKvLayoutInfo,
    "dsv4_ctx_options": CCtxOptions, "dsv4_backend_info": CBackendInfo,
    "dsv4_device_info": CDeviceInfo, "dsv4_ctx_info": CCtxInfo,
    "dsv4_plan_options": CPlanOptions, "dsv4_plan_info": CPlanInfo, "dsv4_run_args": CRunArgs,
    "dsv4_kv_write_args": CKvWriteArgs, "dsv4_export_args": CExportArgs,
    "dsv4_merge_args": CMergeArgs,
}

_P = _c.POINTER
_handle = _c.c_void_p  # dsv4_ctx* / dsv4_plan* (opaque)

# name -> (restype, argtypes). _status return types get the Dsv4Error errcheck.
SIGNATURES = {
    "dsv4_get_version": (_c.c_uint32, []),
    "dsv4_get_version_string": (_c.c_char_p, []),
    "dsv4_status_string": (_c.c_char_p, [_status]),
    "dsv4_last_error_message": (_c.c_char_p, []),
    "dsv4_ctx_options_init": (_status, [_P(CCtxOptions), _c.c_size_t]),
    "dsv4_ctx_create": (_status, [_P(CCtxOptions), _P(_handle)]),
    "dsv4_ctx_destroy": (None, [_handle]),
    "dsv4_enumerate_backends": (_status, [_P(CCtxOptions), _P(CBackendInfo), _c.c_int32,
                                          _P(_c.c_int32)]),
    "dsv4_get_device_info": (_status, [_P(CCtxOptions), _c.c_char_p, _c.c_int32,
                                       _P(CDeviceInfo)]),
    "dsv4_ctx_get_info": (_status, [_handle, _P(CCtxInfo)]),
    "dsv4_kv_layout_info_init": (_status, [_P(CKvLayoutInfo), _c.c_size_t]),
    "dsv4_kv_layout_get_info": (_status, [_c.c_uint32, _c.c_int32, _P(CKvLayoutInfo)]),
    "dsv4_plan_options_init": (_status, [_P(CPlanOptions), _c.c_size_t]),
    "dsv4_plan_create": (_status, [_handle, _P(CPlanOptions), _P(_handle)]),
    "dsv4_plan_destroy": (None, [_handle]),
    "dsv4_plan_get_workspace_size": (_status, [_handle, _P(_size_t)]),
    "dsv4_plan_get_info": (_status, [_handle, _P(CPlanInfo)]),
    "dsv4_run_args_init": (_status, [_P(CRunArgs), _c.c_size_t]),
    "dsv4_run": (_status, [_handle, _P(CRunArgs)]),
    "dsv4_kv_write_args_init": (_status, [_P(CKvWriteArgs), _c.c_size_t]),
    "dsv4_kv_write": (_status, [_handle, _P(CKvWriteArgs)]),
    "dsv4_export_args_init": (_status, [_P(CExportArgs), _c.c_size_t]),
    "dsv4_export_indices": (_status, [_handle, _P(CExportArgs)]),
    "dsv4_merge_args_init": (_status, [_P(CMergeArgs), _c.c_size_t]),
    "dsv4_merge": (_status, [_handle, _P(CMergeArgs)]),
}


class Dsv4Error(RuntimeError):
    """A libdsv4 call returned a non-zero status. `message` is dsv4_last_error_message(), read
    on the calling thread right after the call; it names the argument at fault."""

    def __init__(self, status, function, message):
        try:
            status = Status(status)
        except ValueError:
            pass  # a newer library's status: keep the integer
        self.status = status
        self.function = function
        self.message = message
        name = status.name if isinstance(status, Status) else "status %d" % status
        super().__init__("%s: %s: %s" % (function, name, message))


def _errcheck(lib):
    message = lib.dsv4_last_error_message

    def check(result, function, arguments):
        if result != 0:
            # errcheck runs on the calling thread before any other library call of that thread.
            raise Dsv4Error(result, function.__name__, (message() or b"").decode(errors="replace"))
        return result
    return check


LIBRARY_NAME = "libdsv4.so.0"


def _candidates(path):
    """Library paths to try, in order (see load_library)."""
    if path:
        return [os.fspath(path)]
    found = []
    env = os.environ.get("DSV4_LIBRARY")
    if env:
        found.append(env)
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from . import _paths  # written by cmake --install or by a pip install given DSV4_LIBRARY
        found.append(os.path.normpath(os.path.join(here, _paths.LIBRARY)))
    except ImportError:
        pass
    directories = [here, os.path.dirname(here)]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    for libdir in ["lib", "lib64"] + (["lib/" + multiarch] if multiarch else []):
        directories.append(os.path.join(sys.prefix, libdir))
    for directory in directories:
        candidate = os.path.join(directory, LIBRARY_NAME)
        if os.path.exists(candidate):
            found.append(candidate)
    found.append(ctypes.util.find_library("dsv4") or LIBRARY_NAME)
    return found


def _bind(lib):
    check = _errcheck(lib)
    for name, (restype, argtypes) in SIGNATURES.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
        if restype is _status:
            function.errcheck = check
    return lib


_loaded = None
_lock = threading.Lock()


def load_library(path=None):
    """Loads libdsv4 once (RTLD_LOCAL), from the first of: `path`; $DSV4_LIBRARY; the path
    recorded at install time in dsv4/_paths.py (cmake --install: relative to the package; pip
    install with DSV4_LIBRARY set: that path); libdsv4.so.0 beside the package; sys.prefix/lib
    (lib64, lib/<multiarch>), e.g. a venv the library was installed into with
    `cmake --install build --prefix $VIRTUAL_ENV`; the dynamic linker's search. The library finds
    its backend modules itself (<its directory>/dsv4/backends). A later call with a different
    explicit path is an error; without a path it returns the library already loaded."""
    global _loaded
    with _lock:
        if _loaded is not None:
            if path and os.path.realpath(os.fspath(path)) != os.path.realpath(_loaded._name):
                raise RuntimeError("libdsv4 is already loaded from %s" % _loaded._name)
            return _loaded
        errors = []
        for candidate in _candidates(path):
            try:
                _loaded = _bind(ctypes.CDLL(candidate, mode=os.RTLD_LOCAL))
                return _loaded
            except OSError as error:
                errors.append("%s: %s" % (candidate, error))
        raise OSError("cannot load libdsv4 (set DSV4_LIBRARY): " + "; ".join(errors))


def lib():
    return _loaded if _loaded is not None else load_library()


def init_struct(cls, init_function):
    """Runs a dsv4_*_init function for our struct; passing our sizeof means a newer library writes
    only the fields this binding knows."""
    value = cls()
    init_function(_c.byref(value), _c.sizeof(cls))
    return value


def out_struct(cls):
    """An output struct whose struct_size tells the library how much it may write."""
    value = cls()
    if "struct_size" in dict(cls._fields_):
        value.struct_size = _c.sizeof(cls)
    return value
