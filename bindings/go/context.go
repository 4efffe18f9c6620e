package dsv4

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"runtime"
	"sync"
	"unsafe"
)

// ContextOptions are the dsv4_ctx_options a Go caller sets (the log level comes from
// DSV4_LOG_LEVEL; log callbacks are not offered).
type ContextOptions struct {
	Device     Device // default CPU
	Backend    string // module name ("cpu", "cuda"); "" = DSV4_BACKEND, then probing
	ModuleDir  string // extra module directory searched first
	NumThreads int32  // CPU backend worker threads; 0 = DSV4_CPU_THREADS, then cores
}

// cOptions fills C options; free releases their strings.
func (o *ContextOptions) cOptions() (opts C.dsv4_ctx_options, free func(), err error) {
	free = func() {}
	if err = ensureLoaded(); err != nil {
		return
	}
	var m message
	if err = check(C.dsv4go_ctx_options_init(&opts, m.ptr()), "dsv4_ctx_options_init", &m); err != nil {
		return
	}
	if o == nil {
		return
	}
	if o.Device != (Device{}) {
		opts.device.device_type = C.int32_t(o.Device.Type)
		opts.device.device_id = C.int32_t(o.Device.ID)
	}
	var strs []*C.char
	if o.Backend != "" {
		opts.backend = C.CString(o.Backend)
		strs = append(strs, opts.backend)
	}
	if o.ModuleDir != "" {
		opts.module_dir = C.CString(o.ModuleDir)
		strs = append(strs, opts.module_dir)
	}
	opts.num_threads = C.int32_t(o.NumThreads)
	free = func() {
		for _, s := range strs {
			C.free(unsafe.Pointer(s))
		}
	}
	return
}

// Context is a dsv4_ctx: one backend module on one device. Safe for concurrent use.
type Context struct {
	mu     sync.RWMutex
	handle *C.dsv4_ctx // nil once closed
	owner  *ctxHandle
	device Device
}

// ctxHandle destroys the C context when its last user (the Context and each Plan) lets go.
type ctxHandle struct {
	mu    sync.Mutex
	raw   *C.dsv4_ctx
	users int
}

func (h *ctxHandle) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.users--; h.users == 0 {
		C.dsv4go_ctx_destroy(h.raw)
		h.raw = nil
	}
}

// NewContext loads candidate modules and opens the device (nil options: CPU, backend by
// DSV4_BACKEND or probing).
func NewContext(options *ContextOptions) (*Context, error) {
	opts, free, err := options.cOptions()
	defer free()
	if err != nil {
		return nil, err
	}
	var m message
	var raw *C.dsv4_ctx
	if err := check(C.dsv4go_ctx_create(&opts, &raw, m.ptr()), "dsv4_ctx_create", &m); err != nil {
		return nil, err
	}
	c := &Context{handle: raw, owner: &ctxHandle{raw: raw, users: 1}, device: CPU}
	if options != nil && options.Device != (Device{}) {
		c.device = options.Device
	}
	runtime.SetFinalizer(c, (*Context).Close)
	return c, nil
}

// Close releases the context; plans made from it keep the C context until they close. Calls on
// a closed context fail with libdsv4's INVALID_ARGUMENT. Idempotent.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.handle != nil {
		c.handle = nil
		c.owner.release()
		runtime.SetFinalizer(c, nil)
	}
	return nil
}

// ContextInfo is dsv4_ctx_info.
type ContextInfo struct {
	Device     Device
	NumThreads int32
	Backend    string
	Path       string
	Reason     string
}

// Info describes the selected backend.
func (c *Context) Info() (ContextInfo, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var info C.dsv4_ctx_info
	var m message
	if err := check(C.dsv4go_ctx_get_info(c.handle, &info, m.ptr()), "dsv4_ctx_get_info", &m); err != nil {
		return ContextInfo{}, err
	}
	return ContextInfo{Device{int32(info.device.device_type), int32(info.device.device_id)},
		int32(info.num_threads), C.GoString(&info.backend[0]), C.GoString(&info.path[0]),
		C.GoString(&info.reason[0])}, nil
}

