//! libdsv4 from Rust: DeepSeek-V4 sparse MLA attention behind a safe wrapper of the C ABI.
//!
//! ```no_run
//! use dsv4::{Bf16, Context, PlanOptions, RunArgs, Tensor};
//! # fn main() -> Result<(), dsv4::Error> {
//! let ctx = Context::cpu()?; // CPU tensors; the backend is chosen by probing
//! let mut options = PlanOptions::new()?; // dsv4_plan_options with its defaults
//! options.num_heads = 8;
//! options.max_tokens = 2;
//! options.topk = 4;
//! options.swa_cache.layout = dsv4::sys::DSV4_KV_LAYOUT_BF16;
//! options.swa_cache.block_size = 4;
//! let plan = ctx.plan(&options)?;
//! let q = vec![Bf16(0x3c00); 2 * 8 * 512];
//! let cache = vec![Bf16(0x3f80); 4 * 512];
//! let indices: Vec<i32> = vec![0, 1, 2, 3, 3, 2, -1, -1];
//! let mut out = vec![Bf16(0); 2 * 8 * 512];
//! let (q, cache) = (Tensor::new(&q, &[2, 8, 512])?, Tensor::new(&cache, &[1, 4, 512])?);
//! let indices = Tensor::new(&indices, &[2, 4])?;
//! let out = Tensor::new_mut(&mut out, &[2, 8, 512])?;
//! let mut args = RunArgs { q: Some(&q), swa_cache: Some(&cache), indices: Some(&indices),
//!                          out: Some(&out), ..RunArgs::default() };
//! plan.run(&mut args)?;
//! # Ok(())
//! # }
//! ```
//!
//! The library is loaded at run time: `$DSV4_LIBRARY`, else `libdsv4.so.0` through the dynamic
//! linker's search (or [`load_library`] first). Every failing call returns [`Error`] with the
//! status, the C function and `dsv4_last_error_message()` (read on the calling thread right
//! after the call).
//!
//! Threads follow the C contract: a [`Context`] is thread-safe (`Send + Sync`); a [`Plan`] is
//! immutable and runs on several threads at once (`Send + Sync`), each run with its own
//! workspace (a `&mut` borrow, or one allocated for the call). A plan keeps its context alive,
//! and a closed plan cannot be used:
//!
//! ```compile_fail
//! # fn f(plan: dsv4::Plan, args: &mut dsv4::RunArgs) {
//! plan.close();
//! plan.run(args); // use of a moved value
//! # }
//! ```
use std::ffi::{c_void, CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::os::raw::c_char;
use std::path::PathBuf;
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex};

pub use dsv4_sys as sys;
use sys::Api;

// ---------------------------------------------------------------------------------------------
// Errors and loading
// ---------------------------------------------------------------------------------------------

/// A failing libdsv4 call (or a check of this binding's own, with `DSV4_STATUS_INVALID_ARGUMENT`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: sys::dsv4_status,
    function: &'static str,
    message: String,
}

impl Error {
    pub fn new(
        status: sys::dsv4_status,
        function: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Error { status, function, message: message.into() }
    }
    /// The `DSV4_STATUS_*` value.
    pub fn status(&self) -> sys::dsv4_status {
        self.status
    }
    /// "DSV4_STATUS_INVALID_ARGUMENT", ... ("DSV4_STATUS_UNKNOWN" for a value this crate does not
    /// know).
    pub fn status_name(&self) -> &'static str {
        sys::CONSTANTS
            .iter()
            .find(|(name, value)| name.starts_with("DSV4_STATUS_") && *value == self.status as i64)
            .map_or("DSV4_STATUS_UNKNOWN", |(name, _)| name)
    }
    /// The C function (or binding check) that failed.
    pub fn function(&self) -> &'static str {
        self.function
    }
    /// libdsv4's message, naming the argument at fault.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.function, self.status_name(), self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

fn invalid(function: &'static str, message: impl Into<String>) -> Error {
    Error::new(sys::DSV4_STATUS_INVALID_ARGUMENT, function, message)
}

static LIBRARY: Mutex<Option<&'static Api>> = Mutex::new(None);

fn install(result: std::result::Result<Api, String>) -> Result<&'static Api> {
    let api = result.map_err(|e| Error::new(sys::DSV4_STATUS_NO_BACKEND, "dlopen", e))?;
    Ok(Box::leak(Box::new(api)))
}

/// Loads libdsv4 from `path` unless a library is loaded already; returns the one in use.
pub fn load_library(path: &str) -> Result<&'static Api> {
    let mut slot = LIBRARY.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_none() {
        *slot = Some(install(Api::open(path))?);
    }
    Ok(slot.expect("set above"))
}

/// The loaded library: `$DSV4_LIBRARY`, else `libdsv4.so.0` (loaded on first use).
pub fn library() -> Result<&'static Api> {
    let mut slot = LIBRARY.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_none() {
        *slot = Some(install(Api::load())?);
    }
    Ok(slot.expect("set above"))
}

