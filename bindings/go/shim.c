/* The C side of the Go binding (shim.h). */
#define _GNU_SOURCE /* RTLD_* */
#include "shim.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Every function of the public headers, resolved with dlsym: no link-time dependency on libdsv4.
// clang-format off
#define DSV4GO_SYMBOLS(X) \
  X(dsv4_get_version) \
  X(dsv4_get_version_string) \
  X(dsv4_status_string) \
  X(dsv4_last_error_message) \
  X(dsv4_ctx_options_init) \
  X(dsv4_ctx_create) \
  X(dsv4_ctx_destroy) \
  X(dsv4_enumerate_backends) \
  X(dsv4_get_device_info) \
  X(dsv4_ctx_get_info) \
  X(dsv4_kv_layout_info_init) \
  X(dsv4_kv_layout_get_info) \
  X(dsv4_plan_options_init) \
  X(dsv4_plan_create) \
  X(dsv4_plan_destroy) \
  X(dsv4_plan_get_workspace_size) \
  X(dsv4_plan_get_info) \
  X(dsv4_run_args_init) \
  X(dsv4_run) \
  X(dsv4_kv_write_args_init) \
  X(dsv4_kv_write) \
  X(dsv4_merge_args_init) \
  X(dsv4_merge) \
  X(dsv4_export_args_init) \
  X(dsv4_export_indices)
// clang-format on

// The names are followed by ')' where called: the header's same-named init macros stay unexpanded.
static struct {
#define DSV4GO_FIELD(name) __typeof__(name)* name;
  DSV4GO_SYMBOLS(DSV4GO_FIELD)
#undef DSV4GO_FIELD
} dsv4go;

static const char* dsv4go_symbols[] = {
#define DSV4GO_NAME(name) #name,
    DSV4GO_SYMBOLS(DSV4GO_NAME)
#undef DSV4GO_NAME
};
int dsv4go_symbol_count(void) { return (int)(sizeof dsv4go_symbols / sizeof dsv4go_symbols[0]); }
const char* dsv4go_symbol(int i) { return dsv4go_symbols[i]; }

int dsv4go_load(const char* path, char* message) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    snprintf(message, DSV4GO_MESSAGE, "cannot load %s: %s", path, dlerror());
    return -1;
  }