// CacheDesc is dsv4_kv_cache_desc (BlockStrideBytes 0 = the layout's minimum).
type CacheDesc struct {
	Layout           uint32
	BlockSize        int32
	BlockStrideBytes int64
	KVScale          float32 // per-tensor FP8 layout only; 0 = 1.0
	Flags            uint32  // KVCacheFlag* (FP8 FNUZ bytes)
}

func (d CacheDesc) c() C.dsv4_kv_cache_desc {
	scale := d.KVScale
	if scale == 0 {
		scale = 1
	}
	return C.dsv4_kv_cache_desc{layout: C.uint32_t(d.Layout), block_size: C.int32_t(d.BlockSize),
		block_stride_bytes: C.int64_t(d.BlockStrideBytes), kv_scale: C.float(scale),
		flags: C.uint32_t(d.Flags)}
}

func cacheDescOf(d C.dsv4_kv_cache_desc) CacheDesc {
	return CacheDesc{uint32(d.layout), int32(d.block_size), int64(d.block_stride_bytes),
		float32(d.kv_scale), uint32(d.flags)}
}

// KVWrite stores rows values [N, d] (bf16/fp32) into cache at slots [N] (int32, negative = skip),
// quantised as desc's layout asks (dsv4_kv_write). stream: a backend-native stream or 0.
func (c *Context) KVWrite(desc CacheDesc, values, slots, cache *Tensor, stream uintptr) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k := newCall()
	defer k.free()
	a := &k.arena.kv_write
	var m message
	if err := check(C.dsv4go_kv_write_args_init(a, m.ptr()), "dsv4_kv_write_args_init", &m); err != nil {
		return err
	}
	a.cache_desc = desc.c()
	var err error
	if a.values, err = k.tensor(values, "values"); err != nil {
		return err
	}
	if a.slots, err = k.tensor(slots, "slots"); err != nil {
		return err
	}
	if a.cache, err = k.tensor(cache, "cache"); err != nil {
		return err
	}
	C.dsv4go_set_stream(&a.stream, C.uintptr_t(stream))
	err = k.invoke(C.DSV4GO_KV_WRITE, unsafe.Pointer(c.handle), unsafe.Pointer(a), nil, "dsv4_kv_write")
	runtime.KeepAlive(k.keep)
	return err
}

// MergeArgs are dsv4_merge_args: P partial results (OutParts [P, T, H, 512], LSEParts [P, T, H],
// computed without the sink) merged into Out [T, H, 512] (and LSE [T, H]), the sink applied once
// (spec 12.2).
type MergeArgs struct {
	OutParts, LSEParts, AttnSink, Out, LSE *Tensor
	Stream                                 uintptr
}

// Merge combines partial results over disjoint key sets into one (dsv4_merge).
func (c *Context) Merge(args *MergeArgs) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k := newCall()
	defer k.free()
	a := &k.arena.merge
	var m message
	if err := check(C.dsv4go_merge_args_init(a, m.ptr()), "dsv4_merge_args_init", &m); err != nil {
		return err
	}
	fields := []struct {
		field **C.dsv4_tensor
		t     *Tensor
		name  string
	}{{&a.out_parts, args.OutParts, "out_parts"}, {&a.lse_parts, args.LSEParts, "lse_parts"},
		{&a.attn_sink, args.AttnSink, "attn_sink"}, {&a.out, args.Out, "out"}, {&a.lse, args.LSE, "lse"}}
	for _, f := range fields {
		t, err := k.tensor(f.t, f.name)
		if err != nil {
			return err
		}
		*f.field = t
	}
	C.dsv4go_set_stream(&a.stream, C.uintptr_t(args.Stream))
	err := k.invoke(C.DSV4GO_MERGE, unsafe.Pointer(c.handle), unsafe.Pointer(a), nil, "dsv4_merge")
	runtime.KeepAlive(k.keep)
	return err
}

