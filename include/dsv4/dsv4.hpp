/*
 * libdsv4 — header-only C++17 wrapper of the C ABI (dsv4.h, dsv4_paged.h), like oneDNN's
 * dnnl.hpp: RAII handles, tensors built from spans or strided views, and failures as exceptions.
 * Adds nothing to the ABI: every call goes straight to the C function of the same name (libdsv4
 * 0.2: dsv4_merge, fp16 rows, cache flags).
 *
 *   dsv4::Context ctx;                                   // CPU tensors, backend by probing
 *   dsv4::PlanOptions po;                                // dsv4_plan_options with its defaults
 *   po.num_heads = 8, po.max_tokens = 2, po.topk = 4;
 *   po.swa_cache.layout = DSV4_KV_LAYOUT_BF16, po.swa_cache.block_size = 4;
 *   dsv4::Plan plan(ctx, po);
 *   std::vector<uint8_t> ws(plan.workspace_size());
 *   plan.run(dsv4::RunArgs()
 *                .q(dsv4::Tensor(q_bits, dsv4::kBFloat16, {2, 8, 512}))
 *                .swa_cache(...).indices(...).out(...).workspace(ws));
 *
 * Errors: a failing call throws dsv4::Error (a std::runtime_error) carrying the status, the C
 * function's name and dsv4_last_error_message(), read on the failing thread right after the call.
 * Checks of the wrapper's own (a buffer shorter than its shape, a read-only buffer as an output)
 * throw the same type with DSV4_STATUS_INVALID_ARGUMENT.
 *
 * Lifetimes: a Tensor only borrows its data, and RunArgs / ExportArgs / KvWriteArgs only point at
 * Tensors: both must outlive the call (temporaries in one full expression do). A Plan keeps its
 * Context's handle alive, so plans may outlive the Context object they were made from. Threading
 * is the C contract's: a Context is thread-safe; a Plan is immutable and may run on several
 * threads at once with distinct workspaces.
 */
#ifndef DSV4_HPP
#define DSV4_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dsv4.h"
#include "dsv4_paged.h"

namespace dsv4 {

// ----------------------------------------------------------------------------------------------
// Errors
// ----------------------------------------------------------------------------------------------
class Error : public std::runtime_error {
 public:
  Error(dsv4_status status, const std::string& function, const std::string& message)
      : std::runtime_error(function + ": " + dsv4_status_string(status) + ": " + message),
        status_(status),
        function_(function),
        message_(message) {}
  dsv4_status status() const noexcept { return status_; }
  const std::string& function() const noexcept { return function_; }
  const std::string& message() const noexcept { return message_; }

