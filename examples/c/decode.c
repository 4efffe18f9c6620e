/*
 * decode.c — one DeepSeek-V4 decode step in explicit mode, checked against a naive loop.
 *
 * What it shows:
 *   1. an FP8 584 B cache (DSV4_KV_LAYOUT_FP8_V4_584B, 64 entries per block) written with
 *      dsv4_kv_write, which quantises fp32 rows exactly as vLLM's cache insert does;
 *   2. a plan for 16 heads and a 128-wide candidate list per token with per-token lengths
 *      (FlashMLA's indices + topk_length); -1 entries are skipped;
 *   3. dsv4_run with an attention sink, writing out [T, H, 512] bf16 and lse [T, H];
 *   4. a plain loop over the cache bytes (the layout documented in dsv4_types.h) that computes the
 *      same attention in double precision, and the comparison.
 * Exit status 0 when the library and the loop agree.
 */
#include <dsv4/dsv4.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T = 4, H = 16, D = 512, BLOCK = 64, BLOCKS = 4, TOPK = 128 };

static uint32_t rng_state = 12345u;
static double uniform(void) { /* in [-1, 1) */
  rng_state = rng_state * 1664525u + 1013904223u;
  return (double)(rng_state >> 8) / 8388608.0 - 1.0;
}

static uint16_t to_bf16(float x) { /* round to nearest even (no NaN inputs here) */
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static double from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}
static double from_e4m3(uint8_t b) { /* OCP e4m3fn: 4 exponent bits (bias 7), 3 mantissa bits */
  int e = (b >> 3) & 15, m = b & 7;
  double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
  return (b & 0x80) ? -v : v;
}

/* Dims of cache slot `slot` (FP8 584 B layout: data at e*576, UE8M0 scales at BLOCK*576 + e*8). */
static void read_entry(const uint8_t* cache, int64_t block_bytes, int slot, double* k) {
  const uint8_t* base = cache + (int64_t)(slot / BLOCK) * block_bytes;
  const int e = slot % BLOCK;
  const uint8_t* data = base + e * 576;
  const uint8_t* scales = base + BLOCK * 576 + e * 8;
  int d;
  for (d = 0; d < 448; ++d) k[d] = from_e4m3(data[d]) * ldexp(1.0, scales[d / 64] - 127);
  for (d = 0; d < 64; ++d)
    k[448 + d] = from_bf16((uint16_t)(data[448 + 2 * d] | data[449 + 2 * d] << 8));
}

static int fail(const char* what, dsv4_status st) {
  fprintf(stderr, "%s: %s: %s\n", what, dsv4_status_string(st), dsv4_last_error_message());
  return 1;
}

