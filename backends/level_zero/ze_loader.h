// The Level Zero entry points the module calls, resolved from the loader at run time (dlopen), so
// the module loads and reports "unavailable, no Level Zero loader" where libze1 is missing, and a
// test can hand it an in-tree fake loader (DSV4_LEVEL_ZERO_LOADER).
#pragma once

#include <level_zero/ze_api.h>

namespace dsv4 {
namespace ze {

// Level Zero 1.9: the context and device of a command list (older loaders do not export them).
typedef ze_result_t (*command_list_get_context_fn)(ze_command_list_handle_t, ze_context_handle_t*);
typedef ze_result_t (*command_list_get_device_fn)(ze_command_list_handle_t, ze_device_handle_t*);

#define DSV4_ZE_FUNCTIONS(X)         \
  X(zeInit)                          \
  X(zeDriverGet)                     \
  X(zeDeviceGet)                     \
  X(zeDeviceGetProperties)           \
  X(zeContextCreate)                 \
  X(zeContextDestroy)                \
  X(zeModuleCreate)                  \
  X(zeModuleDestroy)                 \
  X(zeModuleBuildLogGetString)       \
  X(zeModuleBuildLogDestroy)         \
  X(zeKernelCreate)                  \
  X(zeKernelDestroy)                 \
  X(zeKernelSetGroupSize)            \
  X(zeKernelSetArgumentValue)        \
  X(zeCommandListAppendLaunchKernel) \
  X(zeMemGetAllocProperties)

struct api {
#define DSV4_ZE_MEMBER(name) decltype(&::name) name = nullptr;
  DSV4_ZE_FUNCTIONS(DSV4_ZE_MEMBER)
#undef DSV4_ZE_MEMBER
  command_list_get_context_fn list_context = nullptr;  // optional (Level Zero 1.9)
  command_list_get_device_fn list_device = nullptr;    // optional (Level Zero 1.9)
};

}  // namespace ze
}  // namespace dsv4
