//! Raw declarations of libdsv4's C ABI (`include/dsv4/dsv4.h`, `dsv4_types.h`, `dsv4_paged.h`):
//! `#[repr(C)]` structs, constants, the function pointer types, and [`Api`], the table of the
//! library's functions resolved with `dlopen`/`dlsym` at run time (no link-time dependency on
//! libdsv4).
//!
//! Statuses, layouts, device and dtype codes are plain integers, never Rust enums: a newer
//! library may return a value this crate does not know. Every struct, constant and function is
//! compared with the C compiler's view of the headers by this crate's `abi_table` test.
#![allow(non_camel_case_types)]

use std::ffi::{c_void, CStr, CString};
use std::os::raw::{c_char, c_int};

pub type dsv4_status = i32;

/// Opaque handles.
#[repr(C)]
pub struct dsv4_ctx {
    _private: [u8; 0],
}
#[repr(C)]
pub struct dsv4_plan {
    _private: [u8; 0],
}

pub type dsv4_log_fn =
    Option<unsafe extern "C" fn(level: i32, message: *const c_char, user_data: *mut c_void)>;

/// Name, offset and size of one field, as `std::mem` sees it (for the ABI test).
pub struct FieldLayout {
    pub name: &'static str,
    pub offset: usize,
    pub size: usize,
}

/// Size, alignment and fields of one struct, as `std::mem` sees it (for the ABI test).
pub struct StructLayout {
    pub name: &'static str,
    pub size: usize,
    pub align: usize,
    pub fields: Vec<FieldLayout>,
}

fn pointee_size<T>(_: *const T) -> usize {
    std::mem::size_of::<T>()
}

