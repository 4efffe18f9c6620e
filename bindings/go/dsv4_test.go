package dsv4

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"
)

// ------------------------------------------------------------------ the ABI table

func abiTable(t *testing.T) [][]string {
	path := os.Getenv("DSV4_ABI_TABLE")
	if path == "" {
		t.Fatal("DSV4_ABI_TABLE names the ABI table (tests/abi/gen_abi_table.py)")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows [][]string
	s := bufio.NewScanner(f)
	for s.Scan() {
		if w := strings.Fields(s.Text()); len(w) > 0 && !strings.HasPrefix(w[0], "#") {
			rows = append(rows, w)
		}
	}
	return rows
}

// The enum-like constant families the package mirrors in full.
var constantFamilies = []string{"DSV4_STATUS_", "DSV4_DEVICE_", "DSV4_DTYPE_CODE_", "DSV4_KV_LAYOUT_",
	"DSV4_KV_CACHE_FLAG_", "DSV4_LOG_", "DSV4_MODE_", "DSV4_INDEX_", "DSV4_PLAN_FLAG_",
	"DSV4_EXPORT_", "DSV4_VERSION_"}

// Every struct (size, alignment, fields in order with offsets and sizes) and function of the C
// headers matches this package's declarations, both ways, and so do the constants.
func TestABIMatchesTheCHeaders(t *testing.T) {
	want := map[string][]string{}
	var order []string
	wantConstants := map[string]int64{}
	var wantFunctions []string
	for _, r := range abiTable(t) {
		switch r[0] {
		case "struct":
			want[r[1]] = []string{fmt.Sprintf("size %s align %s", r[2], r[3])}
			order = append(order, r[1])
		case "field":
			want[r[1]] = append(want[r[1]], fmt.Sprintf("%s at %s size %s", r[2], r[3], r[4]))
		case "constant":
			v, _ := strconv.ParseInt(r[2], 10, 64)
			wantConstants[r[1]] = v
		case "function":
			wantFunctions = append(wantFunctions, r[1])
		}
	}
	got := map[string][]string{}
	for _, s := range abiStructs() {
		rows := []string{fmt.Sprintf("size %d align %d", s.size, s.align)}
		for _, f := range s.fields {
			rows = append(rows, fmt.Sprintf("%s at %d size %d", f.name, f.offset, f.size))
		}
		got[s.name] = rows
	}
	if len(want) == 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("struct layouts differ from the C headers:\n got  %v\n want %v", got, want)
	}
	// Every constant declared here has the header's value; every member of the enum-like
	// families is declared (standalone constants, such as limits, may be left out).
	gotConstants := abiConstants()
	for name, v := range gotConstants {
		if w, ok := wantConstants[name]; !ok || w != v {
			t.Errorf("constant %s = %d here, %d (present: %v) in the C headers", name, v, w, ok)
		}
	}
	for name := range wantConstants {
		for _, family := range constantFamilies {
			if _, ok := gotConstants[name]; strings.HasPrefix(name, family) && !ok {
				t.Errorf("constant %s is in the C headers but not declared here", name)
			}
		}
	}
	if err := ensureLoaded(); err != nil {
		t.Fatal(err)
	}
	gotFunctions := abiFunctions()
	sort.Strings(gotFunctions)
	sort.Strings(wantFunctions)
	if !reflect.DeepEqual(gotFunctions, wantFunctions) {
		t.Errorf("functions differ:\n got  %v\n want %v", gotFunctions, wantFunctions)
	}
}

// ------------------------------------------------------------------ the test vectors

type vecTensor struct {
	name  string
	dtype DType
	shape []int64
	bytes []byte    // inputs
	want  []float64 // outputs
	tol   [3]float64
}

type vecCase struct {
	name    string
	op      string // "run" (a plan and Run) or "merge" (Context.Merge)
	options [][2]string
	inputs  []vecTensor
	outputs []vecTensor
}

func dtypeNamed(t *testing.T, name string) DType {
	d, ok := map[string]DType{"bfloat16": BFloat16, "float16": Float16, "float32": Float32,
		"float64": Float64, "int32": Int32, "uint8": UInt8}[name]
	if !ok {
		t.Fatalf("unknown dtype %s", name)
	}
	return d
}