 private:
  dsv4_status status_;
  std::string function_;
  std::string message_;
};

/** Throws Error for a failing status with this thread's last error message. */
inline void check(dsv4_status status, const char* function) {
  if (status != DSV4_STATUS_OK) throw Error(status, function, dsv4_last_error_message());
}

// ----------------------------------------------------------------------------------------------
// Devices and dtypes
// ----------------------------------------------------------------------------------------------
constexpr dsv4_device cpu_device() { return dsv4_device{DSV4_DEVICE_CPU, 0}; }
constexpr dsv4_device cuda_device(int32_t id = 0) { return dsv4_device{DSV4_DEVICE_CUDA, id}; }
constexpr dsv4_device opencl_device(int32_t id = 0) { return dsv4_device{DSV4_DEVICE_OPENCL, id}; }

constexpr dsv4_dtype kBFloat16{DSV4_DTYPE_CODE_BFLOAT, 16, 1};
constexpr dsv4_dtype kFloat16{DSV4_DTYPE_CODE_FLOAT, 16, 1};
constexpr dsv4_dtype kFloat32{DSV4_DTYPE_CODE_FLOAT, 32, 1};
constexpr dsv4_dtype kFloat64{DSV4_DTYPE_CODE_FLOAT, 64, 1};
constexpr dsv4_dtype kInt8{DSV4_DTYPE_CODE_INT, 8, 1};
constexpr dsv4_dtype kInt32{DSV4_DTYPE_CODE_INT, 32, 1};
constexpr dsv4_dtype kInt64{DSV4_DTYPE_CODE_INT, 64, 1};
constexpr dsv4_dtype kUInt8{DSV4_DTYPE_CODE_UINT, 8, 1};
constexpr dsv4_dtype kUInt16{DSV4_DTYPE_CODE_UINT, 16, 1};
constexpr dsv4_dtype kFloat8E4M3{DSV4_DTYPE_CODE_FLOAT8_E4M3FN, 8, 1};

/** 16-bit storage types that name their dtype (a plain uint16_t is kUInt16). */
struct bfloat16_t {
  uint16_t bits;
};
struct float16_t {
  uint16_t bits;
};

/** The dtype an element type stands for (Tensor's typed constructors). */
template <typename T>
constexpr dsv4_dtype dtype_of() {
  using U = std::remove_cv_t<T>;
  static_assert(std::is_arithmetic<U>::value || std::is_same<U, bfloat16_t>::value ||
                    std::is_same<U, float16_t>::value,
                "dsv4::dtype_of: no dtype for this element type");
  if constexpr (std::is_same<U, bfloat16_t>::value) return kBFloat16;
  if constexpr (std::is_same<U, float16_t>::value) return kFloat16;
  if constexpr (std::is_floating_point<U>::value) {
    return dsv4_dtype{DSV4_DTYPE_CODE_FLOAT, static_cast<uint8_t>(8 * sizeof(U)), 1};
  }
  if constexpr (std::is_signed<U>::value) {
    return dsv4_dtype{DSV4_DTYPE_CODE_INT, static_cast<uint8_t>(8 * sizeof(U)), 1};
  }
  return dsv4_dtype{DSV4_DTYPE_CODE_UINT, static_cast<uint8_t>(8 * sizeof(U)), 1};
}

// ----------------------------------------------------------------------------------------------
// Tensors
// ----------------------------------------------------------------------------------------------
/**
 * A borrowed dsv4_tensor: data pointer, device, dtype, shape and optional strides (in elements),
 * with the shape arrays held inside the object (copies and moves re-point them). Nothing is
 * copied or freed. Up to kMaxDims dimensions.
 */
class Tensor {
 public:
  static constexpr int kMaxDims = 8;

  Tensor() { repoint(); }

  /** Compact row-major tensor at `data` (any device). */
  Tensor(void* data, dsv4_dtype dtype, std::initializer_list<int64_t> shape,
         dsv4_device device = cpu_device())
      : Tensor(data, dtype, shape.begin(), static_cast<int>(shape.size()), nullptr, device) {}
  Tensor(const void* data, dsv4_dtype dtype, std::initializer_list<int64_t> shape,
         dsv4_device device = cpu_device())
      : Tensor(const_cast<void*>(data), dtype, shape, device) {
    writable_ = false;
  }

  /** Any strides (elements; nullptr = compact row-major). */
  Tensor(void* data, dsv4_dtype dtype, const int64_t* shape, int ndim, const int64_t* strides,
         dsv4_device device = cpu_device()) {
    if (ndim < 0 || ndim > kMaxDims) {
      throw Error(DSV4_STATUS_INVALID_ARGUMENT, "dsv4::Tensor",
                  "ndim " + std::to_string(ndim) + " is outside 0.." + std::to_string(kMaxDims));
    }
    for (int i = 0; i < ndim; ++i) shape_[i] = shape[i];
    if (strides != nullptr) {
      for (int i = 0; i < ndim; ++i) strides_[i] = strides[i];
    }
    has_strides_ = strides != nullptr;
    t_.data = data;
    t_.device = device;
    t_.ndim = ndim;
    t_.dtype = dtype;
    repoint();
  }

