// The shared kernel maths of backends/common (codec.h, layout.h, index.h, paged_index.h,
// softmax.h) in OpenCL C, which cannot include those C++ headers. Statement for statement the same
// arithmetic; tests/opencl runs both on the same inputs through PoCL and requires equal bits
// (every codec input, every layout's dequantisation and quantisation, the paged builders on
// garbage batches). Change one, change the other.

#define DSV4_FN static inline

// ---------------------------------------------------------------------------------------------
// codec.h
// ---------------------------------------------------------------------------------------------
DSV4_FN float dsv4_bf16_to_f32(ushort h) { return as_float(((uint)h) << 16); }

DSV4_FN ushort dsv4_f32_to_bf16(float x) {
  uint u = as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (ushort)(u >> 16);
}

DSV4_FN float dsv4_round_to_bf16(float x) { return dsv4_bf16_to_f32(dsv4_f32_to_bf16(x)); }

DSV4_FN float dsv4_fp16_to_f32(ushort h) {
  const uint sign = ((uint)(h & 0x8000u)) << 16;
  const uint ex = (h >> 10) & 0x1fu;
  const uint man = h & 0x3ffu;
  if (ex == 0x1fu) return as_float(sign | 0x7f800000u | (man << 13));
  if (ex == 0) {
    const float mag = (float)man * (1.0f / 16777216.0f);
    return as_float(as_uint(mag) | sign);
  }
  return as_float(sign | ((ex + 112u) << 23) | (man << 13));
}

DSV4_FN ushort dsv4_f32_to_fp16(float x) {
  const uint u = as_uint(x);
  const ushort sign = (ushort)((u >> 16) & 0x8000u);
  const uint a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (ushort)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (ushort)(sign | 0x7c00u);
  if (a < 0x38800000u) {
    const float v = as_float(a) * 16777216.0f;
    uint i = (uint)v;
    const float frac = v - (float)i;
    if (frac > 0.5f || (frac == 0.5f && (i & 1u))) ++i;
    return (ushort)(sign | i);
  }
  const uint r = a + 0xfffu + ((a >> 13) & 1u);
  return (ushort)(sign | (((r >> 23) - 112u) << 10) | ((r >> 13) & 0x3ffu));
}

DSV4_FN float dsv4_fp8_e4m3_to_f32(uchar b) {
  const uint sign = ((uint)(b & 0x80u)) << 24;
  const uint ex = (b >> 3) & 0xfu;
  const uint man = b & 0x7u;
  if (ex == 0xfu && man == 0x7u) return as_float(sign | 0x7fc00000u);
  if (ex == 0) {
    const float mag = (float)man * (1.0f / 512.0f);
    return as_float(as_uint(mag) | sign);
  }
  return as_float(sign | ((ex + 120u) << 23) | (man << 20));
}

DSV4_FN float dsv4_fp8_e4m3fnuz_to_f32(uchar b) {
  if (b == 0x80u) return as_float(0x7fc00000u);
  const uint sign = ((uint)(b & 0x80u)) << 24;
  const uint ex = (b >> 3) & 0xfu;
  const uint man = b & 0x7u;
  if (ex == 0) {
    const float mag = (float)man * (1.0f / 1024.0f);
    return as_float(as_uint(mag) | sign);
  }
  return as_float(sign | ((ex + 119u) << 23) | (man << 20));
}

DSV4_FN float dsv4_fp8_to_f32(uchar b, int fnuz) {
  return fnuz ? dsv4_fp8_e4m3fnuz_to_f32(b) : dsv4_fp8_e4m3_to_f32(b);
}

DSV4_FN uchar dsv4_f32_to_fp8_e4m3(float x) {
  const uint u = as_uint(x);
  const uchar sign = (uchar)((u >> 24) & 0x80u);
  const uint a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uchar)(sign | 0x7fu);
  if (a >= 0x43e00000u) return (uchar)(sign | 0x7eu);
  if (a < 0x3c800000u) {
    const float v = as_float(a) * 512.0f;
    uint i = (uint)v;
    const float frac = v - (float)i;
    if (frac > 0.5f || (frac == 0.5f && (i & 1u))) ++i;
    return (uchar)(sign | i);
  }
  const uint r = a + 0x7ffffu + ((a >> 20) & 1u);
  const uint ex = (r >> 23) - 120u;
  const uint man = (r >> 20) & 0x7u;
  if (ex > 15u || (ex == 15u && man == 7u)) return (uchar)(sign | 0x7eu);
  return (uchar)(sign | (ex << 3) | man);
}