// PlanOptions mirror dsv4_plan_options; DefaultPlanOptions gives libdsv4's defaults.
type PlanOptions struct {
	Mode                   uint32
	Flags                  uint32
	NumHeads               int32
	HeadDimQK              int32
	HeadDimV               int32
	SoftmaxScale           float32
	QDType                 DType
	QScale                 float32
	MaxTokens              int32
	SWACache               CacheDesc
	ExtraCache             CacheDesc
	IndexFormat            uint32
	TopK                   int32
	ExtraTopK              int32
	CompressRatio          int32
	Window                 int32
	IndexTopK              int32
	DecodeThreshold        int32
	MaxModelLen            int64
	MaxRequests            int32
	MaxSWABlocksPerRequest int32
	MaxCmpBlocksPerRequest int32
	CompressedBlockTokens  int32
	OutDType               DType // bf16 (default), or fp32 for partials merged later
}

// DefaultPlanOptions is dsv4_plan_options_init's result.
func DefaultPlanOptions() (PlanOptions, error) {
	if err := ensureLoaded(); err != nil {
		return PlanOptions{}, err
	}
	var o C.dsv4_plan_options
	var m message
	if err := check(C.dsv4go_plan_options_init(&o, m.ptr()), "dsv4_plan_options_init", &m); err != nil {
		return PlanOptions{}, err
	}
	return PlanOptions{uint32(o.mode), uint32(o.flags), int32(o.num_heads), int32(o.head_dim_qk),
		int32(o.head_dim_v), float32(o.softmax_scale),
		DType{uint8(o.q_dtype.code), uint8(o.q_dtype.bits), uint16(o.q_dtype.lanes)},
		float32(o.q_scale), int32(o.max_tokens), cacheDescOf(o.swa_cache), cacheDescOf(o.extra_cache),
		uint32(o.index_format), int32(o.topk), int32(o.extra_topk), int32(o.compress_ratio),
		int32(o.window), int32(o.index_topk), int32(o.decode_threshold), int64(o.max_model_len),
		int32(o.max_requests), int32(o.max_swa_blocks_per_request),
		int32(o.max_cmp_blocks_per_request), int32(o.compressed_block_tokens),
		DType{uint8(o.out_dtype.code), uint8(o.out_dtype.bits), uint16(o.out_dtype.lanes)}}, nil
}

func (p *PlanOptions) c() (C.dsv4_plan_options, error) {
	var o C.dsv4_plan_options
	var m message
	if err := check(C.dsv4go_plan_options_init(&o, m.ptr()), "dsv4_plan_options_init", &m); err != nil {
		return o, err
	}
	o.mode, o.flags = C.uint32_t(p.Mode), C.uint32_t(p.Flags)
	o.num_heads, o.head_dim_qk, o.head_dim_v = C.int32_t(p.NumHeads), C.int32_t(p.HeadDimQK), C.int32_t(p.HeadDimV)
	o.softmax_scale, o.q_scale = C.float(p.SoftmaxScale), C.float(p.QScale)
	o.q_dtype.code, o.q_dtype.bits, o.q_dtype.lanes = C.uint8_t(p.QDType.Code), C.uint8_t(p.QDType.Bits), C.uint16_t(p.QDType.Lanes)
	o.max_tokens = C.int32_t(p.MaxTokens)
	o.swa_cache, o.extra_cache = p.SWACache.c(), p.ExtraCache.c()
	o.index_format, o.topk, o.extra_topk = C.uint32_t(p.IndexFormat), C.int32_t(p.TopK), C.int32_t(p.ExtraTopK)
	o.compress_ratio, o.window, o.index_topk = C.int32_t(p.CompressRatio), C.int32_t(p.Window), C.int32_t(p.IndexTopK)
	o.decode_threshold, o.max_model_len = C.int32_t(p.DecodeThreshold), C.int64_t(p.MaxModelLen)
	o.max_requests = C.int32_t(p.MaxRequests)
	o.max_swa_blocks_per_request = C.int32_t(p.MaxSWABlocksPerRequest)
	o.max_cmp_blocks_per_request = C.int32_t(p.MaxCmpBlocksPerRequest)
	o.compressed_block_tokens = C.int32_t(p.CompressedBlockTokens)
	o.out_dtype.code, o.out_dtype.bits, o.out_dtype.lanes = C.uint8_t(p.OutDType.Code), C.uint8_t(p.OutDType.Bits), C.uint16_t(p.OutDType.Lanes)
	return o, nil
}

// Plan is an immutable dsv4_plan. Safe for concurrent use: each Run gets its own workspace.
type Plan struct {
	mu     sync.RWMutex
	handle *C.dsv4_plan // nil once closed
	ctx    *ctxHandle
	device Device
}

