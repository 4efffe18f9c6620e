// Round 44 probe (docs/performance.md): how fast an H200 gathers random 576-byte rows (the 584 B
// layout's data rows) of a 612 MB cache, by plain loads and by the bulk-copy engine, under the normal
// and the evict_first L2 policy, after a memset flush (default) or a read flush (FLUSH=read): the
// index lists of CONFIG1 b=64 / 128 (b requests x 2 tokens x 640 rows over 16384 keys each).
// Build and run: nvcc -O3 -std=c++17 -arch=sm_90a round44-gather-floor-probe.cu -o gather &&
//   ./gather && FLUSH=read ./gather
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include <string>

#define CK(x)                                                                       \
  do {                                                                              \
    cudaError_t e_ = (x);                                                           \
    if (e_ != cudaSuccess) {                                                        \
      std::printf("CUDA %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

struct Params {
  const uint8_t* cache;
  int64_t block_stride;
  int block_size;
  const int32_t* idx;
  int L;
  int rows_total;
  unsigned long long* sink;
};

__device__ __forceinline__ const uint8_t* row_ptr(const Params& p, int32_t slot) {
  return p.cache + (int64_t)(slot / p.block_size) * p.block_stride + (int64_t)(slot % p.block_size) * 576;
}

__device__ __forceinline__ uint4 ldg_ef(const uint4* p, uint64_t pol) {
  uint4 v;
  asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(pol));
  return v;
}
// (a) plain loads: a warp reads UNROLL rows at once, lane l takes 16-byte pieces l, l + 32 (36 pieces per row).
template <int UNROLL, bool EF>
__global__ void gather_ldg(Params p) {
  uint64_t pol;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  const int warps = gridDim.x * blockDim.x / 32;
  const int gw = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  uint32_t acc = 0;
  for (int r0 = gw * UNROLL; r0 < p.rows_total; r0 += warps * UNROLL) {
    uint4 v[UNROLL][2];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int r = min(r0 + u, p.rows_total - 1);
      const uint4* row = reinterpret_cast<const uint4*>(row_ptr(p, p.idx[r]));
      if (EF) {
        v[u][0] = ldg_ef(row + lane, pol);
        v[u][1] = lane < 4 ? ldg_ef(row + 32 + lane, pol) : make_uint4(0, 0, 0, 0);
      } else {
        v[u][0] = __ldg(row + lane);
        v[u][1] = lane < 4 ? __ldg(row + 32 + lane) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u][0].x ^ v[u][0].w ^ v[u][1].y ^ v[u][1].z;
  }
  if (acc == 0x12345678u) atomicAdd(p.sink, 1ull);
}

// (b) bulk copies: one CTA per token; each warp owns NS slots of G rows, copies issued by lanes 0..G-1.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
template <int W, int NS, int G, bool EF>
__global__ void __launch_bounds__(W * 32, 1) gather_bulk(Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem);
  uint8_t* slots = smem + 1024;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = blockIdx.x;
  if (lane == 0)
    for (int s = 0; s < NS; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_u32(&bars[warp * NS + s])));
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();
  const int groups = p.L / G, mine = (groups - warp + W - 1) / W;
  auto issue = [&](int i, int s) {
    const int g = warp + i * W;
    const uint32_t bar = smem_u32(&bars[warp * NS + s]);
    if (lane == 0) asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(G * 576) : "memory");
    __syncwarp();
    if (lane < G) {
      const uint8_t* src = row_ptr(p, p.idx[(int64_t)t * p.L + g * G + lane]);
      const uint32_t dst = smem_u32(slots + ((warp * NS + s) * G + lane) * 592);
      if (EF) {
        uint64_t pol;
        asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], 576, [%2], %3;\n" ::"r"(dst),
            "l"(src), "r"(bar), "l"(pol)
            : "memory");
      } else {
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 576, [%2];\n" ::"r"(dst),
                     "l"(src), "r"(bar)
                     : "memory");
      }
    }
  };
  for (int i = 0; i < NS && i < mine; ++i) issue(i, i);
  uint32_t acc = 0;
  for (int i = 0; i < mine; ++i) {
    const int s = i % NS;
    const uint32_t bar = smem_u32(&bars[warp * NS + s]);
    asm volatile(
        "{\n .reg .pred q;\n W_%=:\n mbarrier.try_wait.parity.shared::cta.b64 q, [%0], %1;\n @!q bra W_%=;\n}\n" ::"r"(bar),
        "r"((i / NS) & 1)
        : "memory");
    acc ^= *reinterpret_cast<const uint32_t*>(slots + ((warp * NS + s) * G + lane % G) * 592 + 4 * lane);
    __syncwarp();
    if (i + NS < mine) {
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      issue(i + NS, s);
    }
  }
  if (acc == 0x12345678u) atomicAdd(p.sink, 1ull);
}

