#include "core/tensor_check.h"

#include <cstdarg>
#include <cstdio>

#include "base/error.h"
#include "common/layout.h"
#include "core/plan.h"

namespace dsv4::detail {

namespace {
// a * b (a, b >= 0) or INVALID_ARGUMENT naming "<name> <what>"; the message is built on failure
// only.
int64_t mul_or_fail(int64_t a, int64_t b, const std::string& name, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s: %s overflows int64 (%lld * %lld)", name.c_str(), what,
         static_cast<long long>(a), static_cast<long long>(b));
  return r;
}
int64_t add_or_fail(int64_t a, int64_t b, const std::string& name, const char* what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s: %s overflows int64 (%lld + %lld)", name.c_str(), what,
         static_cast<long long>(a), static_cast<long long>(b));
  return r;
}
}  // namespace

bool dtype_equal(const dsv4_dtype& a, const dsv4_dtype& b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

std::string dtype_name(const dsv4_dtype& t) {
  if (t.lanes == 1) {
    if (t.code == DSV4_DTYPE_CODE_BFLOAT && t.bits == 16) return "bfloat16";
    if (t.code == DSV4_DTYPE_CODE_FLOAT && t.bits == 32) return "float32";
    if (t.code == DSV4_DTYPE_CODE_FLOAT && t.bits == 16) return "float16";
    if (t.code == DSV4_DTYPE_CODE_INT && t.bits == 32) return "int32";
    if (t.code == DSV4_DTYPE_CODE_INT && t.bits == 64) return "int64";
    if (t.code == DSV4_DTYPE_CODE_INT && t.bits == 8) return "int8";
    if (t.code == DSV4_DTYPE_CODE_UINT && t.bits == 8) return "uint8";
    if (t.code == DSV4_DTYPE_CODE_FLOAT8_E4M3FN && t.bits == 8) return "float8_e4m3fn";
  }
  return strprintf("{code %u, bits %u, lanes %u}", t.code, t.bits, t.lanes);
}

tensor_view check_tensor(const dsv4_tensor* t, const std::string& name, const dsv4_device& device) {
  tensor_view v;
  v.name = name;
  const char* n = name.c_str();
  if (t->ndim < 1 || t->ndim > kMaxDims)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s->ndim = %d must be in 1..%d", n, t->ndim, kMaxDims);
  if (t->shape == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "%s->shape is NULL", n);
  if (t->device.device_type != device.device_type || t->device.device_id != device.device_id)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "%s->device = {type %d, id %d} but the context's device is {type %d, id %d}", n,
         t->device.device_type, t->device.device_id, device.device_type, device.device_id);
  if (t->dtype.lanes != 1 || t->dtype.bits == 0 || t->dtype.bits % 8 != 0)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s->dtype = %s is not a whole-byte single-lane type", n,
         dtype_name(t->dtype).c_str());
  v.ndim = t->ndim;
  v.dtype = t->dtype;
  v.elem_bytes = t->dtype.bits / 8;
  bool empty = false;
  for (int32_t i = 0; i < v.ndim; ++i) {
    if (t->shape[i] < 0)
      fail(DSV4_STATUS_INVALID_ARGUMENT, "%s->shape[%d] = %lld is negative", n, i,
           static_cast<long long>(t->shape[i]));
    v.shape[i] = t->shape[i];
    empty = empty || v.shape[i] == 0;
  }
  if (t->strides != nullptr) {
    for (int32_t i = 0; i < v.ndim; ++i) {
      if (t->strides[i] < 0)
        fail(DSV4_STATUS_INVALID_ARGUMENT, "%s->strides[%d] = %lld is negative", n, i,
             static_cast<long long>(t->strides[i]));
      v.stride[i] = t->strides[i];
    }
  } else {
    int64_t s = 1;
    for (int32_t i = v.ndim - 1; i >= 0; --i) {
      v.stride[i] = s;
      s = mul_or_fail(s, std::max<int64_t>(v.shape[i], 1), name, "element count");
    }
  }
  // Spec 12.3: a tensor with zero elements is valid whatever its data and byte_offset, and no
  // address is formed from them (data + byte_offset may not point anywhere).
  if (empty) return v;
  if (t->data == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "%s->data is NULL", n);
  // The furthest byte the tensor spans must be addressable: within int64 from data and without
  // wrapping the address space. Computed on integers, so no out-of-range pointer is ever formed.
  int64_t last = 0;
  for (int32_t i = 0; i < v.ndim; ++i)
    last = add_or_fail(last, mul_or_fail(v.shape[i] - 1, v.stride[i], name, "byte extent"), name,
                       "byte extent");
  last = mul_or_fail(add_or_fail(last, 1, name, "byte extent"), v.elem_bytes, name, "byte extent");
  if (t->byte_offset > static_cast<uint64_t>(INT64_MAX - last))
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s->byte_offset = %llu overflows the address range", n,
         static_cast<unsigned long long>(t->byte_offset));
  const uintptr_t base = reinterpret_cast<uintptr_t>(t->data);
  const uint64_t span = t->byte_offset + static_cast<uint64_t>(last);  // < 2^63: checked above
  if (span > UINTPTR_MAX - base)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "%s->data = %p with byte_offset %llu and %lld bytes of extent wraps the address space", n,
         t->data, static_cast<unsigned long long>(t->byte_offset), static_cast<long long>(last));
  const uintptr_t address = base + static_cast<uintptr_t>(t->byte_offset);
  // Spec 12.3: kernels load elements through typed pointers.
  if (address % static_cast<uintptr_t>(v.elem_bytes) != 0)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "%s: data + byte_offset = %p + %llu is not a multiple of the element size (%lld bytes "
         "of %s)",
         n, t->data, static_cast<unsigned long long>(t->byte_offset),
         static_cast<long long>(v.elem_bytes), dtype_name(v.dtype).c_str());
  v.data = reinterpret_cast<uint8_t*>(address);
  return v;
}