  /**
   * A contiguous range (anything with data() and size(): std::vector, std::array, std::span)
   * viewed with `shape`; the dtype is that of its element type unless given. Throws Error when the
   * range holds fewer bytes than the shape needs. A const range gives a read-only tensor.
   */
  template <typename Range, typename = decltype(std::declval<Range&>().data()),
            typename = decltype(std::declval<Range&>().size())>
  Tensor(Range& range, std::initializer_list<int64_t> shape)
      : Tensor(range, shape,
               dtype_of<std::remove_pointer_t<decltype(std::declval<Range&>().data())>>()) {}
  template <typename Range, typename = decltype(std::declval<Range&>().data()),
            typename = decltype(std::declval<Range&>().size())>
  Tensor(Range& range, std::initializer_list<int64_t> shape, dsv4_dtype dtype)
      : Tensor(const_cast<void*>(static_cast<const void*>(range.data())), dtype, shape.begin(),
               static_cast<int>(shape.size()), nullptr) {
    using Element = std::remove_pointer_t<decltype(range.data())>;
    writable_ = !std::is_const<Element>::value;
    require_bytes(static_cast<uint64_t>(range.size()) * sizeof(Element), "dsv4::Tensor");
  }

  /**
   * A strided view given ggml-style: extents and byte strides with the fastest dimension FIRST
   * (ne[0], nb[0]); becomes a row-major dsv4_tensor (dimensions reversed, strides in elements).
   * Throws Error when a byte stride is not a multiple of the element size.
   */
  static Tensor from_byte_strides(void* data, dsv4_dtype dtype, const int64_t* ne, const size_t* nb,
                                  int ndim, dsv4_device device = cpu_device()) {
    if (ndim < 0 || ndim > kMaxDims) {
      throw Error(DSV4_STATUS_INVALID_ARGUMENT, "dsv4::Tensor::from_byte_strides",
                  "ndim " + std::to_string(ndim) + " is outside 0.." + std::to_string(kMaxDims));
    }
    const size_t element = (dtype.bits * dtype.lanes + 7u) / 8u;
    int64_t shape[kMaxDims], strides[kMaxDims];
    for (int i = 0; i < ndim; ++i) {
      if (element == 0 || nb[i] % element != 0) {
        throw Error(DSV4_STATUS_INVALID_ARGUMENT, "dsv4::Tensor::from_byte_strides",
                    "nb[" + std::to_string(i) + "] = " + std::to_string(nb[i]) +
                        " is not a multiple of the element size " + std::to_string(element));
      }
      shape[ndim - 1 - i] = ne[i];
      strides[ndim - 1 - i] = static_cast<int64_t>(nb[i] / element);
    }
    return Tensor(data, dtype, shape, ndim, strides, device);
  }

  Tensor(const Tensor& other) { *this = other; }
  Tensor& operator=(const Tensor& other) {
    t_ = other.t_;
    shape_ = other.shape_;
    strides_ = other.strides_;
    has_strides_ = other.has_strides_;
    writable_ = other.writable_;
    repoint();
    return *this;
  }

  /** Reinterprets the same bytes as another dtype of the same width (bf16 held in uint16_t). */
  Tensor& as(dsv4_dtype dtype) {
    if (dtype.bits * dtype.lanes != t_.dtype.bits * t_.dtype.lanes) {
      throw Error(DSV4_STATUS_INVALID_ARGUMENT, "dsv4::Tensor::as",
                  "a dtype of another width cannot reinterpret the buffer");
    }
    t_.dtype = dtype;
    return *this;
  }
  Tensor& byte_offset(uint64_t offset) {
    t_.byte_offset = offset;
    return *this;
  }

