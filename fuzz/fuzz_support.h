// Shared pieces of the libFuzzer targets (fuzz/*.cpp): a CPU context, integer choices that favour
// edge values, and tensors whose storage covers exactly what they describe, so the library can
// only reach memory the caller owns and every byte it must not write can be checked afterwards.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dsv4/dsv4.h"

namespace dsv4fuzz {

// A broken invariant: prints it and aborts, which libFuzzer reports with the input.
[[noreturn]] void broken(const char* file, int line, const char* condition, const std::string& why);
#define FUZZ_CHECK(condition, why) \
  ((condition) ? (void)0 : ::dsv4fuzz::broken(__FILE__, __LINE__, #condition, (why)))

// The process's CPU context (one worker: small, deterministic cases), created on first use.
dsv4_ctx* cpu_ctx();

// True when DSV4_FUZZ_DEBUG is set: targets print their tensors (triage of a found input).
bool debug();

// "STATUS: message" of the last call, for invariant messages.
std::string last_error(dsv4_status status);

// An integer in [lo, hi] most of the time, else one of the edge values of int64 (0, +-1, the int32
// and int64 limits, powers of two around them).
int64_t pick(FuzzedDataProvider& in, int64_t lo, int64_t hi);
int32_t pick32(FuzzedDataProvider& in, int32_t lo, int32_t hi);

// A few input bytes expanded into any amount of pseudo-random data (splitmix64).
class Filler {
 public:
  explicit Filler(uint64_t seed) : state_(seed) {}
  uint64_t next();
  int64_t in_range(int64_t lo, int64_t hi);  // inclusive
  void bytes(uint8_t* dst, size_t n);

 private:
  uint64_t state_;
};

// What a test describes; how its data pointer is formed.
enum class Data : uint8_t {
  kStorage,     // data = storage, byte_offset as given
  kNull,        // data = NULL
  kGarbage,     // data = a small non-NULL integer (only for empty tensors: never dereferenced)
  kWrap,        // data near the top of the address space, so data + byte_offset + extent wraps
  kOffsetOnly,  // data = storage - byte_offset: the address lives in byte_offset (DLPack allows)
};

struct TensorSpec {
  dsv4_dtype dtype{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // empty: NULL (compact row-major)
  uint64_t byte_offset = 0;
  dsv4_device device{DSV4_DEVICE_CPU, 0};
  Data data = Data::kStorage;
  int32_t ndim_override = -1;  // >= 0: ndim differs from shape.size() (a malformed tensor)
};

// A compact row-major spec.
TensorSpec compact(dsv4_dtype dtype, std::vector<int64_t> shape);

// Applies 0..n fuzzer-chosen malformations or legal variations to a spec (shape, strides, dtype,
// device, byte_offset, data pointer).
void mutate(FuzzedDataProvider& in, TensorSpec& spec);

class FuzzTensor {
 public:
  // Storage for the spec: guard bytes around the span the description covers (filled from
  // `fill`), when the span is at most `limit` bytes; otherwise data cannot be backed and is set so
  // that the tensor is invalid (NULL, or an address range that wraps).
  FuzzTensor(const TensorSpec& spec, Filler& fill, size_t limit = size_t{1} << 20);
  FuzzTensor(const FuzzTensor&) = delete;
  FuzzTensor& operator=(const FuzzTensor&) = delete;

  dsv4_tensor* get() { return &tensor_; }
  const TensorSpec& spec() const { return spec_; }
  // The description is invalid whatever the plan: the library must reject any call it is part of.
  bool must_reject() const { return must_reject_; }
  bool empty() const { return empty_; }
  // Valid, but more elements than a fuzz case should process (zero strides): targets skip it.
  bool too_big() const { return too_big_; }
  bool backed() const { return backed_; }
  // Element (multi-index in compact order) -> byte offset into storage(); only when backed.
  std::vector<size_t> element_offsets() const;
  std::vector<uint8_t>& storage() { return storage_; }
  const std::vector<uint8_t>& storage() const { return storage_; }
  int64_t elem_bytes() const { return spec_.dtype.bits / 8; }
  // Storage offset of element 0, and the element stride of dimension i (compact when none given).
  size_t first() const { return first_; }
  int64_t stride(size_t i) const;
  // Writes a value of the element size at every element, in compact order.
  template <class T, class Fn>
  void fill_elements(Fn value) {
    for (size_t off : element_offsets()) {
      const T v = value();
      __builtin_memcpy(storage_.data() + off, &v, sizeof v);
    }
  }
  // "name: dtype {code,bits,lanes} shape [...] strides [...] byte_offset data=... (flags)".
  std::string describe(const char* name) const;
  // Bytes outside the described elements equal `before` (nothing written there).
  bool unchanged_outside_elements(const std::vector<uint8_t>& before) const;

 private:
  TensorSpec spec_;
  dsv4_tensor tensor_{};
  std::vector<int64_t> shape_, strides_;
  std::vector<uint8_t> storage_;
  size_t first_ = 0;  // storage offset of element 0
  bool must_reject_ = false;
  bool empty_ = false;
  bool backed_ = false;
  bool too_big_ = false;
};

}  // namespace dsv4fuzz
