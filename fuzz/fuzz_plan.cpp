// dsv4_plan_create on the CPU backend with fuzzed options (every field, edge values, odd struct
// sizes). Invariants: a failing call leaves *out_plan untouched and says why; a paged plan whose
// lists cannot be int32-indexed (window + compressed width > INT32_MAX, computed here in 128-bit
// arithmetic from the spec's formulas) is rejected; an accepted paged plan's workspace holds its
// lists (int32 [max_tokens, window + width] plus lengths); plan queries agree with the options.
#include <cstdio>
#include <cstring>
#include <vector>

#include "fuzz_support.h"
#include "reference.h"

using namespace dsv4fuzz;

namespace {

using i128 = __int128;

dsv4_kv_cache_desc fuzz_desc(FuzzedDataProvider& in) {
  dsv4_kv_cache_desc d{};
  d.layout = in.PickValueInArray<uint32_t>(
      {DSV4_KV_LAYOUT_BF16, DSV4_KV_LAYOUT_FP8_V4_584B, DSV4_KV_LAYOUT_FP8_V32_656B,
       DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR, DSV4_KV_LAYOUT_FP8_V4_584B, 0u, 6u, 0xffffffffu});
  d.block_size = in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(1, 256) : pick32(in, -4, 64);
  const bool known = d.layout >= DSV4_KV_LAYOUT_BF16 && d.layout <= DSV4_KV_LAYOUT_FP16;
  const int64_t min_stride = known && d.block_size > 0 && d.block_size <= 1 << 16
                                 ? dsv4test::ref_layout_min_block_bytes(d.layout, d.block_size)
                                 : 0;
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      d.block_stride_bytes = 0;
      break;
    case 1:
      d.block_stride_bytes = min_stride + 16 * in.ConsumeIntegralInRange<int64_t>(0, 4);
      break;
    case 2:
      d.block_stride_bytes = min_stride + in.ConsumeIntegralInRange<int64_t>(-2, 2);
      break;
    default:
      d.block_stride_bytes = pick(in, -1, 1 << 20);
  }
  d.kv_scale = in.PickValueInArray<float>(
      {1.0f, 0.25f, 0.0f, -2.0f, __builtin_inff(), __builtin_nanf(""), 1e-30f});
  d.flags = in.ConsumeIntegralInRange<int>(0, 15) == 0
                ? in.PickValueInArray<uint32_t>({DSV4_KV_CACHE_FLAG_FP8_FNUZ, 2u, 0x80000000u})
                : 0u;
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  FuzzedDataProvider in(bytes, size);
  dsv4_plan_options o;
  dsv4_plan_options_init(&o);
  o.mode =
      in.PickValueInArray<uint32_t>({DSV4_MODE_EXPLICIT, DSV4_MODE_PAGED, DSV4_MODE_PAGED, 2u});
  o.flags =
      in.ConsumeIntegralInRange<int>(0, 7) == 0
          ? in.PickValueInArray<uint32_t>({DSV4_PLAN_FLAG_BATCH_INVARIANT,
                                           DSV4_PLAN_FLAG_REFERENCE_KERNEL, 3u, 4u, 0x80000000u})
          : 0u;
  o.num_heads = pick32(in, 1, 128);
  o.head_dim_qk = in.PickValueInArray<int32_t>({512, 512, 576, 0, 511});
  o.head_dim_v = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? pick32(in, 0, 1024) : 512;
  o.softmax_scale = in.PickValueInArray<float>(
      {0.0f, 0.0441941738f, 1.0f, -1.0f, 1e-38f, __builtin_inff(), __builtin_nanf("")});
  static const dsv4_dtype kQTypes[] = {{DSV4_DTYPE_CODE_BFLOAT, 16, 1},
                                       {DSV4_DTYPE_CODE_BFLOAT, 16, 1},
                                       {DSV4_DTYPE_CODE_FLOAT8_E4M3FN, 8, 1},
                                       {DSV4_DTYPE_CODE_FLOAT, 32, 1},
                                       {DSV4_DTYPE_CODE_BFLOAT, 16, 2}};
  o.q_dtype = in.PickValueInArray(kQTypes);
  o.q_scale = in.PickValueInArray<float>({1.0f, 0.5f, 0.0f, -1.0f, __builtin_nanf("")});
  o.max_tokens = pick32(in, 1, 4096);
  o.swa_cache = fuzz_desc(in);
  o.extra_cache = in.ConsumeBool() ? fuzz_desc(in) : dsv4_kv_cache_desc{0, 64, 0, 1.0f, 0};
  o.index_format = in.PickValueInArray<uint32_t>({DSV4_INDEX_DENSE, DSV4_INDEX_CSR, 3u});
  o.topk = pick32(in, 1, 2048);
  o.extra_topk = in.ConsumeBool() ? 0 : pick32(in, 0, 2048);
  o.compress_ratio = in.PickValueInArray<int32_t>({1, 4, 128, 0, -7, 2, 64});
  o.window = pick32(in, 1, 1024);
  o.index_topk = pick32(in, 1, 2048);
  o.decode_threshold = pick32(in, 1, 8);
  o.max_model_len = pick(in, 1, int64_t{1} << 21);
  o.max_requests = pick32(in, 1, 1024);
  o.max_swa_blocks_per_request = pick32(in, 1, 4096);
  o.max_cmp_blocks_per_request = pick32(in, 1, 4096);
  o.compressed_block_tokens =
      in.ConsumeIntegralInRange<int>(0, 7) == 0
          ? pick32(in, 0, 1024)
          : static_cast<int32_t>(static_cast<int64_t>(o.compress_ratio > 1 ? o.compress_ratio : 1) *
                                 o.extra_cache.block_size);

