// The HIP runtime, opened at run time (AMD build only). libdsv4-hip.so does not link libamdhip64:
// it would not even load where ROCm is missing, and a module linked against Debian's
// libamdhip64.so.5 would not load beside ROCm 6's libamdhip64.so.6. Instead this file defines the
// runtime entry points the module's code calls (those the compiler emits for kernel registration
// and <<<>>> launches, and the API calls of module.cpp), and forwards them to the library that
// runtime_open() finds with dlopen. Registration is recorded while the module loads and handed to
// the runtime when it is opened, so loading the module never touches the runtime; without one, the
// probe reports "unavailable" with dlopen's reason.
#include "runtime.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "platform.h"

namespace dsv4 {
namespace hip {
namespace {

// The runtime's functions this module uses (signatures of HIP 5.x and 6.x alike).
struct runtime_api {
  void** (*register_fat_binary)(const void*) = nullptr;
  void (*register_function)(void**, const void*, char*, const char*, unsigned int, void*, void*,
                            dim3*, dim3*, int*) = nullptr;
  hipError_t (*push_call_configuration)(dim3, dim3, size_t, hipStream_t) = nullptr;
  hipError_t (*pop_call_configuration)(dim3*, dim3*, size_t*, hipStream_t*) = nullptr;
  hipError_t (*launch_kernel)(const void*, dim3, dim3, void**, size_t, hipStream_t) = nullptr;
  hipError_t (*get_last_error)() = nullptr;
  const char* (*get_error_name)(hipError_t) = nullptr;
  const char* (*get_error_string)(hipError_t) = nullptr;
  hipError_t (*get_device_count)(int*) = nullptr;
  hipError_t (*get_device)(int*) = nullptr;
  hipError_t (*set_device)(int) = nullptr;
  hipError_t (*device_get_attribute)(int*, hipDeviceAttribute_t, int) = nullptr;
  hipError_t (*device_total_mem)(size_t*, hipDevice_t) = nullptr;
  hipError_t (*device_get_name)(char*, int, hipDevice_t) = nullptr;
  hipError_t (*malloc)(void**, size_t) = nullptr;
  hipError_t (*free)(void*) = nullptr;
  hipError_t (*memcpy)(void*, const void*, size_t, hipMemcpyKind) = nullptr;
  hipError_t (*occupancy)(int*, const void*, int, size_t) = nullptr;
};

// Registrations the compiler-generated constructors made before the runtime was opened.
struct fat_binary {
  const void* data;
  void** runtime_handle = nullptr;
};
struct kernel_registration {
  size_t binary;  // index into g_binaries
  const void* host_function;
  char* device_function;
  const char* device_name;
  unsigned int thread_limit;
};

// What the module's constructors register at dlopen, in fixed storage: nothing there may allocate
// (a bad_alloc out of a constructor would end the process). Registrations beyond the storage leave
// the runtime unavailable.
constexpr size_t kMaxBinaries = 64;
constexpr size_t kMaxKernels = 1024;
fat_binary g_binaries[kMaxBinaries];
size_t g_num_binaries = 0;
kernel_registration g_kernels[kMaxKernels];
size_t g_num_kernels = 0;
bool g_registration_overflow = false;
// Handles given to the constructors: each points at its binary's index.
size_t g_handle_slots[kMaxBinaries];

runtime_api g_api;
bool g_open = false;
std::string g_reason;  // empty until open_once: a static initializer must not allocate
std::once_flag g_once;

template <class F>
bool resolve(void* lib, const char* name, F* out, std::string* missing) {
  dlerror();
  void* sym = dlsym(lib, name);
  if (sym == nullptr) {
    if (!missing->empty()) *missing += ", ";
    *missing += name;
    return false;
  }
  static_assert(sizeof(F) == sizeof(void*), "function pointer size");
  std::memcpy(out, &sym, sizeof sym);
  return true;
}

void open_once(const char* override_path) {
  if (g_registration_overflow) {
    g_reason = "more kernels than the module's registration storage holds";
    return;
  }
  const char* candidates[] = {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5",
                              "/opt/rocm/lib/libamdhip64.so"};
  const bool forced = override_path != nullptr && override_path[0] != '\0';
  void* lib = nullptr;
  std::string tried;
  for (const char* name : candidates) {
    if (forced) name = override_path;  // the one library asked for, nothing else
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
    const char* why = dlerror();
    if (tried.empty()) tried = why != nullptr ? why : name;
    if (forced) break;
  }
  if (lib == nullptr) {
    g_reason = "no HIP runtime (libamdhip64): " + tried;
    return;
  }
  std::string missing;
  runtime_api a;
  bool ok = resolve(lib, "__hipRegisterFatBinary", &a.register_fat_binary, &missing);
  ok &= resolve(lib, "__hipRegisterFunction", &a.register_function, &missing);
  ok &= resolve(lib, "__hipPushCallConfiguration", &a.push_call_configuration, &missing);
  ok &= resolve(lib, "__hipPopCallConfiguration", &a.pop_call_configuration, &missing);
  ok &= resolve(lib, "hipLaunchKernel", &a.launch_kernel, &missing);
  ok &= resolve(lib, "hipGetLastError", &a.get_last_error, &missing);
  ok &= resolve(lib, "hipGetErrorName", &a.get_error_name, &missing);
  ok &= resolve(lib, "hipGetErrorString", &a.get_error_string, &missing);
  ok &= resolve(lib, "hipGetDeviceCount", &a.get_device_count, &missing);
  ok &= resolve(lib, "hipGetDevice", &a.get_device, &missing);
  ok &= resolve(lib, "hipSetDevice", &a.set_device, &missing);
  ok &= resolve(lib, "hipDeviceGetAttribute", &a.device_get_attribute, &missing);
  ok &= resolve(lib, "hipDeviceTotalMem", &a.device_total_mem, &missing);
  ok &= resolve(lib, "hipDeviceGetName", &a.device_get_name, &missing);
  ok &= resolve(lib, "hipMalloc", &a.malloc, &missing);
  ok &= resolve(lib, "hipFree", &a.free, &missing);
  ok &= resolve(lib, "hipMemcpy", &a.memcpy, &missing);
  ok &= resolve(lib, "hipOccupancyMaxActiveBlocksPerMultiprocessor", &a.occupancy, &missing);
  if (!ok) {
    g_reason = "the HIP runtime lacks " + missing;
    return;  // the library stays loaded (never unloaded, like every module dependency)
  }
  for (size_t i = 0; i < g_num_binaries; ++i)
    g_binaries[i].runtime_handle = a.register_fat_binary(g_binaries[i].data);
  for (size_t i = 0; i < g_num_kernels; ++i) {
    const kernel_registration& k = g_kernels[i];
    a.register_function(g_binaries[k.binary].runtime_handle, k.host_function, k.device_function,
                        k.device_name, k.thread_limit, nullptr, nullptr, nullptr, nullptr, nullptr);
  }
  g_api = a;
  g_open = true;
  g_reason.clear();
}

bool api_ready() {
  // Calls before runtime_open() (none in this module) find no runtime.
  return g_open;
}

}  // namespace

bool runtime_open(const char* override_path, std::string* reason) {
  std::call_once(g_once, open_once, override_path);
  if (!g_open && reason != nullptr)
    *reason = g_reason.empty() ? "the HIP runtime was not opened" : g_reason;
  return g_open;
}

}  // namespace hip
}  // namespace dsv4

