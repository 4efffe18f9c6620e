// Paged-mode list building and the KV writer: thin kernels around the shared host/device code of
// backends/common (paged_index.h builders, layout.h quantiser), so the CUDA results are the CPU
// backend's bit for bit.
#include <cuda_runtime.h>

#include <algorithm>

#include "common/codec.h"
#include "common/kv_write.h"
#include "common/layout.h"
#include "common/paged_index.h"
#include "kernels.h"

namespace dsv4 {
namespace cuda {
namespace {

// One thread per token builds its SWA row and compressed row (spec 4.2, 4.4, 4.5).
__global__ void paged_build_kernel(const paged_build_params p) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= p.num_tokens) return;
  const int64_t w = p.geometry.window;
  const int64_t cw = p.geometry.cmp_width;
  int32_t swa_len = 0;
  int32_t cmp_len = 0;
  paged_build_token(p.geometry, p.batch, p.capacity, t, p.swa_indices + t * w, 1, &swa_len,
                    cw > 0 ? p.cmp_indices + t * cw : nullptr, 1, &cmp_len);
  p.swa_lengths[t] = swa_len;
  p.cmp_lengths[t] = cmp_len;
}

constexpr int kWriteThreads = 128;
constexpr int kWriteWarps = kWriteThreads / 32;
constexpr int kWriteBatch = 1024;  // rows a CTA gathers before writing them
constexpr int64_t kWriteRowsPerPart = 128;
constexpr int64_t kWriteMaxParts = 1024;

// Writes a CTA's gathered batch: of the rows that share a slot only the last (the batch is in row
// order) is written, so the rows written at once touch distinct entries. One row per thread
// (quantize_entry is sequential within a row).
__device__ void kv_write_batch(const dsv4_mod_kv_write& w, const int64_t* rows,
                               const int32_t* slots, int n) {
  for (int i = threadIdx.x; i < n; i += kWriteThreads) {
    const int32_t slot = slots[i];
    bool last = true;
    for (int j = i + 1; j < n && last; ++j) last = slots[j] != slot;
    if (last) kv_write_row(w, rows[i], slot);
  }
  __syncthreads();  // the next batch may overwrite these entries
}

// Spec 12.4 (common/kv_write.h): CTA p writes the slots of part p. It walks the rows in order and
// gathers its own into shared memory, batch after batch, so a later row of a slot always
// overwrites an earlier one. Rows beyond the capacity are skipped (dsv4.h: GPU modules never read
// device values to validate).
__global__ void __launch_bounds__(kWriteThreads)
    kv_write_kernel(const dsv4_mod_kv_write w, uint32_t parts) {
  __shared__ int64_t rows[kWriteBatch];
  __shared__ int32_t slots[kWriteBatch];
  __shared__ int warp_counts[kWriteWarps];
  const int64_t capacity = w.cache.num_blocks * static_cast<int64_t>(w.cache.block_size);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  int count = 0;  // rows gathered in the current batch (the same in every thread)
  for (int64_t start = 0; start < w.num_rows; start += kWriteThreads) {
    const int64_t r = start + threadIdx.x;
    const int32_t slot = r < w.num_rows ? w.slots[r] : -1;
    const bool mine = slot >= 0 && slot < capacity && kv_write_part(slot, parts) == blockIdx.x;
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = 0;  // own rows of this tile in the warps before this one
    int tile = 0;
    for (int k = 0; k < kWriteWarps; ++k) {
      before += k < warp ? warp_counts[k] : 0;
      tile += warp_counts[k];
    }
    if (count + tile > kWriteBatch) {
      kv_write_batch(w, rows, slots, count);
      count = 0;
    }
    if (mine) {
      const int at = count + before + __popc(ballot & ((1u << lane) - 1u));
      rows[at] = r;
      slots[at] = slot;
    }
    count += tile;
    __syncthreads();  // warp_counts is reused by the next tile; the batch is complete
  }
  kv_write_batch(w, rows, slots, count);
}

// ---------------------------------------------------------------------------------------------
// Index export. Dense formats: one thread per token writes its rows in place (paged_index.h).
__global__ void export_dense_kernel(const export_params p) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= p.num_tokens) return;
  const paged_geometry& g = p.geometry;
  if (p.format == DSV4_EXPORT_FLASHINFER) {
    const dsv4_mod_export_list& l = p.combined;
    const int32_t num_decodes = paged_num_decodes(p.batch, g.decode_threshold);
    const int32_t len = paged_build_flashinfer_row(g, p.batch, p.capacity, t, num_decodes,
                                                   l.indices + t * l.row_stride, l.width);
    if (l.lengths != nullptr) l.lengths[t * l.len_stride] = len;
    return;
  }
  const dsv4_mod_export_list& sw = p.swa;
  const dsv4_mod_export_list& cm = p.cmp;
  const bool want_cmp = cm.indices != nullptr && g.cmp_width > 0;
  const paged_token k = paged_locate(p.batch, t);
  const int32_t swa_len = paged_build_swa_row(g, p.batch, k, p.capacity.swa,
                                              sw.indices + t * sw.row_stride, sw.col_stride);
  for (int64_t c = g.window; c < sw.width; ++c)
    sw.indices[t * sw.row_stride + c * sw.col_stride] = -1;
  if (sw.lengths != nullptr) sw.lengths[t * sw.len_stride] = swa_len;
  if (!want_cmp) return;
  const int32_t cmp_len = paged_build_cmp_row(g, p.batch, k, t, p.capacity.cmp,
                                              cm.indices + t * cm.row_stride, cm.col_stride);
  for (int64_t c = g.cmp_width; c < cm.width; ++c)
    cm.indices[t * cm.row_stride + c * cm.col_stride] = -1;
  if (cm.lengths != nullptr) cm.lengths[t * cm.len_stride] = cmp_len;
}

