/*
 * An out-of-tree libdsv4 backend module, built against the installed module SDK only
 * (find_package(dsv4 COMPONENTS module_sdk) -> dsv4::module_sdk, or pkg-config dsv4-module).
 *
 * It serves the CPU under the name "example" with probe score 1, so libdsv4 picks it only when
 * asked by name (options.backend = "example" or DSV4_BACKEND=example), and computes explicit-mode
 * attention over bf16 caches (spec section 2.2) with plain loops: the smallest complete module, not
 * a fast one. Everything else (paged mode, FP8 layouts, e4m3 q) is refused at plan creation with a
 * message, as the module ABI asks.
 *
 * The contract (dsv4_backend.h): one exported entry symbol; every slot returns a status and reports
 * errors through host->set_error; nothing throws, aborts or exits; the host has validated every
 * argument against the public API before a slot runs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4_backend.h"

#define EXAMPLE_NAME "example"
#define EXAMPLE_DIM 512

static const dsv4_host_services* g_host;

static dsv4_status fail(dsv4_status status, const char* message) {
  if (g_host != NULL) g_host->set_error(message);
  return status;
}

/* ------------------------------------------ numbers --------------------------------------------
 */
static float bf16_to_float(uint16_t h) {
  const uint32_t bits = (uint32_t)h << 16;
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

/* Round to nearest even; NaN stays a quiet NaN. */
static uint16_t float_to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* ------------------------------------------ lists ----------------------------------------------
 */
/* Token t = b * seq_q + s (dsv4_mod_token_view, dsv4_mod_index_list). */
static int64_t row_count(const dsv4_mod_index_list* l, int64_t t, int64_t seq_q) {
  int64_t n;
  if (l->indices == NULL) return 0;
  n = l->format == DSV4_INDEX_CSR ? (int64_t)l->indptr[t + 1] - l->indptr[t] : l->width;
  if (l->lengths != NULL) {
    const int64_t len = l->lengths[t / seq_q * l->len_stride_b + t % seq_q * l->len_stride_s];
    if (len < n) n = len;
  }
  return n < 0 ? 0 : n;
}

static int32_t entry(const dsv4_mod_index_list* l, int64_t t, int64_t seq_q, int64_t i) {
  if (l->format == DSV4_INDEX_CSR) return l->indices[l->indptr[t] + i];
  return l->indices[t / seq_q * l->stride_b + t % seq_q * l->stride_s + i * l->stride_k];
}

/* The bf16 row of a valid slot (spec 2.3: 0 <= slot < capacity), or NULL. */
static const uint16_t* cache_row(const dsv4_mod_cache* c, int32_t slot) {
  if (slot < 0 || (int64_t)slot >= c->num_blocks * c->block_size) return NULL;
  return (const uint16_t*)(c->base + (int64_t)(slot / c->block_size) * c->block_stride_bytes +
                           (int64_t)(slot % c->block_size) * EXAMPLE_DIM * 2);
}

/* ------------------------------------------ plan -----------------------------------------------
 */
typedef struct example_plan {
  int32_t num_heads;
  float scale;
  size_t max_rows; /* candidates per token: both lists' widths */
} example_plan;

static dsv4_status check_cache(const dsv4_mod_cache_plan* c, int optional, const char* name) {
  char message[160];
  if (optional && c->layout == DSV4_KV_LAYOUT_NONE) return DSV4_STATUS_OK;
  if (c->layout == DSV4_KV_LAYOUT_BF16) return DSV4_STATUS_OK;
  snprintf(message, sizeof message, "plan_create: %s layout %u: the example module reads bf16 only",
           name, (unsigned)c->layout);
  return fail(DSV4_STATUS_UNSUPPORTED, message);
}

/* The host has validated and derived the plan (dsv4_mod_plan): only what this module alone does
 * not serve is checked here. */
static dsv4_status plan_create(void* mctx, const dsv4_mod_plan* plan, void** out_mplan) {
  example_plan* p;
  dsv4_status st;
  (void)mctx;
  if (plan->mode != DSV4_MODE_EXPLICIT)
    return fail(DSV4_STATUS_UNSUPPORTED, "plan_create: the example module has explicit mode only");
  if (plan->q_dtype.code != DSV4_DTYPE_CODE_BFLOAT || plan->q_dtype.bits != 16)
    return fail(DSV4_STATUS_UNSUPPORTED, "plan_create: the example module takes bf16 q only");
  if (plan->out_dtype.code != DSV4_DTYPE_CODE_BFLOAT || plan->out_dtype.bits != 16)
    return fail(DSV4_STATUS_UNSUPPORTED, "plan_create: the example module writes bf16 out only");
  st = check_cache(&plan->cache[0], 0, "swa_cache");
  if (st == DSV4_STATUS_OK) st = check_cache(&plan->cache[1], 1, "extra_cache");
  if (st != DSV4_STATUS_OK) return st;
  p = (example_plan*)malloc(sizeof *p);
  if (p == NULL) return fail(DSV4_STATUS_OUT_OF_MEMORY, "plan_create: out of memory");
  p->num_heads = plan->num_heads;
  p->scale = plan->softmax_scale; /* bf16 caches and q: no further dequantisation scale */
  p->max_rows = (size_t)plan->list_width[0] + (size_t)plan->list_width[1];
  *out_mplan = p;
  return DSV4_STATUS_OK;
}

static void plan_destroy(void* mplan) { free(mplan); }

static dsv4_status plan_get_workspace_size(const void* mplan, size_t* out_bytes) {
  (void)mplan;
  *out_bytes = 0;
  return DSV4_STATUS_OK;
}

static dsv4_status plan_get_kernel_name(const void* mplan, char* buffer, size_t capacity) {
  (void)mplan;
  snprintf(buffer, capacity, "example-naive-f64");
  return DSV4_STATUS_OK;
}

/* ------------------------------------------ run ------------------------------------------------
 */
/* Gathers token t's valid candidate rows from both lists into rows[]; returns their count. */
static size_t gather(const dsv4_mod_run* r, int64_t t, const uint16_t** rows) {
  size_t n = 0;
  int64_t i;
  const int64_t main_n = row_count(&r->main_list, t, r->seq_q);
  const int64_t extra_n = row_count(&r->extra_list, t, r->seq_q);
  for (i = 0; i < main_n; ++i) {
    const uint16_t* row = cache_row(&r->swa_cache, entry(&r->main_list, t, r->seq_q, i));
    if (row != NULL) rows[n++] = row;
  }
  for (i = 0; i < extra_n; ++i) {
    const uint16_t* row = cache_row(&r->extra_cache, entry(&r->extra_list, t, r->seq_q, i));
    if (row != NULL) rows[n++] = row;
  }
  return n;
}

/* Spec 2.2 for one token and head: softmax over the valid rows plus the sink, in float64. */
static void attend(const example_plan* p, const uint16_t* q, const uint16_t* const* rows, size_t n,
                   double sink, double* logits, double* acc, uint16_t* out, float* lse,
                   float* max_logit) {
  double m = -INFINITY, z = 0.0, l, factor;
  size_t j;
  int d;
  for (j = 0; j < n; ++j) {
    double dot = 0.0;
    for (d = 0; d < EXAMPLE_DIM; ++d)
      dot += (double)bf16_to_float(q[d]) * bf16_to_float(rows[j][d]);
    logits[j] = (double)p->scale * dot;
    if (logits[j] > m) m = logits[j];
  }
  if (max_logit != NULL) *max_logit = (float)m;
  if (n == 0) { /* no valid key: output 0, lse +inf, whatever the sink */
    for (d = 0; d < EXAMPLE_DIM; ++d) out[d] = 0;
    if (lse != NULL) *lse = INFINITY;
    return;
  }
  for (d = 0; d < EXAMPLE_DIM; ++d) acc[d] = 0.0;
  for (j = 0; j < n; ++j) {
    const double w = exp(logits[j] - m);
    z += w;
    for (d = 0; d < EXAMPLE_DIM; ++d) acc[d] += w * bf16_to_float(rows[j][d]);
  }
  l = m + log(z);
  /* sinkfac = 1 / (1 + exp(sink - lse)): -inf -> 1, +inf -> 0 */
  factor = 1.0 / (z * (1.0 + exp(sink - l)));
  for (d = 0; d < EXAMPLE_DIM; ++d) out[d] = float_to_bf16((float)(acc[d] * factor));
  if (lse != NULL) *lse = (float)l;
}

static dsv4_status run(const void* mplan, const dsv4_mod_run* r) {
  const example_plan* p = (const example_plan*)mplan;
  const uint16_t** rows = (const uint16_t**)malloc((p->max_rows + 1) * sizeof *rows);
  double* logits = (double*)malloc((p->max_rows + 1) * sizeof *logits);
  double* acc = (double*)malloc(EXAMPLE_DIM * sizeof *acc);
  int64_t t;
  int32_t h;
  if (rows == NULL || logits == NULL || acc == NULL) {
    free(rows);
    free(logits);
    free(acc);
    return fail(DSV4_STATUS_OUT_OF_MEMORY, "run: out of memory");
  }
  for (t = 0; t < r->num_tokens; ++t) {
    const size_t n = gather(r, t, rows);
    const int64_t b = t / r->seq_q, s = t % r->seq_q;
    for (h = 0; h < p->num_heads; ++h) {
      const double sink = r->attn_sink != NULL ? r->attn_sink[h] : -INFINITY;
      const uint16_t* q =
          (const uint16_t*)r->q.data + b * r->q.stride_b + s * r->q.stride_s + h * r->q.stride_h;
      uint16_t* out =
          (uint16_t*)r->out.data + b * r->out.stride_b + s * r->out.stride_s + h * r->out.stride_h;
      float* lse = r->lse.data == NULL ? NULL
                                       : (float*)r->lse.data + b * r->lse.stride_b +
                                             s * r->lse.stride_s + h * r->lse.stride_h;
      float* max_logit = r->max_logits.data == NULL
                             ? NULL
                             : (float*)r->max_logits.data + b * r->max_logits.stride_b +
                                   s * r->max_logits.stride_s + h * r->max_logits.stride_h;
      attend(p, q, rows, n, sink, logits, acc, out, lse, max_logit);
    }
  }
  free(rows);
  free(logits);
  free(acc);
  return DSV4_STATUS_OK;
}

/* Stores rows into a bf16 cache; the last row for a slot wins (spec 12.4). */
static dsv4_status kv_write(void* mctx, const dsv4_mod_kv_write* w) {
  int64_t i;
  int d;
  (void)mctx;
  if (w->cache.layout != DSV4_KV_LAYOUT_BF16 || w->dim != EXAMPLE_DIM)
    return fail(DSV4_STATUS_UNSUPPORTED, "kv_write: the example module writes bf16 caches only");
  for (i = 0; i < w->num_rows; ++i) {
    if ((int64_t)w->slots[i] >= w->cache.num_blocks * w->cache.block_size)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "kv_write: a slot is beyond the cache capacity");
  }
  for (i = 0; i < w->num_rows; ++i) {
    uint16_t* row = (uint16_t*)cache_row(&w->cache, w->slots[i]);
    if (row == NULL) continue; /* negative slot: skipped */
    for (d = 0; d < EXAMPLE_DIM; ++d) {
      const int64_t at = i * w->values_row_stride + d;
      row[d] = w->values_is_bf16 ? ((const uint16_t*)w->values)[at]
                                 : float_to_bf16(((const float*)w->values)[at]);
    }
  }
  return DSV4_STATUS_OK;
}