using dsv4::hip::g_api;

extern "C" {

// Called by the module's own constructors (one per kernel source), before any runtime exists.
void** __hipRegisterFatBinary(const void* data) {
  const size_t index = dsv4::hip::g_num_binaries;
  if (index >= dsv4::hip::kMaxBinaries) {
    dsv4::hip::g_registration_overflow = true;
    return nullptr;
  }
  dsv4::hip::g_binaries[index] = dsv4::hip::fat_binary{data};
  dsv4::hip::g_num_binaries = index + 1;
  dsv4::hip::g_handle_slots[index] = index;
  return reinterpret_cast<void**>(&dsv4::hip::g_handle_slots[index]);
}

void __hipRegisterFunction(void** modules, const void* host_function, char* device_function,
                           const char* device_name, unsigned int thread_limit, void*, void*, dim3*,
                           dim3*, int*) {
  if (modules == nullptr) return;
  const size_t index = *reinterpret_cast<size_t*>(modules);
  if (dsv4::hip::g_num_kernels >= dsv4::hip::kMaxKernels) {
    dsv4::hip::g_registration_overflow = true;
    return;
  }
  dsv4::hip::g_kernels[dsv4::hip::g_num_kernels++] = dsv4::hip::kernel_registration{
      index, host_function, device_function, device_name, thread_limit};
}

// The module is never unloaded; at process exit the runtime may already be gone.
void __hipUnregisterFatBinary(void**) {}

hipError_t __hipPushCallConfiguration(dim3 grid, dim3 block, size_t shared_mem,
                                      hipStream_t stream) {
  if (!dsv4::hip::api_ready()) return hipErrorNotInitialized;
  return g_api.push_call_configuration(grid, block, shared_mem, stream);
}

hipError_t __hipPopCallConfiguration(dim3* grid, dim3* block, size_t* shared_mem,
                                     hipStream_t* stream) {
  if (!dsv4::hip::api_ready()) return hipErrorNotInitialized;
  return g_api.pop_call_configuration(grid, block, shared_mem, stream);
}

hipError_t hipLaunchKernel(const void* function, dim3 grid, dim3 block, void** args,
                           size_t shared_mem, hipStream_t stream) {
  if (!dsv4::hip::api_ready()) return hipErrorNotInitialized;
  return g_api.launch_kernel(function, grid, block, args, shared_mem, stream);
}

hipError_t hipGetLastError(void) {
  return dsv4::hip::api_ready() ? g_api.get_last_error() : hipErrorNotInitialized;
}

const char* hipGetErrorName(hipError_t e) {
  return dsv4::hip::api_ready() ? g_api.get_error_name(e) : "hipErrorNotInitialized";
}

const char* hipGetErrorString(hipError_t e) {
  return dsv4::hip::api_ready() ? g_api.get_error_string(e) : "the HIP runtime is not loaded";
}

hipError_t hipGetDeviceCount(int* count) {
  return dsv4::hip::api_ready() ? g_api.get_device_count(count) : hipErrorNotInitialized;
}

hipError_t hipGetDevice(int* device) {
  return dsv4::hip::api_ready() ? g_api.get_device(device) : hipErrorNotInitialized;
}

hipError_t hipSetDevice(int device) {
  return dsv4::hip::api_ready() ? g_api.set_device(device) : hipErrorNotInitialized;
}

hipError_t hipDeviceGetAttribute(int* value, hipDeviceAttribute_t attr, int device) {
  return dsv4::hip::api_ready() ? g_api.device_get_attribute(value, attr, device)
                                : hipErrorNotInitialized;
}

hipError_t hipDeviceTotalMem(size_t* bytes, hipDevice_t device) {
  return dsv4::hip::api_ready() ? g_api.device_total_mem(bytes, device) : hipErrorNotInitialized;
}

hipError_t hipDeviceGetName(char* name, int len, hipDevice_t device) {
  return dsv4::hip::api_ready() ? g_api.device_get_name(name, len, device) : hipErrorNotInitialized;
}

hipError_t hipMalloc(void** ptr, size_t size) {
  return dsv4::hip::api_ready() ? g_api.malloc(ptr, size) : hipErrorNotInitialized;
}

hipError_t hipFree(void* ptr) {
  return dsv4::hip::api_ready() ? g_api.free(ptr) : hipErrorNotInitialized;
}

hipError_t hipMemcpy(void* dst, const void* src, size_t bytes, hipMemcpyKind kind) {
  return dsv4::hip::api_ready() ? g_api.memcpy(dst, src, bytes, kind) : hipErrorNotInitialized;
}

hipError_t hipOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* function,
                                                        int block_size, size_t shared_mem) {
  return dsv4::hip::api_ready() ? g_api.occupancy(blocks, function, block_size, shared_mem)
                                : hipErrorNotInitialized;
}

}  // extern "C"
