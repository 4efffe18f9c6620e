package dsv4

// #include "shim.h"
import "C"

import "unsafe"

// The layout of every public struct as this package's cgo sees it, the constants it declares by
// C name, and the functions it resolves: the ABI test compares them with the C compiler's table
// (tests/abi/gen_abi_table.py), so that a struct, field, constant or function the header gains is
// noticed here.

type fieldLayout struct {
	name         string
	offset, size uintptr
}

type structLayout struct {
	name        string
	size, align uintptr
	fields      []fieldLayout
}

func abiStructs() []structLayout {
	var (
		v_dsv4_device         C.dsv4_device
		v_dsv4_dtype          C.dsv4_dtype
		v_dsv4_tensor         C.dsv4_tensor
		v_dsv4_kv_cache_desc  C.dsv4_kv_cache_desc
		v_dsv4_kv_layout_info C.dsv4_kv_layout_info
		v_dsv4_ctx_options    C.dsv4_ctx_options
		v_dsv4_backend_info   C.dsv4_backend_info
		v_dsv4_device_info    C.dsv4_device_info
		v_dsv4_ctx_info       C.dsv4_ctx_info
		v_dsv4_plan_options   C.dsv4_plan_options
		v_dsv4_plan_info      C.dsv4_plan_info
		v_dsv4_run_args       C.dsv4_run_args
		v_dsv4_kv_write_args  C.dsv4_kv_write_args
		v_dsv4_merge_args     C.dsv4_merge_args
		v_dsv4_export_args    C.dsv4_export_args
	)
	return []structLayout{
		{"dsv4_device", unsafe.Sizeof(v_dsv4_device), unsafe.Alignof(v_dsv4_device), []fieldLayout{
			{"device_type", unsafe.Offsetof(v_dsv4_device.device_type), unsafe.Sizeof(v_dsv4_device.device_type)},
			{"device_id", unsafe.Offsetof(v_dsv4_device.device_id), unsafe.Sizeof(v_dsv4_device.device_id)},
		}},
		{"dsv4_dtype", unsafe.Sizeof(v_dsv4_dtype), unsafe.Alignof(v_dsv4_dtype), []fieldLayout{
			{"code", unsafe.Offsetof(v_dsv4_dtype.code), unsafe.Sizeof(v_dsv4_dtype.code)},
			{"bits", unsafe.Offsetof(v_dsv4_dtype.bits), unsafe.Sizeof(v_dsv4_dtype.bits)},
			{"lanes", unsafe.Offsetof(v_dsv4_dtype.lanes), unsafe.Sizeof(v_dsv4_dtype.lanes)},
		}},
		{"dsv4_tensor", unsafe.Sizeof(v_dsv4_tensor), unsafe.Alignof(v_dsv4_tensor), []fieldLayout{
			{"data", unsafe.Offsetof(v_dsv4_tensor.data), unsafe.Sizeof(v_dsv4_tensor.data)},
			{"device", unsafe.Offsetof(v_dsv4_tensor.device), unsafe.Sizeof(v_dsv4_tensor.device)},
			{"ndim", unsafe.Offsetof(v_dsv4_tensor.ndim), unsafe.Sizeof(v_dsv4_tensor.ndim)},
			{"dtype", unsafe.Offsetof(v_dsv4_tensor.dtype), unsafe.Sizeof(v_dsv4_tensor.dtype)},
			{"shape", unsafe.Offsetof(v_dsv4_tensor.shape), unsafe.Sizeof(v_dsv4_tensor.shape)},
			{"strides", unsafe.Offsetof(v_dsv4_tensor.strides), unsafe.Sizeof(v_dsv4_tensor.strides)},
			{"byte_offset", unsafe.Offsetof(v_dsv4_tensor.byte_offset), unsafe.Sizeof(v_dsv4_tensor.byte_offset)},
		}},
		{"dsv4_kv_cache_desc", unsafe.Sizeof(v_dsv4_kv_cache_desc), unsafe.Alignof(v_dsv4_kv_cache_desc), []fieldLayout{
			{"layout", unsafe.Offsetof(v_dsv4_kv_cache_desc.layout), unsafe.Sizeof(v_dsv4_kv_cache_desc.layout)},
			{"block_size", unsafe.Offsetof(v_dsv4_kv_cache_desc.block_size), unsafe.Sizeof(v_dsv4_kv_cache_desc.block_size)},
			{"block_stride_bytes", unsafe.Offsetof(v_dsv4_kv_cache_desc.block_stride_bytes), unsafe.Sizeof(v_dsv4_kv_cache_desc.block_stride_bytes)},
			{"kv_scale", unsafe.Offsetof(v_dsv4_kv_cache_desc.kv_scale), unsafe.Sizeof(v_dsv4_kv_cache_desc.kv_scale)},
			{"flags", unsafe.Offsetof(v_dsv4_kv_cache_desc.flags), unsafe.Sizeof(v_dsv4_kv_cache_desc.flags)},
		}},
		{"dsv4_kv_layout_info", unsafe.Sizeof(v_dsv4_kv_layout_info), unsafe.Alignof(v_dsv4_kv_layout_info), []fieldLayout{
			{"struct_size", unsafe.Offsetof(v_dsv4_kv_layout_info.struct_size), unsafe.Sizeof(v_dsv4_kv_layout_info.struct_size)},
			{"layout", unsafe.Offsetof(v_dsv4_kv_layout_info.layout), unsafe.Sizeof(v_dsv4_kv_layout_info.layout)},
			{"head_dim_qk", unsafe.Offsetof(v_dsv4_kv_layout_info.head_dim_qk), unsafe.Sizeof(v_dsv4_kv_layout_info.head_dim_qk)},
			{"head_dim_v", unsafe.Offsetof(v_dsv4_kv_layout_info.head_dim_v), unsafe.Sizeof(v_dsv4_kv_layout_info.head_dim_v)},
			{"bytes_per_token", unsafe.Offsetof(v_dsv4_kv_layout_info.bytes_per_token), unsafe.Sizeof(v_dsv4_kv_layout_info.bytes_per_token)},
			{"reserved", unsafe.Offsetof(v_dsv4_kv_layout_info.reserved), unsafe.Sizeof(v_dsv4_kv_layout_info.reserved)},
			{"min_block_stride_bytes", unsafe.Offsetof(v_dsv4_kv_layout_info.min_block_stride_bytes), unsafe.Sizeof(v_dsv4_kv_layout_info.min_block_stride_bytes)},
		}},
		{"dsv4_ctx_options", unsafe.Sizeof(v_dsv4_ctx_options), unsafe.Alignof(v_dsv4_ctx_options), []fieldLayout{
			{"struct_size", unsafe.Offsetof(v_dsv4_ctx_options.struct_size), unsafe.Sizeof(v_dsv4_ctx_options.struct_size)},
			{"api_version", unsafe.Offsetof(v_dsv4_ctx_options.api_version), unsafe.Sizeof(v_dsv4_ctx_options.api_version)},
			{"device", unsafe.Offsetof(v_dsv4_ctx_options.device), unsafe.Sizeof(v_dsv4_ctx_options.device)},
			{"backend", unsafe.Offsetof(v_dsv4_ctx_options.backend), unsafe.Sizeof(v_dsv4_ctx_options.backend)},
			{"module_dir", unsafe.Offsetof(v_dsv4_ctx_options.module_dir), unsafe.Sizeof(v_dsv4_ctx_options.module_dir)},
			{"num_threads", unsafe.Offsetof(v_dsv4_ctx_options.num_threads), unsafe.Sizeof(v_dsv4_ctx_options.num_threads)},
			{"log_level", unsafe.Offsetof(v_dsv4_ctx_options.log_level), unsafe.Sizeof(v_dsv4_ctx_options.log_level)},
			{"log_fn", unsafe.Offsetof(v_dsv4_ctx_options.log_fn), unsafe.Sizeof(v_dsv4_ctx_options.log_fn)},
			{"log_user_data", unsafe.Offsetof(v_dsv4_ctx_options.log_user_data), unsafe.Sizeof(v_dsv4_ctx_options.log_user_data)},
		}},
		{"dsv4_backend_info", unsafe.Sizeof(v_dsv4_backend_info), unsafe.Alignof(v_dsv4_backend_info), []fieldLayout{
			{"struct_size", unsafe.Offsetof(v_dsv4_backend_info.struct_size), unsafe.Sizeof(v_dsv4_backend_info.struct_size)},
			{"available", unsafe.Offsetof(v_dsv4_backend_info.available), unsafe.Sizeof(v_dsv4_backend_info.available)},
			{"score", unsafe.Offsetof(v_dsv4_backend_info.score), unsafe.Sizeof(v_dsv4_backend_info.score)},
			{"device_type", unsafe.Offsetof(v_dsv4_backend_info.device_type), unsafe.Sizeof(v_dsv4_backend_info.device_type)},
			{"device_count", unsafe.Offsetof(v_dsv4_backend_info.device_count), unsafe.Sizeof(v_dsv4_backend_info.device_count)},
			{"module_abi", unsafe.Offsetof(v_dsv4_backend_info.module_abi), unsafe.Sizeof(v_dsv4_backend_info.module_abi)},
			{"name", unsafe.Offsetof(v_dsv4_backend_info.name), unsafe.Sizeof(v_dsv4_backend_info.name)},
			{"path", unsafe.Offsetof(v_dsv4_backend_info.path), unsafe.Sizeof(v_dsv4_backend_info.path)},
			{"status", unsafe.Offsetof(v_dsv4_backend_info.status), unsafe.Sizeof(v_dsv4_backend_info.status)},
		}},
		{"dsv4_device_info", unsafe.Sizeof(v_dsv4_device_info), unsafe.Alignof(v_dsv4_device_info), []fieldLayout{
			{"struct_size", unsafe.Offsetof(v_dsv4_device_info.struct_size), unsafe.Sizeof(v_dsv4_device_info.struct_size)},
			{"device_type", unsafe.Offsetof(v_dsv4_device_info.device_type), unsafe.Sizeof(v_dsv4_device_info.device_type)},
			{"device_id", unsafe.Offsetof(v_dsv4_device_info.device_id), unsafe.Sizeof(v_dsv4_device_info.device_id)},
			{"compute_units", unsafe.Offsetof(v_dsv4_device_info.compute_units), unsafe.Sizeof(v_dsv4_device_info.compute_units)},
			{"memory_bytes", unsafe.Offsetof(v_dsv4_device_info.memory_bytes), unsafe.Sizeof(v_dsv4_device_info.memory_bytes)},
			{"name", unsafe.Offsetof(v_dsv4_device_info.name), unsafe.Sizeof(v_dsv4_device_info.name)},
		}},
		{"dsv4_ctx_info", unsafe.Sizeof(v_dsv4_ctx_info), unsafe.Alignof(v_dsv4_ctx_info), []fieldLayout{
			{"struct_size", unsafe.Offsetof(v_dsv4_ctx_info.struct_size), unsafe.Sizeof(v_dsv4_ctx_info.struct_size)},
			{"device", unsafe.Offsetof(v_dsv4_ctx_info.device), unsafe.Sizeof(v_dsv4_ctx_info.device)},
			{"num_threads", unsafe.Offsetof(v_dsv4_ctx_info.num_threads), unsafe.Sizeof(v_dsv4_ctx_info.num_threads)},
			{"backend", unsafe.Offsetof(v_dsv4_ctx_info.backend), unsafe.Sizeof(v_dsv4_ctx_info.backend)},
			{"path", unsafe.Offsetof(v_dsv4_ctx_info.path), unsafe.Sizeof(v_dsv4_ctx_info.path)},
			{"reason", unsafe.Offsetof(v_dsv4_ctx_info.reason), unsafe.Sizeof(v_dsv4_ctx_info.reason)},
		}},
		{"dsv4_plan_options", unsafe.Sizeof(v_dsv4_plan_options), unsafe.Alignof(v_dsv4_plan_options), []fieldLayout{
			{"struct_size", unsafe.Offsetof(v_dsv4_plan_options.struct_size), unsafe.Sizeof(v_dsv4_plan_options.struct_size)},
			{"mode", unsafe.Offsetof(v_dsv4_plan_options.mode), unsafe.Sizeof(v_dsv4_plan_options.mode)},
			{"flags", unsafe.Offsetof(v_dsv4_plan_options.flags), unsafe.Sizeof(v_dsv4_plan_options.flags)},
			{"num_heads", unsafe.Offsetof(v_dsv4_plan_options.num_heads), unsafe.Sizeof(v_dsv4_plan_options.num_heads)},
			{"head_dim_qk", unsafe.Offsetof(v_dsv4_plan_options.head_dim_qk), unsafe.Sizeof(v_dsv4_plan_options.head_dim_qk)},
			{"head_dim_v", unsafe.Offsetof(v_dsv4_plan_options.head_dim_v), unsafe.Sizeof(v_dsv4_plan_options.head_dim_v)},
			{"softmax_scale", unsafe.Offsetof(v_dsv4_plan_options.softmax_scale), unsafe.Sizeof(v_dsv4_plan_options.softmax_scale)},
			{"q_dtype", unsafe.Offsetof(v_dsv4_plan_options.q_dtype), unsafe.Sizeof(v_dsv4_plan_options.q_dtype)},
			{"q_scale", unsafe.Offsetof(v_dsv4_plan_options.q_scale), unsafe.Sizeof(v_dsv4_plan_options.q_scale)},
			{"max_tokens", unsafe.Offsetof(v_dsv4_plan_options.max_tokens), unsafe.Sizeof(v_dsv4_plan_options.max_tokens)},
			{"swa_cache", unsafe.Offsetof(v_dsv4_plan_options.swa_cache), unsafe.Sizeof(v_dsv4_plan_options.swa_cache)},
			{"extra_cache", unsafe.Offsetof(v_dsv4_plan_options.extra_cache), unsafe.Sizeof(v_dsv4_plan_options.extra_cache)},
			{"index_format", unsafe.Offsetof(v_dsv4_plan_options.index_format), unsafe.Sizeof(v_dsv4_plan_options.index_format)},
			{"topk", unsafe.Offsetof(v_dsv4_plan_options.topk), unsafe.Sizeof(v_dsv4_plan_options.topk)},
			{"extra_topk", unsafe.Offsetof(v_dsv4_plan_options.extra_topk), unsafe.Sizeof(v_dsv4_plan_options.extra_topk)},
			{"compress_ratio", unsafe.Offsetof(v_dsv4_plan_options.compress_ratio), unsafe.Sizeof(v_dsv4_plan_options.compress_ratio)},
			{"window", unsafe.Offsetof(v_dsv4_plan_options.window), unsafe.Sizeof(v_dsv4_plan_options.window)},
			{"index_topk", unsafe.Offsetof(v_dsv4_plan_options.index_topk), unsafe.Sizeof(v_dsv4_plan_options.index_topk)},
			{"decode_threshold", unsafe.Offsetof(v_dsv4_plan_options.decode_threshold), unsafe.Sizeof(v_dsv4_plan_options.decode_threshold)},
			{"max_model_len", unsafe.Offsetof(v_dsv4_plan_options.max_model_len), unsafe.Sizeof(v_dsv4_plan_options.max_model_len)},
			{"max_requests", unsafe.Offsetof(v_dsv4_plan_options.max_requests), unsafe.Sizeof(v_dsv4_plan_options.max_requests)},
			{"max_swa_blocks_per_request", unsafe.Offsetof(v_dsv4_plan_options.max_swa_blocks_per_request), unsafe.Sizeof(v_dsv4_plan_options.max_swa_blocks_per_request)},
			{"max_cmp_blocks_per_request", unsafe.Offsetof(v_dsv4_plan_options.max_cmp_blocks_per_request), unsafe.Sizeof(v_dsv4_plan_options.max_cmp_blocks_per_request)},
			{"compressed_block_tokens", unsafe.Offsetof(v_dsv4_plan_options.compressed_block_tokens), unsafe.Sizeof(v_dsv4_plan_options.compressed_block_tokens)},
			{"out_dtype", unsafe.Offsetof(v_dsv4_plan_options.out_dtype), unsafe.Sizeof(v_dsv4_plan_options.out_dtype)},
		}},
		{"dsv4_plan_info", unsafe.Sizeof(v_dsv4_plan_info), unsafe.Alignof(v_dsv4_plan_info), []fieldLayout{
			{"struct_size", unsafe.Offsetof(v_dsv4_plan_info.struct_size), unsafe.Sizeof(v_dsv4_plan_info.struct_size)},
			{"mode", unsafe.Offsetof(v_dsv4_plan_info.mode), unsafe.Sizeof(v_dsv4_plan_info.mode)},
			{"num_heads", unsafe.Offsetof(v_dsv4_plan_info.num_heads), unsafe.Sizeof(v_dsv4_plan_info.num_heads)},
			{"head_dim_qk", unsafe.Offsetof(v_dsv4_plan_info.head_dim_qk), unsafe.Sizeof(v_dsv4_plan_info.head_dim_qk)},
			{"workspace_bytes", unsafe.Offsetof(v_dsv4_plan_info.workspace_bytes), unsafe.Sizeof(v_dsv4_plan_info.workspace_bytes)},
			{"backend", unsafe.Offsetof(v_dsv4_plan_info.backend), unsafe.Sizeof(v_dsv4_plan_info.backend)},
			{"kernel", unsafe.Offsetof(v_dsv4_plan_info.kernel), unsafe.Sizeof(v_dsv4_plan_info.kernel)},
		}},
		{"dsv4_run_args", unsafe.Sizeof(v_dsv4_run_args), unsafe.Alignof(v_dsv4_run_args), []fieldLayout{
			{"struct_size", unsafe.Offsetof(v_dsv4_run_args.struct_size), unsafe.Sizeof(v_dsv4_run_args.struct_size)},
			{"reserved", unsafe.Offsetof(v_dsv4_run_args.reserved), unsafe.Sizeof(v_dsv4_run_args.reserved)},
			{"q", unsafe.Offsetof(v_dsv4_run_args.q), unsafe.Sizeof(v_dsv4_run_args.q)},
			{"swa_cache", unsafe.Offsetof(v_dsv4_run_args.swa_cache), unsafe.Sizeof(v_dsv4_run_args.swa_cache)},
			{"extra_cache", unsafe.Offsetof(v_dsv4_run_args.extra_cache), unsafe.Sizeof(v_dsv4_run_args.extra_cache)},
			{"attn_sink", unsafe.Offsetof(v_dsv4_run_args.attn_sink), unsafe.Sizeof(v_dsv4_run_args.attn_sink)},
			{"out", unsafe.Offsetof(v_dsv4_run_args.out), unsafe.Sizeof(v_dsv4_run_args.out)},
			{"lse", unsafe.Offsetof(v_dsv4_run_args.lse), unsafe.Sizeof(v_dsv4_run_args.lse)},
			{"max_logits", unsafe.Offsetof(v_dsv4_run_args.max_logits), unsafe.Sizeof(v_dsv4_run_args.max_logits)},
			{"indices", unsafe.Offsetof(v_dsv4_run_args.indices), unsafe.Sizeof(v_dsv4_run_args.indices)},
			{"indptr", unsafe.Offsetof(v_dsv4_run_args.indptr), unsafe.Sizeof(v_dsv4_run_args.indptr)},
			{"lengths", unsafe.Offsetof(v_dsv4_run_args.lengths), unsafe.Sizeof(v_dsv4_run_args.lengths)},
			{"extra_indices", unsafe.Offsetof(v_dsv4_run_args.extra_indices), unsafe.Sizeof(v_dsv4_run_args.extra_indices)},
			{"extra_indptr", unsafe.Offsetof(v_dsv4_run_args.extra_indptr), unsafe.Sizeof(v_dsv4_run_args.extra_indptr)},
			{"extra_lengths", unsafe.Offsetof(v_dsv4_run_args.extra_lengths), unsafe.Sizeof(v_dsv4_run_args.extra_lengths)},
			{"query_start_loc", unsafe.Offsetof(v_dsv4_run_args.query_start_loc), unsafe.Sizeof(v_dsv4_run_args.query_start_loc)},
			{"seq_lens", unsafe.Offsetof(v_dsv4_run_args.seq_lens), unsafe.Sizeof(v_dsv4_run_args.seq_lens)},
			{"swa_block_table", unsafe.Offsetof(v_dsv4_run_args.swa_block_table), unsafe.Sizeof(v_dsv4_run_args.swa_block_table)},
			{"cmp_block_table", unsafe.Offsetof(v_dsv4_run_args.cmp_block_table), unsafe.Sizeof(v_dsv4_run_args.cmp_block_table)},
			{"slot_mapping", unsafe.Offsetof(v_dsv4_run_args.slot_mapping), unsafe.Sizeof(v_dsv4_run_args.slot_mapping)},
			{"topk_indices", unsafe.Offsetof(v_dsv4_run_args.topk_indices), unsafe.Sizeof(v_dsv4_run_args.topk_indices)},
			{"workspace", unsafe.Offsetof(v_dsv4_run_args.workspace), unsafe.Sizeof(v_dsv4_run_args.workspace)},
			{"workspace_bytes", unsafe.Offsetof(v_dsv4_run_args.workspace_bytes), unsafe.Sizeof(v_dsv4_run_args.workspace_bytes)},
			{"stream", unsafe.Offsetof(v_dsv4_run_args.stream), unsafe.Sizeof(v_dsv4_run_args.stream)},
		}},
		{"dsv4_kv_write_args", unsafe.Sizeof(v_dsv4_kv_write_args), unsafe.Alignof(v_dsv4_kv_write_args), []fieldLayout{
			{"struct_size", unsafe.Offsetof(v_dsv4_kv_write_args.struct_size), unsafe.Sizeof(v_dsv4_kv_write_args.struct_size)},
			{"reserved", unsafe.Offsetof(v_dsv4_kv_write_args.reserved), unsafe.Sizeof(v_dsv4_kv_write_args.reserved)},
			{"cache_desc", unsafe.Offsetof(v_dsv4_kv_write_args.cache_desc), unsafe.Sizeof(v_dsv4_kv_write_args.cache_desc)},
			{"values", unsafe.Offsetof(v_dsv4_kv_write_args.values), unsafe.Sizeof(v_dsv4_kv_write_args.values)},
			{"slots", unsafe.Offsetof(v_dsv4_kv_write_args.slots), unsafe.Sizeof(v_dsv4_kv_write_args.slots)},
			{"cache", unsafe.Offsetof(v_dsv4_kv_write_args.cache), unsafe.Sizeof(v_dsv4_kv_write_args.cache)},
			{"stream", unsafe.Offsetof(v_dsv4_kv_write_args.stream), unsafe.Sizeof(v_dsv4_kv_write_args.stream)},
		}},
		{"dsv4_merge_args", unsafe.Sizeof(v_dsv4_merge_args), unsafe.Alignof(v_dsv4_merge_args), []fieldLayout{
			{"struct_size", unsafe.Offsetof(v_dsv4_merge_args.struct_size), unsafe.Sizeof(v_dsv4_merge_args.struct_size)},
			{"reserved", unsafe.Offsetof(v_dsv4_merge_args.reserved), unsafe.Sizeof(v_dsv4_merge_args.reserved)},
			{"out_parts", unsafe.Offsetof(v_dsv4_merge_args.out_parts), unsafe.Sizeof(v_dsv4_merge_args.out_parts)},
			{"lse_parts", unsafe.Offsetof(v_dsv4_merge_args.lse_parts), unsafe.Sizeof(v_dsv4_merge_args.lse_parts)},
			{"attn_sink", unsafe.Offsetof(v_dsv4_merge_args.attn_sink), unsafe.Sizeof(v_dsv4_merge_args.attn_sink)},
			{"out", unsafe.Offsetof(v_dsv4_merge_args.out), unsafe.Sizeof(v_dsv4_merge_args.out)},
			{"lse", unsafe.Offsetof(v_dsv4_merge_args.lse), unsafe.Sizeof(v_dsv4_merge_args.lse)},
			{"stream", unsafe.Offsetof(v_dsv4_merge_args.stream), unsafe.Sizeof(v_dsv4_merge_args.stream)},
		}},
		{"dsv4_export_args", unsafe.Sizeof(v_dsv4_export_args), unsafe.Alignof(v_dsv4_export_args), []fieldLayout{
			{"struct_size", unsafe.Offsetof(v_dsv4_export_args.struct_size), unsafe.Sizeof(v_dsv4_export_args.struct_size)},
			{"format", unsafe.Offsetof(v_dsv4_export_args.format), unsafe.Sizeof(v_dsv4_export_args.format)},
			{"batch", unsafe.Offsetof(v_dsv4_export_args.batch), unsafe.Sizeof(v_dsv4_export_args.batch)},
			{"swa_indices", unsafe.Offsetof(v_dsv4_export_args.swa_indices), unsafe.Sizeof(v_dsv4_export_args.swa_indices)},
			{"swa_lengths", unsafe.Offsetof(v_dsv4_export_args.swa_lengths), unsafe.Sizeof(v_dsv4_export_args.swa_lengths)},
			{"swa_indptr", unsafe.Offsetof(v_dsv4_export_args.swa_indptr), unsafe.Sizeof(v_dsv4_export_args.swa_indptr)},
			{"cmp_indices", unsafe.Offsetof(v_dsv4_export_args.cmp_indices), unsafe.Sizeof(v_dsv4_export_args.cmp_indices)},
			{"cmp_lengths", unsafe.Offsetof(v_dsv4_export_args.cmp_lengths), unsafe.Sizeof(v_dsv4_export_args.cmp_lengths)},
			{"cmp_indptr", unsafe.Offsetof(v_dsv4_export_args.cmp_indptr), unsafe.Sizeof(v_dsv4_export_args.cmp_indptr)},
			{"combined_indices", unsafe.Offsetof(v_dsv4_export_args.combined_indices), unsafe.Sizeof(v_dsv4_export_args.combined_indices)},
			{"combined_lengths", unsafe.Offsetof(v_dsv4_export_args.combined_lengths), unsafe.Sizeof(v_dsv4_export_args.combined_lengths)},
			{"stream", unsafe.Offsetof(v_dsv4_export_args.stream), unsafe.Sizeof(v_dsv4_export_args.stream)},
		}},
	}
}