fn check(api: &Api, status: sys::dsv4_status, function: &'static str) -> Result<()> {
    if status == sys::DSV4_STATUS_OK {
        return Ok(());
    }
    // SAFETY: the message is thread-local and valid until the next failing call on this thread.
    let message = unsafe { text((api.dsv4_last_error_message)()) };
    Err(Error::new(status, function, message))
}

/// A NUL-terminated C string (static or borrowed) as an owned String.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

fn chars(array: &[c_char]) -> String {
    let bytes: Vec<u8> = array.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The loaded library's version string ("0.1.0").
pub fn version() -> Result<String> {
    let api = library()?;
    // SAFETY: returns static storage.
    Ok(unsafe { text((api.dsv4_get_version_string)()) })
}

// ---------------------------------------------------------------------------------------------
// Devices, dtypes, elements
// ---------------------------------------------------------------------------------------------

/// Where tensors live (DLPack device codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Device {
    pub device_type: i32,
    pub device_id: i32,
}

impl Device {
    pub const CPU: Device = Device { device_type: sys::DSV4_DEVICE_CPU, device_id: 0 };
    pub fn cuda(id: i32) -> Device {
        Device { device_type: sys::DSV4_DEVICE_CUDA, device_id: id }
    }
    pub fn opencl(id: i32) -> Device {
        Device { device_type: sys::DSV4_DEVICE_OPENCL, device_id: id }
    }
    fn raw(self) -> sys::dsv4_device {
        sys::dsv4_device { device_type: self.device_type, device_id: self.device_id }
    }
}

/// An element type (DLPack dtype codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

impl DType {
    pub const BF16: DType = DType::new(sys::DSV4_DTYPE_CODE_BFLOAT, 16);
    pub const F16: DType = DType::new(sys::DSV4_DTYPE_CODE_FLOAT, 16);
    pub const F32: DType = DType::new(sys::DSV4_DTYPE_CODE_FLOAT, 32);
    pub const F64: DType = DType::new(sys::DSV4_DTYPE_CODE_FLOAT, 64);
    pub const I8: DType = DType::new(sys::DSV4_DTYPE_CODE_INT, 8);
    pub const I32: DType = DType::new(sys::DSV4_DTYPE_CODE_INT, 32);
    pub const I64: DType = DType::new(sys::DSV4_DTYPE_CODE_INT, 64);
    pub const U8: DType = DType::new(sys::DSV4_DTYPE_CODE_UINT, 8);
    pub const U16: DType = DType::new(sys::DSV4_DTYPE_CODE_UINT, 16);
    pub const E4M3: DType = DType::new(sys::DSV4_DTYPE_CODE_FLOAT8_E4M3FN, 8);
    pub const fn new(code: u8, bits: u8) -> DType {
        DType { code, bits, lanes: 1 }
    }
    fn raw(self) -> sys::dsv4_dtype {
        sys::dsv4_dtype { code: self.code, bits: self.bits, lanes: self.lanes }
    }
    fn bytes(self) -> usize {
        (self.bits as usize * self.lanes as usize + 7) / 8
    }
}

/// bfloat16 bits.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bf16(pub u16);

/// IEEE binary16 bits.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct F16(pub u16);

/// Element types a slice tensor may hold, with their dtype.
///
/// # Safety
/// `DTYPE` must describe `Self`'s size, and `Self` must be plain data (any bytes valid).
pub unsafe trait Element: Copy {
    const DTYPE: DType;
}
macro_rules! elements {
    ($($t:ty => $d:expr,)*) => { $(unsafe impl Element for $t { const DTYPE: DType = $d; })* };
}
elements! {
    Bf16 => DType::BF16, F16 => DType::F16, f32 => DType::F32, f64 => DType::F64,
    i8 => DType::I8, i32 => DType::I32, i64 => DType::I64, u8 => DType::U8, u16 => DType::U16,
}

// ---------------------------------------------------------------------------------------------
// Tensors
// ---------------------------------------------------------------------------------------------

/// A borrowed `dsv4_tensor` over a slice (its lifetime is `'a`) or over raw memory. Nothing is
/// copied; the shape and strides live inside the tensor.
pub struct Tensor<'a> {
    raw: sys::dsv4_tensor,
    shape: Box<[i64]>,
    strides: Option<Box<[i64]>>,
    bytes: Option<usize>, // the slice's length in bytes; None for raw memory
    writable: bool,
    _data: PhantomData<&'a mut [u8]>,
}