  // The caller's struct: this library's size, an older (shorter) one, or a newer one whose tail
  // may hold non-zero bytes.
  std::vector<uint8_t> caller(sizeof o + 64, 0);
  std::memcpy(caller.data(), &o, sizeof o);
  uint32_t struct_size = sizeof o;
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
    case 0:
      struct_size = in.ConsumeIntegralInRange<uint32_t>(0, sizeof o);
      break;
    case 1:
      struct_size = sizeof o + in.ConsumeIntegralInRange<uint32_t>(1, 64);
      if (in.ConsumeBool())
        caller[caller.size() - 1 - in.ConsumeIntegralInRange<size_t>(0, 63)] = 1;
      break;
    default:
      break;
  }
  std::memcpy(caller.data(), &struct_size, sizeof struct_size);

  // The spec's list widths, without overflow: per-token candidates and the workspace they need.
  // (A shorter struct gets defaults for its missing tail: the model below then does not apply.)
  const bool paged = o.mode == DSV4_MODE_PAGED && struct_size >= sizeof o;
  i128 width = 0;
  if (paged && o.compress_ratio == 4) width = o.index_topk;
  if (paged && o.compress_ratio == 128) {
    const i128 entries = (i128(o.max_model_len) + 127) / 128;
    width = (entries + 127) / 128 * 128;
  }
  const i128 per_token = paged ? i128(o.window) + width : i128(o.topk) + o.extra_topk;
  const bool must_fail = paged && (per_token > INT32_MAX || o.max_model_len < 1 || width < 0);
  // A valid plan this large makes the CPU module allocate per_token * ~(d + 18) floats of scratch;
  // under ASan a request that large aborts instead of throwing, so such cases are skipped.
  if (!must_fail && per_token * 600 * 4 > i128(1) << 29) return 0;

  dsv4_plan* const sentinel = reinterpret_cast<dsv4_plan*>(uintptr_t{0x10});
  dsv4_plan* plan = sentinel;
  const dsv4_status st =
      dsv4_plan_create(cpu_ctx(), reinterpret_cast<const dsv4_plan_options*>(caller.data()), &plan);
  const std::string why = last_error(st);
  if (debug())
    std::fprintf(stderr, "mode %u ratio %d window %d index_topk %d max_model_len %lld -> %s\n",
                 o.mode, o.compress_ratio, o.window, o.index_topk,
                 static_cast<long long>(o.max_model_len), why.c_str());
  if (st != DSV4_STATUS_OK) {
    FUZZ_CHECK(plan == sentinel, "a failing dsv4_plan_create wrote *out_plan: " + why);
    FUZZ_CHECK(std::string(dsv4_last_error_message()).rfind("dsv4_plan_create: ", 0) == 0, why);
    return 0;
  }
  FUZZ_CHECK(!must_fail, "a paged plan whose lists exceed int32 indexing was accepted: window " +
                             std::to_string(o.window) + ", max_model_len " +
                             std::to_string(o.max_model_len));
  FUZZ_CHECK(plan != nullptr && plan != sentinel, "dsv4_plan_create returned OK without a plan");
  size_t workspace = 0;
  FUZZ_CHECK(dsv4_plan_get_workspace_size(plan, &workspace) == DSV4_STATUS_OK, last_error(1));
  if (paged) {
    const i128 need = i128(o.max_tokens) * (per_token + 2) * 4;
    FUZZ_CHECK(i128(workspace) >= need,
               "workspace " + std::to_string(workspace) + " bytes cannot hold the plan's lists");
  }
  dsv4_plan_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  FUZZ_CHECK(dsv4_plan_get_info(plan, &info) == DSV4_STATUS_OK, last_error(1));
  FUZZ_CHECK(
      info.mode == o.mode && info.num_heads == o.num_heads && info.workspace_bytes == workspace,
      "dsv4_plan_get_info disagrees with the options");
  dsv4_plan_destroy(plan);

  // The layout query answers for the descriptors too.
  dsv4_kv_layout_info layout_info;
  dsv4_kv_layout_info_init(&layout_info);
  const dsv4_kv_cache_desc& c = o.swa_cache;
  if (dsv4_kv_layout_get_info(c.layout, c.block_size, &layout_info) == DSV4_STATUS_OK)
    FUZZ_CHECK(layout_info.min_block_stride_bytes ==
                   dsv4test::ref_layout_min_block_bytes(c.layout, c.block_size),
               "dsv4_kv_layout_get_info's minimum block stride differs from the spec's");
  return 0;
}