  bool writable() const noexcept { return writable_; }
  int64_t elements() const noexcept {
    int64_t n = 1;
    for (int i = 0; i < t_.ndim; ++i) n *= shape_[i];
    return n;
  }
  int ndim() const noexcept { return t_.ndim; }
  int64_t shape(int i) const { return shape_.at(static_cast<size_t>(i)); }
  const dsv4_tensor* get() const noexcept { return &t_; }
  dsv4_tensor* get() noexcept { return &t_; }

 private:
  void repoint() {
    t_.shape = shape_.data();
    t_.strides = has_strides_ ? strides_.data() : nullptr;
  }
  void require_bytes(uint64_t available, const char* function) const {
    const uint64_t needed = static_cast<uint64_t>(elements()) * ((t_.dtype.bits + 7u) / 8u);
    if (available < needed) {
      throw Error(DSV4_STATUS_INVALID_ARGUMENT, function,
                  "buffer of " + std::to_string(available) + " bytes is shorter than its shape (" +
                      std::to_string(needed) + " bytes)");
    }
  }

  dsv4_tensor t_{};
  std::array<int64_t, kMaxDims> shape_{};
  std::array<int64_t, kMaxDims> strides_{};
  bool has_strides_ = false;
  bool writable_ = true;
};

namespace detail {
inline dsv4_tensor* writable(Tensor& t, const char* field) {
  if (!t.writable()) {
    throw Error(DSV4_STATUS_INVALID_ARGUMENT, field,
                std::string(field) + " is a read-only buffer, but libdsv4 writes it");
  }
  return t.get();
}
template <typename Range>
std::pair<void*, size_t> byte_range(Range& range) {
  using Element = std::remove_pointer_t<decltype(range.data())>;
  static_assert(!std::is_const<Element>::value, "a workspace must be writable");
  return {static_cast<void*>(range.data()), range.size() * sizeof(Element)};
}
}  // namespace detail

// ----------------------------------------------------------------------------------------------
// Arguments
// ----------------------------------------------------------------------------------------------
/** dsv4_run_args with setters (fields named as in C); points at the Tensors it is given. */
class RunArgs {
 public:
  RunArgs() { dsv4_run_args_init(&a_); }

#define DSV4_HPP_INPUT(field)       \
  RunArgs& field(const Tensor& t) { \
    a_.field = t.get();             \
    return *this;                   \
  }
  DSV4_HPP_INPUT(q)
  DSV4_HPP_INPUT(swa_cache)
  DSV4_HPP_INPUT(extra_cache)
  DSV4_HPP_INPUT(attn_sink)
  DSV4_HPP_INPUT(indices)
  DSV4_HPP_INPUT(indptr)
  DSV4_HPP_INPUT(lengths)
  DSV4_HPP_INPUT(extra_indices)
  DSV4_HPP_INPUT(extra_indptr)
  DSV4_HPP_INPUT(extra_lengths)
  DSV4_HPP_INPUT(query_start_loc)
  DSV4_HPP_INPUT(seq_lens)
  DSV4_HPP_INPUT(swa_block_table)
  DSV4_HPP_INPUT(cmp_block_table)
  DSV4_HPP_INPUT(slot_mapping)
  DSV4_HPP_INPUT(topk_indices)
#undef DSV4_HPP_INPUT

  RunArgs& out(Tensor& t) {
    a_.out = detail::writable(t, "out");
    return *this;
  }
  RunArgs& lse(Tensor& t) {
    a_.lse = detail::writable(t, "lse");
    return *this;
  }
  RunArgs& max_logits(Tensor& t) {
    a_.max_logits = detail::writable(t, "max_logits");
    return *this;
  }
  // Temporaries: `.out(dsv4::Tensor(buf, ...))` within the run's full expression.
  RunArgs& out(Tensor&& t) { return out(static_cast<Tensor&>(t)); }
  RunArgs& lse(Tensor&& t) { return lse(static_cast<Tensor&>(t)); }
  RunArgs& max_logits(Tensor&& t) { return max_logits(static_cast<Tensor&>(t)); }

