// dsv4_kv_write on the CPU backend with fuzzed descriptors, tensors and slots. Invariants: a call
// with a malformed tensor fails; a failing call leaves the cache untouched; a successful one writes
// only the entries of its valid slots, never its inputs, and leaves each duplicated slot holding
// the row written for it alone (spec 12.4: the last row wins).
#include <cstdio>
#include <cstring>
#include <vector>

#include "fuzz_support.h"
#include "reference.h"

using namespace dsv4fuzz;

namespace {

// Byte ranges (offset from the block base, length) of entry e: its data and, for the 584 B layout,
// its scales (spec 3.2).
std::vector<std::pair<int64_t, int64_t>> entry_ranges(uint32_t layout, int64_t block_size,
                                                      int64_t e) {
  if (layout == DSV4_KV_LAYOUT_FP8_V4_584B) return {{e * 576, 576}, {block_size * 576 + e * 8, 8}};
  const int64_t bpt = dsv4test::ref_layout_bytes_per_token(layout);
  return {{e * bpt, bpt}};
}

bool known(uint32_t layout) {
  return layout >= DSV4_KV_LAYOUT_BF16 && layout <= DSV4_KV_LAYOUT_FP16;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  FuzzedDataProvider in(bytes, size);
  Filler fill(in.ConsumeIntegral<uint64_t>());
  dsv4_kv_write_args a;
  dsv4_kv_write_args_init(&a);
  dsv4_kv_cache_desc& desc = a.cache_desc;
  desc.layout = in.PickValueInArray<uint32_t>(
      {DSV4_KV_LAYOUT_BF16, DSV4_KV_LAYOUT_FP8_V4_584B, DSV4_KV_LAYOUT_FP8_V32_656B,
       DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR, DSV4_KV_LAYOUT_FP16, 0u, 6u, 99u});
  desc.block_size =
      in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(1, 70) : pick32(in, -2, 300);
  const int64_t bs = desc.block_size > 0 ? desc.block_size : 1;
  const int64_t min_stride =
      known(desc.layout) && bs <= 4096 ? dsv4test::ref_layout_min_block_bytes(desc.layout, bs) : 0;
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0:
      desc.block_stride_bytes = 0;
      break;
    case 1:
      desc.block_stride_bytes = min_stride;
      break;
    case 2:
      desc.block_stride_bytes = min_stride + 16 * in.ConsumeIntegralInRange<int64_t>(0, 8);
      break;
    case 3:
      desc.block_stride_bytes = min_stride + in.ConsumeIntegralInRange<int64_t>(-3, 40);
      break;
    default:
      desc.block_stride_bytes = pick(in, -1, 1 << 16);
  }
  desc.kv_scale = in.PickValueInArray<float>(
      {1.0f, 0.5f, 0.0371f, 0.0f, -1.0f, 1e30f, __builtin_inff(), __builtin_nanf("")});
  desc.flags = in.ConsumeIntegralInRange<int>(0, 15) == 0
                   ? in.PickValueInArray<uint32_t>({DSV4_KV_CACHE_FLAG_FP8_FNUZ, 2u})
                   : 0u;
  a.reserved = in.ConsumeIntegralInRange<int>(0, 31) == 0 ? 2u : 0u;

  const int64_t stride = desc.block_stride_bytes > 0 ? desc.block_stride_bytes : min_stride;
  const int64_t num_blocks = in.ConsumeIntegralInRange<int64_t>(0, 5);
  const int64_t slot_limit = num_blocks * bs;  // as described before mutation
  const int64_t dim = known(desc.layout) ? dsv4test::ref_layout_head_dim_qk(desc.layout) : 512;
  const int64_t rows = in.ConsumeIntegralInRange<int64_t>(0, 40);
  const bool bf16 = in.ConsumeBool();
  TensorSpec values_spec = compact(
      bf16 ? dsv4_dtype{DSV4_DTYPE_CODE_BFLOAT, 16, 1} : dsv4_dtype{DSV4_DTYPE_CODE_FLOAT, 32, 1},
      {rows, dim});
  TensorSpec slots_spec = compact(dsv4_dtype{DSV4_DTYPE_CODE_INT, 32, 1}, {rows});
  const bool bf16_cache = desc.layout == DSV4_KV_LAYOUT_BF16 && in.ConsumeBool();
  TensorSpec cache_spec =
      compact(bf16_cache ? dsv4_dtype{DSV4_DTYPE_CODE_BFLOAT, 16, 1}
                         : dsv4_dtype{DSV4_DTYPE_CODE_UINT, 8, 1},
              {num_blocks, bf16_cache ? (stride > 0 ? stride : 2) / 2 : (stride > 0 ? stride : 1)});
  mutate(in, values_spec);
  mutate(in, slots_spec);
  mutate(in, cache_spec);
  FuzzTensor values(values_spec, fill);
  FuzzTensor slots(slots_spec, fill);
  FuzzTensor cache(cache_spec, fill);
  if (values.too_big() || slots.too_big() || cache.too_big()) return 0;
  // Slots: valid ones (often repeated), skipped rows, beyond the capacity, anything.
  int32_t previous = 0;
  if (slots.backed() && slots.elem_bytes() == 4) {
    slots.fill_elements<int32_t>([&] {
      switch (in.ConsumeIntegralInRange<int>(0, 9)) {
        case 0:
          return previous;
        case 1:
          return int32_t{-1};
        case 2:
          return static_cast<int32_t>(slot_limit + in.ConsumeIntegralInRange<int32_t>(0, 3));
        case 3:
          return pick32(in, INT32_MIN, INT32_MAX);
        default:
          return previous = static_cast<int32_t>(
                     slot_limit > 0 ? in.ConsumeIntegralInRange<int64_t>(0, slot_limit - 1) : -1);
      }
    });
  }
  const int which_null = in.ConsumeIntegralInRange<int>(0, 15);
  a.values = which_null == 1 ? nullptr : values.get();
  a.slots = which_null == 2 ? nullptr : slots.get();
  a.cache = which_null == 3 ? nullptr : cache.get();

