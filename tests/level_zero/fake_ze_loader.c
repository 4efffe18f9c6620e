/* A fake Level Zero loader for tests (libdsv4-fake-ze-loader.so, given to the Level Zero module
 * through DSV4_LEVEL_ZERO_LOADER): one GPU, handles that are plain numbers, every call recorded
 * (fake_ze_calls), memory that is "USM" only while registered (fake_ze_register, fake_ze_forget),
 * and failures
 * injected by DSV4_FAKE_ZE_FAIL=<function name>. Kernel launches do nothing. */
#include <level_zero/ze_api.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_EXPORT __attribute__((visibility("default")))

static char g_calls[1 << 16];
static size_t g_used;
static struct {
  const char* p;
  size_t n;
} g_usm[256];
static int g_usm_count;
static uintptr_t g_next = 0x10000;

static void record(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void record(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (g_used < sizeof g_calls - 256) {
    g_used += (size_t)vsnprintf(g_calls + g_used, sizeof g_calls - g_used, fmt, ap);
    g_calls[g_used++] = '\n';
    g_calls[g_used] = '\0';
  }
  va_end(ap);
}

static int failing(const char* name) {
  const char* f = getenv("DSV4_FAKE_ZE_FAIL");
  return f != NULL && strcmp(f, name) == 0;
}

static void* handle(void) { return (void*)(g_next += 0x10); }

#define FAKE_DEVICE ((ze_device_handle_t)0x2000)
#define FAKE_CALLER_CONTEXT ((ze_context_handle_t)0x9000)
/* A command list handle of another device (for the device check). */
#define FAKE_FOREIGN_LIST ((ze_command_list_handle_t)0xBAD0)

FAKE_EXPORT const char* fake_ze_calls(void) { return g_calls; }
FAKE_EXPORT void fake_ze_clear(void) {
  g_used = 0;
  g_calls[0] = '\0';
}
FAKE_EXPORT void fake_ze_forget(void) { g_usm_count = 0; }
FAKE_EXPORT void fake_ze_register(const void* p, size_t n) {
  if (g_usm_count < 256) {
    g_usm[g_usm_count].p = (const char*)p;
    g_usm[g_usm_count].n = n;
    ++g_usm_count;
  }
}

FAKE_EXPORT ze_result_t zeInit(ze_init_flags_t flags) {
  record("zeInit %u", (unsigned)flags);
  return failing("zeInit") ? ZE_RESULT_ERROR_UNINITIALIZED : ZE_RESULT_SUCCESS;
}
FAKE_EXPORT ze_result_t zeDriverGet(uint32_t* count, ze_driver_handle_t* drivers) {
  record("zeDriverGet");
  if (drivers != NULL && *count >= 1) drivers[0] = (ze_driver_handle_t)0x1000;
  *count = 1;
  return ZE_RESULT_SUCCESS;
}
FAKE_EXPORT ze_result_t zeDeviceGet(ze_driver_handle_t d, uint32_t* count,
                                    ze_device_handle_t* devices) {
  (void)d;
  record("zeDeviceGet");
  if (devices != NULL && *count >= 1) devices[0] = FAKE_DEVICE;
  *count = 1;
  return ZE_RESULT_SUCCESS;
}
FAKE_EXPORT ze_result_t zeDeviceGetProperties(ze_device_handle_t d, ze_device_properties_t* p) {
  (void)d;
  record("zeDeviceGetProperties");
  p->type = ZE_DEVICE_TYPE_GPU;
  p->numSlices = 2;
  p->numSubslicesPerSlice = 4;
  snprintf(p->name, sizeof p->name, "Fake Level Zero GPU");
  return ZE_RESULT_SUCCESS;
}
FAKE_EXPORT ze_result_t zeContextCreate(ze_driver_handle_t d, const ze_context_desc_t* desc,
                                        ze_context_handle_t* out) {
  (void)d;
  (void)desc;
  *out = (ze_context_handle_t)handle();
  record("zeContextCreate");
  return ZE_RESULT_SUCCESS;
}
FAKE_EXPORT ze_result_t zeContextDestroy(ze_context_handle_t c) {
  (void)c;
  record("zeContextDestroy");
  return ZE_RESULT_SUCCESS;
}
static const char kLog[] = "fake build log: kernel rejected";
FAKE_EXPORT ze_result_t zeModuleCreate(ze_context_handle_t c, ze_device_handle_t d,
                                       const ze_module_desc_t* desc, ze_module_handle_t* out,
                                       ze_module_build_log_handle_t* log) {
  uint32_t magic = 0;
  if (desc->inputSize >= 4) memcpy(&magic, desc->pInputModule, 4);
  record("zeModuleCreate context=%s device=%s format=%d size=%zu magic=0x%08x",
         c == FAKE_CALLER_CONTEXT ? "caller" : "own", d == FAKE_DEVICE ? "gpu" : "?",
         (int)desc->format, desc->inputSize, magic);
  if (log != NULL) *log = (ze_module_build_log_handle_t)handle();
  if (failing("zeModuleCreate")) return ZE_RESULT_ERROR_MODULE_BUILD_FAILURE;
  *out = (ze_module_handle_t)handle();
  return ZE_RESULT_SUCCESS;
}
FAKE_EXPORT ze_result_t zeModuleDestroy(ze_module_handle_t m) {
  (void)m;
  record("zeModuleDestroy");
  return ZE_RESULT_SUCCESS;
}
FAKE_EXPORT ze_result_t zeModuleBuildLogGetString(ze_module_build_log_handle_t l, size_t* size,
                                                  char* text) {
  (void)l;
  if (text != NULL) memcpy(text, kLog, *size < sizeof kLog ? *size : sizeof kLog);
  *size = sizeof kLog;
  return ZE_RESULT_SUCCESS;
}
FAKE_EXPORT ze_result_t zeModuleBuildLogDestroy(ze_module_build_log_handle_t l) {
  (void)l;
  return ZE_RESULT_SUCCESS;
}
FAKE_EXPORT ze_result_t zeKernelCreate(ze_module_handle_t m, const ze_kernel_desc_t* desc,
                                       ze_kernel_handle_t* out) {
  (void)m;
  record("zeKernelCreate %s", desc->pKernelName);
  *out = (ze_kernel_handle_t)handle();
  return ZE_RESULT_SUCCESS;
}
FAKE_EXPORT ze_result_t zeKernelDestroy(ze_kernel_handle_t k) {
  (void)k;
  record("zeKernelDestroy");
  return ZE_RESULT_SUCCESS;
}
FAKE_EXPORT ze_result_t zeKernelSetGroupSize(ze_kernel_handle_t k, uint32_t x, uint32_t y,
                                             uint32_t z) {
  (void)k;
  record("zeKernelSetGroupSize %u %u %u", x, y, z);
  return ZE_RESULT_SUCCESS;
}
FAKE_EXPORT ze_result_t zeKernelSetArgumentValue(ze_kernel_handle_t k, uint32_t i, size_t size,
                                                 const void* value) {
  (void)k;
  (void)value;
  record("zeKernelSetArgumentValue %u %zu", i, size);
  return ZE_RESULT_SUCCESS;
}
FAKE_EXPORT ze_result_t zeCommandListAppendLaunchKernel(ze_command_list_handle_t l,
                                                        ze_kernel_handle_t k,
                                                        const ze_group_count_t* g,
                                                        ze_event_handle_t e, uint32_t nw,
                                                        ze_event_handle_t* w) {
  (void)l;
  (void)k;
  (void)e;
  (void)nw;
  (void)w;
  record("zeCommandListAppendLaunchKernel %u %u %u", g->groupCountX, g->groupCountY,
         g->groupCountZ);
  return ZE_RESULT_SUCCESS;
}
FAKE_EXPORT ze_result_t zeMemGetAllocProperties(ze_context_handle_t c, const void* p,
                                                ze_memory_allocation_properties_t* props,
                                                ze_device_handle_t* dev) {
  (void)c;
  int i;
  props->type = ZE_MEMORY_TYPE_UNKNOWN;
  for (i = 0; i < g_usm_count; ++i)
    if ((const char*)p >= g_usm[i].p && (const char*)p < g_usm[i].p + g_usm[i].n)
      props->type = ZE_MEMORY_TYPE_DEVICE;
  if (dev != NULL) *dev = FAKE_DEVICE;
  record("zeMemGetAllocProperties");
  return ZE_RESULT_SUCCESS;
}
FAKE_EXPORT ze_result_t zeCommandListGetContextHandle(ze_command_list_handle_t l,
                                                      ze_context_handle_t* out) {
  (void)l;
  record("zeCommandListGetContextHandle");
  *out = FAKE_CALLER_CONTEXT;
  return ZE_RESULT_SUCCESS;
}
FAKE_EXPORT ze_result_t zeCommandListGetDeviceHandle(ze_command_list_handle_t l,
                                                     ze_device_handle_t* out) {
  record("zeCommandListGetDeviceHandle");
  *out = l == FAKE_FOREIGN_LIST ? (ze_device_handle_t)0x2100 : FAKE_DEVICE;
  return ZE_RESULT_SUCCESS;
}