  /** Workspace on the plan's device: a pointer and its bytes, or a writable host range. */
  RunArgs& workspace(void* data, size_t bytes) {
    a_.workspace = data;
    a_.workspace_bytes = bytes;
    return *this;
  }
  template <typename Range, typename = decltype(std::declval<Range&>().data())>
  RunArgs& workspace(Range& range) {
    const auto r = detail::byte_range(range);
    return workspace(r.first, r.second);
  }
  RunArgs& stream(void* s) {
    a_.stream = s;
    return *this;
  }

  const dsv4_run_args& get() const noexcept { return a_; }
  dsv4_run_args& get() noexcept { return a_; }

 private:
  dsv4_run_args a_;
};

/** dsv4_export_args over a paged batch (a RunArgs holding its paged fields and caches). */
class ExportArgs {
 public:
  explicit ExportArgs(uint32_t format = DSV4_EXPORT_FLASHMLA) {
    dsv4_export_args_init(&a_);
    a_.format = format;
  }
  ExportArgs& batch(const RunArgs& b) {
    a_.batch = &b.get();
    return *this;
  }
#define DSV4_HPP_OUTPUT(field)              \
  ExportArgs& field(Tensor& t) {            \
    a_.field = detail::writable(t, #field); \
    return *this;                           \
  }                                         \
  ExportArgs& field(Tensor&& t) { return field(static_cast<Tensor&>(t)); }
  DSV4_HPP_OUTPUT(swa_indices)
  DSV4_HPP_OUTPUT(swa_lengths)
  DSV4_HPP_OUTPUT(swa_indptr)
  DSV4_HPP_OUTPUT(cmp_indices)
  DSV4_HPP_OUTPUT(cmp_lengths)
  DSV4_HPP_OUTPUT(cmp_indptr)
  DSV4_HPP_OUTPUT(combined_indices)
  DSV4_HPP_OUTPUT(combined_lengths)
#undef DSV4_HPP_OUTPUT
  ExportArgs& stream(void* s) {
    a_.stream = s;
    return *this;
  }
  const dsv4_export_args& get() const noexcept { return a_; }

 private:
  dsv4_export_args a_;
};

/** dsv4_merge_args: P partial results (out_parts [P, T, H, 512], lse_parts [P, T, H], computed
 *  without the sink) merged into out [T, H, 512] (and lse [T, H]) with the sink applied once. */
class MergeArgs {
 public:
  MergeArgs() { dsv4_merge_args_init(&a_); }
  MergeArgs& out_parts(const Tensor& t) {
    a_.out_parts = t.get();
    return *this;
  }
  MergeArgs& lse_parts(const Tensor& t) {
    a_.lse_parts = t.get();
    return *this;
  }
  MergeArgs& attn_sink(const Tensor& t) {
    a_.attn_sink = t.get();
    return *this;
  }
  MergeArgs& out(Tensor& t) {
    a_.out = detail::writable(t, "out");
    return *this;
  }
  MergeArgs& lse(Tensor& t) {
    a_.lse = detail::writable(t, "lse");
    return *this;
  }
  MergeArgs& out(Tensor&& t) { return out(static_cast<Tensor&>(t)); }
  MergeArgs& lse(Tensor&& t) { return lse(static_cast<Tensor&>(t)); }
  MergeArgs& stream(void* s) {
    a_.stream = s;
    return *this;
  }
  const dsv4_merge_args& get() const noexcept { return a_; }
  dsv4_merge_args& get() noexcept { return a_; }

 private:
  dsv4_merge_args a_;
};

/** dsv4_kv_write_args: rows `values` [N, d] stored at `slots` [N] into `cache` (desc's layout). */
class KvWriteArgs {
 public:
  KvWriteArgs(const dsv4_kv_cache_desc& desc, const Tensor& values, const Tensor& slots,
              Tensor& cache) {
    dsv4_kv_write_args_init(&a_);
    a_.cache_desc = desc;
    a_.values = values.get();
    a_.slots = slots.get();
    a_.cache = detail::writable(cache, "cache");
  }
  KvWriteArgs& stream(void* s) {
    a_.stream = s;
    return *this;
  }
  const dsv4_kv_write_args& get() const noexcept { return a_; }