impl<'a> Tensor<'a> {
    fn build(
        data: *mut c_void,
        bytes: Option<usize>,
        writable: bool,
        device: Device,
        dtype: DType,
        shape: &[i64],
    ) -> Result<Tensor<'a>> {
        let shape: Box<[i64]> = shape.into();
        let mut t = Tensor {
            raw: sys::dsv4_tensor {
                data,
                device: device.raw(),
                ndim: shape.len() as i32,
                dtype: dtype.raw(),
                shape: ptr::null_mut(),
                strides: ptr::null_mut(),
                byte_offset: 0,
            },
            shape,
            strides: None,
            bytes,
            writable,
            _data: PhantomData,
        };
        t.raw.shape = t.shape.as_ptr() as *mut i64;
        t.check_extent("dsv4::Tensor")?;
        Ok(t)
    }

    /// A read-only compact row-major tensor over `data`. Fails when `data` is shorter than the
    /// shape.
    pub fn new<T: Element>(data: &'a [T], shape: &[i64]) -> Result<Tensor<'a>> {
        Tensor::build(
            data.as_ptr() as *mut c_void,
            Some(std::mem::size_of_val(data)),
            false,
            Device::CPU,
            T::DTYPE,
            shape,
        )
    }
    /// A writable compact row-major tensor over `data` (outputs, caches).
    pub fn new_mut<T: Element>(data: &'a mut [T], shape: &[i64]) -> Result<Tensor<'a>> {
        Tensor::build(
            data.as_mut_ptr() as *mut c_void,
            Some(std::mem::size_of_val(data)),
            true,
            Device::CPU,
            T::DTYPE,
            shape,
        )
    }
    /// Bytes viewed as `dtype` (e.g. a cache file read as bytes).
    pub fn from_bytes(data: &'a [u8], dtype: DType, shape: &[i64]) -> Result<Tensor<'a>> {
        Tensor::build(
            data.as_ptr() as *mut c_void,
            Some(data.len()),
            false,
            Device::CPU,
            dtype,
            shape,
        )
    }
    pub fn from_bytes_mut(data: &'a mut [u8], dtype: DType, shape: &[i64]) -> Result<Tensor<'a>> {
        Tensor::build(
            data.as_mut_ptr() as *mut c_void,
            Some(data.len()),
            true,
            Device::CPU,
            dtype,
            shape,
        )
    }

    /// Memory this crate cannot see, e.g. a device pointer (writable; no length check).
    ///
    /// # Safety
    /// `data` must stay valid, on `device`, for every element the shape and strides reach, for
    /// as long as libdsv4 may use it (until the enqueued work completes on GPU backends).
    pub unsafe fn from_raw(
        data: *mut c_void,
        device: Device,
        dtype: DType,
        shape: &[i64],
        strides: Option<&[i64]>,
    ) -> Result<Tensor<'static>> {
        let t = Tensor::build(data, None, true, device, dtype, shape)?;
        match strides {
            Some(s) => t.with_strides(s),
            None => Ok(t),
        }
    }

    /// Strides in elements (one per dimension, non-negative). For slices the farthest element
    /// must lie inside the slice.
    pub fn with_strides(mut self, strides: &[i64]) -> Result<Tensor<'a>> {
        if strides.len() != self.shape.len() || strides.iter().any(|&s| s < 0) {
            return Err(invalid(
                "dsv4::Tensor::with_strides",
                "one non-negative stride per dimension is needed",
            ));
        }
        let strides: Box<[i64]> = strides.into();
        self.raw.strides = strides.as_ptr() as *mut i64;
        self.strides = Some(strides);
        self.check_extent("dsv4::Tensor::with_strides")?;
        Ok(self)
    }

    /// The same bytes as another dtype of the same width (bf16 held in `u16`).
    pub fn with_dtype(mut self, dtype: DType) -> Result<Tensor<'a>> {
        if dtype.bytes() != DType::from_raw(self.raw.dtype).bytes() {
            return Err(invalid("dsv4::Tensor::with_dtype", "dtype of another width"));
        }
        self.raw.dtype = dtype.raw();
        Ok(self)
    }

    pub fn shape(&self) -> &[i64] {
        &self.shape
    }
    pub fn dtype(&self) -> DType {
        DType::from_raw(self.raw.dtype)
    }
    pub fn is_writable(&self) -> bool {
        self.writable
    }
    /// The C struct (valid while `self` is).
    pub fn as_raw(&self) -> *const sys::dsv4_tensor {
        &self.raw
    }

    // Bytes up to and including the farthest element the view reaches.
    fn check_extent(&self, function: &'static str) -> Result<()> {
        let available = match self.bytes {
            Some(bytes) => bytes,
            None => return Ok(()),
        };
        let element = DType::from_raw(self.raw.dtype).bytes() as i64;
        let mut needed = element;
        if self.shape.contains(&0) {
            needed = 0;
        } else {
            for (i, &extent) in self.shape.iter().enumerate() {
                if extent < 0 {
                    return Err(invalid(
                        function,
                        format!("shape[{}] = {} is negative", i, extent),
                    ));
                }
                let stride = match &self.strides {
                    Some(s) => s[i],
                    None => self.shape[i + 1..].iter().product(),
                };
                needed += (extent - 1) * stride * element;
            }
        }
        if needed as u128 > available as u128 {
            return Err(invalid(
                function,
                format!(
                    "buffer of {} bytes is shorter than its shape {:?} needs ({} bytes)",
                    available, self.shape, needed
                ),
            ));
        }
        Ok(())
    }

    fn output(&self, field: &'static str) -> Result<*mut sys::dsv4_tensor> {
        if !self.writable {
            return Err(invalid(
                field,
                format!("{} is a read-only buffer, but libdsv4 writes it", field),
            ));
        }
        Ok(&self.raw as *const sys::dsv4_tensor as *mut sys::dsv4_tensor)
    }
}