// NewPlan validates the options against the context's backend and builds a plan.
func (c *Context) NewPlan(options *PlanOptions) (*Plan, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	o, err := options.c()
	if err != nil {
		return nil, err
	}
	var m message
	var raw *C.dsv4_plan
	if err := check(C.dsv4go_plan_create(c.handle, &o, &raw, m.ptr()), "dsv4_plan_create", &m); err != nil {
		return nil, err
	}
	c.owner.mu.Lock()
	c.owner.users++
	c.owner.mu.Unlock()
	p := &Plan{handle: raw, ctx: c.owner, device: c.device}
	runtime.SetFinalizer(p, (*Plan).Close)
	return p, nil
}

// Close destroys the plan after the runs in progress; later calls fail with libdsv4's
// INVALID_ARGUMENT. Idempotent.
func (p *Plan) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.handle != nil {
		C.dsv4go_plan_destroy(p.handle)
		p.handle = nil
		p.ctx.release()
		runtime.SetFinalizer(p, nil)
	}
	return nil
}

// WorkspaceSize is the workspace every run of the plan needs, in bytes.
func (p *Plan) WorkspaceSize() (int, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.workspaceSize()
}

func (p *Plan) workspaceSize() (int, error) {
	var bytes C.size_t
	var m message
	err := check(C.dsv4go_plan_get_workspace_size(p.handle, &bytes, m.ptr()), "dsv4_plan_get_workspace_size", &m)
	return int(bytes), err
}

// PlanInfo is dsv4_plan_info.
type PlanInfo struct {
	Mode           uint32
	NumHeads       int32
	HeadDimQK      int32
	WorkspaceBytes uint64
	Backend        string
	Kernel         string
}

// Info describes the plan.
func (p *Plan) Info() (PlanInfo, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var info C.dsv4_plan_info
	var m message
	if err := check(C.dsv4go_plan_get_info(p.handle, &info, m.ptr()), "dsv4_plan_get_info", &m); err != nil {
		return PlanInfo{}, err
	}
	return PlanInfo{uint32(info.mode), int32(info.num_heads), int32(info.head_dim_qk),
		uint64(info.workspace_bytes), C.GoString(&info.backend[0]), C.GoString(&info.kernel[0])}, nil
}

// RunArgs are dsv4_run_args (nil = NULL). Workspace: nil allocates a host buffer per call on CPU
// contexts; a Go slice tensor or a RawTensor on the plan's device otherwise.
type RunArgs struct {
	Q, SWACache, ExtraCache, AttnSink, Out, LSE, MaxLogits                         *Tensor
	Indices, Indptr, Lengths, ExtraIndices, ExtraIndptr, ExtraLengths              *Tensor
	QueryStartLoc, SeqLens, SWABlockTable, CmpBlockTable, SlotMapping, TopkIndices *Tensor
	Workspace                                                                      *Tensor
	Stream                                                                         uintptr
}

// runFields are the C field names of RunArgs' tensors, in dsv4_run_args order.
var runFields = []string{"q", "swa_cache", "extra_cache", "attn_sink", "out", "lse", "max_logits",
	"indices", "indptr", "lengths", "extra_indices", "extra_indptr", "extra_lengths",
	"query_start_loc", "seq_lens", "swa_block_table", "cmp_block_table", "slot_mapping",
	"topk_indices"}

func (a *RunArgs) slots() []**Tensor {
	return []**Tensor{&a.Q, &a.SWACache, &a.ExtraCache, &a.AttnSink, &a.Out, &a.LSE, &a.MaxLogits,
		&a.Indices, &a.Indptr, &a.Lengths, &a.ExtraIndices, &a.ExtraIndptr, &a.ExtraLengths,
		&a.QueryStartLoc, &a.SeqLens, &a.SWABlockTable, &a.CmpBlockTable, &a.SlotMapping,
		&a.TopkIndices}
}

// Set sets a tensor by its dsv4_run_args field name ("q", "swa_cache", ...).
func (a *RunArgs) Set(field string, t *Tensor) error {
	for i, name := range runFields {
		if name == field {
			*a.slots()[i] = t
			return nil
		}
	}
	return invalid("dsv4.RunArgs.Set", "no tensor field %q", field)
}