 private:
  dsv4_kv_write_args a_;
};

// ----------------------------------------------------------------------------------------------
// Options
// ----------------------------------------------------------------------------------------------
/** dsv4_plan_options with its defaults; set the C fields directly. */
struct PlanOptions : dsv4_plan_options {
  PlanOptions() {
    check((dsv4_plan_options_init)(this, sizeof(dsv4_plan_options)), "dsv4_plan_options_init");
  }
};

/** dsv4_kv_cache_desc of a layout (block_stride_bytes 0 = the layout's minimum; flags
 *  DSV4_KV_CACHE_FLAG_*). */
inline dsv4_kv_cache_desc cache_desc(uint32_t layout, int32_t block_size,
                                     int64_t block_stride_bytes = 0, float kv_scale = 1.0f,
                                     uint32_t flags = 0) {
  dsv4_kv_cache_desc d;
  std::memset(&d, 0, sizeof d);
  d.layout = layout;
  d.block_size = block_size;
  d.block_stride_bytes = block_stride_bytes;
  d.kv_scale = kv_scale;
  d.flags = flags;
  return d;
}

/** What dsv4_ctx_options holds, with owned strings. */
struct ContextOptions {
  dsv4_device device = cpu_device();
  std::string backend;     ///< "" = DSV4_BACKEND, then probing
  std::string module_dir;  ///< "" = none
  int32_t num_threads = 0;
  int32_t log_level = -1;
  dsv4_log_fn log_fn = nullptr;
  void* log_user_data = nullptr;

  dsv4_ctx_options c() const {
    dsv4_ctx_options o;
    check(dsv4_ctx_options_init(&o), "dsv4_ctx_options_init");
    o.device = device;
    o.backend = backend.empty() ? nullptr : backend.c_str();
    o.module_dir = module_dir.empty() ? nullptr : module_dir.c_str();
    o.num_threads = num_threads;
    o.log_level = log_level;
    o.log_fn = log_fn;
    o.log_user_data = log_user_data;
    return o;
  }
};

template <typename Info>
Info info_struct() {
  Info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  return info;
}

// ----------------------------------------------------------------------------------------------
// Handles
// ----------------------------------------------------------------------------------------------
/** A dsv4_ctx: one backend module on one device. Copies share the handle (thread-safe). */
class Context {
 public:
  Context() : Context(ContextOptions()) {}
  explicit Context(const ContextOptions& options) {
    const dsv4_ctx_options o = options.c();
    dsv4_ctx* ctx = nullptr;
    check(dsv4_ctx_create(&o, &ctx), "dsv4_ctx_create");
    ctx_.reset(ctx, dsv4_ctx_destroy);
  }

  dsv4_ctx* get() const noexcept { return ctx_.get(); }
  const std::shared_ptr<dsv4_ctx>& handle() const noexcept { return ctx_; }
  explicit operator bool() const noexcept { return ctx_ != nullptr; }
  /** Releases this object's share of the handle (plans keep theirs). */
  void reset() noexcept { ctx_.reset(); }

  dsv4_ctx_info info() const {
    dsv4_ctx_info info = info_struct<dsv4_ctx_info>();
    check(dsv4_ctx_get_info(ctx_.get(), &info), "dsv4_ctx_get_info");
    return info;
  }

  /** dsv4_kv_write: quantises rows into a cache of any layout. */
  void kv_write(const KvWriteArgs& args) const {
    check(dsv4_kv_write(ctx_.get(), &args.get()), "dsv4_kv_write");
  }