int main(void) {
  static float rows[BLOCKS * BLOCK][D];
  static uint16_t q[T][H][D], out[T][H][D];
  static int32_t slots[BLOCKS * BLOCK], indices[T][TOPK];
  static double k[TOPK][D];
  const int32_t lengths[T] = {128, 100, 37, 1};
  float sink[H], lse[T][H];
  int64_t shape_rows[2] = {BLOCKS * BLOCK, D}, shape_slots[1] = {BLOCKS * BLOCK};
  int64_t shape_cache[2] = {BLOCKS, 0}, shape_q[3] = {T, H, D}, shape_idx[2] = {T, TOPK};
  int64_t shape_len[1] = {T}, shape_sink[1] = {H}, shape_lse[2] = {T, H};
  const dsv4_device cpu = {DSV4_DEVICE_CPU, 0};
  const dsv4_dtype f32 = {DSV4_DTYPE_CODE_FLOAT, 32, 1}, i32 = {DSV4_DTYPE_CODE_INT, 32, 1};
  const dsv4_dtype u8 = {DSV4_DTYPE_CODE_UINT, 8, 1}, bf16 = {DSV4_DTYPE_CODE_BFLOAT, 16, 1};
  dsv4_tensor t_rows, t_slots, t_cache, t_q, t_idx, t_len, t_sink, t_out, t_lse;
  dsv4_kv_layout_info layout;
  dsv4_kv_write_args wa;
  dsv4_plan_options po;
  dsv4_run_args ra;
  dsv4_ctx* ctx = NULL;
  dsv4_plan* plan = NULL;
  uint8_t* cache;
  double scale = 1.0 / sqrt((double)D), max_err = 0, max_lse_err = 0;
  int t, h, i, d, failures = 0;
  dsv4_status st;

  /* Geometry of the FP8 layout for 64-entry blocks (37440 bytes per block). */
  dsv4_kv_layout_info_init(&layout);
  st = dsv4_kv_layout_get_info(DSV4_KV_LAYOUT_FP8_V4_584B, BLOCK, &layout);
  if (st != DSV4_STATUS_OK) return fail("dsv4_kv_layout_get_info", st);
  shape_cache[1] = layout.min_block_stride_bytes;
  cache = (uint8_t*)calloc(BLOCKS, (size_t)layout.min_block_stride_bytes);
  if (cache == NULL) return 1;

  st = dsv4_ctx_create(NULL, &ctx);
  if (st != DSV4_STATUS_OK) return fail("dsv4_ctx_create", st);

  /* 1. Fill every slot of the cache with a random row (as an engine inserts each token's KV). */
  for (i = 0; i < BLOCKS * BLOCK; ++i) {
    slots[i] = i;
    for (d = 0; d < D; ++d) rows[i][d] = (float)uniform();
  }
  t_rows = (dsv4_tensor){rows, cpu, 2, f32, shape_rows, NULL, 0};
  t_slots = (dsv4_tensor){slots, cpu, 1, i32, shape_slots, NULL, 0};
  t_cache = (dsv4_tensor){cache, cpu, 2, u8, shape_cache, NULL, 0};
  dsv4_kv_write_args_init(&wa);
  wa.cache_desc.layout = DSV4_KV_LAYOUT_FP8_V4_584B;
  wa.cache_desc.block_size = BLOCK;
  wa.values = &t_rows;
  wa.slots = &t_slots;
  wa.cache = &t_cache;
  st = dsv4_kv_write(ctx, &wa);
  if (st != DSV4_STATUS_OK) return fail("dsv4_kv_write", st);

  /* 2. Queries, candidate lists (random distinct slots, -1 beyond the length) and sinks. */
  for (t = 0; t < T; ++t) {
    for (h = 0; h < H; ++h)
      for (d = 0; d < D; ++d) q[t][h][d] = to_bf16((float)uniform());
    for (i = 0; i < TOPK; ++i)
      indices[t][i] = i < lengths[t] ? (t * 61 + i * 7) % (BLOCKS * BLOCK) : -1;
  }
  for (h = 0; h < H; ++h) sink[h] = (float)(2.0 * uniform());

  /* 3. Plan and run. */
  dsv4_plan_options_init(&po); /* explicit mode, FP8 584 B main cache with 64-entry blocks */
  po.num_heads = H;
  po.topk = TOPK;
  po.max_tokens = T;
  st = dsv4_plan_create(ctx, &po, &plan);
  if (st != DSV4_STATUS_OK) return fail("dsv4_plan_create", st);
  t_q = (dsv4_tensor){q, cpu, 3, bf16, shape_q, NULL, 0};
  t_out = (dsv4_tensor){out, cpu, 3, bf16, shape_q, NULL, 0};
  t_idx = (dsv4_tensor){indices, cpu, 2, i32, shape_idx, NULL, 0};
  t_len = (dsv4_tensor){(void*)lengths, cpu, 1, i32, shape_len, NULL, 0};
  t_sink = (dsv4_tensor){sink, cpu, 1, f32, shape_sink, NULL, 0};
  t_lse = (dsv4_tensor){lse, cpu, 2, f32, shape_lse, NULL, 0};
  dsv4_run_args_init(&ra);
  ra.q = &t_q;
  ra.swa_cache = &t_cache;
  ra.indices = &t_idx;
  ra.lengths = &t_len;
  ra.attn_sink = &t_sink;
  ra.out = &t_out;
  ra.lse = &t_lse;
  st = dsv4_run(plan, &ra); /* CPU: synchronous; the plan needs no workspace here */
  if (st != DSV4_STATUS_OK) return fail("dsv4_run", st);

  /* 4. The same attention, naively: softmax over the valid candidates plus the sink logit. */
  for (t = 0; t < T; ++t) {
    int n = 0;
    for (i = 0; i < lengths[t]; ++i)
      if (indices[t][i] >= 0)
        read_entry(cache, layout.min_block_stride_bytes, indices[t][i], k[n++]);
    for (h = 0; h < H; ++h) {
      double logit[TOPK], m = -INFINITY, z = 0, lse_ref, factor;
      for (i = 0; i < n; ++i) {
        double s = 0;
        for (d = 0; d < D; ++d) s += from_bf16(q[t][h][d]) * k[i][d];
        logit[i] = s * scale;
        if (logit[i] > m) m = logit[i];
      }
      for (i = 0; i < n; ++i) z += exp(logit[i] - m);
      lse_ref = m + log(z);
      factor = 1.0 / (1.0 + exp(sink[h] - lse_ref)); /* the sink joins the denominator only */
      if (fabs(lse[t][h] - lse_ref) > 1e-4 * fabs(lse_ref) + 1e-5) ++failures;
      if (fabs(lse[t][h] - lse_ref) > max_lse_err) max_lse_err = fabs(lse[t][h] - lse_ref);
      for (d = 0; d < D; ++d) {
        double want = 0, err;
        for (i = 0; i < n; ++i) want += exp(logit[i] - lse_ref) * k[i][d];
        want *= factor;
        err = fabs(from_bf16(out[t][h][d]) - want);
        if (err > max_err) max_err = err;
        if (err > 1e-3 + fabs(want) / 128) ++failures; /* bf16 output: 2^-8 relative rounding */
      }
    }
  }
  printf(
      "decode: %d tokens x %d heads, FP8 cache, lists of %d/%d/%d/%d: max |out err| %.2e, "
      "max |lse err| %.2e, %s\n",
      T, H, (int)lengths[0], (int)lengths[1], (int)lengths[2], (int)lengths[3], max_err,
      max_lse_err, failures == 0 ? "OK" : "MISMATCH");
  dsv4_plan_destroy(plan);
  dsv4_ctx_destroy(ctx);
  free(cache);
  return failures == 0 ? 0 : 1;
}