DSV4_FN float dsv4_ue8m0_to_f32(uchar b) {
  if (b == 0xffu) return as_float(0x7fc00000u);
  if (b == 0) return as_float(0x00400000u);
  return as_float(((uint)b) << 23);
}

DSV4_FN float dsv4_exp2_int(int e) { return as_float(((uint)(e + 127)) << 23); }

DSV4_FN int dsv4_ceil_log2(float v) {
  const uint u = as_uint(v);
  int e = (int)((u >> 23) & 0xffu);
  uint man = u & 0x7fffffu;
  if (e == 0) {
    int shift = 0;
    while ((man & 0x800000u) == 0) {
      man <<= 1;
      ++shift;
    }
    e = 1 - shift;
    man &= 0x7fffffu;
  }
  return (e - 127) + (man != 0 ? 1 : 0);
}

// ---------------------------------------------------------------------------------------------
// layout.h
// ---------------------------------------------------------------------------------------------
#define DSV4_HEAD_DIM 512
#define DSV4_NOPE_DIM 448
#define DSV4_ROPE_DIM 64
#define DSV4_V4_TILE_DIM 64
#define DSV4_V4_TILES 7
#define DSV4_V4_DATA_BYTES 576
#define DSV4_V4_SCALE_BYTES 8
#define DSV4_V32_TOKEN_BYTES 656
#define DSV4_V32_TILE_DIM 128
#define DSV4_V32_TILES 4
#define DSV4_FP8_MAX 448.0f

DSV4_FN int dsv4_layout_bytes_per_token(uint layout) {
  switch (layout) {
    case DSV4_KV_LAYOUT_BF16:
    case DSV4_KV_LAYOUT_FP16:
      return 2 * DSV4_HEAD_DIM;
    case DSV4_KV_LAYOUT_FP8_V4_584B:
      return 584;
    case DSV4_KV_LAYOUT_FP8_V32_656B:
      return DSV4_V32_TOKEN_BYTES;
    case DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR:
      return DSV4_HEAD_DIM;
    default:
      return 0;
  }
}

DSV4_FN long dsv4_entry_data_offset(uint layout, long e) {
  return layout == DSV4_KV_LAYOUT_FP8_V4_584B ? e * DSV4_V4_DATA_BYTES
                                              : e * dsv4_layout_bytes_per_token(layout);
}

DSV4_FN long dsv4_v4_scale_offset(long block_size, long e) {
  return block_size * DSV4_V4_DATA_BYTES + e * DSV4_V4_SCALE_BYTES;
}

DSV4_FN ushort dsv4_load_u16(__global const uchar* p) { return (ushort)(p[0] | (p[1] << 8)); }

DSV4_FN float dsv4_load_f32(__global const uchar* p) {
  return as_float((uint)p[0] | ((uint)p[1] << 8) | ((uint)p[2] << 16) | ((uint)p[3] << 24));
}

