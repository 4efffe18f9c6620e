// dsv4.hpp, the header-only C++17 wrapper: the binding test vectors through it (compared with the
// float64 reference by the spec 2.4 rule) on the test device (DSV4_TEST_DEVICE=cpu|cuda: device
// pointers for a GPU backend), strided views, RAII lifetimes, and bad input turned into
// dsv4::Error with libdsv4's message (host memory). DSV4_VECTORS_DIR names the vectors (a ctest
// fixture).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dsv4/dsv4.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "compare_rule.h"
#include "test_env.h"
#include "test_util.h"
#include "vectors.h"

namespace {

// The vectors, loaded once.
const vec_set& vectors() {
  static vec_set set = [] {
    vec_set s;
    const char* dir = std::getenv("DSV4_VECTORS_DIR");
    char error[1024];
    if (dir == nullptr || vec_load(dir, &s, error, sizeof error) != 0) {
      ADD_FAILURE() << "cannot load the vectors (DSV4_VECTORS_DIR): "
                    << (dir == nullptr ? "unset" : error);
      std::memset(&s, 0, sizeof s);
    }
    return s;
  }();
  return set;
}

const vec_case* find_case(const std::string& name) {
  for (int i = 0; i < vectors().num_cases; ++i) {
    if (name == vectors().cases[i].name) return &vectors().cases[i];
  }
  return nullptr;
}

dsv4::PlanOptions plan_options(const vec_case& c) {
  dsv4::PlanOptions po;
  for (int i = 0; i < c.num_options; ++i) {
    EXPECT_EQ(vec_apply_option(&po, c.options[i].key, c.options[i].value), 0) << c.options[i].key;
  }
  return po;
}

const vec_tensor* find_input(const vec_case& c, const std::string& name) {
  for (int i = 0; i < c.num_inputs; ++i) {
    if (name == c.inputs[i].name) return &c.inputs[i];
  }
  return nullptr;
}

dsv4::Tensor view(const vec_tensor& t, void* data) {
  return dsv4::Tensor(data, t.code, t.shape, t.ndim, nullptr);
}

// Sets every input of the case by its dsv4_run_args field name.
void set_inputs(const vec_case& c, std::vector<dsv4::Tensor>& keep, dsv4::RunArgs& args) {
  keep.reserve(VEC_MAX_INPUTS);
  for (int i = 0; i < c.num_inputs; ++i) {
    const vec_tensor& t = c.inputs[i];
    keep.push_back(view(t, t.data));
    const dsv4::Tensor& x = keep.back();
    const std::string n = t.name;
    if (n == "q")
      args.q(x);
    else if (n == "swa_cache")
      args.swa_cache(x);
    else if (n == "extra_cache")
      args.extra_cache(x);
    else if (n == "attn_sink")
      args.attn_sink(x);
    else if (n == "indices")
      args.indices(x);
    else if (n == "indptr")
      args.indptr(x);
    else if (n == "lengths")
      args.lengths(x);
    else if (n == "extra_indices")
      args.extra_indices(x);
    else if (n == "extra_indptr")
      args.extra_indptr(x);
    else if (n == "extra_lengths")
      args.extra_lengths(x);
    else if (n == "query_start_loc")
      args.query_start_loc(x);
    else if (n == "seq_lens")
      args.seq_lens(x);
    else if (n == "swa_block_table")
      args.swa_block_table(x);
    else if (n == "cmp_block_table")
      args.cmp_block_table(x);
    else if (n == "slot_mapping")
      args.slot_mapping(x);
    else if (n == "topk_indices")
      args.topk_indices(x);
    else
      ADD_FAILURE() << "unknown input " << n;
  }
}

struct Outputs {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<dsv4::Tensor> tensors;
};

// NaN-filled output buffers (every element must be written) set by name.
Outputs make_outputs(const vec_case& c, dsv4::RunArgs& args) {
  Outputs o;
  o.bytes.resize(c.num_outputs);
  o.tensors.reserve(c.num_outputs);
  for (int i = 0; i < c.num_outputs; ++i) {
    const vec_tensor& t = c.outputs[i];
    o.bytes[i].assign(static_cast<size_t>(t.elements) * t.code.bits / 8, 0xff);
    o.tensors.push_back(view(t, o.bytes[i].data()));
    const std::string n = t.name;
    if (n == "out") args.out(o.tensors.back());
    if (n == "lse") args.lse(o.tensors.back());
    if (n == "max_logits") args.max_logits(o.tensors.back());
  }
  return o;
}

::testing::AssertionResult matches_reference(const vec_case& c, const Outputs& o) {
  for (int i = 0; i < c.num_outputs; ++i) {
    const vec_tensor& t = c.outputs[i];
    std::vector<double> got(static_cast<size_t>(t.elements));
    for (int64_t e = 0; e < t.elements; ++e) got[e] = vec_element(t.code, o.bytes[i].data(), e);
    const std::vector<double> want(t.want, t.want + t.elements);
    const dsv4test::CompareResult r =
        dsv4test::compare_rule(got, want, dsv4test::Tolerance{t.abs_tol, t.rel_tol, t.cos_tol});
    if (!r.passed) {
      return ::testing::AssertionFailure()
             << c.name << "." << t.name << ": " << r.failures << " of " << r.elements
             << " elements out of tolerance, first [" << r.first_failure << "] got " << r.first_got
             << " want " << r.first_want << ", cos_diff " << r.cos_diff << " (vectors seed "
             << vectors().seed << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Merges a case's partial results through dsv4.hpp (its inputs in `tensors`, its outputs).
void merge(const dsv4::Context& ctx, const vec_case& c, const std::vector<dsv4::Tensor>& tensors,
           std::vector<dsv4::Tensor>& outputs) {
  dsv4::MergeArgs args;
  for (int i = 0; i < c.num_inputs; ++i) {
    const std::string n = c.inputs[i].name;
    if (n == "out_parts") args.out_parts(tensors[i]);
    if (n == "lse_parts") args.lse_parts(tensors[i]);
    if (n == "attn_sink") args.attn_sink(tensors[i]);
  }
  for (int i = 0; i < c.num_outputs; ++i) {
    const std::string n = c.outputs[i].name;
    if (n == "out") args.out(outputs[i]);
    if (n == "lse") args.lse(outputs[i]);
  }
  ctx.merge(args);
}

// Runs one case through dsv4.hpp and returns its outputs.
Outputs run_case(const dsv4::Context& ctx, const vec_case& c) {
  if (std::string(c.op) == "merge") {
    std::vector<dsv4::Tensor> inputs;
    for (int i = 0; i < c.num_inputs; ++i) inputs.push_back(view(c.inputs[i], c.inputs[i].data));
    dsv4::RunArgs unused;
    Outputs out = make_outputs(c, unused);
    merge(ctx, c, inputs, out.tensors);
    return out;
  }
  dsv4::Plan plan(ctx, plan_options(c));
  std::vector<uint8_t> workspace(plan.workspace_size());
  dsv4::RunArgs args;
  std::vector<dsv4::Tensor> inputs;
  set_inputs(c, inputs, args);
  Outputs out = make_outputs(c, args);
  plan.run(args.workspace(workspace));
  return out;
}

// Every case with its tensors in the test device's memory (device pointers on a GPU).
TEST(Hpp, VectorsMatchTheReference) {
  using dsv4test::g_device;
  if (g_device == nullptr) GTEST_SKIP() << dsv4test::g_device_why;
  ASSERT_GT(vectors().num_cases, 0);
  dsv4::ContextOptions options;
  options.device = g_device->device();
  if (std::getenv("DSV4_BACKEND") == nullptr) options.backend = g_device->backend();
  dsv4::Context ctx(options);
  int served = 0;  // attention cases the backend planned
  for (int i = 0; i < vectors().num_cases; ++i) {
    const vec_case& c = vectors().cases[i];
    SCOPED_TRACE(c.name);
    if (std::string(c.op) == "merge") {
      std::vector<dsv4test::DeviceBuffer> buffers;
      std::vector<dsv4::Tensor> inputs, outputs;
      for (int k = 0; k < c.num_inputs; ++k) {
        const vec_tensor& t = c.inputs[k];
        buffers.emplace_back(g_device, static_cast<size_t>(t.elements) * t.code.bits / 8);
        g_device->upload(buffers.back().get(), t.data, buffers.back().bytes());
        inputs.emplace_back(buffers.back().get(), t.code, t.shape, t.ndim, nullptr,
                            g_device->device());
      }
      for (int k = 0; k < c.num_outputs; ++k) {
        const vec_tensor& t = c.outputs[k];
        buffers.emplace_back(g_device, static_cast<size_t>(t.elements) * t.code.bits / 8);
        buffers.back().fill(0xff);
        outputs.emplace_back(buffers.back().get(), t.code, t.shape, t.ndim, nullptr,
                             g_device->device());
      }
      merge(ctx, c, inputs, outputs);
      Outputs got;
      for (int k = 0; k < c.num_outputs; ++k)
        got.bytes.push_back(buffers[c.num_inputs + k].download<uint8_t>());
      EXPECT_TRUE(matches_reference(c, got));
      continue;
    }
    std::optional<dsv4::Plan> planned;
    try {
      planned.emplace(ctx, plan_options(c));
    } catch (const dsv4::Error& e) {
      // A case the backend does not serve (e.g. FP8 FNUZ bytes on CUDA) is refused at plan
      // creation with UNSUPPORTED, as the C ABI promises; anything else fails the test.
      if (e.status() != DSV4_STATUS_UNSUPPORTED) throw;
      std::printf("[ UNSERVED ] %s: %s\n", c.name, e.message().c_str());
      continue;
    }
    ++served;
    const dsv4::Plan& plan = *planned;
    dsv4test::DeviceBuffer workspace(g_device, plan.workspace_size());
    std::vector<dsv4test::DeviceBuffer> buffers;
    std::vector<dsv4::Tensor> tensors;
    tensors.reserve(VEC_MAX_INPUTS + VEC_MAX_OUTPUTS);
    dsv4::RunArgs args;
    for (int k = 0; k < c.num_inputs; ++k) {
      const vec_tensor& t = c.inputs[k];
      buffers.emplace_back(g_device, static_cast<size_t>(t.elements) * t.code.bits / 8);
      g_device->upload(buffers.back().get(), t.data, buffers.back().bytes());
      tensors.emplace_back(buffers.back().get(), t.code, t.shape, t.ndim, nullptr,
                           g_device->device());
    }
    std::vector<dsv4::Tensor> host_view;  // set_inputs names the fields; point them at the device
    set_inputs(c, host_view, args);
    dsv4_run_args& raw = args.get();
    int moved = 0;
    for (const dsv4_tensor** field :
         {&raw.q, &raw.swa_cache, &raw.extra_cache, &raw.attn_sink, &raw.indices, &raw.indptr,
          &raw.lengths, &raw.extra_indices, &raw.extra_indptr, &raw.extra_lengths,
          &raw.query_start_loc, &raw.seq_lens, &raw.swa_block_table, &raw.cmp_block_table,
          &raw.slot_mapping, &raw.topk_indices}) {
      for (int k = 0; k < c.num_inputs; ++k) {
        if (*field == host_view[k].get()) {
          *field = tensors[k].get();
          ++moved;
        }
      }
    }
    // Every input now points at device memory (a field missing above would stay on the host).
    EXPECT_EQ(moved, c.num_inputs);
    for (int k = 0; k < c.num_outputs; ++k) {
      const vec_tensor& t = c.outputs[k];
      buffers.emplace_back(g_device, static_cast<size_t>(t.elements) * t.code.bits / 8);
      buffers.back().fill(0xff);  // NaN: every element must be written
      tensors.emplace_back(buffers.back().get(), t.code, t.shape, t.ndim, nullptr,
                           g_device->device());
      const std::string n = t.name;
      if (n == "out") args.out(tensors.back());
      if (n == "lse") args.lse(tensors.back());
      if (n == "max_logits") args.max_logits(tensors.back());
    }
    plan.run(args.workspace(workspace.get(), workspace.bytes()).stream(g_device->stream()));
    Outputs got;
    for (int k = 0; k < c.num_outputs; ++k)
      got.bytes.push_back(buffers[c.num_inputs + k].download<uint8_t>());
    EXPECT_TRUE(matches_reference(c, got));
  }
  EXPECT_GT(served, 0) << "the backend served none of the attention cases";
}

// The same case from several threads at once on one plan, each with its own workspace.
TEST(Hpp, OnePlanRunsOnSeveralThreads) {
  const vec_case* c = find_case("paged_c4a_fp8_mtp");
  ASSERT_NE(c, nullptr);
  dsv4::Context ctx;
  const dsv4::Plan plan(ctx, plan_options(*c));
  std::vector<std::thread> threads;
  bool ok[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) {
    threads.emplace_back([&, k] {
      std::vector<uint8_t> workspace(plan.workspace_size());
      dsv4::RunArgs args;
      std::vector<dsv4::Tensor> inputs;
      set_inputs(*c, inputs, args);
      Outputs out = make_outputs(*c, args);
      plan.run(args.workspace(workspace));
      ok[k] = matches_reference(*c, out);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(ok[0] && ok[1] && ok[2]);
}

// q as a ggml-style strided view (padded head rows inside a larger buffer) gives the bits of the
// compact run.
TEST(Hpp, StridedViewWithoutCopies) {
  const vec_case* c = find_case("explicit_bf16_sink");
  ASSERT_NE(c, nullptr);
  dsv4::Context ctx;
  const Outputs compact = run_case(ctx, *c);

  const vec_tensor& q = *find_input(*c, "q");
  const int64_t T = q.shape[0], H = q.shape[1], D = q.shape[2], row = D + 40;
  std::vector<uint16_t> padded(static_cast<size_t>(T * H * row), 0x7fc0);  // NaN padding
  for (int64_t t = 0; t < T * H; ++t)
    std::memcpy(&padded[t * row], static_cast<const uint16_t*>(q.data) + t * D, D * 2);
  const int64_t ne[3] = {D, H, T};
  const size_t nb[3] = {2, static_cast<size_t>(row * 2), static_cast<size_t>(H * row * 2)};
  const dsv4::Tensor strided =
      dsv4::Tensor::from_byte_strides(padded.data(), dsv4::kBFloat16, ne, nb, 3);
  ASSERT_EQ(strided.get()->strides[0], H * row);
  ASSERT_EQ(strided.get()->strides[1], row);

  dsv4::Plan plan(ctx, plan_options(*c));
  std::vector<uint8_t> workspace(plan.workspace_size());
  dsv4::RunArgs args;
  std::vector<dsv4::Tensor> inputs;
  set_inputs(*c, inputs, args);
  args.q(strided);
  Outputs out = make_outputs(*c, args);
  plan.run(args.workspace(workspace));
  EXPECT_EQ(out.bytes, compact.bytes);

  const size_t odd[3] = {2, 3, 6};  // not a multiple of the element size
  EXPECT_THROW(dsv4::Tensor::from_byte_strides(padded.data(), dsv4::kBFloat16, ne, odd, 3),
               dsv4::Error);
}

// A plan keeps its context alive; copies of a Tensor point at their own shape arrays.
TEST(Hpp, Lifetimes) {
  const vec_case* c = find_case("explicit_fp8_extra");
  ASSERT_NE(c, nullptr);
  dsv4::Plan plan;
  {
    dsv4::Context ctx;
    plan = dsv4::Plan(ctx, plan_options(*c));
  }
  EXPECT_TRUE(plan);
  EXPECT_GT(plan.info().workspace_bytes + 1, 0u);
  std::vector<uint16_t> buffer(24);
  dsv4::Tensor copy;
  {
    const dsv4::Tensor original(buffer, {2, 3, 4}, dsv4::kBFloat16);
    copy = original;
  }
  EXPECT_EQ(copy.get()->shape[2], 4);
  EXPECT_NE(copy.get()->shape, nullptr);
  EXPECT_EQ(copy.elements(), 24);
}

// Runs `body` and returns the dsv4::Error it throws (fails if it throws none).
template <typename Body>
dsv4::Error error_of(Body body) {
  try {
    body();
  } catch (const dsv4::Error& e) {
    return e;
  }
  ADD_FAILURE() << "no dsv4::Error thrown";
  return dsv4::Error(DSV4_STATUS_OK, "", "");
}

TEST(Hpp, BadInputThrowsWithLibdsv4sMessage) {
  const vec_case* c = find_case("explicit_bf16_sink");
  ASSERT_NE(c, nullptr);
  dsv4::Context ctx;
  dsv4::Plan plan(ctx, plan_options(*c));
  std::vector<uint8_t> workspace(plan.workspace_size());
  dsv4::RunArgs args;
  std::vector<dsv4::Tensor> inputs;
  set_inputs(*c, inputs, args);
  Outputs out = make_outputs(*c, args);
  args.workspace(workspace);
  const std::vector<uint8_t> untouched = out.bytes[0];

  // Wrong dtype: q as float32 over the same bytes (half the elements' worth).
  const vec_tensor& q = *find_input(*c, "q");
  const dsv4::Tensor q_f32(q.data, dsv4::kFloat32, {q.shape[0], q.shape[1], q.shape[2] / 2});
  dsv4::RunArgs wrong = args;
  wrong.q(q_f32);
  dsv4::Error e = error_of([&] { plan.run(wrong); });
  EXPECT_NE(e.status(), DSV4_STATUS_OK);
  EXPECT_EQ(e.function(), "dsv4_run");
  EXPECT_NE(e.message().find("q"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find(dsv4_status_string(e.status())), std::string::npos);

  // Null where required: no out.
  dsv4::RunArgs no_out = args;
  no_out.get().out = nullptr;
  e = error_of([&] { plan.run(no_out); });
  EXPECT_EQ(e.status(), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(e.message().find("out"), std::string::npos) << e.what();

  // A workspace that is too small.
  dsv4::RunArgs small = args;
  if (plan.workspace_size() > 0) {
    small.workspace(workspace.data(), plan.workspace_size() - 1);
    EXPECT_EQ(error_of([&] { plan.run(small); }).status(), DSV4_STATUS_WORKSPACE_TOO_SMALL);
  }
  EXPECT_EQ(out.bytes[0], untouched) << "a failing run wrote its output";

  // Short buffer: the wrapper's own check names the shape.
  std::vector<uint16_t> short_buffer(10);
  e = error_of([&] { dsv4::Tensor(short_buffer, {2, 8, 512}, dsv4::kBFloat16); });
  EXPECT_EQ(e.status(), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(e.message().find("shorter"), std::string::npos) << e.what();

  // A read-only buffer as an output.
  const std::vector<uint16_t> read_only(q.elements);
  dsv4::Tensor ro(read_only, {q.shape[0], q.shape[1], q.shape[2]}, dsv4::kBFloat16);
  EXPECT_FALSE(ro.writable());
  EXPECT_EQ(error_of([&] { args.out(ro); }).status(), DSV4_STATUS_INVALID_ARGUMENT);

  // Bad plan options: libdsv4 names the field.
  dsv4::PlanOptions bad = plan_options(*c);
  bad.num_heads = 0;
  e = error_of([&] { dsv4::Plan(ctx, bad); });
  EXPECT_EQ(e.function(), "dsv4_plan_create");
  EXPECT_NE(e.message().find("num_heads"), std::string::npos) << e.what();

  // A closed plan: libdsv4 rejects the NULL handle.
  plan.reset();
  EXPECT_FALSE(plan);
  e = error_of([&] { plan.run(args); });
  EXPECT_EQ(e.status(), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(e.message().find("plan"), std::string::npos) << e.what();
  EXPECT_EQ(error_of([&] { (void)plan.workspace_size(); }).status(), DSV4_STATUS_INVALID_ARGUMENT);

  // dsv4_merge without its parts.
  std::vector<uint16_t> merged(static_cast<size_t>(q.elements));
  e = error_of([&] {
    ctx.merge(dsv4::MergeArgs().out(
        dsv4::Tensor(merged, {q.shape[0], q.shape[1], q.shape[2]}, dsv4::kBFloat16)));
  });
  EXPECT_EQ(e.function(), "dsv4_merge");
  EXPECT_NE(e.message().find("out_parts"), std::string::npos) << e.what();

  // No such backend.
  dsv4::ContextOptions missing;
  missing.backend = "no-such-backend";
  EXPECT_EQ(error_of([&] { dsv4::Context bad_ctx(missing); }).status(), DSV4_STATUS_NO_BACKEND);
}

// kv_write stores bf16 rows bit for bit; export_indices writes a paged batch's lists.
TEST(Hpp, KvWriteAndExport) {
  dsv4::Context ctx;
  const dsv4_kv_cache_desc desc = dsv4::cache_desc(DSV4_KV_LAYOUT_BF16, 3);
  std::vector<dsv4::bfloat16_t> rows(2 * 512);
  for (size_t i = 0; i < rows.size(); ++i) rows[i].bits = static_cast<uint16_t>(0x3f00 + i % 97);
  std::vector<int32_t> slots = {4, -1};
  std::vector<uint16_t> cache(2 * 3 * 512, 0xffff);
  dsv4::Tensor cache_t(cache, {2, 3, 512}, dsv4::kBFloat16);
  ctx.kv_write(
      dsv4::KvWriteArgs(desc, dsv4::Tensor(rows, {2, 512}), dsv4::Tensor(slots, {2}), cache_t));
  for (int d = 0; d < 512; ++d) ASSERT_EQ(cache[4 * 512 + d], rows[d].bits) << d;
  EXPECT_EQ(cache[3 * 512], 0xffff);  // slot -1 is skipped

  const vec_case* c = find_case("paged_c4a_fp8_mtp");
  ASSERT_NE(c, nullptr);
  dsv4::Plan plan(ctx, plan_options(*c));
  dsv4::RunArgs batch;
  std::vector<dsv4::Tensor> inputs;
  set_inputs(*c, inputs, batch);
  const int64_t T = find_input(*c, "slot_mapping")->shape[0];
  const int64_t W = 128;
  std::vector<int32_t> swa(static_cast<size_t>(T * W), 7), lengths(static_cast<size_t>(T), 7);
  plan.export_indices(dsv4::ExportArgs(DSV4_EXPORT_FLASHMLA)
                          .batch(batch)
                          .swa_indices(dsv4::Tensor(swa, {T, W}))
                          .swa_lengths(dsv4::Tensor(lengths, {T})));
  const int32_t* slot_mapping = static_cast<const int32_t*>(find_input(*c, "slot_mapping")->data);
  for (int64_t t = 0; t < T; ++t) {
    if (slot_mapping[t] < 0) {
      EXPECT_EQ(lengths[t], 0) << t;
    } else {  // the token itself is the last SWA entry
      ASSERT_GT(lengths[t], 0) << t;
      EXPECT_EQ(swa[t * W + lengths[t] - 1], slot_mapping[t]) << t;
    }
  }
}

TEST(Hpp, Queries) {
  EXPECT_EQ(dsv4::version(), dsv4_get_version_string());
  const dsv4_kv_layout_info info = dsv4::kv_layout_info(DSV4_KV_LAYOUT_FP8_V4_584B, 64);
  EXPECT_EQ(info.bytes_per_token, 584);
  EXPECT_EQ(info.min_block_stride_bytes, 37440);
  EXPECT_THROW(dsv4::kv_layout_info(999, 64), dsv4::Error);
  bool cpu = false;
  for (const dsv4_backend_info& b : dsv4::enumerate_backends()) cpu |= std::string(b.name) == "cpu";
  EXPECT_TRUE(cpu);
  EXPECT_EQ(dsv4::device_info("cpu").device_type, DSV4_DEVICE_CPU);
  EXPECT_EQ(dsv4::kv_layout_info(DSV4_KV_LAYOUT_FP16, 3).min_block_stride_bytes, 3 * 1024);
  EXPECT_EQ(
      dsv4::cache_desc(DSV4_KV_LAYOUT_FP8_V4_584B, 64, 0, 1.0f, DSV4_KV_CACHE_FLAG_FP8_FNUZ).flags,
      DSV4_KV_CACHE_FLAG_FP8_FNUZ);
  // A cache flag on a layout it does not apply to: libdsv4 names the field.
  dsv4::PlanOptions po;
  po.swa_cache = dsv4::cache_desc(DSV4_KV_LAYOUT_BF16, 64, 0, 1.0f, DSV4_KV_CACHE_FLAG_FP8_FNUZ);
  EXPECT_THROW(dsv4::Plan(dsv4::Context(), po), dsv4::Error);
  const dsv4::Context ctx;
  EXPECT_GT(std::strlen(ctx.info().backend), 0u);
}

}  // namespace