impl DType {
    fn from_raw(d: sys::dsv4_dtype) -> DType {
        DType { code: d.code, bits: d.bits, lanes: d.lanes }
    }
}

fn input(t: Option<&Tensor<'_>>) -> *const sys::dsv4_tensor {
    t.map_or(ptr::null(), |t| t.as_raw())
}

fn output(t: Option<&Tensor<'_>>, field: &'static str) -> Result<*mut sys::dsv4_tensor> {
    t.map_or(Ok(ptr::null_mut()), |t| t.output(field))
}

// ---------------------------------------------------------------------------------------------
// Run arguments
// ---------------------------------------------------------------------------------------------

/// Where a run's workspace comes from.
pub enum Workspace<'a> {
    /// A host buffer of the plan's size allocated for the call (CPU contexts only).
    Auto,
    /// A host buffer (CPU contexts).
    Host(&'a mut [u8]),
    /// Memory on the plan's device, e.g. from cudaMalloc.
    Raw { data: *mut c_void, bytes: usize },
}

/// `dsv4_run_args`: the tensors of one run, by their C field names (`None` = NULL).
pub struct RunArgs<'t> {
    pub q: Option<&'t Tensor<'t>>,
    pub swa_cache: Option<&'t Tensor<'t>>,
    pub extra_cache: Option<&'t Tensor<'t>>,
    pub attn_sink: Option<&'t Tensor<'t>>,
    pub out: Option<&'t Tensor<'t>>,
    pub lse: Option<&'t Tensor<'t>>,
    pub max_logits: Option<&'t Tensor<'t>>,
    pub indices: Option<&'t Tensor<'t>>,
    pub indptr: Option<&'t Tensor<'t>>,
    pub lengths: Option<&'t Tensor<'t>>,
    pub extra_indices: Option<&'t Tensor<'t>>,
    pub extra_indptr: Option<&'t Tensor<'t>>,
    pub extra_lengths: Option<&'t Tensor<'t>>,
    pub query_start_loc: Option<&'t Tensor<'t>>,
    pub seq_lens: Option<&'t Tensor<'t>>,
    pub swa_block_table: Option<&'t Tensor<'t>>,
    pub cmp_block_table: Option<&'t Tensor<'t>>,
    pub slot_mapping: Option<&'t Tensor<'t>>,
    pub topk_indices: Option<&'t Tensor<'t>>,
    pub workspace: Workspace<'t>,
    /// Backend-native stream (cudaStream_t) or null.
    pub stream: *mut c_void,
}

impl<'t> Default for RunArgs<'t> {
    fn default() -> Self {
        RunArgs {
            q: None,
            swa_cache: None,
            extra_cache: None,
            attn_sink: None,
            out: None,
            lse: None,
            max_logits: None,
            indices: None,
            indptr: None,
            lengths: None,
            extra_indices: None,
            extra_indptr: None,
            extra_lengths: None,
            query_start_loc: None,
            seq_lens: None,
            swa_block_table: None,
            cmp_block_table: None,
            slot_mapping: None,
            topk_indices: None,
            workspace: Workspace::Auto,
            stream: ptr::null_mut(),
        }
    }
}

impl<'t> RunArgs<'t> {
    /// Sets a tensor by its `dsv4_run_args` field name.
    pub fn set(&mut self, field: &str, tensor: &'t Tensor<'t>) -> Result<()> {
        let slot = match field {
            "q" => &mut self.q,
            "swa_cache" => &mut self.swa_cache,
            "extra_cache" => &mut self.extra_cache,
            "attn_sink" => &mut self.attn_sink,
            "out" => &mut self.out,
            "lse" => &mut self.lse,
            "max_logits" => &mut self.max_logits,
            "indices" => &mut self.indices,
            "indptr" => &mut self.indptr,
            "lengths" => &mut self.lengths,
            "extra_indices" => &mut self.extra_indices,
            "extra_indptr" => &mut self.extra_indptr,
            "extra_lengths" => &mut self.extra_lengths,
            "query_start_loc" => &mut self.query_start_loc,
            "seq_lens" => &mut self.seq_lens,
            "swa_block_table" => &mut self.swa_block_table,
            "cmp_block_table" => &mut self.cmp_block_table,
            "slot_mapping" => &mut self.slot_mapping,
            "topk_indices" => &mut self.topk_indices,
            _ => return Err(invalid("dsv4::RunArgs::set", format!("no tensor field {:?}", field))),
        };
        *slot = Some(tensor);
        Ok(())
    }

