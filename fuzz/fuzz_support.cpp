#include "fuzz_support.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dsv4fuzz {

void broken(const char* file, int line, const char* condition, const std::string& why) {
  std::fprintf(stderr, "%s:%d: invariant broken: %s\n  %s\n", file, line, condition, why.c_str());
  std::abort();
}

namespace {
void quiet_log(int32_t, const char*, void*) {}
}  // namespace

dsv4_ctx* cpu_ctx() {
  static dsv4_ctx* ctx = [] {
    dsv4_ctx_options o;
    dsv4_ctx_options_init(&o);
    o.backend = "cpu";
    o.num_threads = 1;
    o.log_level = DSV4_LOG_ERROR;
    o.log_fn = quiet_log;
    dsv4_ctx* c = nullptr;
    const dsv4_status st = dsv4_ctx_create(&o, &c);
    if (st != DSV4_STATUS_OK) {
      std::fprintf(stderr, "fuzz: no CPU context: %s\n", last_error(st).c_str());
      std::abort();
    }
    return c;
  }();
  return ctx;
}

bool debug() {
  static const bool on = std::getenv("DSV4_FUZZ_DEBUG") != nullptr;
  return on;
}

std::string FuzzTensor::describe(const char* name) const {
  std::string s = std::string(name) + ": dtype {" + std::to_string(spec_.dtype.code) + "," +
                  std::to_string(spec_.dtype.bits) + "," + std::to_string(spec_.dtype.lanes) +
                  "} ndim " + std::to_string(tensor_.ndim) + " shape [";
  for (int64_t d : shape_) s += std::to_string(d) + " ";
  s += "] strides [";
  for (int64_t d : strides_) s += std::to_string(d) + " ";
  char tail[160];
  std::snprintf(tail, sizeof tail, "] byte_offset %llu data %p device %d:%d%s%s%s",
                static_cast<unsigned long long>(spec_.byte_offset), tensor_.data,
                spec_.device.device_type, spec_.device.device_id,
                must_reject_ ? " must-reject" : "", empty_ ? " empty" : "",
                backed_ ? " backed" : "");
  return s + tail;
}

std::string last_error(dsv4_status status) {
  return std::string(dsv4_status_string(status)) + ": " + dsv4_last_error_message();
}

int64_t pick(FuzzedDataProvider& in, int64_t lo, int64_t hi) {
  static const int64_t kEdges[] = {0,
                                   1,
                                   -1,
                                   2,
                                   INT32_MAX,
                                   int64_t{INT32_MAX} + 1,
                                   INT32_MIN,
                                   int64_t{1} << 32,
                                   (int64_t{1} << 32) - 1,
                                   int64_t{1} << 40,
                                   int64_t{1} << 62,
                                   INT64_MAX,
                                   INT64_MAX - 127,
                                   INT64_MIN,
                                   -(int64_t{1} << 31) - 1};
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0) return in.PickValueInArray(kEdges);
  return in.ConsumeIntegralInRange<int64_t>(lo, hi);
}

int32_t pick32(FuzzedDataProvider& in, int32_t lo, int32_t hi) {
  const int64_t v = pick(in, lo, hi);
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v)));
}

uint64_t Filler::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int64_t Filler::in_range(int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
  return span == 0 ? static_cast<int64_t>(next())
                   : static_cast<int64_t>(static_cast<uint64_t>(lo) + next() % span);
}

void Filler::bytes(uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = next();
    std::memcpy(dst + i, &v, n - i < 8 ? n - i : 8);
  }
}

TensorSpec compact(dsv4_dtype dtype, std::vector<int64_t> shape) {
  TensorSpec s;
  s.dtype = dtype;
  s.shape = std::move(shape);
  return s;
}

namespace {
// Wrapping arithmetic: mutated specs may hold any int64, and the harness must not overflow on them.
int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
}  // namespace