// fill marshals the arguments into c.arena.run.
func (a *RunArgs) fill(k *call) error {
	r := &k.arena.run
	var m message
	if err := check(C.dsv4go_run_args_init(r, m.ptr()), "dsv4_run_args_init", &m); err != nil {
		return err
	}
	fields := []**C.dsv4_tensor{&r.q, &r.swa_cache, &r.extra_cache, &r.attn_sink, &r.out, &r.lse,
		&r.max_logits, &r.indices, &r.indptr, &r.lengths, &r.extra_indices, &r.extra_indptr,
		&r.extra_lengths, &r.query_start_loc, &r.seq_lens, &r.swa_block_table, &r.cmp_block_table,
		&r.slot_mapping, &r.topk_indices}
	for i, slot := range a.slots() {
		t, err := k.tensor(*slot, runFields[i])
		if err != nil {
			return err
		}
		*fields[i] = t
	}
	C.dsv4go_set_stream(&r.stream, C.uintptr_t(a.Stream))
	return nil
}

// Run is one dsv4_run. On failure nothing is written.
func (p *Plan) Run(args *RunArgs) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	k := newCall()
	defer k.free()
	if err := args.fill(k); err != nil {
		return err
	}
	var workspace []byte
	switch ws := args.Workspace; {
	case ws == nil:
		size, err := p.workspaceSize()
		if err != nil {
			return err
		}
		if size > 0 && p.device.Type != DeviceCPU {
			return invalid("workspace", "workspace: this plan needs %d bytes on its device", size)
		}
		workspace = make([]byte, size)
		k.arena.run.workspace_bytes = C.size_t(size)
	case ws.ptr != nil:
		workspace = unsafe.Slice((*byte)(ws.ptr), ws.bytes)
		k.arena.run.workspace_bytes = C.size_t(ws.bytes)
	default: // raw memory on the device: its size is its shape's bytes
		bytes := int64(ws.DType.bytes())
		for _, d := range ws.Shape {
			bytes *= d
		}
		C.dsv4go_set_workspace(&k.arena.run, C.uintptr_t(ws.addr+uintptr(ws.ByteOffset)), C.size_t(bytes))
	}
	err := k.invoke(C.DSV4GO_RUN, unsafe.Pointer(p.handle), unsafe.Pointer(&k.arena.run), workspace, "dsv4_run")
	runtime.KeepAlive(k.keep)
	runtime.KeepAlive(workspace)
	return err
}

// ExportArgs are dsv4_export_args: the paged batch (Batch's paged fields and caches) and the
// outputs (nil = NULL).
type ExportArgs struct {
	Format                            uint32
	Batch                             RunArgs
	SWAIndices, SWALengths, SWAIndptr *Tensor
	CmpIndices, CmpLengths, CmpIndptr *Tensor
	CombinedIndices, CombinedLengths  *Tensor
}

// ExportIndices writes the lists a paged run of the plan would build (dsv4_export_indices).
func (p *Plan) ExportIndices(args *ExportArgs) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	k := newCall()
	defer k.free()
	batch := args.Batch
	batch.Out, batch.LSE, batch.MaxLogits, batch.Q, batch.AttnSink = nil, nil, nil, nil, nil
	if err := batch.fill(k); err != nil {
		return err
	}
	e := &k.arena.export_args
	var m message
	if err := check(C.dsv4go_export_args_init(e, m.ptr()), "dsv4_export_args_init", &m); err != nil {
		return err
	}
	e.format = C.uint32_t(args.Format)
	e.batch = &k.arena.run
	outputs := []struct {
		field *(*C.dsv4_tensor)
		t     *Tensor
		name  string
	}{{&e.swa_indices, args.SWAIndices, "swa_indices"}, {&e.swa_lengths, args.SWALengths, "swa_lengths"},
		{&e.swa_indptr, args.SWAIndptr, "swa_indptr"}, {&e.cmp_indices, args.CmpIndices, "cmp_indices"},
		{&e.cmp_lengths, args.CmpLengths, "cmp_lengths"}, {&e.cmp_indptr, args.CmpIndptr, "cmp_indptr"},
		{&e.combined_indices, args.CombinedIndices, "combined_indices"},
		{&e.combined_lengths, args.CombinedLengths, "combined_lengths"}}
	for _, o := range outputs {
		t, err := k.tensor(o.t, o.name)
		if err != nil {
			return err
		}
		*o.field = t
	}
	e.stream = k.arena.run.stream
	err := k.invoke(C.DSV4GO_EXPORT, unsafe.Pointer(p.handle), unsafe.Pointer(e), nil, "dsv4_export_indices")
	runtime.KeepAlive(k.keep)
	return err
}

