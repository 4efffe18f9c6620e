// Paged-mode list building, index export and the KV writer: thin kernels around the shared
// host/device code of backends/common (paged_index.h builders, layout.h quantiser), so the results
// are the CPU backend's bit for bit.
// clang-format off
#include "platform.h"  // first: HIP declares device memcpy before the shared headers use it
// clang-format on
#include "common/codec.h"
#include "common/layout.h"
#include "common/paged_index.h"
#include "kernels.h"

namespace dsv4 {
namespace hip {
namespace {

constexpr int kTokenThreads = 128;

DSV4_DEV int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// One thread per token builds its SWA row and compressed row (spec 4.2, 4.4, 4.5).
__global__ void DSV4_KERNEL_BOUNDS(kTokenThreads) paged_build_kernel(const paged_build_params p) {
  const int64_t t = global_thread();
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

// One block per row. A row whose slot a later row of the call also names is skipped (spec 12.4:
// the last one wins, whatever order the blocks run in); then the row is widened to fp32 in shared
// memory and quantised by quantize_entry (sequential within a row; rows run in parallel).
__global__ void DSV4_KERNEL_BOUNDS(kWriteThreads) kv_write_kernel(const dsv4_mod_kv_write w) {
  DSV4_DYNAMIC_SMEM(smem);
  float* values = reinterpret_cast<float*>(smem);
  int32_t* later = reinterpret_cast<int32_t*>(smem + kV32HeadDimQK * sizeof(float));
  const int64_t r = blockIdx.x;
  const int32_t slot = w.slots[r];
  if (slot < 0) return;  // the whole block leaves together
  if (threadIdx.x == 0) *later = 0;
  __syncthreads();
  int32_t mine = 0;
  for (int64_t k = r + 1 + threadIdx.x; k < w.num_rows; k += kWriteThreads)
    mine |= w.slots[k] == slot ? 1 : 0;
  if (mine) *later = 1;  // benign: every writer stores 1
  if (w.values_is_bf16) {
    const uint16_t* src = static_cast<const uint16_t*>(w.values) + r * w.values_row_stride;
    for (int d = threadIdx.x; d < w.dim; d += kWriteThreads) values[d] = bf16_to_f32(src[d]);
  } else {
    const float* src = static_cast<const float*>(w.values) + r * w.values_row_stride;
    for (int d = threadIdx.x; d < w.dim; d += kWriteThreads) values[d] = src[d];
  }
  __syncthreads();
  if (threadIdx.x != 0 || *later != 0) return;
  const int64_t block = slot / w.cache.block_size;
  const int64_t entry = slot % w.cache.block_size;
  if (block >= w.cache.num_blocks) return;  // GPU contract (dsv4.h): rows beyond capacity skipped
  quantize_entry(w.cache.layout, w.cache.base + block * w.cache.block_stride_bytes,
                 w.cache.block_size, entry, values, w.cache.kv_scale);
}

// ---------------------------------------------------------------------------------------------
// Index export. Dense formats: one thread per token writes its rows in place (paged_index.h).
__global__ void DSV4_KERNEL_BOUNDS(kTokenThreads) export_dense_kernel(const export_params p) {
  const int64_t t = global_thread();
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

// CSR pass 1: each token's row lengths (the builders write every entry to one scratch int), kept
// in indptr[t + 1] until the scan.
__global__ void DSV4_KERNEL_BOUNDS(kTokenThreads) export_csr_lengths_kernel(const export_params p) {
  const int64_t t = global_thread();
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

// CSR pass 2: in-place inclusive scan of indptr[1 .. T] (one block), indptr[0] = 0.
constexpr int kScanThreads = 1024;
__global__ void DSV4_KERNEL_BOUNDS(kScanThreads)
    export_csr_scan_kernel(int32_t* indptr, int64_t stride, int64_t n) {
  DSV4_DYNAMIC_SMEM(smem);
  int32_t* partial = reinterpret_cast<int32_t*>(smem);
  const int64_t per = (n + kScanThreads - 1) / kScanThreads;
  const int64_t begin = 1 + threadIdx.x * per;
  const int64_t end = begin + per < n + 1 ? begin + per : n + 1;
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

// CSR pass 3: one block per token builds its rows in shared memory and copies the first `length`
// entries to indices[indptr[t] ..].
__global__ void DSV4_KERNEL_BOUNDS(kTokenThreads) export_csr_rows_kernel(const export_params p) {
  DSV4_DYNAMIC_SMEM(smem);
  int32_t* lens = reinterpret_cast<int32_t*>(smem);
  int32_t* row = lens + 4;
  const int64_t t = blockIdx.x;
  const paged_geometry& g = p.geometry;
  if (threadIdx.x == 0) {
    const paged_token k = paged_locate(p.batch, t);
    lens[0] = paged_build_swa_row(g, p.batch, k, p.capacity.swa, row, 1);
    lens[1] = 0;
    if (dsv4_mod_export_wanted(&p.cmp) && g.cmp_width > 0)
      lens[1] = paged_build_cmp_row(g, p.batch, k, t, p.capacity.cmp, row + g.window, 1);
  }
  __syncthreads();
  for (int li = 0; li < 2; ++li) {
    const dsv4_mod_export_list& l = li == 0 ? p.swa : p.cmp;
    if (l.indices == nullptr || (li == 1 && g.cmp_width == 0)) continue;
    const int32_t* src = li == 0 ? row : row + g.window;
    const int64_t start = l.indptr[t * l.indptr_stride];
    for (int i = threadIdx.x; i < lens[li]; i += kTokenThreads)
      l.indices[(start + i) * l.col_stride] = src[i];
    if (threadIdx.x == 0 && l.lengths != nullptr) l.lengths[t * l.len_stride] = lens[li];
  }
}

unsigned token_blocks(int64_t tokens) {
  return static_cast<unsigned>((tokens + kTokenThreads - 1) / kTokenThreads);
}

}  // namespace

hipError_t paged_build_launch(const paged_build_params& p, hipStream_t stream) {
  if (p.num_tokens <= 0) return hipSuccess;
  return dsv4_hip_launch(paged_build_kernel, dim3(token_blocks(p.num_tokens)), dim3(kTokenThreads),
                         0, stream, p);
}

hipError_t export_launch(const export_params& p, hipStream_t stream) {
  // A CSR step without tokens still has indptr = {0}: the scans write it.
  const bool csr = p.format == DSV4_EXPORT_CSR;
  if (p.num_tokens < 0 || (p.num_tokens == 0 && !csr)) return hipSuccess;
  const dim3 blocks(token_blocks(p.num_tokens));
  if (!csr) return dsv4_hip_launch(export_dense_kernel, blocks, dim3(kTokenThreads), 0, stream, p);
  hipError_t err = hipSuccess;
  if (p.num_tokens > 0)
    err = dsv4_hip_launch(export_csr_lengths_kernel, blocks, dim3(kTokenThreads), 0, stream, p);
  if (err != hipSuccess) return err;
  const size_t scan_smem = kScanThreads * sizeof(int32_t);
  err = dsv4_hip_launch(export_csr_scan_kernel, dim3(1), dim3(kScanThreads), scan_smem, stream,
                        p.swa.indptr, p.swa.indptr_stride, p.num_tokens);
  if (err != hipSuccess) return err;
  if (dsv4_mod_export_wanted(&p.cmp) && p.geometry.cmp_width > 0) {
    err = dsv4_hip_launch(export_csr_scan_kernel, dim3(1), dim3(kScanThreads), scan_smem, stream,
                          p.cmp.indptr, p.cmp.indptr_stride, p.num_tokens);
    if (err != hipSuccess) return err;
  }
  if (p.num_tokens == 0) return hipSuccess;
  const size_t smem =
      (4 + static_cast<size_t>(p.geometry.window + p.geometry.cmp_width)) * sizeof(int32_t);
  err = dsv4_hip_allow_smem(export_csr_rows_kernel, smem);
  if (err != hipSuccess) return err;
  return dsv4_hip_launch(export_csr_rows_kernel, dim3(static_cast<unsigned>(p.num_tokens)),
                         dim3(kTokenThreads), smem, stream, p);
}

hipError_t kv_write_launch(const dsv4_mod_kv_write& w, hipStream_t stream) {
  if (w.num_rows <= 0) return hipSuccess;
  const size_t smem = kV32HeadDimQK * sizeof(float) + 16;
  return dsv4_hip_launch(kv_write_kernel, dim3(static_cast<unsigned>(w.num_rows)),
                         dim3(kWriteThreads), smem, stream, w);
}

}  // namespace hip
}  // namespace dsv4
