/*
 * The binding test vectors through the C ABI: every case runs on the backend the probe picks
 * (or DSV4_BACKEND) and each output is compared with the float64 reference by the spec 2.4 rule.
 *
 *   dsv4_vectors_c_test <vectors dir>
 */
#include <dsv4/dsv4.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vectors.h"

static dsv4_tensor make_tensor(vec_tensor* t, void* data) {
  dsv4_tensor x;
  memset(&x, 0, sizeof x);
  x.data = data;
  x.device.device_type = DSV4_DEVICE_CPU;
  x.ndim = t->ndim;
  x.dtype = t->code;
  x.shape = t->shape;
  return x;
}

/* The dsv4_run_args slot of a tensor named like its field. */
static const dsv4_tensor** input_slot(dsv4_run_args* a, const char* name) {
  static const struct {
    const char* name;
    size_t offset;
  } fields[] = {
#define VEC_SLOT(f) {#f, offsetof(dsv4_run_args, f)}
      VEC_SLOT(q),
      VEC_SLOT(swa_cache),
      VEC_SLOT(extra_cache),
      VEC_SLOT(attn_sink),
      VEC_SLOT(indices),
      VEC_SLOT(indptr),
      VEC_SLOT(lengths),
      VEC_SLOT(extra_indices),
      VEC_SLOT(extra_indptr),
      VEC_SLOT(extra_lengths),
      VEC_SLOT(query_start_loc),
      VEC_SLOT(seq_lens),
      VEC_SLOT(swa_block_table),
      VEC_SLOT(cmp_block_table),
      VEC_SLOT(slot_mapping),
      VEC_SLOT(topk_indices),
#undef VEC_SLOT
  };
  size_t i;
  for (i = 0; i < sizeof fields / sizeof fields[0]; ++i)
    if (strcmp(fields[i].name, name) == 0)
      return (const dsv4_tensor**)((char*)a + fields[i].offset);
  return NULL;
}

/* NaN-filled output buffers and their tensors (every element must be written). */
static void make_outputs(vec_case* c, dsv4_tensor* outputs, void** out_data) {
  int i;
  for (i = 0; i < c->num_outputs; ++i) {
    vec_tensor* t = &c->outputs[i];
    const size_t bytes = (size_t)t->elements * t->code.bits / 8;
    out_data[i] = malloc(bytes > 0 ? bytes : 1);
    memset(out_data[i], 0xff, bytes);
    outputs[i] = make_tensor(t, out_data[i]);
  }
}

/* Compares every output with the reference; frees the buffers. */
static int check_outputs(vec_case* c, void** out_data, int ok) {
  char report[512];
  int i;
  for (i = 0; ok && i < c->num_outputs; ++i) {
    if (!vec_compare(&c->outputs[i], out_data[i], report, sizeof report)) {
      printf("FAIL %s: %s\n", c->name, report);
      ok = 0;
    }
  }
  for (i = 0; i < c->num_outputs; ++i) free(out_data[i]);
  if (ok) printf("ok   %s\n", c->name);
  return ok;
}

/* dsv4_merge of the case's partial results. */
static int merge_case(dsv4_ctx* ctx, vec_case* c) {
  dsv4_merge_args args;
  dsv4_tensor inputs[VEC_MAX_INPUTS], outputs[VEC_MAX_OUTPUTS];
  void* out_data[VEC_MAX_OUTPUTS] = {NULL};
  dsv4_status st;
  int i, ok = 1;
  dsv4_merge_args_init(&args);
  for (i = 0; i < c->num_inputs; ++i) {
    inputs[i] = make_tensor(&c->inputs[i], c->inputs[i].data);
    if (strcmp(c->inputs[i].name, "out_parts") == 0) args.out_parts = &inputs[i];
    if (strcmp(c->inputs[i].name, "lse_parts") == 0) args.lse_parts = &inputs[i];
    if (strcmp(c->inputs[i].name, "attn_sink") == 0) args.attn_sink = &inputs[i];
  }
  make_outputs(c, outputs, out_data);
  for (i = 0; i < c->num_outputs; ++i) {
    if (strcmp(c->outputs[i].name, "out") == 0) args.out = &outputs[i];
    if (strcmp(c->outputs[i].name, "lse") == 0) args.lse = &outputs[i];
  }
  st = dsv4_merge(ctx, &args);
  if (st != DSV4_STATUS_OK) {
    printf("FAIL %s: dsv4_merge: %s: %s\n", c->name, dsv4_status_string(st),
           dsv4_last_error_message());
    ok = 0;
  }
  return check_outputs(c, out_data, ok);
}