// Dimension d of entry e (dequant_entry of layout.h, one value at a time): every FP8 product
// rounded to bf16; the per-tensor layout returns the raw e4m3 value.
DSV4_FN float dsv4_dequant_dim(uint layout, uint flags, __global const uchar* block_base,
                               long block_size, long e, int d) {
  __global const uchar* p = block_base + dsv4_entry_data_offset(layout, e);
  const int fnuz = (flags & DSV4_KV_CACHE_FLAG_FP8_FNUZ) != 0;
  switch (layout) {
    case DSV4_KV_LAYOUT_BF16:
      return dsv4_bf16_to_f32(dsv4_load_u16(p + 2 * d));
    case DSV4_KV_LAYOUT_FP16:
      return dsv4_fp16_to_f32(dsv4_load_u16(p + 2 * d));
    case DSV4_KV_LAYOUT_FP8_V4_584B: {
      if (d >= DSV4_NOPE_DIM)
        return dsv4_bf16_to_f32(dsv4_load_u16(p + DSV4_NOPE_DIM + 2 * (d - DSV4_NOPE_DIM)));
      __global const uchar* sc = block_base + dsv4_v4_scale_offset(block_size, e);
      const float s = dsv4_ue8m0_to_f32(sc[d / DSV4_V4_TILE_DIM]);
      return dsv4_round_to_bf16(dsv4_fp8_to_f32(p[d], fnuz) * s);
    }
    case DSV4_KV_LAYOUT_FP8_V32_656B: {
      if (d >= DSV4_HEAD_DIM)
        return dsv4_bf16_to_f32(
            dsv4_load_u16(p + DSV4_HEAD_DIM + 4 * DSV4_V32_TILES + 2 * (d - DSV4_HEAD_DIM)));
      const float s = dsv4_load_f32(p + DSV4_HEAD_DIM + 4 * (d / DSV4_V32_TILE_DIM));
      return dsv4_round_to_bf16(dsv4_fp8_to_f32(p[d], fnuz) * s);
    }
    case DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR:
      return dsv4_fp8_to_f32(p[d], fnuz);
    default:
      return 0.0f;
  }
}

DSV4_FN void dsv4_store_u16(__global uchar* p, ushort h) {
  p[0] = (uchar)(h & 0xff);
  p[1] = (uchar)(h >> 8);
}

// Value d of a kv_write source row (bf16 or fp32).
DSV4_FN float dsv4_row_value(__global const uchar* row, int is_bf16, int d) {
  return is_bf16 ? dsv4_bf16_to_f32(((__global const ushort*)row)[d])
                 : ((__global const float*)row)[d];
}