void mutate(FuzzedDataProvider& in, TensorSpec& s) {
  if (in.ConsumeIntegralInRange<int>(0, 3) != 0) return;  // most tensors stay well-formed
  const int count = in.ConsumeIntegralInRange<int>(1, 2);
  for (int k = 0; k < count; ++k) {
    const size_t n = s.shape.size();
    switch (in.ConsumeIntegralInRange<int>(0, 9)) {
      case 0:  // one extent off by a little, or anything
        if (n > 0) {
          int64_t& d = s.shape[in.ConsumeIntegralInRange<size_t>(0, n - 1)];
          d = in.ConsumeBool() ? wrap_add(d, in.ConsumeIntegralInRange<int64_t>(-2, 2))
                               : pick(in, 0, 4096);
        }
        break;
      case 1:  // a dimension more or less
        if (in.ConsumeBool() && n > 0)
          s.shape.erase(s.shape.begin() + in.ConsumeIntegralInRange<long>(0, long(n) - 1));
        else
          s.shape.insert(s.shape.begin() + in.ConsumeIntegralInRange<long>(0, long(n)),
                         in.ConsumeIntegralInRange<int64_t>(1, 3));
        if (!s.strides.empty()) s.strides.clear();
        break;
      case 2:  // padded strides (a legal view), the last dimension kept contiguous or not
        if (n > 0) {
          s.strides.assign(n, 1);
          int64_t stride = in.ConsumeIntegralInRange<int64_t>(1, 3);
          for (size_t i = n; i-- > 0;) {
            s.strides[i] = stride;
            stride = wrap_mul(stride, wrap_add(s.shape[i] > 0 ? s.shape[i] : 1,
                                               in.ConsumeIntegralInRange<int64_t>(0, 2)));
          }
        }
        break;
      case 3:  // one stride anything (0, negative, huge)
        if (n > 0) {
          if (s.strides.size() != n) {
            s.strides.assign(n, 1);
            for (size_t i = n - 1; i-- > 0;)
              s.strides[i] = wrap_mul(s.strides[i + 1], s.shape[i + 1] > 0 ? s.shape[i + 1] : 1);
          }
          s.strides[in.ConsumeIntegralInRange<size_t>(0, n - 1)] = pick(in, -4, 1 << 20);
        }
        break;
      case 4: {  // another dtype
        static const dsv4_dtype kTypes[] = {
            {DSV4_DTYPE_CODE_BFLOAT, 16, 1}, {DSV4_DTYPE_CODE_FLOAT, 32, 1},
            {DSV4_DTYPE_CODE_INT, 32, 1},    {DSV4_DTYPE_CODE_INT, 64, 1},
            {DSV4_DTYPE_CODE_UINT, 8, 1},    {DSV4_DTYPE_CODE_FLOAT8_E4M3FN, 8, 1},
            {DSV4_DTYPE_CODE_FLOAT, 16, 1},  {DSV4_DTYPE_CODE_INT, 32, 2},
            {DSV4_DTYPE_CODE_INT, 0, 1},     {DSV4_DTYPE_CODE_FLOAT, 12, 1}};
        s.dtype = in.PickValueInArray(kTypes);
        break;
      }
      case 5:  // another device
        s.device = in.ConsumeBool() ? dsv4_device{DSV4_DEVICE_CUDA, 0}
                                    : dsv4_device{DSV4_DEVICE_CPU, pick32(in, 0, 3)};
        break;
      case 6:  // byte_offset: small (aligned or not) or anything
        s.byte_offset = in.ConsumeBool() ? in.ConsumeIntegralInRange<uint64_t>(0, 63)
                                         : static_cast<uint64_t>(pick(in, 0, 1 << 20));
        if (in.ConsumeBool()) s.data = Data::kOffsetOnly;
        break;
      case 7:
        s.data = in.PickValueInArray({Data::kNull, Data::kGarbage, Data::kWrap});
        break;
      case 8:  // no elements
        if (n > 0) s.shape[in.ConsumeIntegralInRange<size_t>(0, n - 1)] = 0;
        break;
      default:
        s.ndim_override = in.ConsumeIntegralInRange<int32_t>(-1, 10);
        break;
    }
  }
}

namespace {
constexpr size_t kGuard = 64;
using i128 = __int128;
}  // namespace