    fn raw(&self, api: &Api) -> Result<sys::dsv4_run_args> {
        // SAFETY: a zeroed dsv4_run_args is valid (null pointers); init sets struct_size.
        let mut a: sys::dsv4_run_args = unsafe { std::mem::zeroed() };
        check(
            api,
            unsafe { (api.dsv4_run_args_init)(&mut a, std::mem::size_of_val(&a)) },
            "dsv4_run_args_init",
        )?;
        a.q = input(self.q);
        a.swa_cache = input(self.swa_cache);
        a.extra_cache = input(self.extra_cache);
        a.attn_sink = input(self.attn_sink);
        a.out = output(self.out, "out")?;
        a.lse = output(self.lse, "lse")?;
        a.max_logits = output(self.max_logits, "max_logits")?;
        a.indices = input(self.indices);
        a.indptr = input(self.indptr);
        a.lengths = input(self.lengths);
        a.extra_indices = input(self.extra_indices);
        a.extra_indptr = input(self.extra_indptr);
        a.extra_lengths = input(self.extra_lengths);
        a.query_start_loc = input(self.query_start_loc);
        a.seq_lens = input(self.seq_lens);
        a.swa_block_table = input(self.swa_block_table);
        a.cmp_block_table = input(self.cmp_block_table);
        a.slot_mapping = input(self.slot_mapping);
        a.topk_indices = input(self.topk_indices);
        a.stream = self.stream;
        Ok(a)
    }
}

/// `dsv4_export_args`: the paged batch (`RunArgs`' paged fields and caches) and the outputs.
pub struct ExportArgs<'t> {
    pub format: u32,
    pub batch: RunArgs<'t>,
    pub swa_indices: Option<&'t Tensor<'t>>,
    pub swa_lengths: Option<&'t Tensor<'t>>,
    pub swa_indptr: Option<&'t Tensor<'t>>,
    pub cmp_indices: Option<&'t Tensor<'t>>,
    pub cmp_lengths: Option<&'t Tensor<'t>>,
    pub cmp_indptr: Option<&'t Tensor<'t>>,
    pub combined_indices: Option<&'t Tensor<'t>>,
    pub combined_lengths: Option<&'t Tensor<'t>>,
}

impl<'t> ExportArgs<'t> {
    pub fn new(format: u32, batch: RunArgs<'t>) -> Self {
        ExportArgs {
            format,
            batch,
            swa_indices: None,
            swa_lengths: None,
            swa_indptr: None,
            cmp_indices: None,
            cmp_lengths: None,
            cmp_indptr: None,
            combined_indices: None,
            combined_lengths: None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

/// `dsv4_plan_options` with the library's defaults; set the C fields through `Deref`.
#[derive(Clone, Copy)]
pub struct PlanOptions(pub sys::dsv4_plan_options);

impl PlanOptions {
    pub fn new() -> Result<PlanOptions> {
        let api = library()?;
        // SAFETY: a zeroed options struct is valid; init fills it within its size.
        let mut o: sys::dsv4_plan_options = unsafe { std::mem::zeroed() };
        check(
            api,
            unsafe { (api.dsv4_plan_options_init)(&mut o, std::mem::size_of_val(&o)) },
            "dsv4_plan_options_init",
        )?;
        Ok(PlanOptions(o))
    }
}

impl std::ops::Deref for PlanOptions {
    type Target = sys::dsv4_plan_options;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}
impl std::ops::DerefMut for PlanOptions {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// `dsv4_kv_cache_desc` of a layout (`block_stride_bytes` 0 = the layout's minimum). Set `flags`
/// (`DSV4_KV_CACHE_FLAG_*`) or `kv_scale` on the result where needed.
pub fn cache_desc(
    layout: u32,
    block_size: i32,
    block_stride_bytes: i64,
) -> sys::dsv4_kv_cache_desc {
    sys::dsv4_kv_cache_desc { layout, block_size, block_stride_bytes, kv_scale: 1.0, flags: 0 }
}

/// `dsv4_merge_args`: P partial results (`out_parts` [P, T, H, 512], `lse_parts` [P, T, H],
/// computed without the sink) merged into `out` [T, H, 512] (and `lse` [T, H]), the sink applied
/// once (spec 12.2).
pub struct MergeArgs<'t> {
    pub out_parts: Option<&'t Tensor<'t>>,
    pub lse_parts: Option<&'t Tensor<'t>>,
    pub attn_sink: Option<&'t Tensor<'t>>,
    pub out: Option<&'t Tensor<'t>>,
    pub lse: Option<&'t Tensor<'t>>,
    /// Backend-native stream or null.
    pub stream: *mut c_void,
}

impl<'t> Default for MergeArgs<'t> {
    fn default() -> Self {
        MergeArgs {
            out_parts: None,
            lse_parts: None,
            attn_sink: None,
            out: None,
            lse: None,
            stream: ptr::null_mut(),
        }
    }
}

/// What `dsv4_ctx_options` holds.
#[derive(Clone, Debug)]
pub struct ContextOptions {
    pub device: Device,
    /// Module name ("cpu", "cuda"); None = DSV4_BACKEND, then probing.
    pub backend: Option<String>,
    pub module_dir: Option<PathBuf>,
    pub num_threads: i32,
    pub log_level: i32,
}

impl Default for ContextOptions {
    fn default() -> Self {
        ContextOptions {
            device: Device::CPU,
            backend: None,
            module_dir: None,
            num_threads: 0,
            log_level: -1,
        }
    }
}

// The C options and the strings they point at.
struct RawContextOptions {
    raw: sys::dsv4_ctx_options,
    _strings: (Option<CString>, Option<CString>),
}

impl ContextOptions {
    fn raw(&self, api: &Api) -> Result<RawContextOptions> {
        let c_string = |field: &'static str, s: Option<String>| -> Result<Option<CString>> {
            s.map(|s| CString::new(s).map_err(|_| invalid(field, format!("{} holds a NUL", field))))
                .transpose()
        };
        let backend = c_string("backend", self.backend.clone())?;
        let module_dir =
            c_string("module_dir", self.module_dir.as_ref().map(|p| p.to_string_lossy().into()))?;
        // SAFETY: a zeroed options struct is valid; init fills it within its size.
        let mut raw: sys::dsv4_ctx_options = unsafe { std::mem::zeroed() };
        check(
            api,
            unsafe { (api.dsv4_ctx_options_init)(&mut raw, std::mem::size_of_val(&raw)) },
            "dsv4_ctx_options_init",
        )?;
        raw.device = self.device.raw();
        raw.backend = backend.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        raw.module_dir = module_dir.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        raw.num_threads = self.num_threads;
        raw.log_level = self.log_level;
        Ok(RawContextOptions { raw, _strings: (backend, module_dir) })
    }
}

// ---------------------------------------------------------------------------------------------
// Context and plan
// ---------------------------------------------------------------------------------------------

struct ContextHandle {
    raw: NonNull<sys::dsv4_ctx>,
    api: &'static Api,
    device: Device,
}

// SAFETY: dsv4.h: "a dsv4_ctx is thread-safe (only create/destroy must not race with its use)";
// destruction happens in Drop, when no other reference exists.
unsafe impl Send for ContextHandle {}
unsafe impl Sync for ContextHandle {}

impl Drop for ContextHandle {
    fn drop(&mut self) {
        // SAFETY: the last reference; every plan holds one, so they are gone.
        unsafe { (self.api.dsv4_ctx_destroy)(self.raw.as_ptr()) }
    }
}

/// Information about a context (`dsv4_ctx_info`).
#[derive(Clone, Debug)]
pub struct ContextInfo {
    pub device: Device,
    pub num_threads: i32,
    pub backend: String,
    pub path: String,
    pub reason: String,
}

/// A `dsv4_ctx`: one backend module on one device. Clones share the handle.
#[derive(Clone)]
pub struct Context {
    handle: Arc<ContextHandle>,
}

impl Context {
    pub fn new(options: &ContextOptions) -> Result<Context> {
        let api = library()?;
        let o = options.raw(api)?;
        let mut raw = ptr::null_mut();
        // SAFETY: the options and their strings live across the call.
        check(api, unsafe { (api.dsv4_ctx_create)(&o.raw, &mut raw) }, "dsv4_ctx_create")?;
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::new(sys::DSV4_STATUS_INTERNAL, "dsv4_ctx_create", "returned NULL")
        })?;
        Ok(Context { handle: Arc::new(ContextHandle { raw, api, device: options.device }) })
    }

