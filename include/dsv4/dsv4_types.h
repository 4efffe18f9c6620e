/*
 * libdsv4 — DeepSeek-V4 sparse MLA attention behind a stable C ABI.
 * dsv4_types.h: status codes, DLPack-compatible tensors, KV-cache layouts, version macros.
 *
 * C99 and C++11 compatible. Every struct that crosses the ABI and may grow starts with
 * `uint32_t struct_size` and only ever grows at its end.
 */
#ifndef DSV4_TYPES_H
#define DSV4_TYPES_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#if defined(DSV4_BUILDING_LIBRARY)
#define DSV4_API __declspec(dllexport)
#else
#define DSV4_API
#endif
#elif defined(DSV4_BUILDING_LIBRARY)
#define DSV4_API __attribute__((visibility("default")))
#else
#define DSV4_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Version. The SONAME (libdsv4.so.0) carries binary compatibility; MINOR grows when symbols or
 * struct tails are added.
 * ------------------------------------------------------------------------------------------- */
#define DSV4_VERSION_MAJOR 0
#define DSV4_VERSION_MINOR 2
#define DSV4_VERSION_PATCH 0
/** Packed major*10000 + minor*100 + patch (zstd style); compare with dsv4_get_version(). */
#define DSV4_VERSION_NUMBER \
  (DSV4_VERSION_MAJOR * 10000 + DSV4_VERSION_MINOR * 100 + DSV4_VERSION_PATCH)
/** The API level of this header, passed in dsv4_ctx_options.api_version: major << 16 | minor. */
#define DSV4_API_VERSION ((uint32_t)((DSV4_VERSION_MAJOR << 16) | DSV4_VERSION_MINOR))

/* ---------------------------------------------------------------------------------------------
 * Status codes. An int32, never a C enum, so a newer library can return a value an older binding
 * does not know. 0 is success; every other value is an error. Values are never renumbered.
 * ------------------------------------------------------------------------------------------- */
typedef int32_t dsv4_status;
/** Success. */
#define DSV4_STATUS_OK ((dsv4_status)0)
/** An argument is NULL, out of range or inconsistent; dsv4_last_error_message() names it. */
#define DSV4_STATUS_INVALID_ARGUMENT ((dsv4_status)1)
/** Valid request that the chosen backend has no kernel for (layout, head dim, dtype, device). */
#define DSV4_STATUS_UNSUPPORTED ((dsv4_status)2)
/** No backend module can serve the request (none found, none available, or the named one is
 * missing). */
#define DSV4_STATUS_NO_BACKEND ((dsv4_status)3)
/** The backend's runtime reported an error (launch failure, driver error). */
#define DSV4_STATUS_BACKEND_ERROR ((dsv4_status)4)
/** Host memory for a context or plan could not be allocated. */
#define DSV4_STATUS_OUT_OF_MEMORY ((dsv4_status)5)
/** The workspace passed to dsv4_run is smaller than dsv4_plan_get_workspace_size(). */
#define DSV4_STATUS_WORKSPACE_TOO_SMALL ((dsv4_status)6)
/** Run arguments disagree with the plan (shape, dtype, layout, capacity); the message names the
 *  field. Build a new plan; do not retry. */
#define DSV4_STATUS_PLAN_MISMATCH ((dsv4_status)7)
/** Struct sizes or API versions that this library cannot read (a header newer than the library). */
#define DSV4_STATUS_ABI_MISMATCH ((dsv4_status)8)
/** A bug in libdsv4 or a backend; please report it with the message. */
#define DSV4_STATUS_INTERNAL ((dsv4_status)9)

/* ---------------------------------------------------------------------------------------------
 * Tensors: laid out exactly like DLPack's DLTensor (dlpack.h 0.6 .. 1.1), so a `DLTensor*` may be
 * passed by cast. Device and dtype codes are DLPack's. Strides are in elements; NULL strides mean
 * compact row-major. Tensors are borrowed for the duration of the call (and, on GPU backends, until
 * the enqueued work completes); libdsv4 never frees caller memory. 256-byte alignment is not
 * assumed.
 * ------------------------------------------------------------------------------------------- */
typedef struct dsv4_device {
  int32_t device_type; /**< DSV4_DEVICE_* (DLDeviceType) */
  int32_t device_id;   /**< ordinal on that device type */
} dsv4_device;

#define DSV4_DEVICE_CPU 1
#define DSV4_DEVICE_CUDA 2
#define DSV4_DEVICE_CUDA_HOST 3
/** OpenCL (DLPack kDLOpenCL): tensors are SVM pointers of the context's OpenCL device. */
#define DSV4_DEVICE_OPENCL 4
#define DSV4_DEVICE_ROCM 10
#define DSV4_DEVICE_CUDA_MANAGED 13
#define DSV4_DEVICE_ONEAPI 14

typedef struct dsv4_dtype {
  uint8_t code;   /**< DSV4_DTYPE_CODE_* (DLDataTypeCode) */
  uint8_t bits;   /**< bits per lane */
  uint16_t lanes; /**< always 1 for libdsv4 */
} dsv4_dtype;