// quantize_entry of layout.h: one row (bf16 or fp32 values) into entry e, as vLLM's writers do.
DSV4_FN void dsv4_quantize_entry(uint layout, __global uchar* block_base, long block_size, long e,
                                 __global const uchar* row, int is_bf16, float kv_scale) {
  __global uchar* p = block_base + dsv4_entry_data_offset(layout, e);
  switch (layout) {
    case DSV4_KV_LAYOUT_BF16:
      for (int d = 0; d < DSV4_HEAD_DIM; ++d)
        dsv4_store_u16(p + 2 * d, dsv4_f32_to_bf16(dsv4_row_value(row, is_bf16, d)));
      break;
    case DSV4_KV_LAYOUT_FP16:
      for (int d = 0; d < DSV4_HEAD_DIM; ++d)
        dsv4_store_u16(p + 2 * d, dsv4_f32_to_fp16(dsv4_row_value(row, is_bf16, d)));
      break;
    case DSV4_KV_LAYOUT_FP8_V4_584B: {
      __global uchar* sc = block_base + dsv4_v4_scale_offset(block_size, e);
      for (int k = 0; k < DSV4_V4_TILES; ++k) {
        float amax = 0.0f;
        for (int j = 0; j < DSV4_V4_TILE_DIM; ++j) {
          const float a =
              dsv4_round_to_bf16(dsv4_row_value(row, is_bf16, k * DSV4_V4_TILE_DIM + j));
          const float m = a < 0 ? -a : a;
          amax = m > amax ? m : amax;
        }
        amax = amax > 1e-4f ? amax : 1e-4f;
        int ex = dsv4_ceil_log2(amax / DSV4_FP8_MAX);
        int byte = ex + 127;
        byte = byte < 0 ? 0 : (byte > 255 ? 255 : byte);
        ex = byte - 127;
        const float inv = (ex >= -126 && ex <= 127) ? dsv4_exp2_int(-ex) : 0.0f;
        for (int j = 0; j < DSV4_V4_TILE_DIM; ++j) {
          float x =
              dsv4_round_to_bf16(dsv4_row_value(row, is_bf16, k * DSV4_V4_TILE_DIM + j)) * inv;
          x = x > DSV4_FP8_MAX ? DSV4_FP8_MAX : (x < -DSV4_FP8_MAX ? -DSV4_FP8_MAX : x);
          p[k * DSV4_V4_TILE_DIM + j] = dsv4_f32_to_fp8_e4m3(x);
        }
        sc[k] = (uchar)byte;
      }
      sc[DSV4_V4_TILES] = 0;
      for (int j = 0; j < DSV4_ROPE_DIM; ++j)
        dsv4_store_u16(p + DSV4_NOPE_DIM + 2 * j,
                       dsv4_f32_to_bf16(dsv4_row_value(row, is_bf16, DSV4_NOPE_DIM + j)));
      break;
    }
    case DSV4_KV_LAYOUT_FP8_V32_656B: {
      for (int k = 0; k < DSV4_V32_TILES; ++k) {
        float amax = 0.0f;
        for (int j = 0; j < DSV4_V32_TILE_DIM; ++j) {
          const float a =
              dsv4_round_to_bf16(dsv4_row_value(row, is_bf16, k * DSV4_V32_TILE_DIM + j));
          const float m = a < 0 ? -a : a;
          amax = m > amax ? m : amax;
        }
        float t = amax / DSV4_FP8_MAX;
        t = t > 1e-4f ? t : 1e-4f;
        const int ex = dsv4_ceil_log2(t);
        const float scale = dsv4_exp2_int(ex);
        const float inv = dsv4_exp2_int(-ex);
        for (int j = 0; j < DSV4_V32_TILE_DIM; ++j) {
          float x =
              dsv4_round_to_bf16(dsv4_row_value(row, is_bf16, k * DSV4_V32_TILE_DIM + j)) * inv;
          x = x > DSV4_FP8_MAX ? DSV4_FP8_MAX : (x < -DSV4_FP8_MAX ? -DSV4_FP8_MAX : x);
          p[k * DSV4_V32_TILE_DIM + j] = dsv4_f32_to_fp8_e4m3(x);
        }
        const uint bits = as_uint(scale);
        for (int b = 0; b < 4; ++b) p[DSV4_HEAD_DIM + 4 * k + b] = (uchar)(bits >> (8 * b));
      }
      for (int j = 0; j < DSV4_ROPE_DIM; ++j)
        dsv4_store_u16(p + DSV4_HEAD_DIM + 4 * DSV4_V32_TILES + 2 * j,
                       dsv4_f32_to_bf16(dsv4_row_value(row, is_bf16, DSV4_HEAD_DIM + j)));
      break;
    }
    case DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR: {
      const float inv = 1.0f / kv_scale;
      for (int d = 0; d < DSV4_HEAD_DIM; ++d) {
        float x = dsv4_row_value(row, is_bf16, d) * inv;
        x = x > DSV4_FP8_MAX ? DSV4_FP8_MAX : (x < -DSV4_FP8_MAX ? -DSV4_FP8_MAX : x);
        p[d] = dsv4_f32_to_fp8_e4m3(x);
      }
      break;
    }
    default:
      break;
  }
}

// ---------------------------------------------------------------------------------------------
// index.h: candidate lists (dense or CSR, optional length cap) and the validity rule.
// ---------------------------------------------------------------------------------------------
// Positions of token t that may hold candidates; a CSR row is clamped to the flat array (device
// values are never validated, so nothing may be read outside it).
DSV4_FN long dsv4_list_row_count(dsv4_cl_list l, __global const int* indptr,
                                 __global const int* lengths, long t, long seq_q) {
  if (!l.present) return 0;
  long n;
  if (l.format == DSV4_INDEX_CSR) {
    const long begin = indptr[t];
    long end = indptr[t + 1];
    if (begin < 0 || begin > l.num_entries) return 0;
    end = end > l.num_entries ? l.num_entries : end;
    n = end - begin;
  } else {
    n = l.width;
  }
  if (l.has_lengths) {
    const long len = lengths[(t / seq_q) * l.len_stride_b + (t % seq_q) * l.len_stride_s];
    n = len < n ? len : n;
  }
  return n < 0 ? 0 : n;
}

