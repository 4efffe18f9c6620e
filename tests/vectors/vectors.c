/* Reader of the binding test vectors: see vectors.h and tests/vectors/README.md. */
#define _POSIX_C_SOURCE 200809L /* strtok_r */
#include "vectors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char* error, size_t size, const char* what, const char* detail) {
  snprintf(error, size, "%s%s%s", what, detail[0] ? ": " : "", detail);
  return -1;
}

static void* read_file(const char* dir, const char* name, size_t expect, char* error,
                       size_t error_size) {
  char path[1024];
  FILE* f;
  void* data;
  long size;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  f = fopen(path, "rb");
  if (f == NULL) {
    fail(error, error_size, "cannot open", path);
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  size = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (size < 0 || (size_t)size != expect) {
    fclose(f);
    fail(error, error_size, "unexpected file size", path);
    return NULL;
  }
  data = malloc(expect > 0 ? expect : 1);
  if (data == NULL || (expect > 0 && fread(data, 1, expect, f) != expect)) {
    free(data);
    fclose(f);
    fail(error, error_size, "cannot read", path);
    return NULL;
  }
  fclose(f);
  return data;
}

int vec_dtype(const char* name, dsv4_dtype* out) {
  static const struct {
    const char* name;
    uint8_t code, bits;
  } table[] = {{"bfloat16", DSV4_DTYPE_CODE_BFLOAT, 16}, {"float16", DSV4_DTYPE_CODE_FLOAT, 16},
               {"float32", DSV4_DTYPE_CODE_FLOAT, 32},   {"float64", DSV4_DTYPE_CODE_FLOAT, 64},
               {"int32", DSV4_DTYPE_CODE_INT, 32},       {"uint8", DSV4_DTYPE_CODE_UINT, 8}};
  size_t i;
  for (i = 0; i < sizeof table / sizeof table[0]; ++i) {
    if (strcmp(name, table[i].name) == 0) {
      out->code = table[i].code;
      out->bits = table[i].bits;
      out->lanes = 1;
      return 0;
    }
  }
  return -1;
}

int vec_load(const char* dir, vec_set* set, char* error, size_t error_size) {
  char path[1024], line[1024];
  FILE* f;
  vec_case* c = NULL;
  int lineno = 0;
  memset(set, 0, sizeof *set);
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  f = fopen(path, "r");
  if (f == NULL) return fail(error, error_size, "cannot open", path);
  while (fgets(line, sizeof line, f) != NULL) {
    char* words[16];
    int n = 0;
    char* save = NULL;
    char* w;
    ++lineno;
    line[strcspn(line, "\r\n")] = '\0';
    for (w = strtok_r(line, " ", &save); w != NULL && n < 16; w = strtok_r(NULL, " ", &save))
      words[n++] = w;
    if (n == 0 || words[0][0] == '#') continue;
    if (strcmp(words[0], "dsv4-vectors") == 0) {
      if (n != 2 || strcmp(words[1], "1") != 0) break;
    } else if (strcmp(words[0], "seed") == 0 && n == 2) {
      set->seed = strtoull(words[1], NULL, 10);
    } else if (strcmp(words[0], "case") == 0 && n == 2) {
      vec_case* grown = (vec_case*)realloc(set->cases, sizeof(vec_case) * (set->num_cases + 1));
      if (grown == NULL) break;
      set->cases = grown;
      c = &set->cases[set->num_cases++];
      memset(c, 0, sizeof *c);
      snprintf(c->name, sizeof c->name, "%s", words[1]);
      snprintf(c->op, sizeof c->op, "run");
    } else if (c != NULL && strcmp(words[0], "op") == 0 && n == 2) {
      snprintf(c->op, sizeof c->op, "%s", words[1]);
    } else if (c != NULL && strcmp(words[0], "option") == 0 && n == 3 &&
               c->num_options < VEC_MAX_OPTIONS) {
      vec_option* o = &c->options[c->num_options++];
      snprintf(o->key, sizeof o->key, "%s", words[1]);
      o->value = strtoll(words[2], NULL, 10);
    } else if (c != NULL && (strcmp(words[0], "input") == 0 || strcmp(words[0], "output") == 0) &&
               n >= 5) {
      const int is_input = words[0][0] == 'i';
      const int first_dim = is_input ? 5 : 4; /* input: name dtype file ndim dims; output: name
                                                 dtype ndim dims file */
      vec_tensor* t;
      int d;
      if (is_input ? c->num_inputs >= VEC_MAX_INPUTS : c->num_outputs >= VEC_MAX_OUTPUTS) break;
      t = is_input ? &c->inputs[c->num_inputs++] : &c->outputs[c->num_outputs++];
      snprintf(t->name, sizeof t->name, "%s", words[1]);
      snprintf(t->dtype, sizeof t->dtype, "%s", words[2]);
      if (vec_dtype(t->dtype, &t->code) != 0) break;
      t->ndim = (int32_t)strtol(words[first_dim - 1], NULL, 10);
      if (t->ndim < 0 || t->ndim > VEC_MAX_DIMS || n != first_dim + t->ndim + (is_input ? 0 : 1))
        break;
      t->elements = 1;
      for (d = 0; d < t->ndim; ++d) {
        t->shape[d] = strtoll(words[first_dim + d], NULL, 10);
        t->elements *= t->shape[d];
      }
      if (is_input) {
        t->data =
            read_file(dir, words[3], (size_t)t->elements * t->code.bits / 8, error, error_size);
        if (t->data == NULL) goto failed;
      } else {
        t->want = (double*)read_file(dir, words[n - 1], (size_t)t->elements * sizeof(double), error,
                                     error_size);
        if (t->want == NULL) goto failed;
      }
    } else if (c != NULL && strcmp(words[0], "tolerance") == 0 && n == 5 && c->num_outputs > 0 &&
               strcmp(words[1], c->outputs[c->num_outputs - 1].name) == 0) {
      vec_tensor* t = &c->outputs[c->num_outputs - 1];
      t->abs_tol = strtod(words[2], NULL);
      t->rel_tol = strtod(words[3], NULL);
      t->cos_tol = strtod(words[4], NULL);
    } else if (c != NULL && strcmp(words[0], "end") == 0 && n == 1) {
      c = NULL;
    } else {
      break;
    }
    continue;
  }
  if (!feof(f)) {
    char where[64];
    snprintf(where, sizeof where, "line %d", lineno);
    fail(error, error_size, "malformed manifest", where);
    goto failed;
  }
  fclose(f);
  return set->num_cases > 0 ? 0 : fail(error, error_size, "no cases in", path);
failed:
  fclose(f);
  vec_free(set);
  return -1;
}

void vec_free(vec_set* set) {
  int i, j;
  for (i = 0; i < set->num_cases; ++i) {
    for (j = 0; j < set->cases[i].num_inputs; ++j) free(set->cases[i].inputs[j].data);
    for (j = 0; j < set->cases[i].num_outputs; ++j) free(set->cases[i].outputs[j].want);
  }
  free(set->cases);
  memset(set, 0, sizeof *set);
}

int vec_apply_option(dsv4_plan_options* o, const char* key, int64_t v) {
#define VEC_FIELD(name, field)  \
  if (strcmp(key, name) == 0) { \
    o->field = (uint32_t)v;     \
    return 0;                   \
  }
  dsv4_kv_cache_desc* cache = NULL;
  const char* sub = NULL;
  if (strncmp(key, "swa_cache.", 10) == 0) cache = &o->swa_cache, sub = key + 10;
  if (strncmp(key, "extra_cache.", 12) == 0) cache = &o->extra_cache, sub = key + 12;
  if (cache != NULL) {
    if (strcmp(sub, "layout") == 0) return cache->layout = (uint32_t)v, 0;
    if (strcmp(sub, "block_size") == 0) return cache->block_size = (int32_t)v, 0;
    if (strcmp(sub, "block_stride_bytes") == 0) return cache->block_stride_bytes = v, 0;
    if (strcmp(sub, "flags") == 0) return cache->flags = (uint32_t)v, 0;
    return -1;
  }
  if (strcmp(key, "max_model_len") == 0) return o->max_model_len = v, 0;
  VEC_FIELD("mode", mode)
  VEC_FIELD("flags", flags)
  VEC_FIELD("index_format", index_format)
#undef VEC_FIELD
  {
    static const struct {
      const char* name;
      size_t offset;
    } ints[] = {
        {"num_heads", offsetof(dsv4_plan_options, num_heads)},
        {"max_tokens", offsetof(dsv4_plan_options, max_tokens)},
        {"topk", offsetof(dsv4_plan_options, topk)},
        {"extra_topk", offsetof(dsv4_plan_options, extra_topk)},
        {"compress_ratio", offsetof(dsv4_plan_options, compress_ratio)},
        {"window", offsetof(dsv4_plan_options, window)},
        {"index_topk", offsetof(dsv4_plan_options, index_topk)},
        {"decode_threshold", offsetof(dsv4_plan_options, decode_threshold)},
        {"max_requests", offsetof(dsv4_plan_options, max_requests)},
        {"max_swa_blocks_per_request", offsetof(dsv4_plan_options, max_swa_blocks_per_request)},
        {"max_cmp_blocks_per_request", offsetof(dsv4_plan_options, max_cmp_blocks_per_request)},
        {"compressed_block_tokens", offsetof(dsv4_plan_options, compressed_block_tokens)},
    };
    size_t i;
    for (i = 0; i < sizeof ints / sizeof ints[0]; ++i) {
      if (strcmp(key, ints[i].name) == 0) {
        const int32_t value = (int32_t)v;
        memcpy((char*)o + ints[i].offset, &value, sizeof value);
        return 0;
      }
    }
  }
  return -1;
}

double vec_element(dsv4_dtype code, const void* data, int64_t i) {
  const unsigned char* p = (const unsigned char*)data;
  if (code.bits == 16) {
    const uint32_t h = (uint32_t)p[2 * i] | ((uint32_t)p[2 * i + 1] << 8);
    if (code.code == DSV4_DTYPE_CODE_BFLOAT) {
      const uint32_t u = h << 16;
      float f;
      memcpy(&f, &u, sizeof f);
      return f;
    } else { /* IEEE binary16 */
      const int exponent = (int)((h >> 10) & 0x1f);
      const double mantissa = (double)(h & 0x3ff);
      const double sign = (h & 0x8000) ? -1.0 : 1.0;
      if (exponent == 0x1f) return mantissa != 0 ? NAN : sign * INFINITY;
      if (exponent == 0) return sign * ldexp(mantissa, -24);
      return sign * ldexp(1024.0 + mantissa, exponent - 25);
    }
  }
  if (code.bits == 32) {
    float f;
    memcpy(&f, p + 4 * i, sizeof f);
    return f;
  }
  {
    double d;
    memcpy(&d, p + 8 * i, sizeof d);
    return d;
  }
}

int vec_compare(const vec_tensor* t, const void* got, char* report, size_t report_size) {
  int64_t i, failures = 0, first = -1;
  double first_got = 0, first_want = 0, dot = 0, norm_got = 0, norm_want = 0, cos_diff;
  for (i = 0; i < t->elements; ++i) {
    const double g = vec_element(t->code, got, i), w = t->want[i];
    int ok;
    if (!isfinite(g) || !isfinite(w)) {
      ok = (isnan(g) && isnan(w)) || (isinf(g) && isinf(w) && g == w);
    } else {
      const double err = fabs(g - w);
      const double rel = w != 0.0 ? err / fabs(w) : (err > 0 ? HUGE_VAL : 0.0);
      ok = err < t->abs_tol || rel < t->rel_tol;
      dot += g * w;
      norm_got += g * g;
      norm_want += w * w;
    }
    if (!ok && failures++ == 0) first = i, first_got = g, first_want = w;
  }
  cos_diff = norm_got + norm_want > 0 ? 1.0 - 2.0 * dot / (norm_got + norm_want) : 0.0;
  if (failures == 0 && (t->cos_tol < 0 || cos_diff <= t->cos_tol)) return 1;
  snprintf(report, report_size,
           "%s: %lld of %lld elements out of tolerance (first [%lld]: got %.9g, want %.9g), "
           "cos_diff %.3g (limit %.3g)",
           t->name, (long long)failures, (long long)t->elements, (long long)first, first_got,
           first_want, cos_diff, t->cos_tol);
  return 0;
}
