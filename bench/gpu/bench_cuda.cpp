// GPU benchmark of the CUDA backend (module ABI, no libdsv4 needed): FlashMLA's DeepSeek-V4 decode
// cases CONFIG1-4 (s_q 2, SWA list 128 on 256-token pages + extra list 512/1024 on 64/2-entry
// blocks, 16384 keys per scope, sink on) at b = 2..256, the same with 8/16/32 heads and with the
// bf16 cache, the plain-PyTorch comparison shapes, and sparse prefill (s_q 4096). Each timing:
// CUDA events around one dsv4 run (list build / attention / combine), L2 flushed before each rep
// (l2_flush: a memset, as FlashMLA's benchmark does, or a read), warm-up, median of 25. Also
// measures the device's copy bandwidth and cuBLAS bf16 GEMM rate, and each case's gather floor: the
// time to read just the cache rows its lists reference (gather_floor), so "xgather" says how far a
// case is from what no kernel can beat. Usage: [DSV4_BENCH_FLUSH=memset|read|none|tlb] bench_cuda
// <libdsv4-cuda.so> [filter] (filter: see selected)
#include <cublas_v2.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <string>

#include "common/index.h"
#include "cuda_harness.h"

using namespace dsv4cudatest;

namespace {

struct bench_case {
  std::string name;
  int heads = 64;
  int batch = 2;
  int seq_q = 2;
  uint32_t layout = DSV4_KV_LAYOUT_FP8_V4_584B;
  int main_block = 256;
  int topk = 128;
  int extra_block = 64;
  int extra_topk = 512;        // 0 = no extra list
  bool extra_lengths = false;  // per-batch-row random extra lengths (CONFIG3/4)
  int64_t keys_per_scope = 16384;
  bool prefill = false;      // one scope of keys_per_scope keys shared by all T = seq_q tokens
  bool small_chunk = false;  // DSV4_CUDA_CHUNK=32 (16-head tiles, 32-key chunks, ~75 KB smem)
};

// FNV-1a of a case's name: the seed of its inputs.
uint64_t case_seed(const std::string& name) {
  uint64_t h = 14695981039346656037ull;
  for (const unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// Whether a filter selects the case `name`: '|'-separated alternatives, each selecting the names
// that contain it, or with a trailing '$' the exact name.
bool selected(const std::string& name, const std::string& filter) {
  size_t from = 0;
  for (;;) {
    const size_t bar = filter.find('|', from);
    const std::string alt =
        filter.substr(from, bar == std::string::npos ? std::string::npos : bar - from);
    const bool exact = !alt.empty() && alt.back() == '$';
    if (exact ? name == alt.substr(0, alt.size() - 1) : name.find(alt) != std::string::npos)
      return true;
    if (bar == std::string::npos) return false;
    from = bar + 1;
  }
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median ms of `timed` calls of `launch`, each between two CUDA events, after `warmup` calls that
// are not timed; `before(i)` runs ahead of call i outside the events (the L2 flush).
template <class Launch, class Before>
float median_ms(int warmup, int timed, Launch&& launch, Before&& before) {
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int i = 0; i < warmup + timed; ++i) {
    before(i);
    CUDA_OK(cudaEventRecord(e0));
    launch();
    CUDA_OK(cudaEventRecord(e1));
    CUDA_OK(cudaEventSynchronize(e1));
    float ms;
    CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= warmup) t.push_back(ms);
  }
  CUDA_OK(cudaGetLastError());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return median(t);
}

// Fills a device cache of `blocks` blocks by tiling a host-quantised pool of blocks.
dbuf make_cache(const host_cache& pool, int64_t blocks) {
  dbuf d(static_cast<size_t>(blocks * pool.stride));
  const int64_t pool_blocks = pool.num_blocks;
  for (int64_t b = 0; b < blocks; b += pool_blocks) {
    const int64_t n = std::min(pool_blocks, blocks - b);
    CUDA_OK(cudaMemcpy(static_cast<uint8_t*>(d.p) + b * pool.stride, pool.bytes.data(),
                       static_cast<size_t>(n * pool.stride), cudaMemcpyHostToDevice));
  }
  return d;
}

struct ceilings {
  double copy_gbs = 0;
  double gemm_tflops = 0;
};

ceilings measure_ceilings() {
  ceilings c;
  const auto nothing = [](int) {};
  {
    const size_t bytes = size_t(2) << 30;
    dbuf a(bytes), b(bytes);
    CUDA_OK(cudaMemset(a.p, 1, bytes));
    const float ms = median_ms(
        2, 10, [&] { CUDA_OK(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice)); },
        nothing);
    c.copy_gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
  }
  {
    const int n = 8192;
    dbuf a(size_t(n) * n * 2), b(size_t(n) * n * 2), d(size_t(n) * n * 2);
    std::vector<uint16_t> h(size_t(n) * n);
    std::mt19937_64 rng(1);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& x : h) x = dsv4::f32_to_bf16(nd(rng));
    a.upload(h);
    b.upload(h);
    cublasHandle_t handle;
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate");
    const float alpha = 1.f, beta = 0.f;
    const float ms = median_ms(
        2, 8,
        [&] {
          cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.p, CUDA_R_16BF, n, b.p,
                       CUDA_R_16BF, n, &beta, d.p, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT);
        },
        nothing);
    cublasDestroy(handle);
    c.gemm_tflops = 2.0 * n * n * double(n) / (ms * 1e-3) / 1e12;
  }
  return c;
}