#define DSV4_DTYPE_CODE_INT 0
#define DSV4_DTYPE_CODE_UINT 1
#define DSV4_DTYPE_CODE_FLOAT 2
#define DSV4_DTYPE_CODE_BFLOAT 4
/* float16 is {DSV4_DTYPE_CODE_FLOAT, 16, 1}. */
#define DSV4_DTYPE_CODE_FLOAT8_E4M3FN 10

typedef struct dsv4_tensor {
  void* data;           /**< base pointer (device pointer for GPU tensors) */
  dsv4_device device;   /**< where data lives */
  int32_t ndim;         /**< number of dimensions */
  dsv4_dtype dtype;     /**< element type */
  int64_t* shape;       /**< ndim extents */
  int64_t* strides;     /**< ndim strides in elements, or NULL for compact row-major */
  uint64_t byte_offset; /**< added to data */
} dsv4_tensor;

/* ---------------------------------------------------------------------------------------------
 * KV-cache layouts. A cache is a layout, not a dtype: the cache tensor's dimension 0 indexes blocks
 * (its byte stride is the block stride); the inner dimensions only need to cover one block's bytes.
 * Slot s of a cache with B entries per block lives in block s / B at entry e = s % B.
 * All multi-byte values are little-endian.
 * ------------------------------------------------------------------------------------------- */
/** No cache (used for an absent extra/compressed cache). */
#define DSV4_KV_LAYOUT_NONE 0u
/** Plain bf16 row: entry e = 512 x bf16 (1024 B) at block_base + e*1024. d_qk = 512, V = K.
 *  Minimum block bytes: B*1024. Cache dtype bf16 or uint8. */
#define DSV4_KV_LAYOUT_BF16 1u
/** DeepSeek-V4 ("MODEL1") FP8, 584 B per token, block-major (spec 3.2):
 *    entry data  at block_base + e*576:  448 x e4m3fn (NoPE dims 0..447), then 64 x bf16 (RoPE
 * 448..511) entry scales at block_base + B*576 + e*8: 7 x UE8M0 exponent bytes (tile k = dims
 * 64k..64k+63, value 2^(byte-127)), 1 pad byte (0) Minimum block bytes: ceil(B*584/576)*576
 * (FlashMLA's padding), e.g. B=64 -> 37440, B=2 -> 1728. d_qk = 512, V = K. Cache dtype
 * uint8/int8/e4m3. */
#define DSV4_KV_LAYOUT_FP8_V4_584B 2u
/** DeepSeek-V3.2 FP8 with scales, 656 B per token, token-major (spec 3.5):
 *    entry at block_base + e*656: 512 x e4m3fn (NoPE 0..511, 4 tiles of 128), 4 x fp32 tile scales,
 *    64 x bf16 RoPE (dims 512..575).
 *  Minimum block bytes: B*656. d_qk = 576; V = the first 512 dims. Cache dtype uint8/int8/e4m3. */
#define DSV4_KV_LAYOUT_FP8_V32_656B 3u
/** Per-tensor FP8 row (FlashInfer TRTLLM-gen path, spec 3.4): entry e = 512 x e4m3fn (512 B) at
 *  block_base + e*512, value = fp8 * kv_scale. Minimum block bytes: B*512. d_qk = 512, V = K. */
#define DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR 4u
/** Plain fp16 row (ggml's default KV type, spec 12.1): entry e = 512 x IEEE binary16 (1024 B) at
 *  block_base + e*1024. Minimum block bytes: B*1024. d_qk = 512, V = K. Cache dtype fp16 or uint8.
 */
#define DSV4_KV_LAYOUT_FP16 5u

/** Cache flags (dsv4_kv_cache_desc.flags). */
/** The FP8 bytes are e4m3 FNUZ (bias 8, 0x80 = NaN, no -0 and no inf; ROCm's SWA encoder on
 *  gfx942, spec 3.2) instead of OCP e4m3fn. FP8 layouts only; read-only (dsv4_kv_write refuses it:
 *  engines write such caches with ROCm's own encoder). */
#define DSV4_KV_CACHE_FLAG_FP8_FNUZ 1u

/** Static description of one KV cache of a layer. */
typedef struct dsv4_kv_cache_desc {
  uint32_t layout;            /**< DSV4_KV_LAYOUT_*; NONE for an absent cache */
  int32_t block_size;         /**< entries per block (any value >= 1; e.g. 64 SWA, 64 C4, 2 C128) */
  int64_t block_stride_bytes; /**< bytes between consecutive blocks; 0 = the layout's minimum */
  float kv_scale;             /**< per-tensor FP8 layout only: dequantisation scale (default 1.0) */
  uint32_t flags; /**< DSV4_KV_CACHE_FLAG_* (0 = none; "reserved, must be 0" before 0.2) */
} dsv4_kv_cache_desc;

/** Byte geometry of a layout, from dsv4_kv_layout_get_info(). */
typedef struct dsv4_kv_layout_info {
  uint32_t struct_size;
  uint32_t layout;
  int32_t head_dim_qk;     /**< dims a key holds (512, or 576 for V3.2) */
  int32_t head_dim_v;      /**< value dims (512) */
  int32_t bytes_per_token; /**< 1024, 584, 656 or 512 */
  int32_t reserved;
  int64_t min_block_stride_bytes; /**< for the block_size asked about */
} dsv4_kv_layout_info;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DSV4_TYPES_H */
