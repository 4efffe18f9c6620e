// Host/device qualifiers so the shared kernel maths compiles for CPU, CUDA and HIP.
#pragma once

#if defined(__CUDACC__)
#define DSV4_HD __host__ __device__ __forceinline__
#elif defined(__HIPCC__)
// HIP-Clang knows __host__ / __device__ by itself; __forceinline__ comes from the HIP headers,
// which the shared headers do not include.
#define DSV4_HD __host__ __device__ inline __attribute__((always_inline))
#else
#define DSV4_HD inline
#endif