func abiFunctions() []string {
	names := make([]string, int(C.dsv4go_symbol_count()))
	for i := range names {
		names[i] = C.GoString(C.dsv4go_symbol(C.int(i)))
	}
	return names
}
func abiConstants() map[string]int64 {
	return map[string]int64{
		"DSV4_VERSION_MAJOR": int64(HeaderVersionMajor), "DSV4_VERSION_MINOR": int64(HeaderVersionMinor),
		"DSV4_VERSION_PATCH": int64(HeaderVersionPatch), "DSV4_VERSION_NUMBER": int64(HeaderVersionNumber),
		"DSV4_API_VERSION": int64(APIVersion),
		"DSV4_STATUS_OK":   int64(StatusOK), "DSV4_STATUS_INVALID_ARGUMENT": int64(StatusInvalidArgument),
		"DSV4_STATUS_UNSUPPORTED": int64(StatusUnsupported), "DSV4_STATUS_NO_BACKEND": int64(StatusNoBackend),
		"DSV4_STATUS_BACKEND_ERROR":       int64(StatusBackendError),
		"DSV4_STATUS_OUT_OF_MEMORY":       int64(StatusOutOfMemory),
		"DSV4_STATUS_WORKSPACE_TOO_SMALL": int64(StatusWorkspaceTooSmall),
		"DSV4_STATUS_PLAN_MISMATCH":       int64(StatusPlanMismatch),
		"DSV4_STATUS_ABI_MISMATCH":        int64(StatusABIMismatch), "DSV4_STATUS_INTERNAL": int64(StatusInternal),
		"DSV4_DEVICE_CPU": int64(DeviceCPU), "DSV4_DEVICE_CUDA": int64(DeviceCUDA),
		"DSV4_DEVICE_OPENCL":    int64(DeviceOpenCL),
		"DSV4_DEVICE_CUDA_HOST": int64(DeviceCUDAHost), "DSV4_DEVICE_ROCM": int64(DeviceROCm),
		"DSV4_DEVICE_CUDA_MANAGED": int64(DeviceCUDAManaged), "DSV4_DEVICE_ONEAPI": int64(DeviceOneAPI),
		"DSV4_DTYPE_CODE_INT": int64(DTypeCodeInt), "DSV4_DTYPE_CODE_UINT": int64(DTypeCodeUInt),
		"DSV4_DTYPE_CODE_FLOAT": int64(DTypeCodeFloat), "DSV4_DTYPE_CODE_BFLOAT": int64(DTypeCodeBFloat),
		"DSV4_DTYPE_CODE_FLOAT8_E4M3FN": int64(DTypeCodeFloat8E4M3FN),
		"DSV4_KV_LAYOUT_NONE":           int64(KVLayoutNone), "DSV4_KV_LAYOUT_BF16": int64(KVLayoutBF16),
		"DSV4_KV_LAYOUT_FP8_V4_584B":         int64(KVLayoutFP8V4584B),
		"DSV4_KV_LAYOUT_FP8_V32_656B":        int64(KVLayoutFP8V32656B),
		"DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR": int64(KVLayoutFP8E4M3PerTensor),
		"DSV4_KV_LAYOUT_FP16":                int64(KVLayoutFP16),
		"DSV4_KV_CACHE_FLAG_FP8_FNUZ":        int64(KVCacheFlagFP8FNUZ),
		"DSV4_LOG_ERROR":                     int64(LogError), "DSV4_LOG_WARN": int64(LogWarn), "DSV4_LOG_INFO": int64(LogInfo),
		"DSV4_LOG_DEBUG":     int64(LogDebug),
		"DSV4_MODE_EXPLICIT": int64(ModeExplicit), "DSV4_MODE_PAGED": int64(ModePaged),
		"DSV4_INDEX_DENSE": int64(IndexDense), "DSV4_INDEX_CSR": int64(IndexCSR),
		"DSV4_PLAN_FLAG_NONE":             int64(PlanFlagNone),
		"DSV4_PLAN_FLAG_BATCH_INVARIANT":  int64(PlanFlagBatchInvariant),
		"DSV4_PLAN_FLAG_REFERENCE_KERNEL": int64(PlanFlagReferenceKernel),
		"DSV4_EXPORT_FLASHMLA":            int64(ExportFlashMLA), "DSV4_EXPORT_CSR": int64(ExportCSR),
		"DSV4_EXPORT_FLASHINFER": int64(ExportFlashInfer),
	}
}
