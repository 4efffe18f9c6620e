// The HIP module's view of its platform: the few HIP runtime calls and device intrinsics its code
// uses, for the three ways its one source is built.
//   AMD (default):        the HIP headers; the runtime itself is opened at run time (runtime.cpp).
//   DSV4_HIP_ON_NVIDIA:   nvcc 13 with the CUDA runtime under the HIP names used here (a test
//                         artefact: Debian's hip/nvidia_detail 5.2 does not compile under CUDA 13).
//   DSV4_HIP_EMULATOR:    a host compiler and the CPU emulator of emu/emu.h (a test artefact that
//                         runs the kernels here against the float64 reference).
// Device code sees threadIdx/blockIdx/blockDim/gridDim, __syncthreads, DSV4_DEV, DSV4_KERNEL,
// DSV4_DYNAMIC_SMEM and the helpers in namespace dsv4::hip below; kernels declare no static
// __shared__ variables (the emulator has the dynamic arena only).
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(DSV4_HIP_EMULATOR)
#include "emu/emu.h"
#elif defined(DSV4_HIP_ON_NVIDIA)
#include <cuda_runtime.h>
#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif
#else
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#else
#include <hip/hip_runtime_api.h>
#endif
#endif

// ------------------------------------------------------------------------------------------------
// Runtime names
// ------------------------------------------------------------------------------------------------
#if defined(DSV4_HIP_EMULATOR)
typedef int hipError_t;
typedef void* hipStream_t;
using dim3 = ::dsv4::emu::dim3;
constexpr hipError_t hipSuccess = 0;
constexpr hipError_t hipErrorInvalidValue = 1;
constexpr hipError_t hipErrorLaunchFailure = 719;
inline const char* hipGetErrorName(hipError_t e) {
  return e == hipSuccess              ? "hipSuccess"
         : e == hipErrorLaunchFailure ? "hipErrorLaunchFailure"
                                      : "hipErrorInvalidValue";
}
inline const char* hipGetErrorString(hipError_t e) {
  return e == hipErrorLaunchFailure ? ::dsv4::emu::last_error() : hipGetErrorName(e);
}
inline hipError_t hipGetDeviceCount(int* n) {
  *n = 1;
  return hipSuccess;
}
inline hipError_t hipGetDevice(int* d) {
  *d = 0;
  return hipSuccess;
}
inline hipError_t hipSetDevice(int d) { return d == 0 ? hipSuccess : hipErrorInvalidValue; }
inline hipError_t hipGetLastError() { return hipSuccess; }
#elif defined(DSV4_HIP_ON_NVIDIA)
typedef cudaError_t hipError_t;
typedef cudaStream_t hipStream_t;
#define hipSuccess cudaSuccess
#define hipErrorInvalidValue cudaErrorInvalidValue
#define hipGetErrorName cudaGetErrorName
#define hipGetErrorString cudaGetErrorString
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDevice cudaGetDevice
#define hipSetDevice cudaSetDevice
#define hipGetLastError cudaGetLastError
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpy cudaMemcpy
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#endif

namespace dsv4 {
namespace hip {

// What the module needs to know about a device.
struct device_attributes {
  int compute_units = 0;
  int max_shared_per_block = 0;  // bytes of dynamic shared memory one block may use
  int warp_size = 0;
  int64_t memory_bytes = 0;
  char name[96] = {0};
};

inline hipError_t query_device(int device, device_attributes* a) {
#if defined(DSV4_HIP_EMULATOR)
  if (device != 0) return hipErrorInvalidValue;
  const emu::device_props& p = emu::props();
  a->compute_units = p.compute_units;
  a->max_shared_per_block = p.max_shared_per_block;
  a->warp_size = p.warp_size;
  a->memory_bytes = int64_t{1} << 34;
  snprintf(a->name, sizeof a->name, "HIP emulator on the CPU (wave%d%s)", p.warp_size,
           p.mfma ? ", matrix cores" : "");
  return hipSuccess;
#elif defined(DSV4_HIP_ON_NVIDIA)
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) return e;
  a->compute_units = prop.multiProcessorCount;
  a->max_shared_per_block = static_cast<int>(prop.sharedMemPerBlockOptin);
  a->warp_size = prop.warpSize;
  a->memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  snprintf(a->name, sizeof a->name, "%.60s (sm_%d%d, HIP source on NVIDIA)", prop.name, prop.major,
           prop.minor);
  return cudaSuccess;
#else
  hipError_t e =
      hipDeviceGetAttribute(&a->compute_units, hipDeviceAttributeMultiprocessorCount, device);
  if (e == hipSuccess)
    e = hipDeviceGetAttribute(&a->max_shared_per_block, hipDeviceAttributeMaxSharedMemoryPerBlock,
                              device);
  if (e == hipSuccess) e = hipDeviceGetAttribute(&a->warp_size, hipDeviceAttributeWarpSize, device);
  size_t bytes = 0;
  if (e == hipSuccess) e = hipDeviceTotalMem(&bytes, device);
  a->memory_bytes = static_cast<int64_t>(bytes);
  if (e == hipSuccess) e = hipDeviceGetName(a->name, static_cast<int>(sizeof a->name), device);
  return e;
#endif
}

}  // namespace hip
}  // namespace dsv4