// A kernel of PTX text, JIT-compiled by the driver (this file is built by the host compiler), run
// on `blocks` CTAs of 256 threads. Its last parameter is a 4-byte sink it writes only if its reads'
// XOR hits a magic value, so that the reads cannot be optimised away.
class jit_kernel {
 public:
  jit_kernel(const char* ptx, const char* entry, int blocks) : sink_(4), blocks_(blocks) {
    CUDA_OK(cudaLibraryLoadData(&lib_, ptx, nullptr, nullptr, 0, nullptr, nullptr, 0));
    CUDA_OK(cudaLibraryGetKernel(&kernel_, lib_, entry));
  }
  ~jit_kernel() { cudaLibraryUnload(lib_); }
  jit_kernel(const jit_kernel&) = delete;
  jit_kernel& operator=(const jit_kernel&) = delete;
  // args: the kernel's parameters but the sink.
  template <class... A>
  void launch(A*... args) {
    void* all[] = {args..., &sink_.p};
    CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void*>(kernel_), dim3(blocks_), dim3(256), all,
                             0, nullptr));
  }

 private:
  dbuf sink_;
  int blocks_;
  cudaLibrary_t lib_ = nullptr;
  cudaKernel_t kernel_ = nullptr;
};

// What is in L2 when a timed run starts. "memset" (default): a 256 MB memset, as FlashMLA's own
// benchmark flushes (an 8 GB zero_() there); it leaves the whole L2 holding dirty lines, so the
// timed run's misses also pay for their write-back. "read": a kernel reads a 256 MB buffer instead;
// the L2 then holds clean lines, and misses cost only their own read. DSV4_BENCH_FLUSH selects. Two
// more modes are diagnostics, not figures to report: "none" (no flush: what the previous rep left
// in L2), and "tlb" (the memset, then one 16-byte read per 64 KB of the case's caches, which puts
// their address translations back and next to nothing in L2: what the memset's translation misses
// cost). The read kernel is PTX (jit_kernel).
const char kReadPtx[] = R"(
.version 7.0
.target sm_80
.address_size 64
.visible .entry dsv4_bench_l2_read(.param .u64 src, .param .u64 words, .param .u64 stride, .param .u64 sink) {
  .reg .pred %p<2>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<10>;
  ld.param.u64 %rd1, [src];
  ld.param.u64 %rd2, [words];
  ld.param.u64 %rd9, [stride];
  ld.param.u64 %rd3, [sink];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mov.u32 %r4, %nctaid.x;
  mul.wide.u32 %rd4, %r1, %r2;
  cvt.u64.u32 %rd5, %r3;
  add.u64 %rd4, %rd4, %rd5;
  mul.wide.u32 %rd6, %r4, %r2;
  mov.u32 %r10, 0;
  setp.ge.u64 %p1, %rd4, %rd2;
  @%p1 bra DONE;
LOOP:
  mul.lo.u64 %rd7, %rd4, %rd9;
  add.u64 %rd8, %rd1, %rd7;
  ld.global.v4.u32 {%r5, %r6, %r7, %r8}, [%rd8];
  xor.b32 %r10, %r10, %r5;
  xor.b32 %r10, %r10, %r6;
  xor.b32 %r10, %r10, %r7;
  xor.b32 %r10, %r10, %r8;
  add.u64 %rd4, %rd4, %rd6;
  setp.lt.u64 %p1, %rd4, %rd2;
  @%p1 bra LOOP;
DONE:
  setp.ne.u32 %p1, %r10, 1592876781;
  @%p1 bra END;
  st.global.u32 [%rd3], %r10;
END:
  ret;
}
)";

