// Contract of the core library's small functions: *_init defaults, status strings, version,
// KV layout geometry, struct_size / api_version handling.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dsv4/dsv4.h"
#include "dsv4/dsv4_paged.h"

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---------------------------------------------------------------------------------------- init
TEST(Init, CtxOptionsDefaults) {
  dsv4_ctx_options options;
  std::memset(&options, 0xFF, sizeof(options));  // init must set every field, not rely on zeroing
  ASSERT_EQ(dsv4_ctx_options_init(&options), DSV4_STATUS_OK);
  EXPECT_EQ(options.struct_size, sizeof(dsv4_ctx_options));
  EXPECT_EQ(options.api_version, DSV4_API_VERSION);
  EXPECT_EQ(options.device.device_type, DSV4_DEVICE_CPU);
  EXPECT_EQ(options.device.device_id, 0);
  EXPECT_EQ(options.backend, nullptr);
  EXPECT_EQ(options.module_dir, nullptr);
  EXPECT_EQ(options.num_threads, 0);
  EXPECT_EQ(options.log_level, -1);
  EXPECT_EQ(options.log_fn, nullptr);
  EXPECT_EQ(options.log_user_data, nullptr);
}

TEST(Init, PlanOptionsDefaults) {
  dsv4_plan_options o;
  std::memset(&o, 0xFF, sizeof(o));
  ASSERT_EQ(dsv4_plan_options_init(&o), DSV4_STATUS_OK);
  EXPECT_EQ(o.struct_size, sizeof(dsv4_plan_options));
  EXPECT_EQ(o.mode, DSV4_MODE_EXPLICIT);
  EXPECT_EQ(o.flags, DSV4_PLAN_FLAG_NONE);
  EXPECT_EQ(o.num_heads, 64);
  EXPECT_EQ(o.head_dim_qk, 512);
  EXPECT_EQ(o.head_dim_v, 512);
  EXPECT_EQ(o.softmax_scale, 0.0f);
  EXPECT_EQ(o.q_dtype.code, DSV4_DTYPE_CODE_BFLOAT);
  EXPECT_EQ(o.q_dtype.bits, 16);
  EXPECT_EQ(o.q_dtype.lanes, 1);
  EXPECT_EQ(o.q_scale, 1.0f);
  EXPECT_EQ(o.max_tokens, 1024);
  EXPECT_EQ(o.swa_cache.layout, DSV4_KV_LAYOUT_FP8_V4_584B);
  EXPECT_EQ(o.swa_cache.block_size, 64);
  EXPECT_EQ(o.swa_cache.block_stride_bytes, 0);
  EXPECT_EQ(o.swa_cache.kv_scale, 1.0f);
  EXPECT_EQ(o.swa_cache.flags, 0u);
  EXPECT_EQ(o.extra_cache.layout, DSV4_KV_LAYOUT_NONE);
  EXPECT_EQ(o.extra_cache.flags, 0u);
  EXPECT_EQ(o.index_format, DSV4_INDEX_DENSE);
  EXPECT_EQ(o.topk, 128);
  EXPECT_EQ(o.extra_topk, 0);
  EXPECT_EQ(o.compress_ratio, 1);
  EXPECT_EQ(o.window, 128);
  EXPECT_EQ(o.decode_threshold, 1);
  EXPECT_EQ(o.max_model_len, 65536);
  EXPECT_EQ(o.max_requests, 256);
  EXPECT_EQ(o.max_swa_blocks_per_request, 1024);
  EXPECT_EQ(o.max_cmp_blocks_per_request, 1024);
  EXPECT_EQ(o.compressed_block_tokens, 256);
}