static int run_case(dsv4_ctx* ctx, vec_case* c) {
  dsv4_plan_options po;
  dsv4_plan* plan = NULL;
  dsv4_run_args args;
  dsv4_tensor inputs[VEC_MAX_INPUTS], outputs[VEC_MAX_OUTPUTS];
  void* out_data[VEC_MAX_OUTPUTS] = {NULL};
  void* workspace = NULL;
  size_t ws = 0;
  dsv4_status st;
  int i, ok = 1;
  dsv4_plan_options_init(&po);
  for (i = 0; i < c->num_options; ++i) {
    if (vec_apply_option(&po, c->options[i].key, c->options[i].value) != 0) {
      printf("FAIL %s: unknown option %s\n", c->name, c->options[i].key);
      return 0;
    }
  }
  st = dsv4_plan_create(ctx, &po, &plan);
  if (st == DSV4_STATUS_OK) st = dsv4_plan_get_workspace_size(plan, &ws);
  if (st != DSV4_STATUS_OK) {
    printf("FAIL %s: plan: %s: %s\n", c->name, dsv4_status_string(st), dsv4_last_error_message());
    dsv4_plan_destroy(plan);
    return 0;
  }
  workspace = malloc(ws > 0 ? ws : 1);
  dsv4_run_args_init(&args);
  for (i = 0; i < c->num_inputs; ++i) {
    const dsv4_tensor** slot = input_slot(&args, c->inputs[i].name);
    if (slot == NULL) {
      printf("FAIL %s: unknown input %s\n", c->name, c->inputs[i].name);
      ok = 0;
      continue;
    }
    inputs[i] = make_tensor(&c->inputs[i], c->inputs[i].data);
    *slot = &inputs[i];
  }
  make_outputs(c, outputs, out_data);
  for (i = 0; i < c->num_outputs; ++i) {
    if (strcmp(c->outputs[i].name, "out") == 0) args.out = &outputs[i];
    if (strcmp(c->outputs[i].name, "lse") == 0) args.lse = &outputs[i];
    if (strcmp(c->outputs[i].name, "max_logits") == 0) args.max_logits = &outputs[i];
  }
  args.workspace = workspace;
  args.workspace_bytes = ws;
  st = ok ? dsv4_run(plan, &args) : DSV4_STATUS_OK;
  if (st != DSV4_STATUS_OK) {
    printf("FAIL %s: dsv4_run: %s: %s\n", c->name, dsv4_status_string(st),
           dsv4_last_error_message());
    ok = 0;
  }
  free(workspace);
  dsv4_plan_destroy(plan);
  return check_outputs(c, out_data, ok);
}

int main(int argc, char** argv) {
  vec_set set;
  char error[1024];
  dsv4_ctx* ctx = NULL;
  dsv4_ctx_info info;
  dsv4_status st;
  int i, passed = 0, failed;
  if (argc != 2) {
    fprintf(stderr, "usage: %s <vectors dir>\n", argv[0]);
    return 2;
  }
  if (vec_load(argv[1], &set, error, sizeof error) != 0) {
    fprintf(stderr, "%s\n", error);
    return 1;
  }
  st = dsv4_ctx_create(NULL, &ctx);
  if (st != DSV4_STATUS_OK) {
    fprintf(stderr, "dsv4_ctx_create: %s: %s\n", dsv4_status_string(st), dsv4_last_error_message());
    vec_free(&set);
    return 1;
  }
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (dsv4_ctx_get_info(ctx, &info) == DSV4_STATUS_OK)
    printf("backend %s (%s), vectors seed %llu\n", info.backend, info.reason,
           (unsigned long long)set.seed);
  for (i = 0; i < set.num_cases; ++i) {
    vec_case* c = &set.cases[i];
    passed += strcmp(c->op, "merge") == 0 ? merge_case(ctx, c) : run_case(ctx, c);
  }
  failed = set.num_cases - passed;
  printf("%d passed, %d failed\n", passed, failed);
  dsv4_ctx_destroy(ctx);
  vec_free(&set);
  return failed == 0 ? 0 : 1;
}