/// Declares the `#[repr(C)]` structs and [`struct_layouts`], which lists them all.
macro_rules! abi_structs {
    ($($(#[$meta:meta])* pub struct $name:ident { $(pub $field:ident: $fty:ty,)* })*) => {
        $(
            $(#[$meta])*
            #[repr(C)]
            #[derive(Clone, Copy)]
            pub struct $name { $(pub $field: $fty,)* }
        )*
        /// Every struct of the public headers with its layout.
        pub fn struct_layouts() -> Vec<StructLayout> {
            vec![$({
                let value = std::mem::MaybeUninit::<$name>::uninit();
                let base = value.as_ptr();
                StructLayout {
                    name: stringify!($name),
                    size: std::mem::size_of::<$name>(),
                    align: std::mem::align_of::<$name>(),
                    // SAFETY: addr_of! forms field addresses of the uninitialised value without
                    // reading it.
                    fields: vec![$(unsafe {
                        let field = std::ptr::addr_of!((*base).$field);
                        FieldLayout {
                            name: stringify!($field),
                            offset: field as *const u8 as usize - base as *const u8 as usize,
                            size: pointee_size(field),
                        }
                    },)*],
                }
            },)*]
        }
    };
}

abi_structs! {
    // ------------------------------------------ dsv4_types.h
    pub struct dsv4_device {
        pub device_type: i32,
        pub device_id: i32,
    }
    pub struct dsv4_dtype {
        pub code: u8,
        pub bits: u8,
        pub lanes: u16,
    }
    /// DLPack's DLTensor. Strides in elements; null strides = compact row-major.
    pub struct dsv4_tensor {
        pub data: *mut c_void,
        pub device: dsv4_device,
        pub ndim: i32,
        pub dtype: dsv4_dtype,
        pub shape: *mut i64,
        pub strides: *mut i64,
        pub byte_offset: u64,
    }
    pub struct dsv4_kv_cache_desc {
        pub layout: u32,
        pub block_size: i32,
        pub block_stride_bytes: i64,
        pub kv_scale: f32,
        pub flags: u32,
    }
    pub struct dsv4_kv_layout_info {
        pub struct_size: u32,
        pub layout: u32,
        pub head_dim_qk: i32,
        pub head_dim_v: i32,
        pub bytes_per_token: i32,
        pub reserved: i32,
        pub min_block_stride_bytes: i64,
    }
    // ------------------------------------------ dsv4.h
    pub struct dsv4_ctx_options {
        pub struct_size: u32,
        pub api_version: u32,
        pub device: dsv4_device,
        pub backend: *const c_char,
        pub module_dir: *const c_char,
        pub num_threads: i32,
        pub log_level: i32,
        pub log_fn: dsv4_log_fn,
        pub log_user_data: *mut c_void,
    }
    pub struct dsv4_backend_info {
        pub struct_size: u32,
        pub available: i32,
        pub score: i32,
        pub device_type: i32,
        pub device_count: i32,
        pub module_abi: u32,
        pub name: [c_char; 32],
        pub path: [c_char; 512],
        pub status: [c_char; 256],
    }
    pub struct dsv4_device_info {
        pub struct_size: u32,
        pub device_type: i32,
        pub device_id: i32,
        pub compute_units: i32,
        pub memory_bytes: i64,
        pub name: [c_char; 128],
    }
    pub struct dsv4_ctx_info {
        pub struct_size: u32,
        pub device: dsv4_device,
        pub num_threads: i32,
        pub backend: [c_char; 32],
        pub path: [c_char; 512],
        pub reason: [c_char; 256],
    }
    pub struct dsv4_plan_options {
        pub struct_size: u32,
        pub mode: u32,
        pub flags: u32,
        pub num_heads: i32,
        pub head_dim_qk: i32,
        pub head_dim_v: i32,
        pub softmax_scale: f32,
        pub q_dtype: dsv4_dtype,
        pub q_scale: f32,
        pub max_tokens: i32,
        pub swa_cache: dsv4_kv_cache_desc,
        pub extra_cache: dsv4_kv_cache_desc,
        pub index_format: u32,
        pub topk: i32,
        pub extra_topk: i32,
        pub compress_ratio: i32,
        pub window: i32,
        pub index_topk: i32,
        pub decode_threshold: i32,
        pub max_model_len: i64,
        pub max_requests: i32,
        pub max_swa_blocks_per_request: i32,
        pub max_cmp_blocks_per_request: i32,
        pub compressed_block_tokens: i32,
        pub out_dtype: dsv4_dtype,
    }
    pub struct dsv4_plan_info {
        pub struct_size: u32,
        pub mode: u32,
        pub num_heads: i32,
        pub head_dim_qk: i32,
        pub workspace_bytes: u64,
        pub backend: [c_char; 32],
        pub kernel: [c_char; 128],
    }
    pub struct dsv4_run_args {
        pub struct_size: u32,
        pub reserved: u32,
        pub q: *const dsv4_tensor,
        pub swa_cache: *const dsv4_tensor,
        pub extra_cache: *const dsv4_tensor,
        pub attn_sink: *const dsv4_tensor,
        pub out: *mut dsv4_tensor,
        pub lse: *mut dsv4_tensor,
        pub max_logits: *mut dsv4_tensor,
        pub indices: *const dsv4_tensor,
        pub indptr: *const dsv4_tensor,
        pub lengths: *const dsv4_tensor,
        pub extra_indices: *const dsv4_tensor,
        pub extra_indptr: *const dsv4_tensor,
        pub extra_lengths: *const dsv4_tensor,
        pub query_start_loc: *const dsv4_tensor,
        pub seq_lens: *const dsv4_tensor,
        pub swa_block_table: *const dsv4_tensor,
        pub cmp_block_table: *const dsv4_tensor,
        pub slot_mapping: *const dsv4_tensor,
        pub topk_indices: *const dsv4_tensor,
        pub workspace: *mut c_void,
        pub workspace_bytes: usize,
        pub stream: *mut c_void,
    }
    pub struct dsv4_kv_write_args {
        pub struct_size: u32,
        pub reserved: u32,
        pub cache_desc: dsv4_kv_cache_desc,
        pub values: *const dsv4_tensor,
        pub slots: *const dsv4_tensor,
        pub cache: *mut dsv4_tensor,
        pub stream: *mut c_void,
    }
    pub struct dsv4_merge_args {
        pub struct_size: u32,
        pub reserved: u32,
        pub out_parts: *const dsv4_tensor,
        pub lse_parts: *const dsv4_tensor,
        pub attn_sink: *const dsv4_tensor,
        pub out: *mut dsv4_tensor,
        pub lse: *mut dsv4_tensor,
        pub stream: *mut c_void,
    }
    // ------------------------------------------ dsv4_paged.h
    pub struct dsv4_export_args {
        pub struct_size: u32,
        pub format: u32,
        pub batch: *const dsv4_run_args,
        pub swa_indices: *mut dsv4_tensor,
        pub swa_lengths: *mut dsv4_tensor,
        pub swa_indptr: *mut dsv4_tensor,
        pub cmp_indices: *mut dsv4_tensor,
        pub cmp_lengths: *mut dsv4_tensor,
        pub cmp_indptr: *mut dsv4_tensor,
        pub combined_indices: *mut dsv4_tensor,
        pub combined_lengths: *mut dsv4_tensor,
        pub stream: *mut c_void,
    }
}

/// Declares the integer constants and [`CONSTANTS`], which lists them all by C name.
macro_rules! abi_constants {
    ($($name:ident: $ty:ty = $value:expr;)*) => {
        $(pub const $name: $ty = $value;)*
        /// Every constant of the public headers, by C name.
        pub const CONSTANTS: &[(&str, i64)] = &[$((stringify!($name), $name as i64),)*];
    };
}

abi_constants! {
    DSV4_VERSION_MAJOR: u32 = 0;
    DSV4_VERSION_MINOR: u32 = 2;
    DSV4_VERSION_PATCH: u32 = 0;
    DSV4_VERSION_NUMBER: u32 = DSV4_VERSION_MAJOR * 10000 + DSV4_VERSION_MINOR * 100 + DSV4_VERSION_PATCH;
    DSV4_API_VERSION: u32 = (DSV4_VERSION_MAJOR << 16) | DSV4_VERSION_MINOR;
    DSV4_STATUS_OK: dsv4_status = 0;
    DSV4_STATUS_INVALID_ARGUMENT: dsv4_status = 1;
    DSV4_STATUS_UNSUPPORTED: dsv4_status = 2;
    DSV4_STATUS_NO_BACKEND: dsv4_status = 3;
    DSV4_STATUS_BACKEND_ERROR: dsv4_status = 4;
    DSV4_STATUS_OUT_OF_MEMORY: dsv4_status = 5;
    DSV4_STATUS_WORKSPACE_TOO_SMALL: dsv4_status = 6;
    DSV4_STATUS_PLAN_MISMATCH: dsv4_status = 7;
    DSV4_STATUS_ABI_MISMATCH: dsv4_status = 8;
    DSV4_STATUS_INTERNAL: dsv4_status = 9;
    DSV4_DEVICE_CPU: i32 = 1;
    DSV4_DEVICE_CUDA: i32 = 2;
    DSV4_DEVICE_CUDA_HOST: i32 = 3;
    DSV4_DEVICE_OPENCL: i32 = 4;
    DSV4_DEVICE_ROCM: i32 = 10;
    DSV4_DEVICE_CUDA_MANAGED: i32 = 13;
    DSV4_DEVICE_ONEAPI: i32 = 14;
    DSV4_DTYPE_CODE_INT: u8 = 0;
    DSV4_DTYPE_CODE_UINT: u8 = 1;
    DSV4_DTYPE_CODE_FLOAT: u8 = 2;
    DSV4_DTYPE_CODE_BFLOAT: u8 = 4;
    DSV4_DTYPE_CODE_FLOAT8_E4M3FN: u8 = 10;
    DSV4_KV_LAYOUT_NONE: u32 = 0;
    DSV4_KV_LAYOUT_BF16: u32 = 1;
    DSV4_KV_LAYOUT_FP8_V4_584B: u32 = 2;
    DSV4_KV_LAYOUT_FP8_V32_656B: u32 = 3;
    DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR: u32 = 4;
    DSV4_KV_LAYOUT_FP16: u32 = 5;
    DSV4_KV_CACHE_FLAG_FP8_FNUZ: u32 = 1;
    DSV4_LOG_ERROR: i32 = 0;
    DSV4_LOG_WARN: i32 = 1;
    DSV4_LOG_INFO: i32 = 2;
    DSV4_LOG_DEBUG: i32 = 3;
    DSV4_MODE_EXPLICIT: u32 = 0;
    DSV4_MODE_PAGED: u32 = 1;
    DSV4_INDEX_DENSE: u32 = 0;
    DSV4_INDEX_CSR: u32 = 1;
    DSV4_PLAN_FLAG_NONE: u32 = 0;
    DSV4_PLAN_FLAG_BATCH_INVARIANT: u32 = 1;
    DSV4_PLAN_FLAG_REFERENCE_KERNEL: u32 = 2;
    DSV4_EXPORT_FLASHMLA: u32 = 0;
    DSV4_EXPORT_CSR: u32 = 1;
    DSV4_EXPORT_FLASHINFER: u32 = 2;
}

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *mut c_char;
}
const RTLD_NOW: c_int = 2;
const RTLD_LOCAL: c_int = 0;

/// The SONAME the dynamic linker's search looks for when DSV4_LIBRARY is unset.
pub const LIBRARY_SONAME: &str = "libdsv4.so.0";

/// Declares the function pointer types (`PFN_<name>`), [`Api`] and [`Api::SYMBOLS`].
macro_rules! abi_functions {
    ($($name:ident($($arg:ident: $aty:ty),*) -> $ret:ty;)*) => {
        pub mod pfn {
            #![allow(non_camel_case_types)]
            use super::*;
            $(pub type $name = unsafe extern "C" fn($($arg: $aty),*) -> $ret;)*
        }
        /// libdsv4's functions, resolved from one loaded library (never unloaded).
        #[allow(non_snake_case)]
        #[derive(Clone, Copy)]
        pub struct Api {
            $(pub $name: pfn::$name,)*
        }
        impl Api {
            /// Every function of the public headers, by C name.
            pub const SYMBOLS: &'static [&'static str] = &[$(stringify!($name),)*];

            /// Opens `path` (a file name searched by the dynamic linker, or a path) with
            /// RTLD_NOW | RTLD_LOCAL and resolves every function. The library stays loaded.
            pub fn open(path: &str) -> Result<Api, String> {
                let c_path = CString::new(path).map_err(|_| format!("{}: path holds a NUL", path))?;
                // SAFETY: dlopen/dlsym/dlerror are called with NUL-terminated strings; each
                // resolved symbol is the C function its name and type declare.
                unsafe {
                    let handle = dlopen(c_path.as_ptr(), RTLD_NOW | RTLD_LOCAL);
                    if handle.is_null() {
                        return Err(format!("cannot load {}: {}", path, last_dl_error()));
                    }
                    Ok(Api {
                        $($name: {
                            let symbol = dlsym(handle, concat!(stringify!($name), "\0").as_ptr() as *const c_char);
                            if symbol.is_null() {
                                return Err(format!("{}: missing symbol {}", path, stringify!($name)));
                            }
                            std::mem::transmute::<*mut c_void, pfn::$name>(symbol)
                        },)*
                    })
                }
            }

            /// `$DSV4_LIBRARY` if set, else [`LIBRARY_SONAME`] through the dynamic linker's
            /// usual search (LD_LIBRARY_PATH, RUNPATH, ld.so.cache, system directories).
            pub fn load() -> Result<Api, String> {
                match std::env::var("DSV4_LIBRARY") {
                    Ok(path) if !path.is_empty() => Api::open(&path),
                    _ => Api::open(LIBRARY_SONAME),
                }
            }
        }
    };
}

unsafe fn last_dl_error() -> String {
    let message = dlerror();
    if message.is_null() {
        "unknown error".to_string()
    } else {
        CStr::from_ptr(message).to_string_lossy().into_owned()
    }
}

abi_functions! {
    dsv4_get_version() -> u32;
    dsv4_get_version_string() -> *const c_char;
    dsv4_status_string(status: dsv4_status) -> *const c_char;
    dsv4_last_error_message() -> *const c_char;
    dsv4_ctx_options_init(options: *mut dsv4_ctx_options, struct_size: usize) -> dsv4_status;
    dsv4_ctx_create(options: *const dsv4_ctx_options, out_ctx: *mut *mut dsv4_ctx) -> dsv4_status;
    dsv4_ctx_destroy(ctx: *mut dsv4_ctx) -> ();
    dsv4_enumerate_backends(options: *const dsv4_ctx_options, out: *mut dsv4_backend_info, capacity: i32, out_count: *mut i32) -> dsv4_status;
    dsv4_get_device_info(options: *const dsv4_ctx_options, backend: *const c_char, index: i32, out_info: *mut dsv4_device_info) -> dsv4_status;
    dsv4_ctx_get_info(ctx: *const dsv4_ctx, out_info: *mut dsv4_ctx_info) -> dsv4_status;
    dsv4_kv_layout_info_init(info: *mut dsv4_kv_layout_info, struct_size: usize) -> dsv4_status;
    dsv4_kv_layout_get_info(layout: u32, block_size: i32, out_info: *mut dsv4_kv_layout_info) -> dsv4_status;
    dsv4_plan_options_init(options: *mut dsv4_plan_options, struct_size: usize) -> dsv4_status;
    dsv4_plan_create(ctx: *mut dsv4_ctx, options: *const dsv4_plan_options, out_plan: *mut *mut dsv4_plan) -> dsv4_status;
    dsv4_plan_destroy(plan: *mut dsv4_plan) -> ();
    dsv4_plan_get_workspace_size(plan: *const dsv4_plan, out_bytes: *mut usize) -> dsv4_status;
    dsv4_plan_get_info(plan: *const dsv4_plan, out_info: *mut dsv4_plan_info) -> dsv4_status;
    dsv4_run_args_init(args: *mut dsv4_run_args, struct_size: usize) -> dsv4_status;
    dsv4_run(plan: *const dsv4_plan, args: *const dsv4_run_args) -> dsv4_status;
    dsv4_kv_write_args_init(args: *mut dsv4_kv_write_args, struct_size: usize) -> dsv4_status;
    dsv4_kv_write(ctx: *mut dsv4_ctx, args: *const dsv4_kv_write_args) -> dsv4_status;
    dsv4_merge_args_init(args: *mut dsv4_merge_args, struct_size: usize) -> dsv4_status;
    dsv4_merge(ctx: *mut dsv4_ctx, args: *const dsv4_merge_args) -> dsv4_status;
    dsv4_export_args_init(args: *mut dsv4_export_args, struct_size: usize) -> dsv4_status;
    dsv4_export_indices(plan: *const dsv4_plan, args: *const dsv4_export_args) -> dsv4_status;
}
