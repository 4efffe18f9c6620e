// Test-only entry points over the kernels' device functions (tests/opencl/agreement_test.cpp).
__kernel void t_sizes(__global long* out) {
  out[0] = sizeof(dsv4_cl_attention_params);
  out[1] = sizeof(dsv4_cl_paged_params);
  out[2] = sizeof(dsv4_cl_export_params);
  out[3] = sizeof(dsv4_cl_kv_write_params);
  out[4] = sizeof(dsv4_cl_merge_params);
}

// Every byte: e4m3fn, e4m3fnuz and UE8M0 decodes.
__kernel void t_codec_u8(__global float* out) {
  const uint i = (uint)get_global_id(0);
  out[i] = dsv4_fp8_e4m3_to_f32((uchar)i);
  out[256 + i] = dsv4_fp8_e4m3fnuz_to_f32((uchar)i);
  out[512 + i] = dsv4_ue8m0_to_f32((uchar)i);
}

// Every 16-bit pattern: bf16 and fp16 decodes.
__kernel void t_codec_u16(__global float* out) {
  const uint i = (uint)get_global_id(0);
  out[i] = dsv4_bf16_to_f32((ushort)i);
  out[65536 + i] = dsv4_fp16_to_f32((ushort)i);
}

// Narrowing of arbitrary fp32 values, and ceil_log2 of positive ones.
__kernel void t_codec_f32(__global const float* x, __global ushort* bf16, __global ushort* fp16,
                          __global uchar* fp8, __global int* clog2) {
  const long i = get_global_id(0);
  const float v = x[i];
  bf16[i] = dsv4_f32_to_bf16(v);
  fp16[i] = dsv4_f32_to_fp16(v);
  fp8[i] = dsv4_f32_to_fp8_e4m3(v);
  const float a = fabs(v);
  clog2[i] = (a > 0.0f && a < INFINITY) ? dsv4_ceil_log2(a) : 0;
}

// Every dim of `entries` entries of a cache (slot e), dequantised.
__kernel void t_dequant(__global const uchar* cache, __global float* out, const uint layout,
                        const uint flags, const long block_size, const long block_stride,
                        const int dqk) {
  const long i = get_global_id(0);
  const long e = i / dqk;
  const int d = (int)(i % dqk);
  out[i] = dsv4_dequant_dim(layout, flags, cache + (e / block_size) * block_stride, block_size,
                            e % block_size, d);
}