    /// CPU tensors, the backend chosen by DSV4_BACKEND or probing.
    pub fn cpu() -> Result<Context> {
        Context::new(&ContextOptions::default())
    }

    pub fn info(&self) -> Result<ContextInfo> {
        let api = self.handle.api;
        // SAFETY: a zeroed info struct is valid; struct_size tells the library its size.
        let mut info: sys::dsv4_ctx_info = unsafe { std::mem::zeroed() };
        info.struct_size = std::mem::size_of_val(&info) as u32;
        check(
            api,
            unsafe { (api.dsv4_ctx_get_info)(self.handle.raw.as_ptr(), &mut info) },
            "dsv4_ctx_get_info",
        )?;
        Ok(ContextInfo {
            device: Device {
                device_type: info.device.device_type,
                device_id: info.device.device_id,
            },
            num_threads: info.num_threads,
            backend: chars(&info.backend),
            path: chars(&info.path),
            reason: chars(&info.reason),
        })
    }

    pub fn plan(&self, options: &PlanOptions) -> Result<Plan> {
        let api = self.handle.api;
        let mut raw = ptr::null_mut();
        // SAFETY: the options are a complete dsv4_plan_options.
        check(
            api,
            unsafe { (api.dsv4_plan_create)(self.handle.raw.as_ptr(), &options.0, &mut raw) },
            "dsv4_plan_create",
        )?;
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::new(sys::DSV4_STATUS_INTERNAL, "dsv4_plan_create", "returned NULL")
        })?;
        Ok(Plan { raw, ctx: self.handle.clone() })
    }

    /// `dsv4_kv_write`: rows `values` [N, d] (bf16/fp32) into `cache` at `slots` [N] (int32,
    /// negative = skip), quantised for `desc`'s layout.
    pub fn kv_write(
        &self,
        desc: &sys::dsv4_kv_cache_desc,
        values: &Tensor<'_>,
        slots: &Tensor<'_>,
        cache: &Tensor<'_>,
    ) -> Result<()> {
        self.kv_write_on(desc, values, slots, cache, ptr::null_mut())
    }

    /// `dsv4_merge`: partial results over disjoint key sets into one (spec 12.2).
    pub fn merge(&self, args: &MergeArgs<'_>) -> Result<()> {
        let api = self.handle.api;
        // SAFETY: zeroed args are valid; init sets struct_size.
        let mut a: sys::dsv4_merge_args = unsafe { std::mem::zeroed() };
        check(
            api,
            unsafe { (api.dsv4_merge_args_init)(&mut a, std::mem::size_of_val(&a)) },
            "dsv4_merge_args_init",
        )?;
        a.out_parts = input(args.out_parts);
        a.lse_parts = input(args.lse_parts);
        a.attn_sink = input(args.attn_sink);
        a.out = output(args.out, "out")?;
        a.lse = output(args.lse, "lse")?;
        a.stream = args.stream;
        // SAFETY: every tensor outlives the call.
        check(api, unsafe { (api.dsv4_merge)(self.handle.raw.as_ptr(), &a) }, "dsv4_merge")
    }

    /// `kv_write` enqueued on a backend-native stream.
    pub fn kv_write_on(
        &self,
        desc: &sys::dsv4_kv_cache_desc,
        values: &Tensor<'_>,
        slots: &Tensor<'_>,
        cache: &Tensor<'_>,
        stream: *mut c_void,
    ) -> Result<()> {
        let api = self.handle.api;
        // SAFETY: zeroed args are valid; init sets struct_size.
        let mut a: sys::dsv4_kv_write_args = unsafe { std::mem::zeroed() };
        check(
            api,
            unsafe { (api.dsv4_kv_write_args_init)(&mut a, std::mem::size_of_val(&a)) },
            "dsv4_kv_write_args_init",
        )?;
        a.cache_desc = *desc;
        a.values = values.as_raw();
        a.slots = slots.as_raw();
        a.cache = cache.output("cache")?;
        a.stream = stream;
        // SAFETY: every tensor outlives the call.
        check(api, unsafe { (api.dsv4_kv_write)(self.handle.raw.as_ptr(), &a) }, "dsv4_kv_write")
    }
}

