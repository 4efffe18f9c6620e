// Checks of caller tensors, written once and used by dsv4_run and dsv4_kv_write: dtype, shape,
// strides, device and byte extents. Only host-side metadata is read, never the data.
#pragma once

#include <cstdint>
#include <string>

#include "dsv4/dsv4.h"
#include "dsv4_backend.h"

namespace dsv4::detail {

constexpr int32_t kMaxDims = 8;

// A checked tensor: shape and element strides (compact row-major when the caller gave NULL),
// data with byte_offset applied.
struct tensor_view {
  std::string name;  // "args->q"
  int32_t ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
  dsv4_dtype dtype{};
  int64_t elem_bytes = 0;
  uint8_t* data = nullptr;
};

// "bfloat16", "float32", "int32", "uint8", "int8", "float8_e4m3fn", or "{code c, bits b, lanes l}".
std::string dtype_name(const dsv4_dtype& t);
bool dtype_equal(const dsv4_dtype& a, const dsv4_dtype& b);

constexpr dsv4_dtype kBf16{DSV4_DTYPE_CODE_BFLOAT, 16, 1};
constexpr dsv4_dtype kF32{DSV4_DTYPE_CODE_FLOAT, 32, 1};
constexpr dsv4_dtype kF16{DSV4_DTYPE_CODE_FLOAT, 16, 1};
constexpr dsv4_dtype kI32{DSV4_DTYPE_CODE_INT, 32, 1};

// Generic well-formedness: ndim 1..8, shape non-NULL and >= 0, strides >= 0, whole bytes per
// element, one lane, device == `device`, data non-NULL unless empty, byte extent fits int64.
// `t` must not be NULL (callers report missing tensors with their own message).
tensor_view check_tensor(const dsv4_tensor* t, const std::string& name, const dsv4_device& device);

// Each throws api_error(status, "<name>-><field> = <value> but <why>").
void require_dtype(const tensor_view& v, const dsv4_dtype& want, dsv4_status status);
// `why_fmt` (printf, formatted only on failure) completes "<name>->shape[d] = x but ...",
// e.g. "the plan has num_heads %d".
void require_dim(const tensor_view& v, int32_t dim, int64_t want, dsv4_status status,
                 const char* why_fmt, ...) __attribute__((format(printf, 5, 6)));
void require_last_contiguous(const tensor_view& v);
// Every dimension compact row-major (1-D: stride 1).
void require_contiguous(const tensor_view& v);

// Total elements (overflow-checked).
int64_t element_count(const tensor_view& v);

// A KV cache tensor against its (normalised) description: dim 0 = blocks with byte stride
// desc.block_stride_bytes, dtype fitting the layout, inner extent covering one block's content.
// Disagreement with the description is reported with `mismatch` (PLAN_MISMATCH for runs).
dsv4_mod_cache check_cache(const dsv4_tensor* t, const std::string& name,
                           const dsv4_kv_cache_desc& desc, const dsv4_device& device,
                           dsv4_status mismatch);

}  // namespace dsv4::detail