#define DSV4GO_RESOLVE(name)                                                 \
  *(void**)&dsv4go.name = dlsym(handle, #name);                              \
  if (dsv4go.name == NULL) {                                                 \
    snprintf(message, DSV4GO_MESSAGE, "%s: missing symbol %s", path, #name); \
    return -1;                                                               \
  }
  DSV4GO_SYMBOLS(DSV4GO_RESOLVE)
#undef DSV4GO_RESOLVE
  return 0;
}

// The thread-local message is read in the same cgo call as the failing function: a goroutine may
// move to another thread between two calls.
static dsv4_status dsv4go_result(dsv4_status status, char* message) {
  if (status != DSV4_STATUS_OK)
    snprintf(message, DSV4GO_MESSAGE, "%s", (dsv4go.dsv4_last_error_message)());
  return status;
}

dsv4_status dsv4go_ctx_options_init(dsv4_ctx_options* o, char* m) {
  return dsv4go_result((dsv4go.dsv4_ctx_options_init)(o, sizeof *o), m);
}
dsv4_status dsv4go_plan_options_init(dsv4_plan_options* o, char* m) {
  return dsv4go_result((dsv4go.dsv4_plan_options_init)(o, sizeof *o), m);
}
dsv4_status dsv4go_ctx_create(const dsv4_ctx_options* o, dsv4_ctx** out, char* m) {
  return dsv4go_result((dsv4go.dsv4_ctx_create)(o, out), m);
}
void dsv4go_ctx_destroy(dsv4_ctx* c) { (dsv4go.dsv4_ctx_destroy)(c); }
dsv4_status dsv4go_ctx_get_info(const dsv4_ctx* c, dsv4_ctx_info* info, char* m) {
  info->struct_size = sizeof *info;
  return dsv4go_result((dsv4go.dsv4_ctx_get_info)(c, info), m);
}
dsv4_status dsv4go_plan_create(dsv4_ctx* c, const dsv4_plan_options* o, dsv4_plan** out, char* m) {
  return dsv4go_result((dsv4go.dsv4_plan_create)(c, o, out), m);
}
void dsv4go_plan_destroy(dsv4_plan* p) { (dsv4go.dsv4_plan_destroy)(p); }
dsv4_status dsv4go_plan_get_workspace_size(const dsv4_plan* p, size_t* out, char* m) {
  return dsv4go_result((dsv4go.dsv4_plan_get_workspace_size)(p, out), m);
}
dsv4_status dsv4go_plan_get_info(const dsv4_plan* p, dsv4_plan_info* info, char* m) {
  info->struct_size = sizeof *info;
  return dsv4go_result((dsv4go.dsv4_plan_get_info)(p, info), m);
}
dsv4_status dsv4go_kv_layout_get_info(uint32_t layout, int32_t block, dsv4_kv_layout_info* info,
                                      char* m) {
  dsv4_status st = (dsv4go.dsv4_kv_layout_info_init)(info, sizeof *info);
  if (st == DSV4_STATUS_OK) st = (dsv4go.dsv4_kv_layout_get_info)(layout, block, info);
  return dsv4go_result(st, m);
}
dsv4_status dsv4go_enumerate_backends(const dsv4_ctx_options* o, dsv4_backend_info* out,
                                      int32_t capacity, int32_t* count, char* m) {
  int32_t i;
  for (i = 0; i < capacity; ++i) out[i].struct_size = sizeof out[i];
  return dsv4go_result((dsv4go.dsv4_enumerate_backends)(o, out, capacity, count), m);
}
dsv4_status dsv4go_get_device_info(const dsv4_ctx_options* o, const char* backend, int32_t index,
                                   dsv4_device_info* info, char* m) {
  info->struct_size = sizeof *info;
  return dsv4go_result((dsv4go.dsv4_get_device_info)(o, backend, index, info), m);
}
uint32_t dsv4go_get_version(void) { return (dsv4go.dsv4_get_version)(); }
const char* dsv4go_get_version_string(void) { return (dsv4go.dsv4_get_version_string)(); }
const char* dsv4go_status_string(dsv4_status s) { return (dsv4go.dsv4_status_string)(s); }

// Calls that take tensors. Their structs live in C memory (the caller's arena); the data of Go
// slices arrives as arguments d0..d23 (Go memory that holds no Go pointers, as cgo's rules ask),
// is stored in tensors[i].data for the call only, and cleared before returning.

void dsv4go_set_address(dsv4_tensor* t, uintptr_t address) { t->data = (void*)address; }
void dsv4go_set_workspace(dsv4_run_args* a, uintptr_t address, size_t bytes) {
  a->workspace = (void*)address;
  a->workspace_bytes = bytes;
}
void dsv4go_set_stream(void** field, uintptr_t stream) { *field = (void*)stream; }

dsv4_status dsv4go_call(int op, void* handle, void* args, dsv4_run_args* run_args,
                        dsv4_tensor* tensors, void* workspace, char* m, void* d0, void* d1,
                        void* d2, void* d3, void* d4, void* d5, void* d6, void* d7, void* d8,
                        void* d9, void* d10, void* d11, void* d12, void* d13, void* d14, void* d15,
                        void* d16, void* d17, void* d18, void* d19, void* d20, void* d21, void* d22,
                        void* d23) {
  void* data[DSV4GO_TENSORS] = {d0,  d1,  d2,  d3,  d4,  d5,  d6,  d7,  d8,  d9,  d10, d11,
                                d12, d13, d14, d15, d16, d17, d18, d19, d20, d21, d22, d23};
  dsv4_status st = DSV4_STATUS_INTERNAL;
  int i;
  for (i = 0; i < DSV4GO_TENSORS; ++i)
    if (data[i] != NULL) tensors[i].data = data[i];
  if (workspace != NULL) run_args->workspace = workspace;
  if (op == DSV4GO_RUN)
    st = (dsv4go.dsv4_run)((const dsv4_plan*)handle, (const dsv4_run_args*)args);
  if (op == DSV4GO_KV_WRITE)
    st = (dsv4go.dsv4_kv_write)((dsv4_ctx*)handle, (const dsv4_kv_write_args*)args);
  if (op == DSV4GO_MERGE) st = (dsv4go.dsv4_merge)((dsv4_ctx*)handle, (const dsv4_merge_args*)args);
  if (op == DSV4GO_EXPORT)
    st = (dsv4go.dsv4_export_indices)((const dsv4_plan*)handle, (const dsv4_export_args*)args);
  st = dsv4go_result(st, m);
  for (i = 0; i < DSV4GO_TENSORS; ++i)
    if (data[i] != NULL) tensors[i].data = NULL;
  if (workspace != NULL) run_args->workspace = NULL;
  return st;
}

dsv4_status dsv4go_run_args_init(dsv4_run_args* a, char* m) {
  return dsv4go_result((dsv4go.dsv4_run_args_init)(a, sizeof *a), m);
}
dsv4_status dsv4go_kv_write_args_init(dsv4_kv_write_args* a, char* m) {
  return dsv4go_result((dsv4go.dsv4_kv_write_args_init)(a, sizeof *a), m);
}
dsv4_status dsv4go_merge_args_init(dsv4_merge_args* a, char* m) {
  return dsv4go_result((dsv4go.dsv4_merge_args_init)(a, sizeof *a), m);
}
dsv4_status dsv4go_export_args_init(dsv4_export_args* a, char* m) {
  return dsv4go_result((dsv4go.dsv4_export_args_init)(a, sizeof *a), m);
}