/// Information about a plan (`dsv4_plan_info`).
#[derive(Clone, Debug)]
pub struct PlanInfo {
    pub mode: u32,
    pub num_heads: i32,
    pub head_dim_qk: i32,
    pub workspace_bytes: u64,
    pub backend: String,
    pub kernel: String,
}

/// An immutable `dsv4_plan`; keeps its context alive.
pub struct Plan {
    raw: NonNull<sys::dsv4_plan>,
    ctx: Arc<ContextHandle>,
}

// SAFETY: dsv4.h: "A dsv4_plan is read-only after creation; concurrent dsv4_run calls on one
// plan need distinct workspaces" — each run borrows its workspace mutably or allocates one.
unsafe impl Send for Plan {}
unsafe impl Sync for Plan {}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: the plan is owned and no call on it is running (they borrow self).
        unsafe { (self.ctx.api.dsv4_plan_destroy)(self.raw.as_ptr()) }
    }
}

impl Plan {
    /// Destroys the plan now (the same as dropping it).
    pub fn close(self) {}

    pub fn workspace_size(&self) -> Result<usize> {
        let api = self.ctx.api;
        let mut bytes = 0usize;
        check(
            api,
            unsafe { (api.dsv4_plan_get_workspace_size)(self.raw.as_ptr(), &mut bytes) },
            "dsv4_plan_get_workspace_size",
        )?;
        Ok(bytes)
    }

    pub fn info(&self) -> Result<PlanInfo> {
        let api = self.ctx.api;
        // SAFETY: a zeroed info struct is valid; struct_size tells the library its size.
        let mut info: sys::dsv4_plan_info = unsafe { std::mem::zeroed() };
        info.struct_size = std::mem::size_of_val(&info) as u32;
        check(
            api,
            unsafe { (api.dsv4_plan_get_info)(self.raw.as_ptr(), &mut info) },
            "dsv4_plan_get_info",
        )?;
        Ok(PlanInfo {
            mode: info.mode,
            num_heads: info.num_heads,
            head_dim_qk: info.head_dim_qk,
            workspace_bytes: info.workspace_bytes,
            backend: chars(&info.backend),
            kernel: chars(&info.kernel),
        })
    }

    /// One `dsv4_run`. On failure nothing is written.
    pub fn run(&self, args: &mut RunArgs<'_>) -> Result<()> {
        let api = self.ctx.api;
        let mut a = args.raw(api)?;
        let mut owned = Vec::new();
        let (data, bytes) = match &mut args.workspace {
            Workspace::Auto => {
                let size = self.workspace_size()?;
                if size > 0 && self.ctx.device.device_type != sys::DSV4_DEVICE_CPU {
                    return Err(invalid(
                        "workspace",
                        format!(
                        "workspace: this plan needs {} bytes on its device: pass Workspace::Raw",
                        size),
                    ));
                }
                owned.resize(size, 0u8);
                (owned.as_mut_ptr() as *mut c_void, owned.len())
            }
            Workspace::Host(buffer) => (buffer.as_mut_ptr() as *mut c_void, buffer.len()),
            Workspace::Raw { data, bytes } => (*data, *bytes),
        };
        a.workspace = data;
        a.workspace_bytes = bytes;
        // SAFETY: every tensor and the workspace outlive the call.
        check(api, unsafe { (api.dsv4_run)(self.raw.as_ptr(), &a) }, "dsv4_run")
    }

