/*
 * A plain C program that uses libdsv4 the way an FFI host does: dlopen() the library by path,
 * dlsym() every function it needs, run one small decode on the CPU backend and compare with a naive
 * double loop written here (independent of the library and of backends/common).
 *
 *   dlopen_decode <path to libdsv4.so.0> [seed]
 *
 * Case: FP8 584 B cache (64-entry block) filled by dsv4_kv_write with 40 random keys at random
 * slots, 8 heads, 2 tokens, dense indices of width 48 (shuffled keys, -1 padding, a length cap on
 * token 1), an attention sink. Exit 0 only if out (bf16) and lse match the reference within 1e-2
 * relative.
 */
#include <dlfcn.h>
#include <dsv4/dsv4.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { H = 8, D = 512, T = 2, KEYS = 40, WIDTH = 48, BLOCK = 64, ENTRY = 576 };

/* ----------------------------------------------------------------------------- the library */
static struct {
  dsv4_status (*ctx_options_init)(dsv4_ctx_options*, size_t);
  dsv4_status (*ctx_create)(const dsv4_ctx_options*, dsv4_ctx**);
  void (*ctx_destroy)(dsv4_ctx*);
  dsv4_status (*plan_options_init)(dsv4_plan_options*, size_t);
  dsv4_status (*plan_create)(dsv4_ctx*, const dsv4_plan_options*, dsv4_plan**);
  void (*plan_destroy)(dsv4_plan*);
  dsv4_status (*plan_get_workspace_size)(const dsv4_plan*, size_t*);
  dsv4_status (*run_args_init)(dsv4_run_args*, size_t);
  dsv4_status (*run)(const dsv4_plan*, const dsv4_run_args*);
  dsv4_status (*kv_write_args_init)(dsv4_kv_write_args*, size_t);
  dsv4_status (*kv_write)(dsv4_ctx*, const dsv4_kv_write_args*);
  dsv4_status (*kv_layout_info_init)(dsv4_kv_layout_info*, size_t);
  dsv4_status (*kv_layout_get_info)(uint32_t, int32_t, dsv4_kv_layout_info*);
  const char* (*last_error_message)(void);
  const char* (*status_string)(dsv4_status);
} lib;

/* dlsym returns an object pointer; copy its bits into the function pointer (POSIX guarantees it).
 */
static int resolve(void* handle, const char* name, void* function_pointer, size_t size) {
  void* symbol = dlsym(handle, name);
  if (symbol == NULL) {
    fprintf(stderr, "dlsym(%s): %s\n", name, dlerror());
    return 0;
  }
  memcpy(function_pointer, &symbol, size);
  return 1;
}
#define RESOLVE(field) resolve(handle, "dsv4_" #field, &lib.field, sizeof(lib.field))