/* ------------------------------------------ device ---------------------------------------------
 */
static dsv4_status probe(int32_t* out_score, int32_t* out_device_count, char* reason,
                         size_t reason_capacity) {
  *out_score = 1; /* below the real CPU module: chosen only by name */
  *out_device_count = 1;
  snprintf(reason, reason_capacity, "ok");
  return DSV4_STATUS_OK;
}

static dsv4_status get_device_info(int32_t index, dsv4_device_info* out_info) {
  if (index != 0) return fail(DSV4_STATUS_INVALID_ARGUMENT, "get_device_info: the CPU is device 0");
  out_info->device_type = DSV4_DEVICE_CPU;
  out_info->device_id = 0;
  out_info->compute_units = 1;
  out_info->memory_bytes = 0;
  snprintf(out_info->name, sizeof out_info->name, "CPU (example module, one thread)");
  return DSV4_STATUS_OK;
}

static int g_context; /* the module keeps no per-context state; its address is the handle */

static dsv4_status ctx_create(const dsv4_mod_ctx_config* config, void** out_mctx) {
  if (config->device_id != 0)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "ctx_create: the CPU is device 0");
  *out_mctx = &g_context;
  return DSV4_STATUS_OK;
}

static void ctx_destroy(void* mctx) { (void)mctx; }