    /// `dsv4_export_indices`: the lists a paged run would build, into the export outputs.
    pub fn export_indices(&self, args: &ExportArgs<'_>) -> Result<()> {
        let api = self.ctx.api;
        let batch = args.batch.raw(api)?;
        // SAFETY: zeroed args are valid; init sets struct_size.
        let mut a: sys::dsv4_export_args = unsafe { std::mem::zeroed() };
        check(
            api,
            unsafe { (api.dsv4_export_args_init)(&mut a, std::mem::size_of_val(&a)) },
            "dsv4_export_args_init",
        )?;
        a.format = args.format;
        a.batch = &batch;
        a.swa_indices = output(args.swa_indices, "swa_indices")?;
        a.swa_lengths = output(args.swa_lengths, "swa_lengths")?;
        a.swa_indptr = output(args.swa_indptr, "swa_indptr")?;
        a.cmp_indices = output(args.cmp_indices, "cmp_indices")?;
        a.cmp_lengths = output(args.cmp_lengths, "cmp_lengths")?;
        a.cmp_indptr = output(args.cmp_indptr, "cmp_indptr")?;
        a.combined_indices = output(args.combined_indices, "combined_indices")?;
        a.combined_lengths = output(args.combined_lengths, "combined_lengths")?;
        a.stream = args.batch.stream;
        // SAFETY: every tensor outlives the call.
        check(
            api,
            unsafe { (api.dsv4_export_indices)(self.raw.as_ptr(), &a) },
            "dsv4_export_indices",
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Queries
// ---------------------------------------------------------------------------------------------

/// Byte geometry of a KV layout (`dsv4_kv_layout_info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayoutInfo {
    pub layout: u32,
    pub head_dim_qk: i32,
    pub head_dim_v: i32,
    pub bytes_per_token: i32,
    pub min_block_stride_bytes: i64,
}

pub fn kv_layout_info(layout: u32, block_size: i32) -> Result<KvLayoutInfo> {
    let api = library()?;
    // SAFETY: a zeroed info struct is valid; init sets struct_size.
    let mut info: sys::dsv4_kv_layout_info = unsafe { std::mem::zeroed() };
    check(
        api,
        unsafe { (api.dsv4_kv_layout_info_init)(&mut info, std::mem::size_of_val(&info)) },
        "dsv4_kv_layout_info_init",
    )?;
    check(
        api,
        unsafe { (api.dsv4_kv_layout_get_info)(layout, block_size, &mut info) },
        "dsv4_kv_layout_get_info",
    )?;
    Ok(KvLayoutInfo {
        layout: info.layout,
        head_dim_qk: info.head_dim_qk,
        head_dim_v: info.head_dim_v,
        bytes_per_token: info.bytes_per_token,
        min_block_stride_bytes: info.min_block_stride_bytes,
    })
}

/// One backend module candidate (`dsv4_backend_info`).
#[derive(Clone, Debug)]
pub struct BackendInfo {
    pub name: String,
    pub available: bool,
    pub score: i32,
    pub device_type: i32,
    pub device_count: i32,
    pub module_abi: u32,
    pub path: String,
    pub status: String,
}

/// Every backend module the loader finds (the same search as [`Context::new`]).
pub fn enumerate_backends(options: &ContextOptions) -> Result<Vec<BackendInfo>> {
    let api = library()?;
    let o = options.raw(api)?;
    loop {
        let mut count = 0i32;
        check(
            api,
            unsafe { (api.dsv4_enumerate_backends)(&o.raw, ptr::null_mut(), 0, &mut count) },
            "dsv4_enumerate_backends",
        )?;
        // SAFETY: zeroed info structs are valid; struct_size tells the library their size.
        let mut infos: Vec<sys::dsv4_backend_info> =
            vec![unsafe { std::mem::zeroed() }; count.max(0) as usize];
        for info in &mut infos {
            info.struct_size = std::mem::size_of::<sys::dsv4_backend_info>() as u32;
        }
        let mut again = 0i32;
        check(
            api,
            unsafe { (api.dsv4_enumerate_backends)(&o.raw, infos.as_mut_ptr(), count, &mut again) },
            "dsv4_enumerate_backends",
        )?;
        if again <= count {
            // A module may appear between the two calls: then ask again.
            return Ok(infos[..again.max(0) as usize]
                .iter()
                .map(|i| BackendInfo {
                    name: chars(&i.name),
                    available: i.available != 0,
                    score: i.score,
                    device_type: i.device_type,
                    device_count: i.device_count,
                    module_abi: i.module_abi,
                    path: chars(&i.path),
                    status: chars(&i.status),
                })
                .collect());
        }
    }
}