FuzzTensor::FuzzTensor(const TensorSpec& spec, Filler& fill, size_t limit) : spec_(spec) {
  const int32_t ndim =
      spec.ndim_override >= 0 ? spec.ndim_override : static_cast<int32_t>(spec.shape.size());
  // The library may read shape[0 .. ndim) (and strides) whatever ndim says: keep them in bounds.
  const size_t stored =
      std::max<size_t>(spec.shape.size(), static_cast<size_t>(ndim > 0 ? ndim : 0));
  shape_ = spec.shape;
  shape_.resize(stored, 1);
  strides_ = spec.strides;
  if (!strides_.empty()) strides_.resize(stored, 1);
  tensor_.ndim = ndim;
  tensor_.shape = shape_.data();
  tensor_.strides = strides_.empty() ? nullptr : strides_.data();
  tensor_.dtype = spec.dtype;
  tensor_.device = spec.device;
  tensor_.byte_offset = spec.byte_offset;

  const dsv4_dtype d = spec.dtype;
  const bool whole = d.lanes == 1 && d.bits > 0 && d.bits % 8 == 0;
  must_reject_ = ndim < 1 || ndim > 8 || !whole || spec.device.device_type != DSV4_DEVICE_CPU ||
                 spec.device.device_id != 0;
  for (int32_t i = 0; i < ndim && i < 8; ++i) {
    must_reject_ = must_reject_ || shape_[static_cast<size_t>(i)] < 0 ||
                   (!strides_.empty() && strides_[static_cast<size_t>(i)] < 0);
    empty_ = empty_ || shape_[static_cast<size_t>(i)] == 0;
  }
  const int64_t elem = whole ? d.bits / 8 : 1;
  i128 span = 0;  // bytes from element 0 to one past the last
  if (!must_reject_ && !empty_) {
    // Saturating at 2^80, beyond every limit here: a product of two saturated values still fits.
    const i128 cap = i128(1) << 80;
    const auto sat_mul = [&](i128 a, i128 b) { return a != 0 && b > cap / a ? cap : a * b; };
    i128 last = 0;
    i128 count = 1;
    for (int32_t i = ndim - 1; i >= 0; --i) {
      const i128 extent = shape_[static_cast<size_t>(i)];
      const i128 stride = strides_.empty() ? count : i128(strides_[static_cast<size_t>(i)]);
      last = std::min(cap, last + sat_mul(extent - 1, stride));
      count = sat_mul(count, extent);
    }
    span = (last + 1) * elem;
    must_reject_ = span > INT64_MAX || i128(spec.byte_offset) > INT64_MAX - span;
    too_big_ = !must_reject_ && count * elem > i128(limit);
  }
  backed_ = !must_reject_ && !empty_ && !too_big_ && span <= i128(limit) &&
            (spec.data == Data::kStorage || spec.data == Data::kOffsetOnly);
  uintptr_t data = 0;
  if (backed_) {
    // 64-aligned base; the element address keeps byte_offset's low bits, so alignment is the
    // fuzzer's choice.
    storage_.resize(64 + kGuard + 64 + static_cast<size_t>(span) + kGuard);
    fill.bytes(storage_.data(), storage_.size());
    const uintptr_t base = reinterpret_cast<uintptr_t>(storage_.data());
    const uintptr_t aligned = (base + 63) / 64 * 64;
    first_ = static_cast<size_t>(aligned - base) + kGuard + spec.byte_offset % 64;
    const uintptr_t address = base + first_;
    // data wraps below 0 when byte_offset exceeds the address: data + byte_offset then runs past
    // the top of the address space, which the library refuses (compared as integers: modulo 2^64
    // the sum is the address again).
    data = address - static_cast<uintptr_t>(spec.byte_offset);
    must_reject_ = static_cast<uintptr_t>(spec.byte_offset) > address ||
                   address % static_cast<uintptr_t>(elem) != 0;
  } else if (empty_) {
    data = spec.data == Data::kNull ? 0 : spec.data == Data::kGarbage ? 3 : ~uintptr_t{4095};
  } else {
    // Not backed: NULL, or an address whose extent runs past the top of the address space.
    const uintptr_t half =
        span > i128(1) << 62 ? uintptr_t{1} << 62 : static_cast<uintptr_t>(span / 2);
    data = spec.data == Data::kWrap ? ~uintptr_t{0} - half : 0;
    must_reject_ = true;
  }
  tensor_.data = reinterpret_cast<void*>(data);
}

int64_t FuzzTensor::stride(size_t i) const {
  if (!strides_.empty()) return strides_[i];
  int64_t s = 1;
  for (size_t j = i + 1; j < static_cast<size_t>(tensor_.ndim); ++j) s *= shape_[j];
  return s;
}

std::vector<size_t> FuzzTensor::element_offsets() const {
  std::vector<size_t> offsets;
  if (!backed_) return offsets;
  const size_t ndim = static_cast<size_t>(tensor_.ndim);
  std::vector<int64_t> stride(ndim);
  int64_t count = 1;
  for (size_t i = ndim; i-- > 0;) {
    stride[i] = strides_.empty() ? count : strides_[i];
    count *= shape_[i];
  }
  offsets.reserve(static_cast<size_t>(count));
  std::vector<int64_t> idx(ndim, 0);
  const int64_t elem = elem_bytes();
  for (int64_t n = 0; n < count; ++n) {
    int64_t off = 0;
    for (size_t i = 0; i < ndim; ++i) off += idx[i] * stride[i];
    offsets.push_back(first_ + static_cast<size_t>(off * elem));
    for (size_t i = ndim; i-- > 0;) {
      if (++idx[i] < shape_[i]) break;
      idx[i] = 0;
    }
  }
  return offsets;
}

bool FuzzTensor::unchanged_outside_elements(const std::vector<uint8_t>& before) const {
  std::vector<char> mine(storage_.size(), 0);
  const size_t elem = static_cast<size_t>(elem_bytes());
  for (size_t off : element_offsets()) std::memset(mine.data() + off, 1, elem);
  for (size_t i = 0; i < storage_.size(); ++i)
    if (!mine[i] && storage_[i] != before[i]) return false;
  return true;
}

}  // namespace dsv4fuzz