void require_dtype(const tensor_view& v, const dsv4_dtype& want, dsv4_status status) {
  if (!dtype_equal(v.dtype, want))
    fail(status, "%s->dtype = %s but must be %s", v.name.c_str(), dtype_name(v.dtype).c_str(),
         dtype_name(want).c_str());
}

void require_dim(const tensor_view& v, int32_t dim, int64_t want, dsv4_status status,
                 const char* why_fmt, ...) {
  if (v.shape[dim] == want) return;
  char why[256];
  va_list args;
  va_start(args, why_fmt);
  std::vsnprintf(why, sizeof why, why_fmt, args);
  va_end(args);
  fail(status, "%s->shape[%d] = %lld but %s", v.name.c_str(), dim,
       static_cast<long long>(v.shape[dim]), why);
}

void require_last_contiguous(const tensor_view& v) {
  const int32_t last = v.ndim - 1;
  if (v.shape[last] > 1 && v.stride[last] != 1)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "%s->strides[%d] = %lld but the last dimension must be contiguous (stride 1)",
         v.name.c_str(), last, static_cast<long long>(v.stride[last]));
}

void require_contiguous(const tensor_view& v) {
  int64_t want = 1;
  for (int32_t i = v.ndim - 1; i >= 0; --i) {
    if (v.shape[i] > 1 && v.stride[i] != want)
      fail(DSV4_STATUS_INVALID_ARGUMENT,
           "%s->strides[%d] = %lld but the tensor must be contiguous (stride %lld)", v.name.c_str(),
           i, static_cast<long long>(v.stride[i]), static_cast<long long>(want));
    // Saturates: an empty tensor (no extent check) may hold dimensions whose product overflows.
    if (__builtin_mul_overflow(want, std::max<int64_t>(v.shape[i], 1), &want)) want = INT64_MAX;
  }
}

int64_t element_count(const tensor_view& v) {
  int64_t n = 1;
  for (int32_t i = 0; i < v.ndim; ++i) n = mul_or_fail(n, v.shape[i], v.name, "element count");
  return n;
}