__global__ void read_flush(const uint4* b, size_t n, unsigned long long* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) acc ^= b[i].x;
  if (acc == 0x12345678u) atomicAdd(sink, 1ull);
}
int main() {
  const bool read_fl = getenv("FLUSH") && std::string(getenv("FLUSH")) == "read";
  const int B = 64, keys_per_req = 16384, L = 640;
  const int64_t stride = 37440;
  void* flush;
  CK(cudaMalloc(&flush, 256 << 20));
  unsigned long long* sink;
  CK(cudaMalloc(&sink, 8));
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (int T : {128, 256}) {
    const int reqs = T / 2;
    const int64_t blocks = (int64_t)reqs * keys_per_req / B;
    uint8_t* dc;
    CK(cudaMalloc(&dc, blocks * stride));
    CK(cudaMemset(dc, 1, blocks * stride));
    std::mt19937_64 rng(99);
    std::vector<int32_t> idx((size_t)T * L), seq((size_t)T * L);
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < L; ++i) {
        idx[(size_t)t * L + i] = (int32_t)((t / 2) * keys_per_req + rng() % keys_per_req);
        seq[(size_t)t * L + i] = (int32_t)((t / 2) * keys_per_req + (t % 2) * L + i);  // contiguous rows
      }
    int32_t *di, *ds;
    CK(cudaMalloc(&di, idx.size() * 4));
    CK(cudaMalloc(&ds, seq.size() * 4));
    CK(cudaMemcpy(di, idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ds, seq.data(), seq.size() * 4, cudaMemcpyHostToDevice));
    const double mb = (double)T * L * 576 / 1e6;
    auto time = [&](const char* name, auto launch) {
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      std::vector<float> ts;
      for (int it = 0; it < 23; ++it) {
        if (read_fl) read_flush<<<sms * 4, 512>>>((const uint4*)flush, (256 << 20) / 16, sink);
        else CK(cudaMemset(flush, it, 256 << 20));
        cudaEventRecord(e0);
        launch();
        cudaEventRecord(e1);
        CK(cudaEventSynchronize(e1));
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (it >= 3) ts.push_back(ms * 1000.f);
      }
      CK(cudaGetLastError());
      std::sort(ts.begin(), ts.end());
      const float us = ts[ts.size() / 2];
      std::printf("T=%d %-44s %7.1f us  %6.2f TB/s\n", T, name, us, mb / us);
    };
    for (int pass = 0; pass < 2; ++pass) {  // random rows, then contiguous ones
      Params p{dc, stride, B, pass ? ds : di, L, T * L, sink};
      const char* kind = pass ? "contiguous" : "random";
      char n[96];
      for (int ef = 0; ef < 2; ++ef) {
        const char* pol = ef ? "evict_first" : "normal";
        std::snprintf(n, sizeof n, "%s %s ldg x4, 512 thr x 4 blk/SM", kind, pol);
        if (ef) time(n, [&] { gather_ldg<4, true><<<sms * 4, 512>>>(p); });
        else time(n, [&] { gather_ldg<4, false><<<sms * 4, 512>>>(p); });
        std::snprintf(n, sizeof n, "%s %s ldg x2, 1024 thr x 2 blk/SM", kind, pol);
        if (ef) time(n, [&] { gather_ldg<2, true><<<sms * 2, 1024>>>(p); });
        else time(n, [&] { gather_ldg<2, false><<<sms * 2, 1024>>>(p); });
        const int smem = 1024 + 8 * 2 * 16 * 592;
        CK(cudaFuncSetAttribute(gather_bulk<8, 2, 16, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        CK(cudaFuncSetAttribute(gather_bulk<8, 2, 16, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        std::snprintf(n, sizeof n, "%s %s bulk W8 NS2 G16", kind, pol);
        if (ef) time(n, [&] { gather_bulk<8, 2, 16, true><<<T, 256, smem>>>(p); });
        else time(n, [&] { gather_bulk<8, 2, 16, false><<<T, 256, smem>>>(p); });
      }
    }
    cudaFree(dc);
    cudaFree(di);
    cudaFree(ds);
  }
  return 0;
}
