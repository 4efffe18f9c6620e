// The kernels of libdsv4-opencl.so and libdsv4-level-zero.so: one OpenCL C source (1.2 and later;
// PoCL builds it from source, clang-14 compiles it to SPIR-V for Level Zero). params.h and
// dsv4_common.cl come first in the built text.
//
// Attention: one work-group per (token, tile of DSV4_CL_HEAD_TILE heads). The token's valid
// candidates (main list, then extra list) are visited in chunks of DSV4_CL_KEY_CHUNK keys: the
// chunk's rows are dequantised once into local memory for all heads of the tile, each work-item
// computes one (head, key) logit, and an online softmax (running max, rescaled sums) accumulates
// the values; 16 work-items per head own 32 output dims each. A token's result depends on its own
// lists only (batch invariant). Invalid positions are masked by selection: their rows are never
// read.
//
// Sub-groups: where the compiler offers cl_intel_subgroups with a fixed sub-group size of 16
// (Intel GPUs; the Level Zero build forces it: the offline compiler defines no extension macros), a
// sub-group of 16 lanes computes each logit over interleaved
// dims and reduces it with sub_group_reduce_add; elsewhere (PoCL, other vendors) each work-item
// computes its logit alone. Both sum in a fixed order.

#if ((defined(cl_intel_subgroups) && defined(cl_intel_required_subgroup_size)) || \
     defined(DSV4_CL_FORCE_SUBGROUP16)) &&                                        \
    !defined(DSV4_CL_NO_SUBGROUPS)
#define DSV4_CL_SUBGROUP16 1
#define DSV4_CL_SG_ATTR __attribute__((intel_reqd_sub_group_size(16)))
#else
#define DSV4_CL_SUBGROUP16 0
#define DSV4_CL_SG_ATTR
#endif

#define DSV4_CL_DIMS_PER_ITEM (DSV4_HEAD_DIM / DSV4_CL_KEY_CHUNK)

// The work-group's tile of heads, its rows of q (as fp32) and the chunk's dequantised keys.
typedef struct dsv4_cl_chunk_slot {
  long block_offset;  // byte offset of the block from the cache base
  long entry;
  int list;  // 0 main, 1 extra, -1 invalid
  int pad;
} dsv4_cl_chunk_slot;