class l2_flush {
 public:
  explicit l2_flush(int sm_count) : buf_(size_t(256) << 20), sm_count_(sm_count) {
    const char* env = std::getenv("DSV4_BENCH_FLUSH");
    const std::string m = env != nullptr ? env : "memset";
    static const char* const kNames[] = {"memset", "read", "none", "tlb"};
    int i = 0;
    while (i < 4 && m != kNames[i]) ++i;
    if (i == 4) throw std::runtime_error("DSV4_BENCH_FLUSH: memset, read, none or tlb");
    mode_ = static_cast<mode>(i);
    if (mode_ == mode::read || mode_ == mode::tlb) {
      CUDA_OK(cudaMemset(buf_.p, 0, buf_.bytes));  // XOR 0: the kernel never stores
      reader_ = std::make_unique<jit_kernel>(kReadPtx, "dsv4_bench_l2_read", sm_count_ * 8);
    }
  }
  const char* name() const {
    static const char* const kShown[] = {"memset", "read", "no", "memset + translation"};
    return kShown[static_cast<int>(mode_)];
  }
  // The buffers whose translations "tlb" restores after each flush (the case's caches).
  std::vector<const dbuf*> touched;
  void run(int rep) {
    switch (mode_) {
      case mode::none:
        return;
      case mode::read:
        read(buf_.p, buf_.bytes, 16);
        return;
      case mode::memset:
      case mode::tlb:
        CUDA_OK(cudaMemsetAsync(buf_.p, rep & 0xff, buf_.bytes));
        if (mode_ == mode::tlb) {
          for (const dbuf* d : touched) read(d->p, d->bytes, 65536);
        }
        return;
    }
  }

 private:
  // none and tlb are diagnostics only: no flush (the run starts with what the previous rep left),
  // and the memset followed by the touched buffers' translations restored.
  enum class mode { memset, read, none, tlb };
  // The read kernel: 16 bytes at every `stride` bytes of [p, p + bytes).
  void read(void* p, uint64_t bytes, uint64_t stride) {
    uint64_t words = bytes / stride;
    reader_->launch(&p, &words, &stride);
  }
  dbuf buf_;
  int sm_count_;
  std::unique_ptr<jit_kernel> reader_;
  mode mode_ = mode::memset;
};

