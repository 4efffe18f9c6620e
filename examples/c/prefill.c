/*
 * prefill.c — one prefill chunk in explicit mode over a plain bf16 cache, checked against a naive
 * loop.
 *
 * What it shows:
 *   1. the bf16 row layout (DSV4_KV_LAYOUT_BF16): slot s = entry s % B of block s / B, 512 bf16
 *      values at block_base + entry * 1024 — filled here directly, no writer needed;
 *   2. a paged request as the caller sees it: positions 0..103 spread over 16-entry blocks in
 *      shuffled order through a block table; the chunk's 24 query tokens are positions 80..103;
 *   3. one list per query token (s_q > 1): token at position p attends to the sliding window
 *      max(0, p-63) .. p, given as physical slots in a dense [T, 64] matrix with per-token lengths;
 *   4. the optional outputs lse and max_logits (natural log, sink excluded), as FlashMLA's
 *      flash_mla_sparse_fwd returns them.
 * Exit status 0 when the library and the loop agree.
 */
#include <dsv4/dsv4.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

enum { T = 24, H = 8, D = 512, BLOCK = 16, BLOCKS = 8, WIDTH = 64, PREFIX = 80 };

static uint32_t rng_state = 2024u;
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
static int fail(const char* what, dsv4_status st) {
  fprintf(stderr, "%s: %s: %s\n", what, dsv4_status_string(st), dsv4_last_error_message());
  return 1;
}