// CSR pass 1: each token's row lengths (the builders write every entry to one scratch int), stored
// in indptr[t + 1] until the scan.
__global__ void export_csr_lengths_kernel(const export_params p) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= p.num_tokens) return;
  const paged_geometry& g = p.geometry;
  int32_t scratch;
  const paged_token k = paged_locate(p.batch, t);
  const int32_t swa_len = paged_build_swa_row(g, p.batch, k, p.capacity.swa, &scratch, 0);
  p.swa.indptr[(t + 1) * p.swa.indptr_stride] = swa_len;
  if (dsv4_mod_export_wanted(&p.cmp) && g.cmp_width > 0)
    p.cmp.indptr[(t + 1) * p.cmp.indptr_stride] =
        paged_build_cmp_row(g, p.batch, k, t, p.capacity.cmp, &scratch, 0);
}

// CSR pass 2: in-place inclusive scan of indptr[1 .. T] (one CTA), indptr[0] = 0.
constexpr int kScanThreads = 1024;
__global__ void __launch_bounds__(kScanThreads)
    export_csr_scan_kernel(int32_t* indptr, int64_t stride, int64_t n) {
  __shared__ int32_t partial[kScanThreads];
  const int64_t per = (n + kScanThreads - 1) / kScanThreads;
  const int64_t begin = 1 + threadIdx.x * per;
  const int64_t end = min(n + 1, begin + per);
  int32_t sum = 0;
  for (int64_t i = begin; i < end; ++i) sum += indptr[i * stride];
  partial[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = 0;
    for (int i = 0; i < kScanThreads; ++i) {
      const int32_t v = partial[i];
      partial[i] = run;
      run += v;
    }
    indptr[0] = 0;
  }
  __syncthreads();
  int32_t run = partial[threadIdx.x];
  for (int64_t i = begin; i < end; ++i) {
    run += indptr[i * stride];
    indptr[i * stride] = run;
  }
}