#define CHECK(call)                                                                   \
  do {                                                                                \
    dsv4_status check_status_ = (call);                                               \
    if (check_status_ != DSV4_STATUS_OK) {                                            \
      fprintf(stderr, "%s failed: %s: %s\n", #call, lib.status_string(check_status_), \
              lib.last_error_message());                                              \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

/* ---------------------------------------------------------------------- independent codecs */
static uint64_t rng_state;
static double uniform(double lo, double hi) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return lo + (hi - lo) * (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static uint16_t float_to_bf16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, 4);
  return (uint16_t)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

static double bf16_to_double(uint16_t value) {
  uint32_t bits = (uint32_t)value << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static double e4m3fn_to_double(uint8_t byte) {
  const int sign = byte >> 7, exponent = (byte >> 3) & 15, mantissa = byte & 7;
  double magnitude;
  if (exponent == 15 && mantissa == 7) return NAN;
  if (exponent == 0)
    magnitude = ldexp(mantissa / 8.0, -6);
  else
    magnitude = ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

/* Key of entry e in a 584 B block (spec 3.2): 448 e4m3 + 64 bf16 at e*576; 7 UE8M0 scales at
 * B*576+e*8. */
static void dequantize_entry(const uint8_t* block, int e, double* key) {
  const uint8_t* data = block + (size_t)e * ENTRY;
  const uint8_t* scales = block + (size_t)BLOCK * ENTRY + (size_t)e * 8;
  int d;
  for (d = 0; d < 448; ++d) key[d] = e4m3fn_to_double(data[d]) * ldexp(1.0, scales[d / 64] - 127);
  for (d = 0; d < 64; ++d)
    key[448 + d] = bf16_to_double((uint16_t)(data[448 + 2 * d] | (data[449 + 2 * d] << 8)));
}

static int64_t dims3[3], dims2[2], dims1[1];
static dsv4_tensor tensor(void* data, int ndim, const int64_t* shape, int64_t* storage,
                          uint8_t code, uint8_t bits) {
  dsv4_tensor t;
  int i;
  memset(&t, 0, sizeof(t));
  for (i = 0; i < ndim; ++i) storage[i] = shape[i];
  t.data = data;
  t.device.device_type = DSV4_DEVICE_CPU;
  t.ndim = ndim;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  t.shape = storage;
  return t;
}

int main(int argc, char** argv) {
  void* handle;
  dsv4_ctx_options ctx_options;
  dsv4_ctx* ctx = NULL;
  dsv4_plan_options plan_options;
  dsv4_plan* plan = NULL;
  dsv4_kv_layout_info layout;
  dsv4_kv_write_args write;
  dsv4_run_args args;
  static float values[KEYS][D];
  static uint8_t cache[37440];
  static uint16_t q[T][H][D], out[T][H][D];
  static float lse[T][H], sink[H];
  static int32_t slots[KEYS], indices[T][WIDTH], lengths[T];
  static double keys[KEYS][D];
  int64_t s_values[2], s_slots[1], s_cache[2], s_q[3], s_out[3], s_lse[2], s_sink[1], s_idx[2],
      s_len[1];
  dsv4_tensor t_values, t_slots, t_cache, t_q, t_out, t_lse, t_sink, t_idx, t_len;
  size_t workspace_bytes = 0;
  void* workspace = NULL;
  int used[BLOCK] = {0};
  int t, h, i, d, k, failures = 0;
  double worst = 0.0;
  unsigned long seed;

  if (argc < 2) {
    fprintf(stderr, "usage: %s <libdsv4.so.0> [seed]\n", argv[0]);
    return 2;
  }
  seed = argc > 2 ? strtoul(argv[2], NULL, 10)
                  : (unsigned long)time(NULL) ^ ((unsigned long)getpid() << 16);
  rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
  printf("seed %lu\n", seed);

  handle = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    fprintf(stderr, "dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  if (!(RESOLVE(ctx_options_init) && RESOLVE(ctx_create) && RESOLVE(ctx_destroy) &&
        RESOLVE(plan_options_init) && RESOLVE(plan_create) && RESOLVE(plan_destroy) &&
        RESOLVE(plan_get_workspace_size) && RESOLVE(run_args_init) && RESOLVE(run) &&
        RESOLVE(kv_write_args_init) && RESOLVE(kv_write) && RESOLVE(kv_layout_info_init) &&
        RESOLVE(kv_layout_get_info) && RESOLVE(last_error_message) && RESOLVE(status_string)))
    return 1;

  CHECK(lib.kv_layout_info_init(&layout, sizeof layout));
  CHECK(lib.kv_layout_get_info(DSV4_KV_LAYOUT_FP8_V4_584B, BLOCK, &layout));
  if (layout.min_block_stride_bytes != (int64_t)sizeof(cache)) {
    fprintf(stderr, "584B block of 64 entries: %lld bytes, expected %zu\n",
            (long long)layout.min_block_stride_bytes, sizeof(cache));
    return 1;
  }

  CHECK(lib.ctx_options_init(&ctx_options, sizeof ctx_options));
  ctx_options.backend = "cpu";
  CHECK(lib.ctx_create(&ctx_options, &ctx));

  /* Keys: random rows with a different magnitude per 64-dim tile, at distinct random slots. */
  for (k = 0; k < KEYS; ++k) {
    int slot;
    do slot = (int)uniform(0, BLOCK);
    while (slot >= BLOCK || used[slot]);
    used[slot] = 1;
    slots[k] = slot;
    for (d = 0; d < D; ++d) values[k][d] = (float)(uniform(-1, 1) * (0.25 + (d / 64) * 0.5));
  }
  memset(cache, 0x7F, sizeof(cache)); /* NaN bytes everywhere a key is not written */
  dims2[0] = KEYS, dims2[1] = D;
  t_values = tensor(values, 2, dims2, s_values, DSV4_DTYPE_CODE_FLOAT, 32);
  dims1[0] = KEYS;
  t_slots = tensor(slots, 1, dims1, s_slots, DSV4_DTYPE_CODE_INT, 32);
  dims2[0] = 1, dims2[1] = (int64_t)sizeof(cache);
  t_cache = tensor(cache, 2, dims2, s_cache, DSV4_DTYPE_CODE_UINT, 8);
  CHECK(lib.kv_write_args_init(&write, sizeof write));
  write.cache_desc.layout = DSV4_KV_LAYOUT_FP8_V4_584B;
  write.cache_desc.block_size = BLOCK;
  write.cache_desc.block_stride_bytes = 0;
  write.cache_desc.kv_scale = 1.0f;
  write.values = &t_values;
  write.slots = &t_slots;
  write.cache = &t_cache;
  CHECK(lib.kv_write(ctx, &write));

  /* The reference reads the bytes back with its own decoder; they must be close to the inputs. */
  for (k = 0; k < KEYS; ++k) {
    dequantize_entry(cache, slots[k], keys[k]);
    for (d = 0; d < D; ++d) {
      const double tile_max = 0.25 + (d / 64) * 0.5;
      if (!(fabs(keys[k][d] - values[k][d]) <= tile_max / 8.0)) {
        fprintf(stderr, "key %d dim %d: stored %g, written %g\n", k, d, keys[k][d], values[k][d]);
        return 1;
      }
    }
  }

  CHECK(lib.plan_options_init(&plan_options, sizeof plan_options));
  plan_options.num_heads = H;
  plan_options.topk = WIDTH;
  plan_options.max_tokens = T;
  CHECK(lib.plan_create(ctx, &plan_options, &plan));
  CHECK(lib.plan_get_workspace_size(plan, &workspace_bytes));
  if (workspace_bytes > 0) workspace = malloc(workspace_bytes);

  for (t = 0; t < T; ++t)
    for (h = 0; h < H; ++h)
      for (d = 0; d < D; ++d) q[t][h][d] = float_to_bf16((float)uniform(-1, 1));
  for (h = 0; h < H; ++h) sink[h] = (float)uniform(-1, 2);
  /* Token t lists every key in a shuffled order with -1 padding; token 1 is capped at 30 entries.
   */
  for (t = 0; t < T; ++t) {
    for (i = 0; i < WIDTH; ++i) indices[t][i] = i < KEYS ? slots[i] : -1;
    for (i = WIDTH - 1; i > 0; --i) {
      const int j = (int)uniform(0, i + 1) % (i + 1);
      const int32_t swap = indices[t][i];
      indices[t][i] = indices[t][j];
      indices[t][j] = swap;
    }
  }
  lengths[0] = WIDTH;
  lengths[1] = 30;

  dims3[0] = T, dims3[1] = H, dims3[2] = D;
  t_q = tensor(q, 3, dims3, s_q, DSV4_DTYPE_CODE_BFLOAT, 16);
  t_out = tensor(out, 3, dims3, s_out, DSV4_DTYPE_CODE_BFLOAT, 16);
  dims2[0] = T, dims2[1] = H;
  t_lse = tensor(lse, 2, dims2, s_lse, DSV4_DTYPE_CODE_FLOAT, 32);
  dims1[0] = H;
  t_sink = tensor(sink, 1, dims1, s_sink, DSV4_DTYPE_CODE_FLOAT, 32);
  dims2[0] = T, dims2[1] = WIDTH;
  t_idx = tensor(indices, 2, dims2, s_idx, DSV4_DTYPE_CODE_INT, 32);
  dims1[0] = T;
  t_len = tensor(lengths, 1, dims1, s_len, DSV4_DTYPE_CODE_INT, 32);
  CHECK(lib.run_args_init(&args, sizeof args));
  args.q = &t_q;
  args.swa_cache = &t_cache;
  args.attn_sink = &t_sink;
  args.out = &t_out;
  args.lse = &t_lse;
  args.indices = &t_idx;
  args.lengths = &t_len;
  args.workspace = workspace;
  args.workspace_bytes = workspace_bytes;
  CHECK(lib.run(plan, &args));

  /* Naive reference: one softmax over the valid candidates plus the sink (whose value is 0). */
  for (t = 0; t < T; ++t) {
    for (h = 0; h < H; ++h) {
      double logits[WIDTH], acc[D], max_logit = -INFINITY, sum = 0.0, ref_lse, sink_factor;
      int valid[WIDTH];
      for (i = 0; i < WIDTH; ++i) {
        const int32_t slot = indices[t][i];
        valid[i] = i < lengths[t] && slot >= 0 && slot < BLOCK;
        logits[i] = 0.0;
        if (!valid[i]) continue;
        for (k = 0; k < KEYS && slots[k] != slot; ++k) {
        }
        for (d = 0; d < D; ++d) logits[i] += bf16_to_double(q[t][h][d]) * keys[k][d];
        logits[i] /= sqrt((double)D);
        if (logits[i] > max_logit) max_logit = logits[i];
      }
      for (d = 0; d < D; ++d) acc[d] = 0.0;
      for (i = 0; i < WIDTH; ++i) {
        double p;
        if (!valid[i]) continue;
        for (k = 0; k < KEYS && slots[k] != indices[t][i]; ++k) {
        }
        p = exp(logits[i] - max_logit);
        sum += p;
        for (d = 0; d < D; ++d) acc[d] += p * keys[k][d];
      }
      ref_lse = max_logit + log(sum);
      sink_factor = 1.0 / (1.0 + exp((double)sink[h] - ref_lse));
      if (!(fabs(lse[t][h] - ref_lse) <= 1e-3 + 1e-3 * fabs(ref_lse))) {
        fprintf(stderr, "lse[%d][%d] = %g, reference %g\n", t, h, lse[t][h], ref_lse);
        ++failures;
      }
      for (d = 0; d < D; ++d) {
        const double ref = acc[d] / sum * sink_factor;
        const double got = bf16_to_double(out[t][h][d]);
        const double err = fabs(got - ref);
        if (err > worst) worst = err;
        if (!(err <= 1e-2 * fabs(ref) || err <= 1e-3)) {
          if (failures < 10)
            fprintf(stderr, "out[%d][%d][%d] = %g, reference %g\n", t, h, d, got, ref);
          ++failures;
        }
      }
    }
  }
  lib.plan_destroy(plan);
  lib.ctx_destroy(ctx);
  free(workspace);
  printf("%d mismatches, max abs error %.3g (seed %lu)\n", failures, worst, seed);
  return failures == 0 ? 0 : 1;
}