  /** dsv4_merge: partial results over disjoint key sets into one (spec 12.2). */
  void merge(const MergeArgs& args) const {
    check(dsv4_merge(ctx_.get(), &args.get()), "dsv4_merge");
  }

 private:
  std::shared_ptr<dsv4_ctx> ctx_;
};

/** An immutable dsv4_plan; keeps its context alive. Move-only; a moved-from Plan is closed. */
class Plan {
 public:
  Plan() = default;
  Plan(const Context& ctx, const dsv4_plan_options& options) : ctx_(ctx.handle()) {
    dsv4_plan* plan = nullptr;
    check(dsv4_plan_create(ctx.get(), &options, &plan), "dsv4_plan_create");
    plan_.reset(plan);
  }

  dsv4_plan* get() const noexcept { return plan_.get(); }
  explicit operator bool() const noexcept { return plan_ != nullptr; }
  /** Destroys the plan now (later calls on it fail with libdsv4's INVALID_ARGUMENT). */
  void reset() noexcept {
    plan_.reset();
    ctx_.reset();
  }

  size_t workspace_size() const {
    size_t bytes = 0;
    check(dsv4_plan_get_workspace_size(plan_.get(), &bytes), "dsv4_plan_get_workspace_size");
    return bytes;
  }
  dsv4_plan_info info() const {
    dsv4_plan_info info = info_struct<dsv4_plan_info>();
    check(dsv4_plan_get_info(plan_.get(), &info), "dsv4_plan_get_info");
    return info;
  }
  void run(const RunArgs& args) const { check(dsv4_run(plan_.get(), &args.get()), "dsv4_run"); }
  void export_indices(const ExportArgs& args) const {
    check(dsv4_export_indices(plan_.get(), &args.get()), "dsv4_export_indices");
  }

 private:
  struct Destroy {
    void operator()(dsv4_plan* p) const noexcept { dsv4_plan_destroy(p); }
  };
  std::shared_ptr<dsv4_ctx> ctx_;             // members are destroyed in reverse order:
  std::unique_ptr<dsv4_plan, Destroy> plan_;  // the plan before its context
};

// ----------------------------------------------------------------------------------------------
// Queries
// ----------------------------------------------------------------------------------------------
inline std::string version() { return dsv4_get_version_string(); }

inline dsv4_kv_layout_info kv_layout_info(uint32_t layout, int32_t block_size) {
  dsv4_kv_layout_info info;
  check(dsv4_kv_layout_info_init(&info), "dsv4_kv_layout_info_init");
  check(dsv4_kv_layout_get_info(layout, block_size, &info), "dsv4_kv_layout_get_info");
  return info;
}

/** Every backend module the loader finds (same search as a Context with these options). */
inline std::vector<dsv4_backend_info> enumerate_backends(
    const ContextOptions& options = ContextOptions()) {
  const dsv4_ctx_options o = options.c();
  for (;;) {
    int32_t count = 0;
    check(dsv4_enumerate_backends(&o, nullptr, 0, &count), "dsv4_enumerate_backends");
    std::vector<dsv4_backend_info> infos(static_cast<size_t>(count),
                                         info_struct<dsv4_backend_info>());
    int32_t again = 0;
    check(dsv4_enumerate_backends(&o, infos.data(), count, &again), "dsv4_enumerate_backends");
    if (again <= count) {  // a module may appear between the two calls
      infos.resize(static_cast<size_t>(again));
      return infos;
    }
  }
}

inline dsv4_device_info device_info(const std::string& backend, int32_t index = 0,
                                    const ContextOptions& options = ContextOptions()) {
  const dsv4_ctx_options o = options.c();
  dsv4_device_info info = info_struct<dsv4_device_info>();
  check(dsv4_get_device_info(&o, backend.c_str(), index, &info), "dsv4_get_device_info");
  return info;
}

}  // namespace dsv4

#endif /* DSV4_HPP */