dsv4_mod_cache check_cache(const dsv4_tensor* t, const std::string& name,
                           const dsv4_kv_cache_desc& desc, const dsv4_device& device,
                           dsv4_status mismatch) {
  const tensor_view v = check_tensor(t, name, device);
  const char* n = name.c_str();
  const dsv4_dtype d = v.dtype;
  const bool one_byte =
      d.bits == 8 && (d.code == DSV4_DTYPE_CODE_UINT || d.code == DSV4_DTYPE_CODE_INT ||
                      d.code == DSV4_DTYPE_CODE_FLOAT8_E4M3FN);
  if (desc.layout == DSV4_KV_LAYOUT_BF16) {
    if (!dtype_equal(d, kBf16) && !(d.bits == 8 && d.code == DSV4_DTYPE_CODE_UINT))
      fail(mismatch, "%s->dtype = %s but layout BF16 needs bfloat16 or uint8", n,
           dtype_name(d).c_str());
  } else if (desc.layout == DSV4_KV_LAYOUT_FP16) {
    if (!dtype_equal(d, kF16) && !(d.bits == 8 && d.code == DSV4_DTYPE_CODE_UINT))
      fail(mismatch, "%s->dtype = %s but layout FP16 needs float16 or uint8", n,
           dtype_name(d).c_str());
  } else if (!one_byte) {
    fail(mismatch, "%s->dtype = %s but layout %s needs a 1-byte type (uint8, int8, float8_e4m3fn)",
         n, dtype_name(d).c_str(), layout_name(desc.layout));
  }
  if (v.ndim < 2)
    fail(
        DSV4_STATUS_INVALID_ARGUMENT,
        "%s->ndim = %d but a cache needs dimension 0 = blocks and inner dimensions holding a block",
        n, v.ndim);
  const int64_t align = layout_base_alignment(desc.layout);
  if (reinterpret_cast<uintptr_t>(v.data) % static_cast<uintptr_t>(align) != 0)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "%s: data + byte_offset = %p is not a multiple of %lld bytes, which layout %s needs for "
         "its block base",
         n, static_cast<void*>(v.data), static_cast<long long>(align), layout_name(desc.layout));
  const int64_t block_stride = mul_or_fail(v.stride[0], v.elem_bytes, name, "block stride");
  if (block_stride != desc.block_stride_bytes)
    fail(mismatch, "%s: byte stride of dimension 0 = %lld but the %s block stride is %lld bytes", n,
         static_cast<long long>(block_stride),
         mismatch == DSV4_STATUS_PLAN_MISMATCH ? "plan's" : "descriptor's",
         static_cast<long long>(desc.block_stride_bytes));
  // Bytes one block spans inside the tensor: must cover the entries the layout stores. Checked
  // arithmetic: a cache of 0 blocks is empty, so check_tensor bounded none of its strides.
  int64_t inner = 1;
  for (int32_t i = 1; i < v.ndim; ++i) {
    if (v.shape[i] == 0) {
      inner = 0;
      break;
    }
    inner = add_or_fail(inner, mul_or_fail(v.shape[i] - 1, v.stride[i], name, "block extent"), name,
                        "block extent");
  }
  inner = mul_or_fail(inner, v.elem_bytes, name, "block extent");
  const int64_t content =
      static_cast<int64_t>(desc.block_size) * layout_bytes_per_token(desc.layout);
  if (inner < content)
    fail(mismatch,
         "%s: a block spans %lld bytes (inner dimensions) but %d entries of layout %s need %lld", n,
         static_cast<long long>(inner), desc.block_size, layout_name(desc.layout),
         static_cast<long long>(content));
  dsv4_mod_cache c{};
  c.base = v.data;
  c.layout = desc.layout;
  c.block_size = desc.block_size;
  c.block_stride_bytes = desc.block_stride_bytes;
  c.num_blocks = v.shape[0];
  c.kv_scale = desc.kv_scale;
  c.flags = desc.flags;
  mul_or_fail(c.num_blocks, c.block_size, name, "capacity (blocks * block_size)");
  return c;
}

}  // namespace dsv4::detail