// The gather floor of a case: the time to read just the cache rows its lists reference (each row's
// data bytes: 576 of the 584 B layout, whole rows of the others), nothing else, by plain 16-byte
// loads under the L2 evict_first policy, after the same flush. No attention kernel can take less;
// for small head counts it is most of the time (docs/tried.md, T2). The kernel is PTX
// (jit_kernel): thread i of the grid-stride loop reads piece i % pieces of row
// i / pieces (row addresses from a table, 8 bytes per row more read), four pieces in flight per
// thread.
const char kGatherPtx[] = R"(
.version 7.4
.target sm_80
.address_size 64
.visible .entry dsv4_bench_gather(.param .u64 rows, .param .u32 n, .param .u32 pieces, .param .u64 sink) {
  .reg .pred %p<6>;
  .reg .b32 %r<40>;
  .reg .b64 %rd<20>;
  ld.param.u64 %rd1, [rows];
  ld.param.u32 %r1, [n];
  ld.param.u32 %r2, [pieces];
  ld.param.u64 %rd2, [sink];
  createpolicy.fractional.L2::evict_first.b64 %rd3, 1.0;
  mov.u32 %r3, %ctaid.x;
  mov.u32 %r4, %ntid.x;
  mov.u32 %r5, %tid.x;
  mad.lo.u32 %r6, %r3, %r4, %r5;
  mov.u32 %r7, %nctaid.x;
  mul.lo.u32 %r8, %r7, %r4;
  shl.b32 %r35, %r8, 2;
  mov.u32 %r30, 0;
LOOP:
  setp.ge.u32 %p1, %r6, %r1;
  @%p1 bra DONE;
  add.u32 %r9, %r6, %r8;
  add.u32 %r10, %r9, %r8;
  add.u32 %r11, %r10, %r8;
  setp.lt.u32 %p2, %r9, %r1;
  setp.lt.u32 %p3, %r10, %r1;
  setp.lt.u32 %p4, %r11, %r1;
  selp.u32 %r9, %r9, %r6, %p2;
  selp.u32 %r10, %r10, %r6, %p3;
  selp.u32 %r11, %r11, %r6, %p4;
  div.u32 %r12, %r6, %r2;
  div.u32 %r13, %r9, %r2;
  div.u32 %r14, %r10, %r2;
  div.u32 %r15, %r11, %r2;
  mul.wide.u32 %rd4, %r12, 8;
  mul.wide.u32 %rd5, %r13, 8;
  mul.wide.u32 %rd6, %r14, 8;
  mul.wide.u32 %rd7, %r15, 8;
  add.u64 %rd4, %rd1, %rd4;
  add.u64 %rd5, %rd1, %rd5;
  add.u64 %rd6, %rd1, %rd6;
  add.u64 %rd7, %rd1, %rd7;
  ld.global.nc.u64 %rd8, [%rd4];
  ld.global.nc.u64 %rd9, [%rd5];
  ld.global.nc.u64 %rd10, [%rd6];
  ld.global.nc.u64 %rd11, [%rd7];
  mul.lo.u32 %r12, %r12, %r2;
  mul.lo.u32 %r13, %r13, %r2;
  mul.lo.u32 %r14, %r14, %r2;
  mul.lo.u32 %r15, %r15, %r2;
  sub.u32 %r12, %r6, %r12;
  sub.u32 %r13, %r9, %r13;
  sub.u32 %r14, %r10, %r14;
  sub.u32 %r15, %r11, %r15;
  mul.wide.u32 %rd12, %r12, 16;
  mul.wide.u32 %rd13, %r13, 16;
  mul.wide.u32 %rd14, %r14, 16;
  mul.wide.u32 %rd15, %r15, 16;
  add.u64 %rd8, %rd8, %rd12;
  add.u64 %rd9, %rd9, %rd13;
  add.u64 %rd10, %rd10, %rd14;
  add.u64 %rd11, %rd11, %rd15;
  ld.global.nc.L2::cache_hint.v4.u32 {%r16, %r17, %r18, %r19}, [%rd8], %rd3;
  ld.global.nc.L2::cache_hint.v4.u32 {%r20, %r21, %r22, %r23}, [%rd9], %rd3;
  ld.global.nc.L2::cache_hint.v4.u32 {%r24, %r25, %r26, %r27}, [%rd10], %rd3;
  ld.global.nc.L2::cache_hint.v4.u32 {%r31, %r32, %r33, %r34}, [%rd11], %rd3;
  xor.b32 %r16, %r16, %r17;
  xor.b32 %r18, %r18, %r19;
  xor.b32 %r20, %r20, %r21;
  xor.b32 %r22, %r22, %r23;
  xor.b32 %r24, %r24, %r25;
  xor.b32 %r26, %r26, %r27;
  xor.b32 %r31, %r31, %r32;
  xor.b32 %r33, %r33, %r34;
  xor.b32 %r16, %r16, %r18;
  xor.b32 %r20, %r20, %r22;
  xor.b32 %r24, %r24, %r26;
  xor.b32 %r31, %r31, %r33;
  xor.b32 %r16, %r16, %r20;
  xor.b32 %r24, %r24, %r31;
  xor.b32 %r30, %r30, %r16;
  xor.b32 %r30, %r30, %r24;
  add.u32 %r6, %r6, %r35;
  bra LOOP;
DONE:
  setp.ne.u32 %p5, %r30, 1592876781;
  @%p5 bra END;
  st.global.u32 [%rd2], %r30;
END:
  ret;
}
)";

class gather_floor {
 public:
  explicit gather_floor(int sm_count) : reader_(kGatherPtx, "dsv4_bench_gather", sm_count * 8) {}
  // Median µs of reading `row_bytes` (a multiple of 16) at each of the device addresses in `rows`.
  float time_us(const std::vector<uint64_t>& rows, int row_bytes, l2_flush& flush) {
    const uint64_t total = rows.size() * static_cast<uint64_t>(row_bytes / 16);
    if (rows.empty() || total >= (1ull << 31)) return 0.0f;
    dbuf d(rows.size() * 8);
    d.upload(rows);
    void* p = d.p;
    uint32_t n = static_cast<uint32_t>(total), pieces = static_cast<uint32_t>(row_bytes / 16);
    return median_ms(
               2, 25, [&] { reader_.launch(&p, &n, &pieces); }, [&](int i) { flush.run(i); }) *
           1000.0f;
  }

 private:
  jit_kernel reader_;
};