TEST(Init, RunArgsDefaults) {
  dsv4_run_args a;
  std::memset(&a, 0xFF, sizeof(a));
  ASSERT_EQ(dsv4_run_args_init(&a), DSV4_STATUS_OK);
  EXPECT_EQ(a.struct_size, sizeof(dsv4_run_args));
  EXPECT_EQ(a.reserved, 0u);
  const dsv4_tensor* const tensors[] = {a.q,
                                        a.swa_cache,
                                        a.extra_cache,
                                        a.attn_sink,
                                        a.out,
                                        a.lse,
                                        a.max_logits,
                                        a.indices,
                                        a.indptr,
                                        a.lengths,
                                        a.extra_indices,
                                        a.extra_indptr,
                                        a.extra_lengths,
                                        a.query_start_loc,
                                        a.seq_lens,
                                        a.swa_block_table,
                                        a.cmp_block_table,
                                        a.slot_mapping,
                                        a.topk_indices};
  for (const dsv4_tensor* t : tensors) EXPECT_EQ(t, nullptr);
  EXPECT_EQ(a.workspace, nullptr);
  EXPECT_EQ(a.workspace_bytes, 0u);
  EXPECT_EQ(a.stream, nullptr);
}

TEST(Init, KvWriteArgsDefaults) {
  dsv4_kv_write_args a;
  std::memset(&a, 0xFF, sizeof(a));
  ASSERT_EQ(dsv4_kv_write_args_init(&a), DSV4_STATUS_OK);
  EXPECT_EQ(a.struct_size, sizeof(dsv4_kv_write_args));
  EXPECT_EQ(a.reserved, 0u);
  EXPECT_EQ(a.cache_desc.flags, 0u);
  EXPECT_EQ(a.values, nullptr);
  EXPECT_EQ(a.slots, nullptr);
  EXPECT_EQ(a.cache, nullptr);
  EXPECT_EQ(a.stream, nullptr);
}

TEST(Init, KvLayoutInfoInit) {
  dsv4_kv_layout_info info;
  std::memset(&info, 0xFF, sizeof(info));
  ASSERT_EQ(dsv4_kv_layout_info_init(&info), DSV4_STATUS_OK);
  EXPECT_EQ(info.struct_size, sizeof(dsv4_kv_layout_info));
}

TEST(Init, ExportArgsDefaults) {
  dsv4_export_args a;
  std::memset(&a, 0xFF, sizeof(a));
  ASSERT_EQ(dsv4_export_args_init(&a), DSV4_STATUS_OK);
  EXPECT_EQ(a.struct_size, sizeof(dsv4_export_args));
  EXPECT_EQ(a.format, DSV4_EXPORT_FLASHMLA);
  EXPECT_EQ(a.batch, nullptr);
  const dsv4_tensor* const tensors[] = {a.swa_indices,      a.swa_lengths,     a.swa_indptr,
                                        a.cmp_indices,      a.cmp_lengths,     a.cmp_indptr,
                                        a.combined_indices, a.combined_lengths};
  for (const dsv4_tensor* t : tensors) EXPECT_EQ(t, nullptr);
  EXPECT_EQ(a.stream, nullptr);
}