  if (debug())
    std::fprintf(stderr, "layout %u block_size %d stride %lld kv_scale %g\n%s\n%s\n%s\n",
                 desc.layout, desc.block_size, static_cast<long long>(desc.block_stride_bytes),
                 static_cast<double>(desc.kv_scale), values.describe("values").c_str(),
                 slots.describe("slots").c_str(), cache.describe("cache").c_str());
  const std::vector<uint8_t> cache_before = cache.storage();
  const std::vector<uint8_t> values_before = values.storage();
  const std::vector<uint8_t> slots_before = slots.storage();
  const dsv4_status st = dsv4_kv_write(cpu_ctx(), &a);
  const std::string why = last_error(st);
  const bool malformed = (a.values && values.must_reject()) || (a.slots && slots.must_reject()) ||
                         (a.cache && cache.must_reject());
  FUZZ_CHECK(!(malformed && st == DSV4_STATUS_OK), "a malformed tensor was accepted");
  FUZZ_CHECK(values.storage() == values_before && slots.storage() == slots_before,
             "kv_write changed its inputs: " + why);
  if (st != DSV4_STATUS_OK) {
    FUZZ_CHECK(cache.storage() == cache_before, "a failing kv_write wrote the cache: " + why);
    FUZZ_CHECK(std::string(dsv4_last_error_message()).rfind("dsv4_kv_write: ", 0) == 0, why);
    return 0;
  }
  if (rows == 0 || !cache.backed() || !slots.backed()) {
    FUZZ_CHECK(cache.storage() == cache_before, "nothing to write, yet the cache changed");
    return 0;
  }
  // Success: the descriptor and tensors were valid (the cache's dimension 0, perhaps mutated, is
  // its block count). Only the valid slots' entries changed.
  const int64_t capacity = cache.spec().shape[0] * bs;
  const std::vector<size_t> slot_at = slots.element_offsets();
  std::vector<int32_t> slot_values(slot_at.size());
  for (size_t r = 0; r < slot_at.size(); ++r) {
    std::memcpy(&slot_values[r], slots.storage().data() + slot_at[r], 4);
  }
  const int64_t block_bytes = cache.stride(0) * cache.elem_bytes();
  std::vector<char> written(cache.storage().size(), 0);
  std::vector<int64_t> last_row(static_cast<size_t>(capacity), -1);
  for (size_t r = 0; r < slot_values.size(); ++r) {
    const int32_t s = slot_values[r];
    FUZZ_CHECK(s < capacity, "kv_write accepted a slot beyond the capacity");
    if (s < 0) continue;
    last_row[static_cast<size_t>(s)] = static_cast<int64_t>(r);
    for (auto [off, len] : entry_ranges(desc.layout, bs, s % bs))
      std::memset(written.data() + cache.first() + (s / bs) * block_bytes + off, 1,
                  static_cast<size_t>(len));
  }
  for (size_t i = 0; i < written.size(); ++i)
    FUZZ_CHECK(written[i] || cache.storage()[i] == cache_before[i],
               "kv_write changed byte " + std::to_string(i) + " outside its slots' entries");

  // Spec 12.4: each slot holds what writing its last row alone gives.
  std::vector<int32_t> unique_slots;
  std::vector<uint8_t> unique_rows;
  const std::vector<size_t> value_at = values.element_offsets();
  const size_t elem = static_cast<size_t>(values.elem_bytes());
  for (int64_t s = 0; s < capacity; ++s) {
    const int64_t r = last_row[static_cast<size_t>(s)];
    if (r < 0) continue;
    unique_slots.push_back(static_cast<int32_t>(s));
    for (int64_t k = 0; k < dim; ++k) {
      const uint8_t* p = values.storage().data() + value_at[static_cast<size_t>(r * dim + k)];
      unique_rows.insert(unique_rows.end(), p, p + elem);
    }
  }
  const int64_t n = static_cast<int64_t>(unique_slots.size());
  int64_t vshape[2] = {n, dim}, sshape[1] = {n};
  dsv4_tensor vt{
      unique_rows.data(), {DSV4_DEVICE_CPU, 0}, 2, values_spec.dtype, vshape, nullptr, 0};
  dsv4_tensor stt{
      unique_slots.data(), {DSV4_DEVICE_CPU, 0}, 1, slots_spec.dtype, sshape, nullptr, 0};
  // A copy of the cache as it was, at the same address modulo 64 (alignment rules stay met).
  std::vector<uint8_t> again_storage(cache_before.size() + 64);
  const uintptr_t shift = (reinterpret_cast<uintptr_t>(cache.storage().data()) -
                           reinterpret_cast<uintptr_t>(again_storage.data())) %
                          64;
  uint8_t* again = again_storage.data() + shift;
  std::memcpy(again, cache_before.data(), cache_before.size());
  dsv4_tensor ct = *cache.get();
  ct.data =
      reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(again) + cache.first() - ct.byte_offset);
  dsv4_kv_write_args b = a;
  b.values = &vt;
  b.slots = &stt;
  b.cache = &ct;
  const dsv4_status st2 = dsv4_kv_write(cpu_ctx(), &b);
  FUZZ_CHECK(st2 == DSV4_STATUS_OK, "the deduplicated write failed: " + last_error(st2));
  FUZZ_CHECK(std::memcmp(again, cache.storage().data(), cache_before.size()) == 0,
             "a duplicated slot does not hold its last row");
  return 0;
}
