/*
 * Fake backend modules for the loader tests, built from this one source with -D switches (the
 * Vulkan-loader test-ICD pattern). Each variant is its own MODULE library,
 * libdsv4-fake_<variant>.so, in its own directory, so a test points options.module_dir at exactly
 * one failure mode.
 *
 *   FAKE_NAME          module name reported in the table ("fake_ok", ...)
 *   FAKE_SCORE         probe score (default 5)
 *   FAKE_DEVICE_TYPE   device type served (default DSV4_DEVICE_CPU)
 *   FAKE_NO_ENTRY      export no entry symbol at all
 *   FAKE_ABI_OLD_MAJOR answer module ABI 1.0 (a module built for libdsv4 0.1)
 *   FAKE_ABI_MINOR_NEW module speaks 2.7 and answers min(host, module) as the contract says
 *   FAKE_PROBE_ZERO    probe score 0 with a reason
 *   FAKE_CTX_FAIL      ctx_create returns DSV4_STATUS_BACKEND_ERROR
 *   FAKE_IFACE_SMALL   table struct_size smaller than the 1.0 table
 *   FAKE_ENTRY_FAILS   the entry returns DSV4_STATUS_ABI_MISMATCH
 *   FAKE_NEEDS_DEP     calls into a shared library the loader cannot find (dlopen fails)
 *
 * Plans are not supported (UNSUPPORTED): the loader tests only need selection and ctx_create.
 */
#include <stdio.h>
#include <string.h>

#include "dsv4_backend.h"

#ifndef FAKE_NAME
#error "FAKE_NAME must be defined"
#endif
#ifndef FAKE_SCORE
#define FAKE_SCORE 5
#endif
#ifndef FAKE_DEVICE_TYPE
#define FAKE_DEVICE_TYPE DSV4_DEVICE_CPU
#endif

#ifdef FAKE_ABI_MINOR_NEW
#define FAKE_MODULE_ABI ((DSV4_MODULE_ABI_MAJOR << 16) | 7u)
#else
#define FAKE_MODULE_ABI DSV4_MODULE_ABI_VERSION
#endif

#ifdef FAKE_NEEDS_DEP
int dsv4_fake_dep_value(void); /* defined in fake_dep.c, a library the loader cannot find */
#endif

static const dsv4_host_services* g_host;
static int g_ctx_token; /* address used as the module context */

static dsv4_status fake_probe(int32_t* out_score, int32_t* out_device_count, char* reason,
                              size_t reason_capacity) {
#ifdef FAKE_PROBE_ZERO
  *out_score = 0;
  *out_device_count = 0;
  snprintf(reason, reason_capacity, "fake device absent");
#else
  *out_score = FAKE_SCORE;
#ifdef FAKE_NEEDS_DEP
  *out_score += dsv4_fake_dep_value() * 0;
#endif
  *out_device_count = 1;
  snprintf(reason, reason_capacity, "ok");
#endif
  return DSV4_STATUS_OK;
}

static dsv4_status fake_get_device_info(int32_t index, dsv4_device_info* out_info) {
  if (index != 0) {
    if (g_host) g_host->set_error("index: fake modules have one device");
    return DSV4_STATUS_INVALID_ARGUMENT;
  }
  out_info->device_type = FAKE_DEVICE_TYPE;
  out_info->device_id = 0;
  out_info->compute_units = 1;
  out_info->memory_bytes = 0;
  snprintf(out_info->name, sizeof(out_info->name), "%s device", FAKE_NAME);
  return DSV4_STATUS_OK;
}

static dsv4_status fake_ctx_create(const dsv4_mod_ctx_config* config, void** out_mctx) {
  (void)config;
#ifdef FAKE_CTX_FAIL
  (void)out_mctx;
  (void)g_ctx_token;
  if (g_host) g_host->set_error("fake ctx_create failure");
  return DSV4_STATUS_BACKEND_ERROR;
#else
  *out_mctx = &g_ctx_token;
  return DSV4_STATUS_OK;
#endif
}

static void fake_ctx_destroy(void* mctx) { (void)mctx; }

static dsv4_status fake_plan_create(void* mctx, const dsv4_mod_plan* plan, void** out_mplan) {
  (void)mctx;
  (void)plan;
  (void)out_mplan;
  if (g_host) g_host->set_error("fake modules have no kernels");
  return DSV4_STATUS_UNSUPPORTED;
}

static void fake_plan_destroy(void* mplan) { (void)mplan; }

static dsv4_status fake_plan_get_workspace_size(const void* mplan, size_t* out_bytes) {
  (void)mplan;
  *out_bytes = 0;
  return DSV4_STATUS_OK;
}

static dsv4_status fake_plan_get_kernel_name(const void* mplan, char* buffer, size_t capacity) {
  (void)mplan;
  snprintf(buffer, capacity, "none");
  return DSV4_STATUS_OK;
}

static dsv4_status fake_run(const void* mplan, const dsv4_mod_run* run) {
  (void)mplan;
  (void)run;
  return DSV4_STATUS_UNSUPPORTED;
}

static dsv4_status fake_kv_write(void* mctx, const dsv4_mod_kv_write* write) {
  (void)mctx;
  (void)write;
  return DSV4_STATUS_UNSUPPORTED;
}

static const dsv4_backend_iface g_iface = {
#ifdef FAKE_IFACE_SMALL
    (uint32_t)offsetof(dsv4_backend_iface, kv_write), /* a table that stops before 2.0 ends */
#else
    (uint32_t)sizeof(dsv4_backend_iface),
#endif
    FAKE_MODULE_ABI,
    FAKE_NAME,
    "fake 1.0",
    FAKE_DEVICE_TYPE,
    0,
    fake_probe,
    fake_get_device_info,
    fake_ctx_create,
    fake_ctx_destroy,
    fake_plan_create,
    fake_plan_destroy,
    fake_plan_get_workspace_size,
    fake_plan_get_kernel_name,
    fake_run,
    fake_kv_write,
    NULL, /* export_indices: optional */
    NULL, /* merge: optional */
};

#ifdef FAKE_NO_ENTRY
#define FAKE_ENTRY_VISIBILITY static __attribute__((unused)) /* exports nothing */
#else
#define FAKE_ENTRY_VISIBILITY DSV4_MODULE_EXPORT
#endif

FAKE_ENTRY_VISIBILITY dsv4_status dsv4_backend_entry(uint32_t* inout_abi_version,
                                                     const dsv4_host_services* host,
                                                     const dsv4_backend_iface** out_iface);

FAKE_ENTRY_VISIBILITY dsv4_status dsv4_backend_entry(uint32_t* inout_abi_version,
                                                     const dsv4_host_services* host,
                                                     const dsv4_backend_iface** out_iface) {
  g_host = host;
#ifdef FAKE_ENTRY_FAILS
  (void)inout_abi_version;
  (void)out_iface;
  (void)g_iface;
  return DSV4_STATUS_ABI_MISMATCH;
#else
#ifdef FAKE_ABI_OLD_MAJOR
  /* A module built for module ABI 1.x (libdsv4 0.1) answers with its own major. */
  *inout_abi_version = 1u << 16;
#else
  if ((*inout_abi_version >> 16) != (FAKE_MODULE_ABI >> 16)) return DSV4_STATUS_ABI_MISMATCH;
  if (*inout_abi_version > FAKE_MODULE_ABI) *inout_abi_version = FAKE_MODULE_ABI;
#endif
  *out_iface = &g_iface;
  return DSV4_STATUS_OK;
#endif
}