TEST(Init, NullIsInvalidArgument) {
  EXPECT_EQ((dsv4_export_args_init)(nullptr, sizeof(dsv4_export_args)),
            DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ((dsv4_ctx_options_init)(nullptr, sizeof(dsv4_ctx_options)),
            DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ((dsv4_plan_options_init)(nullptr, sizeof(dsv4_plan_options)),
            DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ((dsv4_run_args_init)(nullptr, sizeof(dsv4_run_args)), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ((dsv4_kv_write_args_init)(nullptr, sizeof(dsv4_kv_write_args)),
            DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ((dsv4_kv_layout_info_init)(nullptr, sizeof(dsv4_kv_layout_info)),
            DSV4_STATUS_INVALID_ARGUMENT);
}

// ------------------------------------------------------------------------------------- status
TEST(Status, EveryCodeHasItsName) {
  const std::vector<std::pair<dsv4_status, const char*>> names = {
      {DSV4_STATUS_OK, "DSV4_STATUS_OK"},
      {DSV4_STATUS_INVALID_ARGUMENT, "DSV4_STATUS_INVALID_ARGUMENT"},
      {DSV4_STATUS_UNSUPPORTED, "DSV4_STATUS_UNSUPPORTED"},
      {DSV4_STATUS_NO_BACKEND, "DSV4_STATUS_NO_BACKEND"},
      {DSV4_STATUS_BACKEND_ERROR, "DSV4_STATUS_BACKEND_ERROR"},
      {DSV4_STATUS_OUT_OF_MEMORY, "DSV4_STATUS_OUT_OF_MEMORY"},
      {DSV4_STATUS_WORKSPACE_TOO_SMALL, "DSV4_STATUS_WORKSPACE_TOO_SMALL"},
      {DSV4_STATUS_PLAN_MISMATCH, "DSV4_STATUS_PLAN_MISMATCH"},
      {DSV4_STATUS_ABI_MISMATCH, "DSV4_STATUS_ABI_MISMATCH"},
      {DSV4_STATUS_INTERNAL, "DSV4_STATUS_INTERNAL"},
  };
  for (const auto& entry : names) {
    const char* text = dsv4_status_string(entry.first);
    ASSERT_NE(text, nullptr);
    EXPECT_STREQ(text, entry.second);
    EXPECT_EQ(text, dsv4_status_string(entry.first)) << "static storage expected";
  }
}

TEST(Status, UnknownCodes) {
  for (dsv4_status code : {-1, 10, 11, 100, INT32_MAX, INT32_MIN}) {
    const char* text = dsv4_status_string(code);
    ASSERT_NE(text, nullptr);
    EXPECT_STREQ(text, "DSV4_STATUS_UNKNOWN") << code;
  }
}

TEST(Status, LastErrorIsThreadLocalText) {
  // After a failing call the message is non-empty and names the argument.
  EXPECT_EQ((dsv4_plan_options_init)(nullptr, sizeof(dsv4_plan_options)),
            DSV4_STATUS_INVALID_ARGUMENT);
  const char* message = dsv4_last_error_message();
  ASSERT_NE(message, nullptr);
  EXPECT_TRUE(contains(message, "options")) << message;
}

TEST(Status, LastErrorIsPerThread) {
  EXPECT_EQ((dsv4_plan_options_init)(nullptr, sizeof(dsv4_plan_options)),
            DSV4_STATUS_INVALID_ARGUMENT);
  const std::string main_message = dsv4_last_error_message();
  std::string fresh, own;
  std::thread worker([&] {
    fresh = dsv4_last_error_message();  // nothing failed on this thread yet
    dsv4_kv_layout_info info;
    dsv4_kv_layout_info_init(&info);
    dsv4_kv_layout_get_info(99, 64, &info);
    own = dsv4_last_error_message();
  });
  worker.join();
  EXPECT_EQ(fresh, "");
  EXPECT_TRUE(contains(own, "layout")) << own;
  EXPECT_EQ(main_message, dsv4_last_error_message())
      << "another thread's failure changed this thread's message";
}

// ------------------------------------------------------------------------------------- version
TEST(Version, AgreesWithMacros) {
  EXPECT_EQ(dsv4_get_version(), static_cast<uint32_t>(DSV4_VERSION_NUMBER));
  char expected[32];
  std::snprintf(expected, sizeof(expected), "%d.%d.%d", DSV4_VERSION_MAJOR, DSV4_VERSION_MINOR,
                DSV4_VERSION_PATCH);
  ASSERT_NE(dsv4_get_version_string(), nullptr);
  EXPECT_STREQ(dsv4_get_version_string(), expected);
  EXPECT_EQ(DSV4_API_VERSION,
            (static_cast<uint32_t>(DSV4_VERSION_MAJOR) << 16) | DSV4_VERSION_MINOR);
}

// ------------------------------------------------------------------------------------- layouts
struct LayoutCase {
  uint32_t layout;
  int32_t block_size;
  int32_t head_dim_qk;
  int32_t bytes_per_token;
  int64_t min_block_stride;
};

TEST(KvLayout, Geometry) {
  const LayoutCase cases[] = {
      {DSV4_KV_LAYOUT_FP8_V4_584B, 64, 512, 584, 37440},
      {DSV4_KV_LAYOUT_FP8_V4_584B, 2, 512, 584, 1728},
      {DSV4_KV_LAYOUT_FP8_V4_584B, 256, 512, 584, 149760},
      {DSV4_KV_LAYOUT_FP8_V4_584B, 1, 512, 584, 1152},  // ceil(584/576) * 576
      {DSV4_KV_LAYOUT_BF16, 64, 512, 1024, 1024 * 64},
      {DSV4_KV_LAYOUT_BF16, 3, 512, 1024, 1024 * 3},
      {DSV4_KV_LAYOUT_FP8_V32_656B, 64, 576, 656, 656 * 64},
      {DSV4_KV_LAYOUT_FP8_V32_656B, 5, 576, 656, 656 * 5},
      {DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR, 64, 512, 512, 512 * 64},
      {DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR, 7, 512, 512, 512 * 7},
  };
  for (const LayoutCase& c : cases) {
    SCOPED_TRACE("layout " + std::to_string(c.layout) + " B=" + std::to_string(c.block_size));
    dsv4_kv_layout_info info;
    ASSERT_EQ(dsv4_kv_layout_info_init(&info), DSV4_STATUS_OK);
    ASSERT_EQ(dsv4_kv_layout_get_info(c.layout, c.block_size, &info), DSV4_STATUS_OK)
        << dsv4_last_error_message();
    EXPECT_EQ(info.layout, c.layout);
    EXPECT_EQ(info.head_dim_qk, c.head_dim_qk);
    EXPECT_EQ(info.head_dim_v, 512);
    EXPECT_EQ(info.bytes_per_token, c.bytes_per_token);
    EXPECT_EQ(info.min_block_stride_bytes, c.min_block_stride);
  }
}

TEST(KvLayout, BadArguments) {
  dsv4_kv_layout_info info;
  ASSERT_EQ(dsv4_kv_layout_info_init(&info), DSV4_STATUS_OK);
  const dsv4_kv_layout_info before = info;
  EXPECT_EQ(dsv4_kv_layout_get_info(99, 64, &info), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(dsv4_last_error_message(), "layout")) << dsv4_last_error_message();
  EXPECT_EQ(dsv4_kv_layout_get_info(DSV4_KV_LAYOUT_BF16, 0, &info), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(dsv4_last_error_message(), "block_size")) << dsv4_last_error_message();
  EXPECT_EQ(dsv4_kv_layout_get_info(DSV4_KV_LAYOUT_BF16, -4, &info), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(std::memcmp(&before, &info, sizeof(info)), 0)
      << "failing calls must not write out_info";
  EXPECT_EQ(dsv4_kv_layout_get_info(DSV4_KV_LAYOUT_BF16, 64, nullptr),
            DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(dsv4_last_error_message(), "out_info")) << dsv4_last_error_message();

  dsv4_kv_layout_info zero_size = info;
  zero_size.struct_size = 0;
  EXPECT_EQ(dsv4_kv_layout_get_info(DSV4_KV_LAYOUT_BF16, 64, &zero_size),
            DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(dsv4_last_error_message(), "struct_size")) << dsv4_last_error_message();
}

// ------------------------------------------------------------------------- struct_size handling
// A buffer larger than the struct, so "struct_size bigger than sizeof" stays inside owned memory.
template <typename T>
struct Padded {
  T value;
  unsigned char tail[64];
};

dsv4_status create_ctx(const dsv4_ctx_options* options, std::string* message) {
  dsv4_ctx* const sentinel = reinterpret_cast<dsv4_ctx*>(static_cast<uintptr_t>(0x7777770));
  dsv4_ctx* ctx = sentinel;
  const dsv4_status status = dsv4_ctx_create(options, &ctx);
  *message = dsv4_last_error_message();
  if (status == DSV4_STATUS_OK)
    dsv4_ctx_destroy(ctx);
  else
    EXPECT_EQ(ctx, sentinel) << "failing dsv4_ctx_create wrote *out_ctx";
  return status;
}

// The _init functions write only the caller's struct_size bytes (the macro passes sizeof(*p)), so a
// newer library never overruns an older caller's struct; a larger size than the library knows is an
// ABI mismatch and writes nothing.
template <typename T>
void expect_sized_init(dsv4_status (*init)(T*, size_t), const char* arg) {
  Padded<T> padded;
  std::memset(&padded, 0xAB, sizeof(padded));
  ASSERT_EQ(init(&padded.value, sizeof(T)), DSV4_STATUS_OK);
  EXPECT_EQ(padded.value.struct_size, sizeof(T));
  for (unsigned char byte : padded.tail) ASSERT_EQ(byte, 0xAB) << "init wrote past sizeof";

  std::memset(&padded, 0xAB, sizeof(padded));
  EXPECT_EQ(init(&padded.value, sizeof(T) + 16), DSV4_STATUS_ABI_MISMATCH);
  EXPECT_TRUE(contains(dsv4_last_error_message(), std::string(arg) + "->struct_size"))
      << dsv4_last_error_message();
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(&padded);
  for (size_t i = 0; i < sizeof(padded); ++i) ASSERT_EQ(bytes[i], 0xAB) << "failed init wrote";

  EXPECT_EQ(init(&padded.value, 4), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(init(nullptr, sizeof(T)), DSV4_STATUS_INVALID_ARGUMENT);
}

TEST(StructSize, InitWritesOnlyTheCallersSize) {
  expect_sized_init<dsv4_ctx_options>(&(dsv4_ctx_options_init), "options");
  expect_sized_init<dsv4_plan_options>(&(dsv4_plan_options_init), "options");
  expect_sized_init<dsv4_run_args>(&(dsv4_run_args_init), "args");
  expect_sized_init<dsv4_kv_write_args>(&(dsv4_kv_write_args_init), "args");
  expect_sized_init<dsv4_kv_layout_info>(&(dsv4_kv_layout_info_init), "info");
  expect_sized_init<dsv4_export_args>(&(dsv4_export_args_init), "args");
}

TEST(StructSize, CtxOptions) {
  Padded<dsv4_ctx_options> padded;
  std::memset(&padded, 0, sizeof(padded));
  ASSERT_EQ(dsv4_ctx_options_init(&padded.value), DSV4_STATUS_OK);
  std::string message;
  ASSERT_EQ(create_ctx(&padded.value, &message), DSV4_STATUS_OK) << message;

  padded.value.struct_size = 0;
  EXPECT_EQ(create_ctx(&padded.value, &message), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(message, "options->struct_size")) << message;

  padded.value.struct_size = 4;  // covers only struct_size itself
  EXPECT_EQ(create_ctx(&padded.value, &message), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(message, "options->struct_size")) << message;

  padded.value.struct_size = sizeof(dsv4_ctx_options) + 16;  // a newer header than this library
  EXPECT_EQ(create_ctx(&padded.value, &message), DSV4_STATUS_ABI_MISMATCH);
  EXPECT_TRUE(contains(message, "options->struct_size")) << message;
}

TEST(StructSize, ApiVersionMajorMismatch) {
  dsv4_ctx_options options;
  ASSERT_EQ(dsv4_ctx_options_init(&options), DSV4_STATUS_OK);
  std::string message;
  options.api_version = (static_cast<uint32_t>(DSV4_VERSION_MAJOR + 1) << 16) | DSV4_VERSION_MINOR;
  EXPECT_EQ(create_ctx(&options, &message), DSV4_STATUS_ABI_MISMATCH);
  EXPECT_TRUE(contains(message, "options->api_version")) << message;
  if (DSV4_VERSION_MAJOR > 0) {
    options.api_version = static_cast<uint32_t>(DSV4_VERSION_MAJOR - 1) << 16;
    EXPECT_EQ(create_ctx(&options, &message), DSV4_STATUS_ABI_MISMATCH);
  }
  options.api_version = 0xFFFF0000u;
  EXPECT_EQ(create_ctx(&options, &message), DSV4_STATUS_ABI_MISMATCH);
  EXPECT_TRUE(contains(message, "options->api_version")) << message;
}

TEST(StructSize, EnumerateAndDeviceInfoCheckOptionsToo) {
  dsv4_ctx_options options;
  ASSERT_EQ(dsv4_ctx_options_init(&options), DSV4_STATUS_OK);
  options.struct_size = 0;
  int32_t count = -7;
  EXPECT_EQ(dsv4_enumerate_backends(&options, nullptr, 0, &count), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(count, -7);
  EXPECT_TRUE(contains(dsv4_last_error_message(), "options->struct_size"))
      << dsv4_last_error_message();

  dsv4_device_info device;
  std::memset(&device, 0, sizeof(device));
  device.struct_size = sizeof(device);
  EXPECT_EQ(dsv4_get_device_info(&options, "cpu", 0, &device), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(dsv4_last_error_message(), "options->struct_size"))
      << dsv4_last_error_message();
  EXPECT_EQ(device.name[0], '\0') << "failing dsv4_get_device_info wrote out_info";
}

class WithCpuContext : public ::testing::Test {
 protected:
  void SetUp() override {
    dsv4_ctx_options options;
    ASSERT_EQ(dsv4_ctx_options_init(&options), DSV4_STATUS_OK);
    options.backend = "cpu";
    ASSERT_EQ(dsv4_ctx_create(&options, &ctx_), DSV4_STATUS_OK) << dsv4_last_error_message();
  }
  void TearDown() override { dsv4_ctx_destroy(ctx_); }
  dsv4_ctx* ctx_ = nullptr;
};

TEST_F(WithCpuContext, PlanOptionsStructSize) {
  Padded<dsv4_plan_options> padded;
  std::memset(&padded, 0, sizeof(padded));
  ASSERT_EQ(dsv4_plan_options_init(&padded.value), DSV4_STATUS_OK);
  padded.value.num_heads = 8;
  padded.value.topk = 64;
  padded.value.max_tokens = 4;
  dsv4_plan* plan = nullptr;
  ASSERT_EQ(dsv4_plan_create(ctx_, &padded.value, &plan), DSV4_STATUS_OK)
      << dsv4_last_error_message();
  dsv4_plan_destroy(plan);

  const std::pair<uint32_t, dsv4_status> cases[] = {
      {0u, DSV4_STATUS_INVALID_ARGUMENT},
      {4u, DSV4_STATUS_INVALID_ARGUMENT},
      {static_cast<uint32_t>(sizeof(dsv4_plan_options) + 8), DSV4_STATUS_ABI_MISMATCH},
  };
  for (const auto& c : cases) {
    padded.value.struct_size = c.first;
    dsv4_plan* const sentinel = reinterpret_cast<dsv4_plan*>(static_cast<uintptr_t>(0x6666660));
    plan = sentinel;
    EXPECT_EQ(dsv4_plan_create(ctx_, &padded.value, &plan), c.second) << "struct_size " << c.first;
    EXPECT_TRUE(contains(dsv4_last_error_message(), "options->struct_size"))
        << dsv4_last_error_message();
    EXPECT_EQ(plan, sentinel);
  }
}

TEST_F(WithCpuContext, KvWriteArgsStructSize) {
  Padded<dsv4_kv_write_args> padded;
  std::memset(&padded, 0, sizeof(padded));
  ASSERT_EQ(dsv4_kv_write_args_init(&padded.value), DSV4_STATUS_OK);
  const std::pair<uint32_t, dsv4_status> cases[] = {
      {0u, DSV4_STATUS_INVALID_ARGUMENT},
      {4u, DSV4_STATUS_INVALID_ARGUMENT},
      {static_cast<uint32_t>(sizeof(dsv4_kv_write_args) + 8), DSV4_STATUS_ABI_MISMATCH},
  };
  for (const auto& c : cases) {
    padded.value.struct_size = c.first;
    EXPECT_EQ(dsv4_kv_write(ctx_, &padded.value), c.second) << "struct_size " << c.first;
    EXPECT_TRUE(contains(dsv4_last_error_message(), "args->struct_size"))
        << dsv4_last_error_message();
  }
}

TEST_F(WithCpuContext, InfoStructSizes) {
  // Info structs are caller-provided: the caller states their size; 0 is rejected.
  dsv4_ctx_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  ASSERT_EQ(dsv4_ctx_get_info(ctx_, &info), DSV4_STATUS_OK) << dsv4_last_error_message();
  EXPECT_STREQ(info.backend, "cpu");
  EXPECT_EQ(info.device.device_type, DSV4_DEVICE_CPU);
  EXPECT_GT(info.num_threads, 0);
  EXPECT_TRUE(contains(info.reason, "options.backend")) << info.reason;
  std::memset(&info, 0, sizeof(info));
  EXPECT_EQ(dsv4_ctx_get_info(ctx_, &info), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(dsv4_last_error_message(), "struct_size")) << dsv4_last_error_message();

  dsv4_device_info device;
  std::memset(&device, 0, sizeof(device));
  device.struct_size = sizeof(device);
  ASSERT_EQ(dsv4_get_device_info(nullptr, "cpu", 0, &device), DSV4_STATUS_OK)
      << dsv4_last_error_message();
  EXPECT_EQ(device.device_type, DSV4_DEVICE_CPU);
  EXPECT_GT(device.compute_units, 0);
  EXPECT_NE(device.name[0], '\0');
}

TEST(RunArgs, StructSizeAndReservedAreChecked) {
  // dsv4_run checks the args struct itself before any tensor; a CPU plan is its first argument.
  dsv4_ctx_options options;
  ASSERT_EQ(dsv4_ctx_options_init(&options), DSV4_STATUS_OK);
  options.backend = "cpu";
  dsv4_ctx* ctx = nullptr;
  ASSERT_EQ(dsv4_ctx_create(&options, &ctx), DSV4_STATUS_OK) << dsv4_last_error_message();
  dsv4_plan_options plan_options;
  ASSERT_EQ(dsv4_plan_options_init(&plan_options), DSV4_STATUS_OK);
  plan_options.num_heads = 4;
  plan_options.topk = 16;
  plan_options.max_tokens = 2;
  dsv4_plan* plan = nullptr;
  ASSERT_EQ(dsv4_plan_create(ctx, &plan_options, &plan), DSV4_STATUS_OK)
      << dsv4_last_error_message();

  Padded<dsv4_run_args> padded;
  std::memset(&padded, 0, sizeof(padded));
  ASSERT_EQ(dsv4_run_args_init(&padded.value), DSV4_STATUS_OK);
  const std::pair<uint32_t, dsv4_status> cases[] = {
      {0u, DSV4_STATUS_INVALID_ARGUMENT},
      {4u, DSV4_STATUS_INVALID_ARGUMENT},
      {static_cast<uint32_t>(sizeof(dsv4_run_args) + 8), DSV4_STATUS_ABI_MISMATCH},
  };
  for (const auto& c : cases) {
    padded.value.struct_size = c.first;
    EXPECT_EQ(dsv4_run(plan, &padded.value), c.second) << "struct_size " << c.first;
    EXPECT_TRUE(contains(dsv4_last_error_message(), "args->struct_size"))
        << dsv4_last_error_message();
  }
  padded.value.struct_size = sizeof(dsv4_run_args);
  padded.value.reserved = 1;
  EXPECT_EQ(dsv4_run(plan, &padded.value), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(dsv4_last_error_message(), "args->reserved")) << dsv4_last_error_message();

  dsv4_plan_destroy(plan);
  dsv4_ctx_destroy(ctx);
}

}  // namespace
