// Host/device qualifiers so the shared kernel maths compiles for CPU, CUDA and HIP.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define DSV4_HD __host__ __device__ __forceinline__
#else
#define DSV4_HD inline
#endif
