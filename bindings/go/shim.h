/* The C side of the Go binding: libdsv4's functions resolved with dlsym, and shims that make each
 * call and copy the thread-local error message in the same cgo call. */
#ifndef DSV4GO_SHIM_H
#define DSV4GO_SHIM_H

#include <dsv4/dsv4_paged.h>
#include <stddef.h>
#include <stdint.h>

enum { DSV4GO_MESSAGE = 1024 };
enum {
  DSV4GO_TENSORS = 24,
  DSV4GO_RUN = 0,
  DSV4GO_KV_WRITE = 1,
  DSV4GO_EXPORT = 2,
  DSV4GO_MERGE = 3
};

/* One call's C-side structs: the arguments, the tensors and their shapes and strides. */
typedef struct dsv4go_arena {
  dsv4_run_args run;
  dsv4_export_args export_args;
  dsv4_kv_write_args kv_write;
  dsv4_merge_args merge;
  dsv4_tensor tensors[DSV4GO_TENSORS];
  int64_t dims[DSV4GO_TENSORS][16];
} dsv4go_arena;

int dsv4go_symbol_count(void);
const char* dsv4go_symbol(int i);
int dsv4go_load(const char* path, char* message);
dsv4_status dsv4go_ctx_options_init(dsv4_ctx_options* o, char* m);
dsv4_status dsv4go_plan_options_init(dsv4_plan_options* o, char* m);
dsv4_status dsv4go_ctx_create(const dsv4_ctx_options* o, dsv4_ctx** out, char* m);
void dsv4go_ctx_destroy(dsv4_ctx* c);
dsv4_status dsv4go_ctx_get_info(const dsv4_ctx* c, dsv4_ctx_info* info, char* m);
dsv4_status dsv4go_plan_create(dsv4_ctx* c, const dsv4_plan_options* o, dsv4_plan** out, char* m);
void dsv4go_plan_destroy(dsv4_plan* p);
dsv4_status dsv4go_plan_get_workspace_size(const dsv4_plan* p, size_t* out, char* m);
dsv4_status dsv4go_plan_get_info(const dsv4_plan* p, dsv4_plan_info* info, char* m);
dsv4_status dsv4go_kv_layout_get_info(uint32_t layout, int32_t block, dsv4_kv_layout_info* info,
                                      char* m);
dsv4_status dsv4go_enumerate_backends(const dsv4_ctx_options* o, dsv4_backend_info* out,
                                      int32_t capacity, int32_t* count, char* m);
dsv4_status dsv4go_get_device_info(const dsv4_ctx_options* o, const char* backend, int32_t index,
                                   dsv4_device_info* info, char* m);
uint32_t dsv4go_get_version(void);
const char* dsv4go_get_version_string(void);
const char* dsv4go_status_string(dsv4_status s);
dsv4_status dsv4go_run_args_init(dsv4_run_args* a, char* m);
dsv4_status dsv4go_kv_write_args_init(dsv4_kv_write_args* a, char* m);
dsv4_status dsv4go_export_args_init(dsv4_export_args* a, char* m);
dsv4_status dsv4go_merge_args_init(dsv4_merge_args* a, char* m);
void dsv4go_set_address(dsv4_tensor* t, uintptr_t address);
void dsv4go_set_workspace(dsv4_run_args* a, uintptr_t address, size_t bytes);
void dsv4go_set_stream(void** field, uintptr_t stream);
dsv4_status dsv4go_call(int op, void* handle, void* args, dsv4_run_args* run_args,
                        dsv4_tensor* tensors, void* workspace, char* m, void* d0, void* d1,
                        void* d2, void* d3, void* d4, void* d5, void* d6, void* d7, void* d8,
                        void* d9, void* d10, void* d11, void* d12, void* d13, void* d14, void* d15,
                        void* d16, void* d17, void* d18, void* d19, void* d20, void* d21, void* d22,
                        void* d23);

#endif /* DSV4GO_SHIM_H */