// ------------------------------------------------------------------------------------------------
// Device side (kernel sources only)
// ------------------------------------------------------------------------------------------------
#if defined(DSV4_HIP_EMULATOR)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define threadIdx (::dsv4::emu::thread_idx())
#define blockIdx (::dsv4::emu::block_idx())
#define blockDim (::dsv4::emu::block_dim())
#define gridDim (::dsv4::emu::grid_dim())
#define warpSize (::dsv4::emu::warp_size())
#define __syncthreads() ::dsv4::emu::sync_block()
#define DSV4_KERNEL_BOUNDS(threads)
#define DSV4_KERNEL_BOUNDS_MIN(threads, blocks)
#define DSV4_DYNAMIC_SMEM(name) uint8_t* const name = ::dsv4::emu::dynamic_smem()
struct alignas(16) uint4 {
  uint32_t x, y, z, w;
};
struct alignas(8) uint2 {
  uint32_t x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
#define DSV4_DEVICE_CODE 1
#elif defined(__CUDACC__) || defined(__HIPCC__)
#define DSV4_KERNEL_BOUNDS(threads) __launch_bounds__(threads)
// Also at least `blocks` resident blocks per SM (NVIDIA: caps the registers). HIP's second bound
// means something else (waves per EU), so AMD builds take the thread bound only.
#if defined(DSV4_HIP_ON_NVIDIA)
#define DSV4_KERNEL_BOUNDS_MIN(threads, blocks) __launch_bounds__(threads, blocks)
#else
#define DSV4_KERNEL_BOUNDS_MIN(threads, blocks) __launch_bounds__(threads)
#endif
#define DSV4_DYNAMIC_SMEM(name) extern __shared__ __attribute__((aligned(16))) uint8_t name[]
#define DSV4_DEVICE_CODE 1
#endif

#if defined(DSV4_DEVICE_CODE)
#define DSV4_DEV __device__ __forceinline__

namespace dsv4 {
namespace hip {

// Lane exchange inside aligned groups of up to 32 lanes (the same on wave32 and wave64).
DSV4_DEV float shfl_xor(float v, int lane_mask) {
#if defined(DSV4_HIP_EMULATOR)
  uint32_t u;
  memcpy(&u, &v, 4);
  u = emu::shfl_xor32(u, lane_mask);
  memcpy(&v, &u, 4);
  return v;
#elif defined(DSV4_HIP_ON_NVIDIA)
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
#else
  return __shfl_xor(v, lane_mask, 32);
#endif
}

// binary16 bits -> fp32 (exact).
DSV4_DEV float half_bits_to_float(uint16_t h);

// 2 e4m3fn bytes (low byte first) -> their values as two binary16 bit patterns, exactly, on
// hardware that converts them (NVIDIA sm_89+); DSV4_HIP_HW_FP8 says whether it does.
#if defined(DSV4_HIP_ON_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define DSV4_HIP_HW_FP8 1
DSV4_DEV uint32_t e4m3x2_to_f16x2(uint16_t pair) {
  uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(pair));
  return h2;
}
#else
#define DSV4_HIP_HW_FP8 0
#endif

DSV4_DEV float half_bits_to_float(uint16_t h) {
#if defined(DSV4_HIP_EMULATOR)
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1fu) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp == 0) {
    float mag = static_cast<float>(man) * (1.0f / 16777216.0f);
    memcpy(&u, &mag, 4);
    u |= sign;
  } else {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
#elif defined(DSV4_HIP_ON_NVIDIA)
  return __half2float(__ushort_as_half(h));
#else
  return static_cast<float>(__builtin_bit_cast(_Float16, h));
#endif
}

// 32-bit high half of a 32x32-bit product.
DSV4_DEV uint32_t umulhi(uint32_t a, uint32_t b) {
#if defined(DSV4_HIP_EMULATOR)
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#else
  return __umulhi(a, b);
#endif
}

}  // namespace hip
}  // namespace dsv4

// Enqueues kernel<<<grid, block, smem, stream>>>(args...); the emulator runs it at once.
template <class... P, class... A>
inline hipError_t dsv4_hip_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                                  hipStream_t stream, const A&... args) {
#if defined(DSV4_HIP_EMULATOR)
  (void)stream;
  const int rc = ::dsv4::emu::launch(grid, block, smem, [&] { kernel(args...); });
  return rc == 0 ? hipSuccess : hipErrorLaunchFailure;
#else
  // clang-format off
  kernel<<<grid, block, smem, stream>>>(args...);
  // clang-format on
  return hipGetLastError();
#endif
}

// Lets `kernel` use up to `bytes` of dynamic shared memory (NVIDIA needs it above 48 KB).
template <class... P>
inline hipError_t dsv4_hip_allow_smem(void (*kernel)(P...), size_t bytes) {
#if defined(DSV4_HIP_ON_NVIDIA)
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(bytes));
#else
  (void)kernel;
  (void)bytes;
  return hipSuccess;
#endif
}

// Blocks of `kernel` one compute unit holds at once (1 when the runtime cannot tell).
template <class... P>
inline int dsv4_hip_blocks_per_cu(void (*kernel)(P...), int threads, size_t smem) {
#if defined(DSV4_HIP_EMULATOR)
  (void)kernel;
  (void)threads;
  const size_t lds = static_cast<size_t>(::dsv4::emu::props().max_shared_per_block);
  return smem == 0 ? 4 : static_cast<int>(lds / smem > 0 ? lds / smem : 1);
#else
  int n = 0;
#if defined(DSV4_HIP_ON_NVIDIA)
  const hipError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem);
#else
  const hipError_t e = hipOccupancyMaxActiveBlocksPerMultiprocessor(
      &n, reinterpret_cast<const void*>(kernel), threads, smem);
#endif
  return e == hipSuccess && n > 0 ? n : 1;
#endif
}
#endif  // DSV4_DEVICE_CODE