DSV4_FN int dsv4_list_entry(dsv4_cl_list l, __global const int* indices, __global const int* indptr,
                            long t, long seq_q, long i) {
  if (l.format == DSV4_INDEX_CSR) return indices[(long)indptr[t] + i];
  return indices[(t / seq_q) * l.stride_b + (t % seq_q) * l.stride_s + i * l.stride_k];
}

DSV4_FN int dsv4_slot_is_valid(long idx, dsv4_cl_cache c) {
  return c.present && idx >= 0 && idx < c.num_blocks * (long)c.block_size;
}

// ---------------------------------------------------------------------------------------------
// paged_index.h: the list builders of spec section 4. `limit` (>= 0) is the number of leading
// entries stored (the full width for dense rows; a CSR row stores only its length).
// ---------------------------------------------------------------------------------------------
#define DSV4_C128_RATIO 128
#define DSV4_C4_RATIO 4

typedef struct dsv4_cl_batch {
  __global const int* query_start_loc;
  __global const int* seq_lens;
  __global const int* swa_block_table;
  __global const int* cmp_block_table;
  __global const int* slot_mapping;
  __global const int* topk_indices;
} dsv4_cl_batch;

typedef struct dsv4_cl_paged_token {
  int req;
  int pos;
  int valid;
} dsv4_cl_paged_token;

