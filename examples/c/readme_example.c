/* The README's example: attention of 2 tokens x 8 heads over a 4-row bf16 cache, explicit mode. */
#include <dsv4/dsv4.h>
#include <stdio.h>

int main(void) {
  static uint16_t q[2][8][512], cache[1][4][512], out[2][8][512]; /* bf16 bits */
  int32_t idx[2][4] = {{0, 1, 2, 3}, {3, 2, -1, -1}};             /* -1 = no candidate */
  int64_t sq[3] = {2, 8, 512}, sc[3] = {1, 4, 512}, si[2] = {2, 4};
  dsv4_device cpu = {DSV4_DEVICE_CPU, 0};
  dsv4_dtype bf16 = {DSV4_DTYPE_CODE_BFLOAT, 16, 1}, i32 = {DSV4_DTYPE_CODE_INT, 32, 1};
  dsv4_tensor tq = {q, cpu, 3, bf16, sq, NULL, 0}, tc = {cache, cpu, 3, bf16, sc, NULL, 0};
  dsv4_tensor ti = {idx, cpu, 2, i32, si, NULL, 0}, to = {out, cpu, 3, bf16, sq, NULL, 0};
  dsv4_ctx* ctx = NULL;
  dsv4_plan* plan = NULL;
  dsv4_plan_options po;
  dsv4_run_args args;
  dsv4_status st;
  int i;
  for (i = 0; i < 4 * 512; ++i) cache[0][i / 512][i % 512] = 0x3f80 + (uint16_t)(i % 7);  /* ~1 */
  for (i = 0; i < 8 * 512; ++i) q[0][i / 512][i % 512] = q[1][i / 512][i % 512] = 0x3c00; /* 2^-7 */
  st = dsv4_ctx_create(NULL, &ctx);                 /* CPU tensors; backend chosen by probing */
  dsv4_plan_options_init(&po);                      /* explicit mode, 512-dim keys */
  po.num_heads = 8, po.max_tokens = 2, po.topk = 4; /* list width */
  po.swa_cache.layout = DSV4_KV_LAYOUT_BF16, po.swa_cache.block_size = 4;
  if (st == DSV4_STATUS_OK) st = dsv4_plan_create(ctx, &po, &plan);
  dsv4_run_args_init(&args);
  args.q = &tq, args.swa_cache = &tc, args.indices = &ti, args.out = &to;
  if (st == DSV4_STATUS_OK) st = dsv4_run(plan, &args);
  if (st != DSV4_STATUS_OK)
    fprintf(stderr, "%s: %s\n", dsv4_status_string(st), dsv4_last_error_message());
  else /* token 1 averages rows 3 and 2, whose dim 0 holds bf16 0x3f83 and 0x3f82 */
    printf("out[1][0][0] = bf16 0x%04x\n", (unsigned)out[1][0][0]);
  if (st == DSV4_STATUS_OK && (out[1][0][0] < 0x3f82 || out[1][0][0] > 0x3f83)) st = -1;
  dsv4_plan_destroy(plan);
  dsv4_ctx_destroy(ctx);
  return st == DSV4_STATUS_OK ? 0 : 1;
}