/* ------------------------------------------ entry ----------------------------------------------
 */
static const dsv4_backend_iface g_iface = {
    .struct_size = sizeof(dsv4_backend_iface),
    .abi_version = DSV4_MODULE_ABI_VERSION,
    .name = EXAMPLE_NAME,
    .module_version = "example 1.0",
    .device_type = DSV4_DEVICE_CPU,
    .probe = probe,
    .get_device_info = get_device_info,
    .ctx_create = ctx_create,
    .ctx_destroy = ctx_destroy,
    .plan_create = plan_create,
    .plan_destroy = plan_destroy,
    .plan_get_workspace_size = plan_get_workspace_size,
    .plan_get_kernel_name = plan_get_kernel_name,
    .run = run,
    .kv_write = kv_write,
    /* export_indices (paged mode) and merge are optional: NULL */
};

/* Negotiation: the host offers its newest ABI; answer min(host, ours) within the same major. */
DSV4_MODULE_EXPORT dsv4_status dsv4_backend_entry(uint32_t* inout_abi_version,
                                                  const dsv4_host_services* host,
                                                  const dsv4_backend_iface** out_iface) {
  if (inout_abi_version == NULL || out_iface == NULL) return DSV4_STATUS_INVALID_ARGUMENT;
  if (host == NULL || host->struct_size < sizeof(dsv4_host_services))
    return DSV4_STATUS_ABI_MISMATCH;
  if ((*inout_abi_version >> 16) != DSV4_MODULE_ABI_MAJOR) {
    if (host->set_error != NULL) host->set_error("example: another module ABI major");
    return DSV4_STATUS_ABI_MISMATCH;
  }
  if (*inout_abi_version > DSV4_MODULE_ABI_VERSION) *inout_abi_version = DSV4_MODULE_ABI_VERSION;
  g_host = host;
  *out_iface = &g_iface;
  return DSV4_STATUS_OK;
}