func loadVectors(t *testing.T) (uint64, []*vecCase) {
	dir := os.Getenv("DSV4_VECTORS_DIR")
	text, err := os.ReadFile(filepath.Join(dir, "manifest.txt"))
	if err != nil {
		t.Fatalf("DSV4_VECTORS_DIR: %v", err)
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	dims := func(w []string) []int64 {
		n, _ := strconv.Atoi(w[0])
		shape := make([]int64, n)
		for i := range shape {
			shape[i], _ = strconv.ParseInt(w[1+i], 10, 64)
		}
		return shape
	}
	var seed uint64
	var cases []*vecCase
	for _, line := range strings.Split(string(text), "\n") {
		w := strings.Fields(line)
		if len(w) == 0 {
			continue
		}
		var c *vecCase
		if len(cases) > 0 {
			c = cases[len(cases)-1]
		}
		switch w[0] {
		case "dsv4-vectors":
			if w[1] != "1" {
				t.Fatalf("vectors format %s", w[1])
			}
		case "seed":
			seed, _ = strconv.ParseUint(w[1], 10, 64)
		case "case":
			cases = append(cases, &vecCase{name: w[1], op: "run"})
		case "op":
			c.op = w[1]
		case "option":
			c.options = append(c.options, [2]string{w[1], w[2]})
		case "input":
			c.inputs = append(c.inputs, vecTensor{name: w[1], dtype: dtypeNamed(t, w[2]),
				shape: dims(w[4:]), bytes: read(w[3])})
		case "output":
			raw := read(w[len(w)-1])
			want := make([]float64, len(raw)/8)
			for i := range want {
				want[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
			}
			c.outputs = append(c.outputs, vecTensor{name: w[1], dtype: dtypeNamed(t, w[2]),
				shape: dims(w[3:]), want: want})
		case "tolerance":
			o := &c.outputs[len(c.outputs)-1]
			for i := range o.tol {
				o.tol[i], _ = strconv.ParseFloat(w[2+i], 64)
			}
		case "end":
		default:
			t.Fatalf("unknown manifest record %q", w[0])
		}
	}
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	return seed, cases
}

func findCase(t *testing.T, cases []*vecCase, name string) *vecCase {
	for _, c := range cases {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no case %s", name)
	return nil
}

func planOptions(t *testing.T, c *vecCase) PlanOptions {
	o, err := DefaultPlanOptions()
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range c.options {
		v, _ := strconv.ParseInt(kv[1], 10, 64)
		switch kv[0] {
		case "mode":
			o.Mode = uint32(v)
		case "flags":
			o.Flags = uint32(v)
		case "index_format":
			o.IndexFormat = uint32(v)
		case "num_heads":
			o.NumHeads = int32(v)
		case "max_tokens":
			o.MaxTokens = int32(v)
		case "topk":
			o.TopK = int32(v)
		case "extra_topk":
			o.ExtraTopK = int32(v)
		case "compress_ratio":
			o.CompressRatio = int32(v)
		case "window":
			o.Window = int32(v)
		case "index_topk":
			o.IndexTopK = int32(v)
		case "decode_threshold":
			o.DecodeThreshold = int32(v)
		case "max_model_len":
			o.MaxModelLen = v
		case "max_requests":
			o.MaxRequests = int32(v)
		case "max_swa_blocks_per_request":
			o.MaxSWABlocksPerRequest = int32(v)
		case "max_cmp_blocks_per_request":
			o.MaxCmpBlocksPerRequest = int32(v)
		case "compressed_block_tokens":
			o.CompressedBlockTokens = int32(v)
		case "swa_cache.layout":
			o.SWACache.Layout = uint32(v)
		case "swa_cache.block_size":
			o.SWACache.BlockSize = int32(v)
		case "swa_cache.block_stride_bytes":
			o.SWACache.BlockStrideBytes = v
		case "extra_cache.layout":
			o.ExtraCache.Layout = uint32(v)
		case "extra_cache.block_size":
			o.ExtraCache.BlockSize = int32(v)
		case "extra_cache.block_stride_bytes":
			o.ExtraCache.BlockStrideBytes = v
		case "swa_cache.flags":
			o.SWACache.Flags = uint32(v)
		case "extra_cache.flags":
			o.ExtraCache.Flags = uint32(v)
		default:
			t.Fatalf("unknown option %s", kv[0])
		}
	}
	return o
}

// caseArgs are a case's tensors: RunArgs' fields, and the merge's parts by name.
type caseArgs struct {
	RunArgs
	extra map[string]*Tensor
}

// prepare sets the case's inputs and NaN-filled outputs (every element must be written).
func prepare(t *testing.T, c *vecCase) (*caseArgs, [][]byte) {
	args := &caseArgs{extra: map[string]*Tensor{}}
	for _, in := range c.inputs {
		x, err := TensorFromBytes(in.bytes, in.dtype, in.shape...)
		if err != nil {
			t.Fatal(err)
		}
		if in.name == "out_parts" || in.name == "lse_parts" {
			args.extra[in.name] = x
		} else if err := args.Set(in.name, x); err != nil {
			t.Fatal(err)
		}
	}
	outs := make([][]byte, len(c.outputs))
	for i, o := range c.outputs {
		outs[i] = make([]byte, len(o.want)*o.dtype.bytes())
		for j := range outs[i] {
			outs[i][j] = 0xff
		}
		x, err := TensorFromBytes(outs[i], o.dtype, o.shape...)
		if err != nil {
			t.Fatal(err)
		}
		if err := args.Set(o.name, x); err != nil {
			t.Fatal(err)
		}
	}
	return args, outs
}

func element(d DType, b []byte, i int) float64 {
	if d == BFloat16 {
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16))
	}
	return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
}

// compare applies the spec 2.4 rule: infinities/NaNs coincide; abs OR rel per element; cosine.
func compare(o *vecTensor, got []byte) error {
	failures, first := 0, -1
	var dot, ng, nw float64
	for i, w := range o.want {
		g := element(o.dtype, got, i)
		var ok bool
		if math.IsInf(g, 0) || math.IsNaN(g) || math.IsInf(w, 0) || math.IsNaN(w) {
			ok = (math.IsNaN(g) && math.IsNaN(w)) || (math.IsInf(g, 0) && math.IsInf(w, 0) && g == w)
		} else {
			err := math.Abs(g - w)
			rel := 0.0
			if w != 0 {
				rel = err / math.Abs(w)
			} else if err > 0 {
				rel = math.Inf(1)
			}
			ok = err < o.tol[0] || rel < o.tol[1]
			dot, ng, nw = dot+g*w, ng+g*g, nw+w*w
		}
		if !ok {
			if failures == 0 {
				first = i
			}
			failures++
		}
	}
	cosDiff := 0.0
	if ng+nw > 0 {
		cosDiff = 1 - 2*dot/(ng+nw)
	}
	if failures == 0 && (o.tol[2] < 0 || cosDiff <= o.tol[2]) {
		return nil
	}
	return fmt.Errorf("%s: %d of %d elements out of tolerance (first [%d]), cos_diff %g",
		o.name, failures, len(o.want), first, cosDiff)
}

func TestVectorsMatchTheReference(t *testing.T) {
	seed, cases := loadVectors(t)
	ctx, err := NewContext(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	for _, c := range cases {
		args, outs := prepare(t, c)
		if c.op == "merge" {
			err := ctx.Merge(&MergeArgs{OutParts: args.extra["out_parts"], LSEParts: args.extra["lse_parts"],
				AttnSink: args.AttnSink, Out: args.Out, LSE: args.LSE})
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		} else {
			opts := planOptions(t, c)
			plan, err := ctx.NewPlan(&opts)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if err := plan.Run(&args.RunArgs); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			plan.Close()
		}
		for i := range c.outputs {
			if err := compare(&c.outputs[i], outs[i]); err != nil {
				t.Errorf("%s: %v (vectors seed %d)", c.name, err, seed)
			}
		}
	}
}

// Raw addresses (as for device memory: here mmap'd, outside Go's heap) for the output and the
// workspace give the same result.
func TestRawAddressesRunLikeSlices(t *testing.T) {
	seed, cases := loadVectors(t)
	c := findCase(t, cases, "explicit_fp8_extra")
	ctx, err := NewContext(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	opts := planOptions(t, c)
	plan, err := ctx.NewPlan(&opts)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	size, _ := plan.WorkspaceSize()
	out := &c.outputs[0]
	mem, err := syscall.Mmap(-1, 0, len(out.want)*2+size+1, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	for i := range mem {
		mem[i] = 0xff
	}
	base := uintptr(unsafe.Pointer(&mem[0]))
	args, _ := prepare(t, c)
	args.Out = RawTensor(base, CPU, BFloat16, out.shape, nil)
	args.Workspace = RawTensor(base+uintptr(len(out.want)*2), CPU, UInt8, []int64{int64(size)}, nil)
	if err := plan.Run(&args.RunArgs); err != nil {
		t.Fatal(err)
	}
	if err := compare(out, mem[:len(out.want)*2]); err != nil {
		t.Errorf("%v (vectors seed %d)", err, seed)
	}
}

// One plan on several goroutines (each run with its own workspace), then closed while others may
// still call it: under -race this checks the binding's locking.
func TestConcurrentRunsAndClose(t *testing.T) {
	_, cases := loadVectors(t)
	c := findCase(t, cases, "paged_c4a_fp8_mtp")
	ctx, err := NewContext(nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := planOptions(t, c)
	plan, err := ctx.NewPlan(&opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx.Close() // the plan keeps the C context alive
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for g := range errs {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			args, outs := prepare(t, c)
			if errs[g] = plan.Run(&args.RunArgs); errs[g] == nil {
				errs[g] = compare(&c.outputs[0], outs[0])
			}
		}(g)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	wg.Add(2)
	for g := 0; g < 2; g++ {
		go func() {
			defer wg.Done()
			args, _ := prepare(t, c)
			if err := plan.Run(&args.RunArgs); err != nil && !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("a run racing Close: %v", err)
			}
		}()
	}
	plan.Close()
	wg.Wait()
}

func TestBadInputIsAnErrorWithLibdsv4sMessage(t *testing.T) {
	_, cases := loadVectors(t)
	c := findCase(t, cases, "explicit_bf16_sink")
	ctx, err := NewContext(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	opts := planOptions(t, c)
	plan, err := ctx.NewPlan(&opts)
	if err != nil {
		t.Fatal(err)
	}
	expect := func(what string, err error, status error, fragment string) {
		t.Helper()
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("%s: want a *dsv4.Error, got %v", what, err)
		}
		if !errors.Is(err, status) || !strings.Contains(e.Message, fragment) {
			t.Errorf("%s: got %v, want %v naming %q", what, err, status, fragment)
		}
	}

	// Wrong dtype: q as float32.
	args, outs := prepare(t, c)
	untouched := append([]byte(nil), outs[0]...)
	q := args.Q
	if args.Q, err = q.WithDType(Float32); err == nil {
		t.Fatal("WithDType changed the width")
	}
	args.Q, _ = NewTensor(make([]float32, q.Shape[0]*q.Shape[1]*q.Shape[2]), q.Shape...)
	err = plan.Run(&args.RunArgs)
	expect("wrong dtype", err, ErrPlanMismatch, "q")
	if e := err.(*Error); e.Func != "dsv4_run" || !strings.Contains(err.Error(), e.Status.String()) {
		t.Errorf("the error names its function and status: %v", err)
	}
	if string(outs[0]) != string(untouched) {
		t.Error("a failing run wrote its output")
	}

	// Null where required: no output.
	args, _ = prepare(t, c)
	args.Out = nil
	expect("no out", plan.Run(&args.RunArgs), ErrInvalidArgument, "out")

	// A workspace that is too small.
	if size, _ := plan.WorkspaceSize(); size > 1 {
		args, _ = prepare(t, c)
		args.Workspace, _ = NewTensor(make([]byte, 1), 1)
		expect("small workspace", plan.Run(&args.RunArgs), ErrWorkspaceTooSmall, "workspace")
	}

	// Short buffer: the binding's own check.
	_, err = NewTensor(make([]BF16, 10), 2, 8, 512)
	expect("short buffer", err, ErrInvalidArgument, "shorter")
	x, _ := NewTensor(make([]int32, 10), 2, 5)
	_, err = x.WithStrides(6, 1)
	expect("strides past the end", err, ErrInvalidArgument, "shorter")

	// Bad plan options.
	bad := planOptions(t, c)
	bad.NumHeads = 0
	_, err = ctx.NewPlan(&bad)
	expect("num_heads 0", err, ErrInvalidArgument, "num_heads")

	// A closed plan and a closed context: libdsv4 rejects the NULL handles.
	plan.Close()
	plan.Close()
	args, _ = prepare(t, c)
	expect("closed plan", plan.Run(&args.RunArgs), ErrInvalidArgument, "plan")
	_, err = plan.WorkspaceSize()
	expect("closed plan", err, ErrInvalidArgument, "plan")
	ctx.Close()
	_, err = ctx.NewPlan(&opts)
	expect("closed context", err, ErrInvalidArgument, "ctx")

	// Merge without its parts (on a live context).
	ctx2, err := NewContext(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx2.Close()
	args, _ = prepare(t, c)
	expect("merge without parts", ctx2.Merge(&MergeArgs{Out: args.Out}), ErrInvalidArgument, "out_parts")

	// No such backend.
	_, err = NewContext(&ContextOptions{Backend: "no-such-backend"})
	expect("missing backend", err, ErrNoBackend, "no-such-backend")
}

func TestKVWriteExportAndQueries(t *testing.T) {
	ctx, err := NewContext(&ContextOptions{Backend: "cpu", NumThreads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	rows := make([]BF16, 2*512)
	for i := range rows {
		rows[i] = BF16(0x3f00 + i%97)
	}
	cache := make([]BF16, 2*3*512)
	for i := range cache {
		cache[i] = 0xffff
	}
	values, _ := NewTensor(rows, 2, 512)
	slots, _ := NewTensor([]int32{4, -1}, 2)
	cacheT, _ := NewTensor(cache, 2, 3, 512)
	if err := ctx.KVWrite(CacheDesc{Layout: KVLayoutBF16, BlockSize: 3}, values, slots, cacheT, 0); err != nil {
		t.Fatal(err)
	}
	for d := 0; d < 512; d++ {
		if cache[4*512+d] != rows[d] {
			t.Fatalf("dim %d: got %#x want %#x", d, cache[4*512+d], rows[d])
		}
	}
	if cache[3*512] != 0xffff {
		t.Error("slot -1 was written")
	}

	_, cases := loadVectors(t)
	c := findCase(t, cases, "paged_c4a_fp8_mtp")
	opts := planOptions(t, c)
	plan, err := ctx.NewPlan(&opts)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	batch, _ := prepare(t, c)
	slotMapping := make([]int32, batch.SlotMapping.Shape[0])
	for i := range slotMapping {
		slotMapping[i] = int32(binary.LittleEndian.Uint32(c.inputs[len(c.inputs)-2].bytes[4*i:]))
	}
	T := int64(len(slotMapping))
	swa, lengths := make([]int32, T*128), make([]int32, T)
	swaT, _ := NewTensor(swa, T, 128)
	lengthsT, _ := NewTensor(lengths, T)
	if err := plan.ExportIndices(&ExportArgs{Format: ExportFlashMLA, Batch: batch.RunArgs, SWAIndices: swaT,
		SWALengths: lengthsT}); err != nil {
		t.Fatal(err)
	}
	for i, s := range slotMapping {
		if s < 0 && lengths[i] != 0 || s >= 0 && swa[int64(i)*128+int64(lengths[i])-1] != s {
			t.Errorf("token %d: slot %d, length %d", i, s, lengths[i])
		}
	}

	if v, err := Version(); err != nil || strings.Count(v, ".") != 2 {
		t.Errorf("Version: %q %v", v, err)
	}
	if n, _ := VersionNumber(); n != HeaderVersionNumber {
		t.Errorf("library %d, header %d", n, HeaderVersionNumber)
	}
	info, err := GetKVLayoutInfo(KVLayoutFP8V4584B, 64)
	if err != nil || info.BytesPerToken != 584 || info.MinBlockStrideBytes != 37440 {
		t.Errorf("GetKVLayoutInfo: %+v %v", info, err)
	}
	if _, err := GetKVLayoutInfo(999, 64); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("layout 999: %v", err)
	}
	backends, err := EnumerateBackends(nil)
	found := false
	for _, b := range backends {
		found = found || b.Name == "cpu" && b.Available
	}
	if err != nil || !found {
		t.Errorf("EnumerateBackends: %+v %v", backends, err)
	}
	if d, err := GetDeviceInfo(nil, "cpu", 0); err != nil || d.DeviceType != DeviceCPU {
		t.Errorf("GetDeviceInfo: %+v %v", d, err)
	}
	if ci, err := ctx.Info(); err != nil || ci.Backend != "cpu" || ci.NumThreads != 2 {
		t.Errorf("Info: %+v %v", ci, err)
	}
	if pi, err := plan.Info(); err != nil || pi.Kernel == "" || pi.Mode != ModePaged {
		t.Errorf("plan Info: %+v %v", pi, err)
	}
}

// Contexts and plans left unreachable are closed by their finalizers.
func TestFinalizersClose(t *testing.T) {
	_, cases := loadVectors(t)
	c := findCase(t, cases, "explicit_fp8_extra")
	for i := 0; i < 3; i++ {
		ctx, err := NewContext(nil)
		if err != nil {
			t.Fatal(err)
		}
		opts := planOptions(t, c)
		if _, err := ctx.NewPlan(&opts); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.GC()
}