// KVLayoutInfo is dsv4_kv_layout_info: the byte geometry of a layout.
type KVLayoutInfo struct {
	Layout              uint32
	HeadDimQK           int32
	HeadDimV            int32
	BytesPerToken       int32
	MinBlockStrideBytes int64
}

// GetKVLayoutInfo gives the geometry of layout for blockSize entries per block.
func GetKVLayoutInfo(layout uint32, blockSize int32) (KVLayoutInfo, error) {
	if err := ensureLoaded(); err != nil {
		return KVLayoutInfo{}, err
	}
	var info C.dsv4_kv_layout_info
	var m message
	if err := check(C.dsv4go_kv_layout_get_info(C.uint32_t(layout), C.int32_t(blockSize), &info, m.ptr()),
		"dsv4_kv_layout_get_info", &m); err != nil {
		return KVLayoutInfo{}, err
	}
	return KVLayoutInfo{uint32(info.layout), int32(info.head_dim_qk), int32(info.head_dim_v),
		int32(info.bytes_per_token), int64(info.min_block_stride_bytes)}, nil
}

// BackendInfo is dsv4_backend_info: one module candidate as the loader saw it.
type BackendInfo struct {
	Name        string
	Available   bool
	Score       int32
	DeviceType  int32
	DeviceCount int32
	ModuleABI   uint32
	Path        string
	Status      string
}

// EnumerateBackends lists every module file the loader finds (the same search as NewContext).
func EnumerateBackends(options *ContextOptions) ([]BackendInfo, error) {
	opts, free, err := options.cOptions()
	defer free()
	if err != nil {
		return nil, err
	}
	for {
		var m message
		var count C.int32_t
		if err := check(C.dsv4go_enumerate_backends(&opts, nil, 0, &count, m.ptr()), "dsv4_enumerate_backends", &m); err != nil {
			return nil, err
		}
		infos := make([]C.dsv4_backend_info, int(count)+1)
		var again C.int32_t
		if err := check(C.dsv4go_enumerate_backends(&opts, &infos[0], count, &again, m.ptr()), "dsv4_enumerate_backends", &m); err != nil {
			return nil, err
		}
		if again > count { // a module appeared between the two calls
			continue
		}
		out := make([]BackendInfo, int(again))
		for i := range out {
			b := &infos[i]
			out[i] = BackendInfo{C.GoString(&b.name[0]), b.available != 0, int32(b.score),
				int32(b.device_type), int32(b.device_count), uint32(b.module_abi),
				C.GoString(&b.path[0]), C.GoString(&b.status[0])}
		}
		return out, nil
	}
}

// DeviceInfo is dsv4_device_info.
type DeviceInfo struct {
	DeviceType   int32
	DeviceID     int32
	ComputeUnits int32
	MemoryBytes  int64
	Name         string
}

// GetDeviceInfo describes device index of the named backend module.
func GetDeviceInfo(options *ContextOptions, backend string, index int32) (DeviceInfo, error) {
	opts, free, err := options.cOptions()
	defer free()
	if err != nil {
		return DeviceInfo{}, err
	}
	name := C.CString(backend)
	defer C.free(unsafe.Pointer(name))
	var info C.dsv4_device_info
	var m message
	if err := check(C.dsv4go_get_device_info(&opts, name, C.int32_t(index), &info, m.ptr()), "dsv4_get_device_info", &m); err != nil {
		return DeviceInfo{}, err
	}
	return DeviceInfo{int32(info.device_type), int32(info.device_id), int32(info.compute_units),
		int64(info.memory_bytes), C.GoString(&info.name[0])}, nil
}