// CSR pass 3: one CTA per token builds its rows in shared memory and copies the first `length`
// entries to indices[indptr[t] ..].
__global__ void export_csr_rows_kernel(const export_params p) {
  extern __shared__ int32_t row[];
  const int64_t t = blockIdx.x;
  const paged_geometry& g = p.geometry;
  __shared__ int32_t lens[2];
  if (threadIdx.x == 0) {
    const paged_token k = paged_locate(p.batch, t);
    lens[0] = paged_build_swa_row(g, p.batch, k, p.capacity.swa, row, 1);
    lens[1] = 0;
    if (dsv4_mod_export_wanted(&p.cmp) && g.cmp_width > 0)
      lens[1] = paged_build_cmp_row(g, p.batch, k, t, p.capacity.cmp, row + g.window, 1);
  }
  __syncthreads();
  const dsv4_mod_export_list* lists[2] = {&p.swa, &p.cmp};
  const int32_t* src[2] = {row, row + g.window};
  for (int li = 0; li < 2; ++li) {
    const dsv4_mod_export_list& l = *lists[li];
    if (l.indices == nullptr || (li == 1 && g.cmp_width == 0)) continue;
    const int64_t start = l.indptr[t * l.indptr_stride];
    for (int i = threadIdx.x; i < lens[li]; i += blockDim.x)
      l.indices[(start + i) * l.col_stride] = src[li][i];
    if (threadIdx.x == 0 && l.lengths != nullptr) l.lengths[t * l.len_stride] = lens[li];
  }
}

}  // namespace

cudaError_t paged_build_launch(const paged_build_params& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  const int threads = 128;
  const int64_t blocks = (p.num_tokens + threads - 1) / threads;
  paged_build_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t export_launch(const export_params& p, cudaStream_t stream) {
  const bool csr = p.format == DSV4_EXPORT_CSR;
  if (p.num_tokens < 0 || (p.num_tokens == 0 && !csr)) return cudaSuccess;
  const int threads = 128;
  const unsigned blocks = static_cast<unsigned>((p.num_tokens + threads - 1) / threads);
  if (!csr) {
    export_dense_kernel<<<blocks, threads, 0, stream>>>(p);
    return cudaGetLastError();
  }
  // A step without tokens still has indptr = {0}: the scans write it.
  if (p.num_tokens > 0) export_csr_lengths_kernel<<<blocks, threads, 0, stream>>>(p);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  export_csr_scan_kernel<<<1, kScanThreads, 0, stream>>>(p.swa.indptr, p.swa.indptr_stride,
                                                         p.num_tokens);
  if (dsv4_mod_export_wanted(&p.cmp) && p.geometry.cmp_width > 0)
    export_csr_scan_kernel<<<1, kScanThreads, 0, stream>>>(p.cmp.indptr, p.cmp.indptr_stride,
                                                           p.num_tokens);
  err = cudaGetLastError();
  if (err != cudaSuccess || p.num_tokens == 0) return err;
  const size_t smem =
      static_cast<size_t>(p.geometry.window + p.geometry.cmp_width) * sizeof(int32_t);
  if (smem > 48 * 1024) {
    err = cudaFuncSetAttribute(export_csr_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  export_csr_rows_kernel<<<static_cast<unsigned>(p.num_tokens), threads, smem, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t kv_write_launch(const dsv4_mod_kv_write& w, cudaStream_t stream) {
  if (w.num_rows <= 0) return cudaSuccess;
  // About kWriteRowsPerPart rows per CTA; every CTA scans all slots, so the parts stay few.
  const int64_t parts =
      std::min(kWriteMaxParts, (w.num_rows + kWriteRowsPerPart - 1) / kWriteRowsPerPart);
  kv_write_kernel<<<static_cast<unsigned>(parts), kWriteThreads, 0, stream>>>(
      w, static_cast<uint32_t>(parts));
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace dsv4
