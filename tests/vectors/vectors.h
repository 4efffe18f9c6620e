/*
 * Reader of the binding test vectors (tests/vectors/README.md) for the C and C++ tests: the
 * manifest, the input tensors' bytes, the outputs' reference values and tolerances, the plan
 * options applied to a dsv4_plan_options, and the spec 2.4 comparison rule in C. C99.
 */
#ifndef DSV4_TEST_VECTORS_H
#define DSV4_TEST_VECTORS_H

#include <dsv4/dsv4.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VEC_MAX_DIMS 8
#define VEC_MAX_OPTIONS 32
#define VEC_MAX_INPUTS 24
#define VEC_MAX_OUTPUTS 4

typedef struct vec_tensor {
  char name[32];  /* dsv4_run_args field name */
  char dtype[16]; /* "bfloat16", "float32", "int32", "uint8", ... */
  dsv4_dtype code;
  int32_t ndim;
  int64_t shape[VEC_MAX_DIMS];
  int64_t elements;
  void* data;   /* inputs: the file's bytes; outputs: NULL until the caller allocates */
  double* want; /* outputs: the reference values [elements] */
  double abs_tol, rel_tol, cos_tol;
} vec_tensor;

typedef struct vec_option {
  char key[48];
  int64_t value;
} vec_option;

typedef struct vec_case {
  char name[64];
  char op[16]; /* "run": a plan and dsv4_run; "merge": dsv4_merge */
  int num_options;
  vec_option options[VEC_MAX_OPTIONS];
  int num_inputs;
  vec_tensor inputs[VEC_MAX_INPUTS];
  int num_outputs;
  vec_tensor outputs[VEC_MAX_OUTPUTS];
} vec_case;

typedef struct vec_set {
  uint64_t seed;
  int num_cases;
  vec_case* cases;
} vec_set;

/* Reads <dir>/manifest.txt and every file it names. Returns 0, or -1 with `error` set. */
int vec_load(const char* dir, vec_set* set, char* error, size_t error_size);
void vec_free(vec_set* set);

/* Applies one manifest option (a dsv4_plan_options field, cache fields dotted) to `options`.
 * Returns 0, or -1 for an unknown key. */
int vec_apply_option(dsv4_plan_options* options, const char* key, int64_t value);

/* A dtype name's DLPack code; returns 0, or -1 for an unknown name. */
int vec_dtype(const char* name, dsv4_dtype* out);

/* Element i of a buffer of dtype `code` as a double (bf16, fp16, fp32, fp64). */
double vec_element(dsv4_dtype code, const void* data, int64_t i);

/* The spec 2.4 rule (reference/compare_rule.h) over `t.elements` values of `got`: infinities and
 * NaNs coincide, every element within abs OR rel tolerance, and the cosine difference at most
 * cos_tol (cos_tol < 0: not checked). Returns 1 when it holds; else 0 with `report` naming the
 * first failure. */
int vec_compare(const vec_tensor* t, const void* got, char* report, size_t report_size);

#ifdef __cplusplus
}
#endif

#endif /* DSV4_TEST_VECTORS_H */