struct result {
  float us;
  float gather_us;  // gather_floor of the case's referenced rows
  double tflops, gbs_flashmla, gbs_gathered;
  char kernel[128];
  std::string
      lengths;      // per-row extra lengths (CONFIG3/4): the chunks they make, which set the time
  std::string run;  // the tiling and splits the runs take (DSV4_CUDA_LOG_RUNS)
};

result run_case(const module& m, void* ctx, const bench_case& c, std::mt19937_64& rng,
                l2_flush& flush, gather_floor& floor) {
  const int T = c.batch * c.seq_q;
  const int H = c.heads;
  const bool extra = c.extra_topk > 0;
  const int scopes = c.prefill ? 1 : c.batch;
  // Pools of quantised blocks (random rows), tiled over the caches.
  host_cache main_pool, extra_pool;
  main_pool.init(c.layout, c.main_block, std::min<int64_t>(16384, c.keys_per_scope), 0, 1.0f, rng);
  const int64_t main_blocks = scopes * ((c.keys_per_scope + c.main_block - 1) / c.main_block);
  dbuf d_main = make_cache(main_pool, main_blocks);
  dbuf d_extra;
  int64_t extra_blocks = 0;
  if (extra) {
    extra_pool.init(c.layout, c.extra_block, 16384, 0, 1.0f, rng);
    extra_blocks = scopes * ((c.keys_per_scope + c.extra_block - 1) / c.extra_block);
    d_extra = make_cache(extra_pool, extra_blocks);
  }
  // Indices: random keys of the token's scope, through a random block permutation.
  auto make_indices = [&](int width, int block, int64_t blocks, std::vector<int32_t>* out) {
    std::vector<int32_t> perm(blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const int64_t per_scope = blocks / scopes;
    std::uniform_int_distribution<int64_t> key(0, c.keys_per_scope - 1);
    out->resize(static_cast<size_t>(T) * width);
    for (int t = 0; t < T; ++t) {
      const int64_t scope = c.prefill ? 0 : t / c.seq_q;
      for (int i = 0; i < width; ++i) {
        const int64_t k = key(rng);
        const int64_t blk = perm[scope * per_scope + k / block];
        (*out)[static_cast<size_t>(t) * width + i] = static_cast<int32_t>(blk * block + k % block);
      }
    }
  };
  std::vector<int32_t> main_idx, extra_idx, extra_len;
  result res{};
  make_indices(c.topk, c.main_block, main_blocks, &main_idx);
  int64_t attended = static_cast<int64_t>(T) * c.topk;
  if (extra) {
    make_indices(c.extra_topk, c.extra_block, extra_blocks, &extra_idx);
    if (c.extra_lengths) {
      extra_len.resize(c.batch);
      for (auto& l : extra_len) l = static_cast<int32_t>(rng() % (c.extra_topk + 1));
      for (int t = 0; t < T; ++t) attended += extra_len[t / c.seq_q];
      int chunks_max = 0;
      double chunks_sum = 0;
      for (const int32_t l : extra_len) {
        const int chunks = (c.topk + 63) / 64 + (l + 63) / 64;
        chunks_max = std::max(chunks_max, chunks);
        chunks_sum += chunks;
      }
      char buf[96];
      std::snprintf(buf, sizeof buf, "  [64-key chunks per row: mean %.1f, max %d]",
                    chunks_sum / c.batch, chunks_max);
      res.lengths = buf;
    } else {
      attended += static_cast<int64_t>(T) * c.extra_topk;
    }
  }
  const int dqk = dsv4::layout_head_dim_qk(c.layout);
  std::vector<uint16_t> q(static_cast<size_t>(T) * H * dqk);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& x : q) x = dsv4::f32_to_bf16(std::fmax(-1.f, std::fmin(1.f, nd(rng))));
  std::vector<float> sink(H);
  for (auto& s : sink) s = nd(rng);

  dsv4_plan_options o{};
  o.struct_size = sizeof o;
  o.mode = DSV4_MODE_EXPLICIT;
  o.num_heads = H;
  o.head_dim_qk = dqk;
  o.head_dim_v = 512;
  o.softmax_scale = 1.0f / std::sqrt(static_cast<float>(dqk));
  o.q_dtype = dsv4_dtype{DSV4_DTYPE_CODE_BFLOAT, 16, 1};
  o.q_scale = 1.0f;
  o.max_tokens = T;
  o.swa_cache = main_pool.desc();
  if (extra) o.extra_cache = extra_pool.desc();
  o.index_format = DSV4_INDEX_DENSE;
  o.topk = c.topk;
  o.extra_topk = c.extra_topk;
  // log_runs: a plan whose runs log their tiling and splits (DSV4_CUDA_LOG_RUNS; never the timed
  // one: the log is formatted on the host between the timing events).
  auto make_plan = [&](bool log_runs) {
    void* made = nullptr;
    if (c.small_chunk) setenv("DSV4_CUDA_CHUNK", "32", 1);
    if (log_runs) setenv("DSV4_CUDA_LOG_RUNS", "1", 1);
    const dsv4_mod_plan mod = mod_plan_of(o);
    const dsv4_status plan_status = m.iface->plan_create(ctx, &mod, &made);
    unsetenv("DSV4_CUDA_CHUNK");
    unsetenv("DSV4_CUDA_LOG_RUNS");
    DSV4_OK(plan_status);
    return made;
  };
  void* plan = make_plan(false);
  DSV4_OK(m.iface->plan_get_kernel_name(plan, res.kernel, sizeof res.kernel));
  size_t ws_bytes = 0;
  DSV4_OK(m.iface->plan_get_workspace_size(plan, &ws_bytes));

  dbuf d_q(q.size() * 2), d_sink(H * 4), d_out(static_cast<size_t>(T) * H * 512 * 2),
      d_lse(static_cast<size_t>(T) * H * 4), d_mi(main_idx.size() * 4),
      d_ei(std::max<size_t>(1, extra_idx.size()) * 4),
      d_el(std::max<size_t>(1, extra_len.size()) * 4), d_ws(ws_bytes);
  d_q.upload(q);
  d_sink.upload(sink);
  d_mi.upload(main_idx);
  if (extra) d_ei.upload(extra_idx);
  if (!extra_len.empty()) d_el.upload(extra_len);

  dsv4_mod_run r{};
  r.struct_size = sizeof r;
  r.mode = DSV4_MODE_EXPLICIT;
  r.num_tokens = T;
  r.seq_q = c.seq_q;
  const int64_t qs = static_cast<int64_t>(H) * dqk;
  r.q = dsv4_mod_token_view{d_q.p, c.seq_q * qs, qs, dqk};
  r.out = dsv4_mod_token_view{d_out.p, static_cast<int64_t>(c.seq_q) * H * 512,
                              static_cast<int64_t>(H) * 512, 512};
  r.lse = dsv4_mod_token_view{d_lse.p, static_cast<int64_t>(c.seq_q) * H, H, 1};
  r.swa_cache = main_pool.mod(d_main.p);
  r.swa_cache.num_blocks = main_blocks;
  if (extra) {
    r.extra_cache = extra_pool.mod(d_extra.p);
    r.extra_cache.num_blocks = extra_blocks;
  }
  r.attn_sink = d_sink.as<float>();
  r.main_list.indices = d_mi.as<int32_t>();
  r.main_list.format = DSV4_INDEX_DENSE;
  r.main_list.width = c.topk;
  r.main_list.stride_b = static_cast<int64_t>(c.seq_q) * c.topk;
  r.main_list.stride_s = c.topk;
  r.main_list.stride_k = 1;
  if (extra) {
    r.extra_list.indices = d_ei.as<int32_t>();
    r.extra_list.format = DSV4_INDEX_DENSE;
    r.extra_list.width = c.extra_topk;
    r.extra_list.stride_b = static_cast<int64_t>(c.seq_q) * c.extra_topk;
    r.extra_list.stride_s = c.extra_topk;
    r.extra_list.stride_k = 1;
    if (!extra_len.empty()) {
      r.extra_list.lengths = d_el.as<int32_t>();
      r.extra_list.len_stride_b = 1;
      r.extra_list.len_stride_s = 0;
    }
  }
  r.workspace = d_ws.p;
  r.workspace_bytes = ws_bytes;

  flush.touched = {&d_main};
  if (extra) flush.touched.push_back(&d_extra);
  // Three warm-up runs as they come, then 25 after a flush each.
  const float ms = median_ms(
      3, 25, [&] { DSV4_OK(m.iface->run(plan, &r)); },
      [&](int i) {
        if (i >= 3) flush.run(i - 3);
      });
  {
    // The rows the lists reference (per-row lengths cut the extra list), in list order: each
    // entry's data in the run's caches, as the kernels address it (slot_block_base,
    // entry_data_offset).
    std::vector<uint64_t> rows;
    rows.reserve(static_cast<size_t>(attended));
    auto add = [&](const dsv4_mod_cache& cache, const std::vector<int32_t>& idx, int width, int t,
                   int n) {
      for (int i = 0; i < n; ++i) {
        int64_t e;
        const uint8_t* block =
            dsv4::slot_block_base(cache, idx[static_cast<size_t>(t) * width + i], &e);
        rows.push_back(reinterpret_cast<uint64_t>(block + dsv4::entry_data_offset(c.layout, e)));
      }
    };
    for (int t = 0; t < T; ++t) {
      add(r.swa_cache, main_idx, c.topk, t, c.topk);
      if (extra)
        add(r.extra_cache, extra_idx, c.extra_topk, t,
            extra_len.empty() ? c.extra_topk : extra_len[t / c.seq_q]);
    }
    // An entry's data bytes: its stride inside the block (576 of the 584 B layout, whole rows
    // else).
    const int row_bytes = static_cast<int>(dsv4::entry_data_offset(c.layout, 1));
    res.gather_us = floor.time_us(rows, row_bytes, flush);
  }
  flush.touched.clear();
  m.iface->plan_destroy(plan);
  // The plan's kernel name is its widest tiling; a run of few tokens may take another.
  void* logging = make_plan(true);
  last_log().clear();
  DSV4_OK(m.iface->run(logging, &r));
  CUDA_OK(cudaDeviceSynchronize());
  m.iface->plan_destroy(logging);
  const std::string& logged = last_log();  // "run: T tokens, <tiling and splits>"
  const size_t what = logged.rfind("run: ", 0) == 0 ? logged.find(", ") : std::string::npos;
  if (what != std::string::npos) res.run = logged.substr(what + 2);

  res.us = ms * 1000.0f;
  const double secs = res.us * 1e-6;
  res.tflops = 2.0 * H * static_cast<double>(attended) * (512 + 512) / secs / 1e12;
  const double qo = static_cast<double>(T) * H * 512 * 2 * 2;
  const double bpt = dsv4::layout_bytes_per_token(c.layout);
  // FlashMLA style counts distinct rows x 576 B; the s_q tokens of a request here draw their own
  // random rows, so attended rows are (almost all) distinct.
  res.gbs_flashmla = (qo + static_cast<double>(attended) * 576) / secs / 1e9;
  res.gbs_gathered = (qo + static_cast<double>(attended) * bpt) / secs / 1e9;
  return res;
}