DSV4_FN int dsv4_paged_request_of(const dsv4_cl_paged_params* g, const dsv4_cl_batch* b, long t) {
  int lo = 0;
  int hi = g->num_reqs;
  if (hi <= 0 || t < b->query_start_loc[0] || t >= b->query_start_loc[hi]) return -1;
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    if (b->query_start_loc[mid] <= t) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

DSV4_FN dsv4_cl_paged_token dsv4_paged_locate(const dsv4_cl_paged_params* g, const dsv4_cl_batch* b,
                                              long t) {
  dsv4_cl_paged_token k;
  k.req = -1;
  k.pos = -1;
  k.valid = 0;
  const int r = dsv4_paged_request_of(g, b, t);
  if (r < 0) return k;
  const long first = b->query_start_loc[r];
  const long qlen = (long)b->query_start_loc[r + 1] - first;
  const long pos = b->seq_lens[r] - qlen + (t - first);
  k.req = r;
  k.valid = b->slot_mapping[t] >= 0 && pos >= 0 && pos <= INT_MAX;
  k.pos = k.valid ? (int)pos : -1;
  return k;
}

DSV4_FN int dsv4_paged_num_decodes(const dsv4_cl_paged_params* g, const dsv4_cl_batch* b) {
  for (int r = 0; r < g->num_reqs; ++r) {
    const long query_len = (long)b->query_start_loc[r + 1] - b->query_start_loc[r];
    if (query_len > g->decode_threshold) return r;
  }
  return g->num_reqs;
}

DSV4_FN int dsv4_paged_slot(__global const int* bt_row, int bt_cols, long i, int block_size,
                            long capacity) {
  if (i < 0) return -1;
  const long col = i / block_size;
  if (col >= bt_cols) return -1;
  const long slot = (long)bt_row[col] * block_size + i % block_size;
  return (slot >= 0 && slot < capacity && slot <= INT_MAX) ? (int)slot : -1;
}

DSV4_FN long dsv4_paged_swa_start(long pos, int window) {
  const long s = pos - window + 1;
  return s > 0 ? s : 0;
}

DSV4_FN int dsv4_paged_build_swa_row(const dsv4_cl_paged_params* g, const dsv4_cl_batch* b,
                                     dsv4_cl_paged_token k, __global int* row, long stride,
                                     long limit) {
  int len = 0;
  long start = 0;
  __global const int* bt_row = b->swa_block_table;
  if (k.valid) {
    start = dsv4_paged_swa_start(k.pos, g->window);
    len = (int)(k.pos - start + 1);
    bt_row = b->swa_block_table + (long)k.req * g->swa_bt_stride;
  }
  for (int j = 0; j < g->window && j < limit; ++j) {
    row[j * stride] = j < len ? dsv4_paged_slot(bt_row, g->swa_bt_cols, start + j,
                                                g->swa_block_size, g->swa_capacity)
                              : -1;
  }
  return len;
}

DSV4_FN long dsv4_paged_visible_entries(const dsv4_cl_paged_params* g, long pos) {
  return g->ratio > 1 ? (pos + 1) / g->ratio : 0;
}

DSV4_FN int dsv4_paged_build_cmp_row(const dsv4_cl_paged_params* g, const dsv4_cl_batch* b,
                                     dsv4_cl_paged_token k, long t, __global int* row, long stride,
                                     long limit) {
  int len = 0;
  if (!k.valid || g->ratio <= 1) {
    for (int i = 0; i < g->cmp_width && i < limit; ++i) row[i * stride] = -1;
    return 0;
  }
  __global const int* bt_row = b->cmp_block_table + (long)k.req * g->cmp_bt_stride;
  const long visible = dsv4_paged_visible_entries(g, k.pos);
  if (g->ratio == DSV4_C4_RATIO) {
    __global const int* local_row = b->topk_indices + t * g->topk_stride;
    for (int i = 0; i < g->cmp_width; ++i) {
      const int l = local_row[i];
      int slot = -1;
      if (l >= 0) {
        ++len;
        if (l < visible)
          slot = dsv4_paged_slot(bt_row, g->cmp_bt_cols, l, g->cmp_block_size, g->cmp_capacity);
      }
      if (i < limit) row[i * stride] = slot;
    }
    return len;
  }
  const long n = visible < g->cmp_width ? visible : g->cmp_width;
  for (int i = 0; i < g->cmp_width && i < limit; ++i) {
    row[i * stride] =
        i < n ? dsv4_paged_slot(bt_row, g->cmp_bt_cols, i, g->cmp_block_size, g->cmp_capacity) : -1;
  }
  return (int)n;
}

// paged_build_flashinfer_row: the FlashInfer combined row of token t (spec 4.9).
DSV4_FN int dsv4_paged_build_flashinfer_row(const dsv4_cl_paged_params* g, const dsv4_cl_batch* b,
                                            long t, int num_decodes, __global int* row,
                                            long width) {
  const dsv4_cl_paged_token k = dsv4_paged_locate(g, b, t);
  dsv4_paged_build_swa_row(g, b, k, row, 1, g->window);
  const int cmp_len =
      g->cmp_width > 0 ? dsv4_paged_build_cmp_row(g, b, k, t, row + g->window, 1, g->cmp_width) : 0;
  long keep = g->cmp_width;
  int len = g->window;
  if (!k.valid) {
    keep = 0;
  } else if (k.req < num_decodes || g->ratio == DSV4_C128_RATIO) {
    len = g->window + cmp_len;
  } else {
    const long visible = dsv4_paged_visible_entries(g, k.pos);
    keep = visible < g->cmp_width ? visible : g->cmp_width;
    len = (int)(g->window + keep);
  }
  for (long c = g->window + keep; c < width; ++c) row[c] = -1;
  return len;
}

// ---------------------------------------------------------------------------------------------
// softmax.h
// ---------------------------------------------------------------------------------------------
DSV4_FN float dsv4_sink_factor(float sink, float lse) {
  if (sink == -INFINITY) return 1.0f;
  return 1.0f / (1.0f + exp(sink - lse));
}

DSV4_FN float dsv4_merged_lse(__global const float* lse, long stride, int parts) {
  float m = -INFINITY;
  int any = 0;
  for (int p = 0; p < parts; ++p) {
    const float l = lse[p * stride];
    if (l != l) return l;
    if (l == INFINITY || l == -INFINITY) continue;
    m = l > m ? l : m;
    any = 1;
  }
  if (!any) return INFINITY;
  float sum = 0.0f;
  for (int p = 0; p < parts; ++p) {
    const float l = lse[p * stride];
    if (l != INFINITY && l != -INFINITY) sum += exp(l - m);
  }
  return m + log(sum);
}

DSV4_FN float dsv4_merge_weight(float lse_part, float lse) {
  if (lse_part == INFINITY || lse_part == -INFINITY) return 0.0f;
  return exp(lse_part - lse);
}
