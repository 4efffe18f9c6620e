// Longest tokens first (kernels.h, token_order_launch).
//
// A launch of one CTA per (token, head group) over several waves ends when its last CTA does. The
// hardware dispatches CTAs in launch order as SMs free up, so with uneven lengths (CONFIG3/4: 2..18
// chunks per token, in token order) a long token dispatched in the last wave sets the time. Handing
// the CTAs their tokens longest first makes the dispatch a longest-processing-time schedule: the
// waves fill with the long tokens and the short ones even out the end. The lengths are device data
// (paged mode builds them on the device), so one CTA sorts them on the device, before the attention
// kernel, and the chain stays capturable in a CUDA graph. The sort is stable (ties keep token
// order, so a request's MTP tokens stay neighbours); results do not depend on the order at all.
#include <cuda_runtime.h>

#include "device_common.cuh"
#include "kernels.h"

namespace dsv4 {
namespace cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBuckets = kOrderMaxChunks + 1;

// Token t's chunks: the active chunks of both lists (a prefix of each list's chunks, as chunk_walk
// walks them); at most kOrderMaxChunks (token_order_launch).
__device__ __forceinline__ int token_chunks(const attention_params& p, int64_t t) {
  int n = 0;
  for (int li = 0; li < 2; ++li)
    n += min(p.chunks[li], (list_count(p, t, li) + kChunkKeys - 1) / kChunkKeys);
  return n;
}

// A counting sort by chunks, descending: bucket b's tokens start after every longer token's. Ranks
// inside a bucket follow token order: a pass of 1024 tokens ranks each among its warp's equal lanes
// (match_any) and the earlier warps and passes (per-warp bucket counts).
__global__ void __launch_bounds__(kThreads)
    token_order_kernel(const attention_params p, int32_t* order) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");  // the attention CTAs may start
#endif
  __shared__ int first[kBuckets];  // histogram, then each bucket's first rank
  __shared__ int before[kWarps]
                       [kBuckets];  // this pass: warp w's tokens per bucket, then their first rank
  const int T = p.num_tokens;
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  for (int b = tid; b < kBuckets; b += kThreads) first[b] = 0;
  __syncthreads();
  for (int t = tid; t < T; t += kThreads) atomicAdd(&first[token_chunks(p, t)], 1);
  __syncthreads();
  if (tid == 0) {
    int rank = 0;
    for (int b = kBuckets - 1; b >= 0; --b) {
      const int n = first[b];
      first[b] = rank;
      rank += n;
    }
  }
  for (int pass = 0; pass * kThreads < T; ++pass) {
    for (int i = tid; i < kWarps * kBuckets; i += kThreads) before[i / kBuckets][i % kBuckets] = 0;
    __syncthreads();
    const int t = pass * kThreads + tid;
    const int n = t < T ? token_chunks(p, t) : -1;
    const uint32_t same = __match_any_sync(0xffffffffu, n);
    const int in_warp = __popc(same & ((1u << lane) - 1u));
    if (n >= 0 && in_warp == 0) before[warp][n] = __popc(same);
    __syncthreads();
    for (int b = tid; b < kBuckets; b += kThreads) {
      int rank = first[b];
      for (int w = 0; w < kWarps; ++w) {
        const int c = before[w][b];
        before[w][b] = rank;
        rank += c;
      }
      first[b] = rank;  // the next pass's tokens of bucket b follow these
    }
    __syncthreads();
    if (n >= 0) order[before[warp][n] + in_warp] = t;
    __syncthreads();
  }
}

}  // namespace

cudaError_t token_order_launch(const attention_params& p, int32_t* order, cudaStream_t stream) {
  if (p.num_tokens < 1 || p.chunks[0] + p.chunks[1] > kOrderMaxChunks) return cudaErrorInvalidValue;
  token_order_kernel<<<1, kThreads, 0, stream>>>(p, order);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace dsv4