std::vector<bench_case> cases() {
  std::vector<bench_case> v;
  struct cfg {
    const char* name;
    int heads, extra_topk, extra_block;
    bool lens;
  };
  const cfg configs[] = {{"CONFIG1", 64, 512, 64, false},
                         {"CONFIG2", 128, 1024, 64, false},
                         {"CONFIG3", 64, 1024, 2, true},
                         {"CONFIG4", 128, 1024, 2, true}};
  // FlashMLA's decode batch sizes, timed for the FP8 and the bf16 caches alike, and (FP8 only) the
  // batches between them that a serving engine's decode steps mostly have.
  const int decode_batches[] = {2, 64, 128, 256};
  const int fp8_batches[] = {2, 8, 16, 32, 64, 128, 256};
  for (const cfg& k : configs) {
    for (int b : fp8_batches) {
      bench_case c;
      c.name = std::string(k.name) + " b=" + std::to_string(b);
      c.heads = k.heads;
      c.batch = b;
      c.extra_topk = k.extra_topk;
      c.extra_block = k.extra_block;
      c.extra_lengths = k.lens;
      v.push_back(c);
    }
  }
  // Small head counts (tensor parallel 8/4/2 of 64 heads) against 64 heads.
  for (int h : {8, 16, 32, 64}) {
    for (int b : decode_batches) {
      bench_case c;
      c.name = "CONFIG1 h" + std::to_string(h) + " b=" + std::to_string(b);
      c.heads = h;
      c.batch = b;
      v.push_back(c);
    }
  }
  // The small-shared-memory variant (what sm_86/89 get), forced on this GPU.
  for (int h : {8, 16, 64}) {
    for (int b : {2, 64, 128}) {
      bench_case c;
      c.name = "CONFIG1 h" + std::to_string(h) + " k32 b=" + std::to_string(b);
      c.heads = h;
      c.batch = b;
      c.small_chunk = true;
      v.push_back(c);
    }
  }
  // bf16 cache, same decode shapes (and the plain-PyTorch comparison shapes: 640 / 1152 keys).
  for (const cfg& k : configs) {
    if (k.extra_block == 2) continue;
    for (int b : decode_batches) {
      bench_case c;
      c.name = std::string(k.name) + " bf16 b=" + std::to_string(b);
      c.layout = DSV4_KV_LAYOUT_BF16;
      c.heads = k.heads;
      c.batch = b;
      c.extra_topk = k.extra_topk;
      c.extra_block = k.extra_block;
      v.push_back(c);
    }
  }
  // Sparse prefill, bf16 KV (FlashMLA's flash_mla_sparse_fwd cases): s_q 4096 in one list.
  for (int skv : {8192, 65536}) {
    for (int hk : {0, 1}) {
      bench_case c;
      c.heads = hk ? 128 : 64;
      c.topk = hk ? 1024 : 512;
      c.name = "prefill h" + std::to_string(c.heads) + " topk " + std::to_string(c.topk) +
               " s_kv " + std::to_string(skv);
      c.layout = DSV4_KV_LAYOUT_BF16;
      c.prefill = true;
      c.batch = 1;
      c.seq_q = 4096;
      c.main_block = 64;
      c.extra_topk = 0;
      c.keys_per_scope = skv;
      v.push_back(c);
    }
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(
        stderr, "usage: %s <libdsv4-cuda.so> [filter | exact-name$ | alternative|alternative...]\n",
        argv[0]);
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress is visible even if a case hangs
  const std::string filter = argc > 2 ? argv[2] : "";
  try {
    module m(argv[1]);
    if (!m.skip_reason.empty()) {
      std::printf("skipped: %s\n", m.skip_reason.c_str());
      return kSkip;
    }
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    void* ctx = nullptr;
    dsv4_mod_ctx_config cfg{sizeof(dsv4_mod_ctx_config), 0, 0, 0};
    DSV4_OK(m.iface->ctx_create(&cfg, &ctx));
    const ceilings ceil = measure_ceilings();
    std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
                prop.l2CacheSize >> 20);
    std::printf("ceilings: copy %.0f GB/s (read + write), cuBLAS bf16 GEMM 8192^3 %.0f TFLOP/s\n",
                ceil.copy_gbs, ceil.gemm_tflops);
    l2_flush flush(prop.multiProcessorCount);
    std::printf("L2 before each timed run: %s flush (DSV4_BENCH_FLUSH=memset|read|none|tlb)\n",
                flush.name());
    gather_floor floor(prop.multiProcessorCount);
    std::printf(
        "gather: the case's referenced rows alone, read by plain loads (evict_first) after the "
        "same flush\n");
    std::printf("%-34s %10s %9s %11s %11s %8s %8s %9s %7s  %s\n", "case", "us", "TFLOP/s",
                "GB/s(FMLA)", "GB/s(gath)", "%copy", "%gemm", "gather us", "xgather", "kernel");
    for (const bench_case& c : cases()) {
      if (!selected(c.name, filter)) continue;
      // Each case draws from its own generator, seeded by its name: its inputs (the per-row lengths
      // of CONFIG3/4 among them) are the same whichever filter selected it and whatever ran before.
      std::mt19937_64 rng(case_seed(c.name));
      const result r = run_case(m, ctx, c, rng, flush, floor);
      std::printf("%-34s %10.1f %9.1f %11.0f %11.0f %7.1f%% %7.1f%% %9.1f %6.2fx  %s\n",
                  c.name.c_str(), r.us, r.tflops, r.gbs_flashmla, r.gbs_gathered,
                  100.0 * r.gbs_gathered / ceil.copy_gbs, 100.0 * r.tflops / ceil.gemm_tflops,
                  r.gather_us, r.gather_us > 0 ? r.us / r.gather_us : 0.0,
                  (r.kernel + (r.run.empty() ? "" : " [" + r.run + "]") + r.lengths).c_str());
      std::fflush(stdout);
    }
    // Trace builds of the module (-DDSV4_SM90_TRACE) dump the timeline of the last Hopper launch.
    if (const char* trace_out = std::getenv("DSV4_TRACE_OUT")) {
      using dump_fn = int (*)(const char*);
      if (auto dump = reinterpret_cast<dump_fn>(dlsym(m.so, "dsv4_cuda_sm90_trace_dump"))) {
        std::printf("trace: %s (rc %d)\n", trace_out, dump(trace_out));
      } else {
        std::printf("trace: the module was not built with DSV4_SM90_TRACE\n");
      }
    }
    m.iface->ctx_destroy(ctx);
    return 0;
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}