int main(void) {
  static uint16_t cache[BLOCKS][BLOCK][D]; /* block stride 16 * 1024 bytes (the minimum) */
  static uint16_t q[T][H][D], out[T][H][D];
  static int32_t indices[T][WIDTH], lengths[T];
  static float lse[T][H], max_logits[T][H];
  const int32_t block_table[BLOCKS] = {5, 2, 7, 0, 3, 6, 1, 4}; /* logical -> physical block */
  int64_t shape_cache[3] = {BLOCKS, BLOCK, D}, shape_q[3] = {T, H, D};
  int64_t shape_idx[2] = {T, WIDTH}, shape_len[1] = {T}, shape_th[2] = {T, H};
  const dsv4_device cpu = {DSV4_DEVICE_CPU, 0};
  const dsv4_dtype f32 = {DSV4_DTYPE_CODE_FLOAT, 32, 1}, i32 = {DSV4_DTYPE_CODE_INT, 32, 1};
  const dsv4_dtype bf16 = {DSV4_DTYPE_CODE_BFLOAT, 16, 1};
  dsv4_tensor t_cache, t_q, t_out, t_idx, t_len, t_lse, t_max;
  dsv4_plan_options po;
  dsv4_run_args ra;
  dsv4_ctx* ctx = NULL;
  dsv4_plan* plan = NULL;
  const double scale = 1.0 / sqrt((double)D);
  double max_err = 0, max_lse_err = 0;
  int t, h, i, d, b, e, failures = 0;
  dsv4_status st;

  /* 1. Cache rows for positions 0 .. PREFIX + T - 1 (written by earlier steps and this chunk). */
  for (b = 0; b < BLOCKS; ++b)
    for (e = 0; e < BLOCK; ++e)
      for (d = 0; d < D; ++d) cache[b][e][d] = to_bf16((float)(2.0 * uniform()));

  /* 2-3. Queries and the sliding-window list of each query token, as physical slots. */
  for (t = 0; t < T; ++t) {
    const int p = PREFIX + t, first = p - WIDTH + 1 > 0 ? p - WIDTH + 1 : 0;
    for (h = 0; h < H; ++h)
      for (d = 0; d < D; ++d) q[t][h][d] = to_bf16((float)uniform());
    lengths[t] = p - first + 1;
    for (i = 0; i < WIDTH; ++i) {
      const int pos = first + i;
      indices[t][i] = i < lengths[t] ? block_table[pos / BLOCK] * BLOCK + pos % BLOCK : -1;
    }
  }

  st = dsv4_ctx_create(NULL, &ctx);
  if (st != DSV4_STATUS_OK) return fail("dsv4_ctx_create", st);
  dsv4_plan_options_init(&po);
  po.num_heads = H;
  po.max_tokens = T;
  po.topk = WIDTH;
  po.swa_cache.layout = DSV4_KV_LAYOUT_BF16;
  po.swa_cache.block_size = BLOCK;
  st = dsv4_plan_create(ctx, &po, &plan);
  if (st != DSV4_STATUS_OK) return fail("dsv4_plan_create", st);

  t_cache = (dsv4_tensor){cache, cpu, 3, bf16, shape_cache, NULL, 0};
  t_q = (dsv4_tensor){q, cpu, 3, bf16, shape_q, NULL, 0};
  t_out = (dsv4_tensor){out, cpu, 3, bf16, shape_q, NULL, 0};
  t_idx = (dsv4_tensor){indices, cpu, 2, i32, shape_idx, NULL, 0};
  t_len = (dsv4_tensor){lengths, cpu, 1, i32, shape_len, NULL, 0};
  t_lse = (dsv4_tensor){lse, cpu, 2, f32, shape_th, NULL, 0};
  t_max = (dsv4_tensor){max_logits, cpu, 2, f32, shape_th, NULL, 0};
  dsv4_run_args_init(&ra);
  ra.q = &t_q;
  ra.swa_cache = &t_cache;
  ra.indices = &t_idx;
  ra.lengths = &t_len;
  ra.out = &t_out;
  ra.lse = &t_lse;
  ra.max_logits = &t_max;
  st = dsv4_run(plan, &ra); /* no sink: attn_sink NULL */
  if (st != DSV4_STATUS_OK) return fail("dsv4_run", st);

  /* 4. Naive check: plain softmax attention of every token over its window. */
  for (t = 0; t < T; ++t) {
    for (h = 0; h < H; ++h) {
      double logit[WIDTH], m = -INFINITY, z = 0, lse_ref;
      for (i = 0; i < lengths[t]; ++i) {
        const uint16_t* k = cache[indices[t][i] / BLOCK][indices[t][i] % BLOCK];
        double s = 0;
        for (d = 0; d < D; ++d) s += from_bf16(q[t][h][d]) * from_bf16(k[d]);
        logit[i] = s * scale;
        if (logit[i] > m) m = logit[i];
      }
      for (i = 0; i < lengths[t]; ++i) z += exp(logit[i] - m);
      lse_ref = m + log(z);
      if (fabs(lse[t][h] - lse_ref) > 1e-4 * fabs(lse_ref) + 1e-5) ++failures;
      if (fabs(max_logits[t][h] - m) > 1e-4 * fabs(m) + 1e-5) ++failures;
      if (fabs(lse[t][h] - lse_ref) > max_lse_err) max_lse_err = fabs(lse[t][h] - lse_ref);
      for (d = 0; d < D; ++d) {
        double want = 0, err;
        for (i = 0; i < lengths[t]; ++i)
          want += exp(logit[i] - lse_ref) *
                  from_bf16(cache[indices[t][i] / BLOCK][indices[t][i] % BLOCK][d]);
        err = fabs(from_bf16(out[t][h][d]) - want);
        if (err > max_err) max_err = err;
        if (err > 1e-3 + fabs(want) / 128) ++failures;
      }
    }
  }
  printf(
      "prefill: %d query tokens (positions %d..%d) x %d heads, bf16 cache, window %d: "
      "max |out err| %.2e, max |lse err| %.2e, %s\n",
      T, PREFIX, PREFIX + T - 1, H, WIDTH, max_err, max_lse_err, failures == 0 ? "OK" : "MISMATCH");
  dsv4_plan_destroy(plan);
  dsv4_ctx_destroy(ctx);
  return failures == 0 ? 0 : 1;
}