__kernel __attribute__((reqd_work_group_size(DSV4_CL_ATTN_THREADS, 1, 1))) DSV4_CL_SG_ATTR void
dsv4_attention(__global const uchar* q, __global uchar* out, __global float* lse,
               __global float* max_logits, __global const uchar* cache0,
               __global const uchar* cache1, __global const float* sink,
               __global const int* indices0, __global const int* indptr0,
               __global const int* lengths0, __global const int* indices1,
               __global const int* indptr1, __global const int* lengths1,
               const dsv4_cl_attention_params p) {
  __local float qs[DSV4_CL_HEAD_TILE * DSV4_CL_MAX_DQK];
  __local float ks[DSV4_CL_KEY_CHUNK * DSV4_CL_KEY_STRIDE];
  __local float logits[DSV4_CL_HEAD_TILE * DSV4_CL_KEY_CHUNK];
  __local dsv4_cl_chunk_slot slots[DSV4_CL_KEY_CHUNK];
  __local long list_count[2];

  const int lid = (int)get_local_id(0);
  const long t = (long)get_group_id(1);
  const int h0 = (int)get_group_id(0) * DSV4_CL_HEAD_TILE;
  const int heads = min(DSV4_CL_HEAD_TILE, p.num_heads - h0);
  const int dqk = p.head_dim_qk;
  const long seq_q = p.seq_q;
  const long tb = t / seq_q, ts = t % seq_q;
  // Output role: head hh of the tile, dims sub + 16 k.
  const int hh = lid / DSV4_CL_KEY_CHUNK;
  const int sub = lid % DSV4_CL_KEY_CHUNK;

  // q rows of the tile as fp32 (rows past the tile are zero).
  for (int i = lid; i < DSV4_CL_HEAD_TILE * dqk; i += DSV4_CL_ATTN_THREADS) {
    const int h = i / dqk, d = i % dqk;
    float v = 0.0f;
    if (h < heads) {
      const long off = tb * p.q.stride_b + ts * p.q.stride_s + (long)(h0 + h) * p.q.stride_h + d;
      v = p.q_fp8 ? dsv4_fp8_e4m3_to_f32(q[off])
                  : dsv4_bf16_to_f32(((__global const ushort*)q)[off]);
    }
    qs[h * DSV4_CL_MAX_DQK + d] = v;
  }
  if (lid < 2) {
    list_count[lid] = lid == 0 ? dsv4_list_row_count(p.list[0], indptr0, lengths0, t, seq_q)
                               : dsv4_list_row_count(p.list[1], indptr1, lengths1, t, seq_q);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const long n0 = list_count[0];
  const long total = n0 + list_count[1];

  float acc[DSV4_CL_DIMS_PER_ITEM];
  for (int k = 0; k < DSV4_CL_DIMS_PER_ITEM; ++k) acc[k] = 0.0f;
  float m = -INFINITY;  // running max of the head's valid logits
  float l = 0.0f;       // running sum of exp(logit - m)
  long valid = 0;       // valid candidates of the token

  for (long c0 = 0; c0 < total; c0 += DSV4_CL_KEY_CHUNK) {
    // The chunk's candidates: which list, and where the row lives (or invalid).
    if (lid < DSV4_CL_KEY_CHUNK) {
      const long pos = c0 + lid;
      dsv4_cl_chunk_slot s;
      s.list = -1;
      s.block_offset = 0;
      s.entry = 0;
      s.pad = 0;
      if (pos < total) {
        const int li = pos < n0 ? 0 : 1;
        const long i = li == 0 ? pos : pos - n0;
        const dsv4_cl_cache c = p.cache[li];
        const long idx = li == 0 ? dsv4_list_entry(p.list[0], indices0, indptr0, t, seq_q, i)
                                 : dsv4_list_entry(p.list[1], indices1, indptr1, t, seq_q, i);
        if (dsv4_slot_is_valid(idx, c)) {
          s.list = li;
          s.block_offset = (idx / c.block_size) * c.block_stride;
          s.entry = idx % c.block_size;
        }
      }
      slots[lid] = s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // Dequantise the chunk's valid rows (invalid ones are zero and never read).
    for (int i = lid; i < DSV4_CL_KEY_CHUNK * dqk; i += DSV4_CL_ATTN_THREADS) {
      const int j = i / dqk, d = i % dqk;
      const dsv4_cl_chunk_slot s = slots[j];
      float v = 0.0f;
      if (s.list >= 0) {
        const dsv4_cl_cache c = p.cache[s.list];
        __global const uchar* base = (s.list == 0 ? cache0 : cache1) + s.block_offset;
        v = dsv4_dequant_dim(c.layout, c.flags, base, c.block_size, s.entry, d);
      }
      ks[j * DSV4_CL_KEY_STRIDE + d] = v;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // Logits: work-item (head hh, key sub), or sub-group hh over 16 interleaved dim slices.
#if DSV4_CL_SUBGROUP16
    for (int j = 0; j < DSV4_CL_KEY_CHUNK; ++j) {
      float part = 0.0f;
      for (int d = sub; d < dqk; d += DSV4_CL_KEY_CHUNK)
        part += qs[hh * DSV4_CL_MAX_DQK + d] * ks[j * DSV4_CL_KEY_STRIDE + d];
      const float dot = sub_group_reduce_add(part);
      if (sub == j) {
        const dsv4_cl_chunk_slot s = slots[j];
        logits[hh * DSV4_CL_KEY_CHUNK + j] = s.list >= 0 ? dot * p.logit_scale[s.list] : -INFINITY;
      }
    }
#else
    {
      const dsv4_cl_chunk_slot s = slots[sub];
      float dot = 0.0f;
      for (int d = 0; d < dqk; ++d)
        dot += qs[hh * DSV4_CL_MAX_DQK + d] * ks[sub * DSV4_CL_KEY_STRIDE + d];
      logits[hh * DSV4_CL_KEY_CHUNK + sub] = s.list >= 0 ? dot * p.logit_scale[s.list] : -INFINITY;
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    // Online softmax of head hh (every work-item of the head computes the same values) and the
    // value accumulation of its dims.
    float chunk_max = -INFINITY;
    int chunk_valid = 0;
    for (int j = 0; j < DSV4_CL_KEY_CHUNK; ++j) {
      if (slots[j].list < 0) continue;
      ++chunk_valid;
      chunk_max = fmax(chunk_max, logits[hh * DSV4_CL_KEY_CHUNK + j]);
    }
    valid += chunk_valid;
    if (chunk_valid > 0) {
      const float m_new = fmax(m, chunk_max);
      const float alpha = m == -INFINITY ? 0.0f : exp(m - m_new);
      float pj[DSV4_CL_KEY_CHUNK];
      float sum = 0.0f;
      for (int j = 0; j < DSV4_CL_KEY_CHUNK; ++j) {
        const int li = slots[j].list;
        const float e = li >= 0 ? exp(logits[hh * DSV4_CL_KEY_CHUNK + j] - m_new) : 0.0f;
        sum += e;
        pj[j] = li >= 0 ? e * p.weight[li] : 0.0f;
      }
      l = l * alpha + sum;
      m = m_new;
      for (int k = 0; k < DSV4_CL_DIMS_PER_ITEM; ++k) {
        const int d = sub + DSV4_CL_KEY_CHUNK * k;
        float a = acc[k] * alpha;
        for (int j = 0; j < DSV4_CL_KEY_CHUNK; ++j) a += pj[j] * ks[j * DSV4_CL_KEY_STRIDE + d];
        acc[k] = a;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  if (hh >= heads) return;
  const int head = h0 + hh;
  const long o_off = tb * p.out.stride_b + ts * p.out.stride_s + (long)head * p.out.stride_h;
  __global float* out32 = (__global float*)out;  // the plan's out dtype: fp32 or bf16
  __global ushort* out16 = (__global ushort*)out;
  if (valid == 0) {  // lonely query: out 0, lse +inf, max_logits -inf (spec 2.3)
    for (int k = 0; k < DSV4_CL_DIMS_PER_ITEM; ++k) {
      const long at = o_off + sub + DSV4_CL_KEY_CHUNK * k;
      if (p.out_f32)
        out32[at] = 0.0f;
      else
        out16[at] = 0;
    }
    if (sub == 0 && p.has_lse)
      lse[tb * p.lse.stride_b + ts * p.lse.stride_s + (long)head * p.lse.stride_h] = INFINITY;
    if (sub == 0 && p.has_max_logits)
      max_logits[tb * p.max_logits.stride_b + ts * p.max_logits.stride_s +
                 (long)head * p.max_logits.stride_h] = -INFINITY;
    return;
  }
  const float row_lse = m + log(l);
  const float f = p.has_sink ? dsv4_sink_factor(sink[head], row_lse) : 1.0f;
  const float scale = (1.0f / l) * f;
  for (int k = 0; k < DSV4_CL_DIMS_PER_ITEM; ++k) {
    const long at = o_off + sub + DSV4_CL_KEY_CHUNK * k;
    const float v = f == 0.0f ? 0.0f : acc[k] * scale;
    if (p.out_f32)
      out32[at] = v;
    else
      out16[at] = dsv4_f32_to_bf16(v);
  }
  if (sub == 0 && p.has_lse)
    lse[tb * p.lse.stride_b + ts * p.lse.stride_s + (long)head * p.lse.stride_h] = row_lse;
  if (sub == 0 && p.has_max_logits)
    max_logits[tb * p.max_logits.stride_b + ts * p.max_logits.stride_s +
               (long)head * p.max_logits.stride_h] = m;
}

// ---------------------------------------------------------------------------------------------
// Paged mode: one work-item per token builds its SWA row and compressed row (spec 4.2, 4.4, 4.5)
// into the workspace.
// ---------------------------------------------------------------------------------------------
#define DSV4_CL_BATCH_ARGS                                                      \
  __global const int *query_start_loc, __global const int *seq_lens,            \
      __global const int *swa_block_table, __global const int *cmp_block_table, \
      __global const int *slot_mapping, __global const int *topk_indices

DSV4_FN dsv4_cl_batch dsv4_make_batch(__global const int* query_start_loc,
                                      __global const int* seq_lens,
                                      __global const int* swa_block_table,
                                      __global const int* cmp_block_table,
                                      __global const int* slot_mapping,
                                      __global const int* topk_indices) {
  dsv4_cl_batch b;
  b.query_start_loc = query_start_loc;
  b.seq_lens = seq_lens;
  b.swa_block_table = swa_block_table;
  b.cmp_block_table = cmp_block_table;
  b.slot_mapping = slot_mapping;
  b.topk_indices = topk_indices;
  return b;
}

__kernel void dsv4_paged_build(DSV4_CL_BATCH_ARGS, __global int* swa_indices,
                               __global int* swa_lengths, __global int* cmp_indices,
                               __global int* cmp_lengths, const dsv4_cl_paged_params g) {
  const long t = (long)get_global_id(0);
  if (t >= g.num_tokens) return;
  const dsv4_cl_batch b = dsv4_make_batch(query_start_loc, seq_lens, swa_block_table,
                                          cmp_block_table, slot_mapping, topk_indices);
  const dsv4_cl_paged_token k = dsv4_paged_locate(&g, &b, t);
  swa_lengths[t] = dsv4_paged_build_swa_row(&g, &b, k, swa_indices + t * g.window, 1, g.window);
  cmp_lengths[t] =
      g.cmp_width > 0
          ? dsv4_paged_build_cmp_row(&g, &b, k, t, cmp_indices + t * g.cmp_width, 1, g.cmp_width)
          : 0;
}

// ---------------------------------------------------------------------------------------------
// Index export (dsv4_export_indices). Dense formats: one work-item per token writes its rows.
// ---------------------------------------------------------------------------------------------
__kernel void dsv4_export_dense(DSV4_CL_BATCH_ARGS, __global int* swa_indices,
                                __global int* swa_lengths, __global int* cmp_indices,
                                __global int* cmp_lengths, __global int* combined_indices,
                                __global int* combined_lengths, const dsv4_cl_paged_params g,
                                const dsv4_cl_export_params e) {
  const long t = (long)get_global_id(0);
  if (t >= g.num_tokens) return;
  const dsv4_cl_batch b = dsv4_make_batch(query_start_loc, seq_lens, swa_block_table,
                                          cmp_block_table, slot_mapping, topk_indices);
  if (e.format == DSV4_EXPORT_FLASHINFER) {
    const int num_decodes = dsv4_paged_num_decodes(&g, &b);
    const int len = dsv4_paged_build_flashinfer_row(
        &g, &b, t, num_decodes, combined_indices + t * e.combined.row_stride, e.combined.width);
    if (e.combined.has_lengths) combined_lengths[t * e.combined.len_stride] = len;
    return;
  }
  const dsv4_cl_paged_token k = dsv4_paged_locate(&g, &b, t);
  __global int* srow = swa_indices + t * e.swa.row_stride;
  const int swa_len = dsv4_paged_build_swa_row(&g, &b, k, srow, e.swa.col_stride, g.window);
  for (long c = g.window; c < e.swa.width; ++c) srow[c * e.swa.col_stride] = -1;
  if (e.swa.has_lengths) swa_lengths[t * e.swa.len_stride] = swa_len;
  if (!e.cmp.present || g.cmp_width == 0) return;
  __global int* crow = cmp_indices + t * e.cmp.row_stride;
  const int cmp_len = dsv4_paged_build_cmp_row(&g, &b, k, t, crow, e.cmp.col_stride, g.cmp_width);
  for (long c = g.cmp_width; c < e.cmp.width; ++c) crow[c * e.cmp.col_stride] = -1;
  if (e.cmp.has_lengths) cmp_lengths[t * e.cmp.len_stride] = cmp_len;
}

// CSR pass 1: each token's row lengths, stored in indptr[t + 1] until the scan.
__kernel void dsv4_export_csr_lengths(DSV4_CL_BATCH_ARGS, __global int* swa_indptr,
                                      __global int* cmp_indptr, __global int* scratch,
                                      const dsv4_cl_paged_params g, const dsv4_cl_export_params e) {
  const long t = (long)get_global_id(0);
  if (t >= g.num_tokens) return;
  const dsv4_cl_batch b = dsv4_make_batch(query_start_loc, seq_lens, swa_block_table,
                                          cmp_block_table, slot_mapping, topk_indices);
  const dsv4_cl_paged_token k = dsv4_paged_locate(&g, &b, t);
  swa_indptr[(t + 1) * e.swa.indptr_stride] = dsv4_paged_build_swa_row(&g, &b, k, scratch, 0, 0);
  if (e.cmp.present && g.cmp_width > 0)
    cmp_indptr[(t + 1) * e.cmp.indptr_stride] =
        dsv4_paged_build_cmp_row(&g, &b, k, t, scratch, 0, 0);
}

// CSR pass 2: in-place inclusive scan of indptr[1 .. n] by one work-group, indptr[0] = 0.
__kernel __attribute__((reqd_work_group_size(DSV4_CL_SCAN_THREADS, 1, 1))) void
dsv4_export_csr_scan(__global int* indptr, const long stride, const long n) {
  __local int partial[DSV4_CL_SCAN_THREADS];
  const int lid = (int)get_local_id(0);
  const long per = (n + DSV4_CL_SCAN_THREADS - 1) / DSV4_CL_SCAN_THREADS;
  const long begin = 1 + lid * per;
  const long end = min(n + 1, begin + per);
  int sum = 0;
  for (long i = begin; i < end; ++i) sum += indptr[i * stride];
  partial[lid] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    int run = 0;
    for (int i = 0; i < DSV4_CL_SCAN_THREADS; ++i) {
      const int v = partial[i];
      partial[i] = run;
      run += v;
    }
    indptr[0] = 0;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  int run = partial[lid];
  for (long i = begin; i < end; ++i) {
    run += indptr[i * stride];
    indptr[i * stride] = run;
  }
}

// CSR pass 3: each token stores the first `length` entries of its rows at indptr[t].
__kernel void dsv4_export_csr_rows(DSV4_CL_BATCH_ARGS, __global int* swa_indices,
                                   __global int* swa_indptr, __global int* swa_lengths,
                                   __global int* cmp_indices, __global int* cmp_indptr,
                                   __global int* cmp_lengths, const dsv4_cl_paged_params g,
                                   const dsv4_cl_export_params e) {
  const long t = (long)get_global_id(0);
  if (t >= g.num_tokens) return;
  const dsv4_cl_batch b = dsv4_make_batch(query_start_loc, seq_lens, swa_block_table,
                                          cmp_block_table, slot_mapping, topk_indices);
  const dsv4_cl_paged_token k = dsv4_paged_locate(&g, &b, t);
  const long s_start = swa_indptr[t * e.swa.indptr_stride];
  const long s_len = swa_indptr[(t + 1) * e.swa.indptr_stride] - s_start;
  dsv4_paged_build_swa_row(&g, &b, k, swa_indices + s_start * e.swa.col_stride, e.swa.col_stride,
                           s_len);
  if (e.swa.has_lengths) swa_lengths[t * e.swa.len_stride] = (int)s_len;
  if (!e.cmp.present || g.cmp_width == 0) return;
  const long c_start = cmp_indptr[t * e.cmp.indptr_stride];
  const long c_len = cmp_indptr[(t + 1) * e.cmp.indptr_stride] - c_start;
  dsv4_paged_build_cmp_row(&g, &b, k, t, cmp_indices + c_start * e.cmp.col_stride, e.cmp.col_stride,
                           c_len);
  if (e.cmp.has_lengths) cmp_lengths[t * e.cmp.len_stride] = (int)c_len;
}

// ---------------------------------------------------------------------------------------------
// KV writer: one work-item per row; a row whose slot a later row of the call also targets is
// skipped, so the last one wins (spec 12.4). Slots beyond the capacity are skipped (GPU contract).
// ---------------------------------------------------------------------------------------------
__kernel void dsv4_kv_write(__global const uchar* values, __global const int* slots,
                            __global uchar* cache, const dsv4_cl_kv_write_params w) {
  const long r = (long)get_global_id(0);
  if (r >= w.num_rows) return;
  const int slot = slots[r];
  if (slot < 0) return;
  for (long later = r + 1; later < w.num_rows; ++later)
    if (slots[later] == slot) return;
  const long block = slot / w.block_size;
  const long entry = slot % w.block_size;
  if (block >= w.num_blocks) return;
  const long elem = w.values_is_bf16 ? 2 : 4;
  dsv4_quantize_entry((uint)w.layout, cache + block * w.block_stride, w.block_size, entry,
                      values + r * w.values_row_stride * elem, w.values_is_bf16, w.kv_scale);
}

// ---------------------------------------------------------------------------------------------
// dsv4_merge (spec 12.2): one work-group per (token, head); parts combined in index order.
// ---------------------------------------------------------------------------------------------
__kernel __attribute__((reqd_work_group_size(DSV4_CL_MERGE_THREADS, 1, 1))) void dsv4_merge(
    __global const uchar* out_parts, __global const float* lse_parts, __global const float* sink,
    __global ushort* out, __global float* lse, const dsv4_cl_merge_params m) {
  const long row = (long)get_group_id(0);
  const int lid = (int)get_local_id(0);
  const long t = row / m.num_heads;
  const long h = row % m.num_heads;
  __global const float* lse_p = lse_parts + t * m.lse_part_stride_t + h * m.lse_part_stride_h;
  const float merged = dsv4_merged_lse(lse_p, m.lse_part_stride_p, m.num_parts);
  __global ushort* o = out + t * m.out_stride_t + h * m.out_stride_h;
  if (lid == 0 && m.has_lse) lse[t * m.lse_stride_t + h * m.lse_stride_h] = merged;
  const int per = DSV4_HEAD_DIM / DSV4_CL_MERGE_THREADS;
  float acc[DSV4_HEAD_DIM / DSV4_CL_MERGE_THREADS];
  for (int i = 0; i < per; ++i) acc[i] = 0.0f;
  if (merged != INFINITY) {
    for (int part = 0; part < m.num_parts; ++part) {
      const float wgt = dsv4_merge_weight(lse_p[part * m.lse_part_stride_p], merged);
      if (wgt == 0.0f) continue;
      const long off = part * m.part_stride_p + t * m.part_stride_t + h * m.part_stride_h;
      for (int i = 0; i < per; ++i) {
        const long d = i * DSV4_CL_MERGE_THREADS + lid;
        const float v = m.out_parts_f32
                            ? ((__global const float*)out_parts)[off + d]
                            : dsv4_bf16_to_f32(((__global const ushort*)out_parts)[off + d]);
        acc[i] += wgt * v;
      }
    }
    const float f = m.has_sink ? dsv4_sink_factor(sink[h], merged) : 1.0f;
    for (int i = 0; i < per; ++i) acc[i] *= f;
  }
  for (int i = 0; i < per; ++i) o[i * DSV4_CL_MERGE_THREADS + lid] = dsv4_f32_to_bf16(acc[i]);
}
