// Package dsv4 is the Go binding of libdsv4: DeepSeek-V4 sparse MLA attention behind a stable C
// ABI (include/dsv4/dsv4.h).
//
//	ctx, err := dsv4.NewContext(nil)             // CPU tensors, backend chosen by probing
//	opts, err := dsv4.DefaultPlanOptions()        // dsv4_plan_options with its defaults
//	opts.NumHeads, opts.MaxTokens, opts.TopK = 8, 2, 4
//	opts.SWACache = dsv4.CacheDesc{Layout: dsv4.KVLayoutBF16, BlockSize: 4}
//	plan, err := ctx.NewPlan(&opts)
//	err = plan.Run(&dsv4.RunArgs{Q: q, SWACache: cache, Indices: indices, Out: out})
//
// The library is loaded at run time with dlopen (no link-time dependency): $DSV4_LIBRARY, else
// libdsv4.so.0 through the dynamic linker's search, or LoadLibrary first. A failing call returns
// an *Error carrying the status, the C function and libdsv4's message (read within the same cgo
// call, as the header asks of Go callers); errors.Is(err, dsv4.ErrInvalidArgument) tests the
// status.
//
// Contexts and plans are safe for concurrent use, as the C contract allows: a Plan runs on
// several goroutines at once, each call with its own workspace. Close releases them (a plan
// before its context: a context closed first lives on until its last plan closes); finalizers
// close what is left unreachable. Tensors borrow Go slices only for the duration of a call.
package dsv4

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// Status is a DSV4_STATUS_* value (an int32: a newer library may return a value not listed).
type Status int32

const (
	StatusOK                Status = C.DSV4_STATUS_OK
	StatusInvalidArgument   Status = C.DSV4_STATUS_INVALID_ARGUMENT
	StatusUnsupported       Status = C.DSV4_STATUS_UNSUPPORTED
	StatusNoBackend         Status = C.DSV4_STATUS_NO_BACKEND
	StatusBackendError      Status = C.DSV4_STATUS_BACKEND_ERROR
	StatusOutOfMemory       Status = C.DSV4_STATUS_OUT_OF_MEMORY
	StatusWorkspaceTooSmall Status = C.DSV4_STATUS_WORKSPACE_TOO_SMALL
	StatusPlanMismatch      Status = C.DSV4_STATUS_PLAN_MISMATCH
	StatusABIMismatch       Status = C.DSV4_STATUS_ABI_MISMATCH
	StatusInternal          Status = C.DSV4_STATUS_INTERNAL
)

var statusNames = map[Status]string{
	StatusOK: "DSV4_STATUS_OK", StatusInvalidArgument: "DSV4_STATUS_INVALID_ARGUMENT",
	StatusUnsupported: "DSV4_STATUS_UNSUPPORTED", StatusNoBackend: "DSV4_STATUS_NO_BACKEND",
	StatusBackendError: "DSV4_STATUS_BACKEND_ERROR", StatusOutOfMemory: "DSV4_STATUS_OUT_OF_MEMORY",
	StatusWorkspaceTooSmall: "DSV4_STATUS_WORKSPACE_TOO_SMALL",
	StatusPlanMismatch:      "DSV4_STATUS_PLAN_MISMATCH", StatusABIMismatch: "DSV4_STATUS_ABI_MISMATCH",
	StatusInternal: "DSV4_STATUS_INTERNAL",
}

func (s Status) String() string {
	if name, ok := statusNames[s]; ok {
		return name
	}
	return fmt.Sprintf("DSV4_STATUS_UNKNOWN(%d)", int32(s))
}

// Error is a failing libdsv4 call, or a check of this binding's own (StatusInvalidArgument).
type Error struct {
	Status  Status
	Func    string // the C function (or binding check) that failed
	Message string // libdsv4's message, naming the argument at fault
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s: %s", e.Func, e.Status, e.Message) }

// Is matches the sentinel errors below by status.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Func == "" && t.Message == "" && t.Status == e.Status
}

// Sentinels for errors.Is.
var (
	ErrInvalidArgument   = &Error{Status: StatusInvalidArgument}
	ErrUnsupported       = &Error{Status: StatusUnsupported}
	ErrNoBackend         = &Error{Status: StatusNoBackend}
	ErrBackendError      = &Error{Status: StatusBackendError}
	ErrOutOfMemory       = &Error{Status: StatusOutOfMemory}
	ErrWorkspaceTooSmall = &Error{Status: StatusWorkspaceTooSmall}
	ErrPlanMismatch      = &Error{Status: StatusPlanMismatch}
	ErrABIMismatch       = &Error{Status: StatusABIMismatch}
	ErrInternal          = &Error{Status: StatusInternal}
)

func invalid(function, format string, args ...interface{}) error {
	return &Error{Status: StatusInvalidArgument, Func: function, Message: fmt.Sprintf(format, args...)}
}

// message is the buffer each shim copies libdsv4's message into, within the failing cgo call.
type message [C.DSV4GO_MESSAGE]C.char

func (m *message) ptr() *C.char { return &m[0] }

func check(status C.dsv4_status, function string, m *message) error {
	if status == C.DSV4_STATUS_OK {
		return nil
	}
	return &Error{Status: Status(status), Func: function, Message: C.GoString(m.ptr())}
}

// LibrarySONAME is what the dynamic linker searches for when DSV4_LIBRARY is unset.
const LibrarySONAME = "libdsv4.so.0"

var library struct {
	sync.Mutex
	loaded bool
	path   string
}

// LoadLibrary loads libdsv4 from path (a file name the dynamic linker searches, or a path) unless
// a library is loaded already. Other functions load $DSV4_LIBRARY or libdsv4.so.0 on first use.
func LoadLibrary(path string) error {
	library.Lock()
	defer library.Unlock()
	if library.loaded {
		return nil
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var m message
	if C.dsv4go_load(cpath, m.ptr()) != 0 {
		return &Error{Status: StatusNoBackend, Func: "dlopen", Message: C.GoString(m.ptr())}
	}
	library.loaded, library.path = true, path
	return nil
}

func ensureLoaded() error {
	library.Lock()
	loaded := library.loaded
	library.Unlock()
	if loaded {
		return nil
	}
	path := os.Getenv("DSV4_LIBRARY")
	if path == "" {
		path = LibrarySONAME
	}
	return LoadLibrary(path)
}

// Version is the loaded library's version string ("0.2.0").
func Version() (string, error) {
	if err := ensureLoaded(); err != nil {
		return "", err
	}
	return C.GoString(C.dsv4go_get_version_string()), nil
}

// VersionNumber is major*10000 + minor*100 + patch of the loaded library.
func VersionNumber() (uint32, error) {
	if err := ensureLoaded(); err != nil {
		return 0, err
	}
	return uint32(C.dsv4go_get_version()), nil
}

// Device is where tensors live (DLPack device codes).
type Device struct {
	Type int32 // DeviceCPU, DeviceCUDA, ...
	ID   int32
}

// Device types (DSV4_DEVICE_*).
const (
	DeviceCPU         = int32(C.DSV4_DEVICE_CPU)
	DeviceCUDA        = int32(C.DSV4_DEVICE_CUDA)
	DeviceCUDAHost    = int32(C.DSV4_DEVICE_CUDA_HOST)
	DeviceOpenCL      = int32(C.DSV4_DEVICE_OPENCL)
	DeviceROCm        = int32(C.DSV4_DEVICE_ROCM)
	DeviceCUDAManaged = int32(C.DSV4_DEVICE_CUDA_MANAGED)
	DeviceOneAPI      = int32(C.DSV4_DEVICE_ONEAPI)
)

// CPU is host memory.
var CPU = Device{Type: DeviceCPU}

// CUDA is device id of the CUDA runtime.
func CUDA(id int32) Device { return Device{Type: DeviceCUDA, ID: id} }

// OpenCL is device id of the context's OpenCL platform (tensors are SVM pointers).
func OpenCL(id int32) Device { return Device{Type: DeviceOpenCL, ID: id} }

// KV cache layouts (DSV4_KV_LAYOUT_*).
const (
	KVLayoutNone             = uint32(C.DSV4_KV_LAYOUT_NONE)
	KVLayoutBF16             = uint32(C.DSV4_KV_LAYOUT_BF16)
	KVLayoutFP8V4584B        = uint32(C.DSV4_KV_LAYOUT_FP8_V4_584B)
	KVLayoutFP8V32656B       = uint32(C.DSV4_KV_LAYOUT_FP8_V32_656B)
	KVLayoutFP8E4M3PerTensor = uint32(C.DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR)
	KVLayoutFP16             = uint32(C.DSV4_KV_LAYOUT_FP16)
)

// Cache flags (DSV4_KV_CACHE_FLAG_*, CacheDesc.Flags).
const KVCacheFlagFP8FNUZ = uint32(C.DSV4_KV_CACHE_FLAG_FP8_FNUZ)

// Plan modes, index formats, flags and export formats.
const (
	ModeExplicit = uint32(C.DSV4_MODE_EXPLICIT)
	ModePaged    = uint32(C.DSV4_MODE_PAGED)
	IndexDense   = uint32(C.DSV4_INDEX_DENSE)
	IndexCSR     = uint32(C.DSV4_INDEX_CSR)
	PlanFlagNone = uint32(C.DSV4_PLAN_FLAG_NONE)
	// PlanFlagBatchInvariant: every token's results are bit-identical whatever else is in the run.
	PlanFlagBatchInvariant = uint32(C.DSV4_PLAN_FLAG_BATCH_INVARIANT)
	// PlanFlagReferenceKernel: the backend's reference kernel.
	PlanFlagReferenceKernel = uint32(C.DSV4_PLAN_FLAG_REFERENCE_KERNEL)
	ExportFlashMLA          = uint32(C.DSV4_EXPORT_FLASHMLA)
	ExportCSR               = uint32(C.DSV4_EXPORT_CSR)
	ExportFlashInfer        = uint32(C.DSV4_EXPORT_FLASHINFER)
)

// Log levels (DSV4_LOG_*; the level itself comes from DSV4_LOG_LEVEL).
const (
	LogError = int32(C.DSV4_LOG_ERROR)
	LogWarn  = int32(C.DSV4_LOG_WARN)
	LogInfo  = int32(C.DSV4_LOG_INFO)
	LogDebug = int32(C.DSV4_LOG_DEBUG)
)

// DType is an element type (DLPack codes).
type DType struct {
	Code  uint8
	Bits  uint8
	Lanes uint16
}

// DType codes (DSV4_DTYPE_CODE_*).
const (
	DTypeCodeInt          = uint8(C.DSV4_DTYPE_CODE_INT)
	DTypeCodeUInt         = uint8(C.DSV4_DTYPE_CODE_UINT)
	DTypeCodeFloat        = uint8(C.DSV4_DTYPE_CODE_FLOAT)
	DTypeCodeBFloat       = uint8(C.DSV4_DTYPE_CODE_BFLOAT)
	DTypeCodeFloat8E4M3FN = uint8(C.DSV4_DTYPE_CODE_FLOAT8_E4M3FN)
)

// The dtypes libdsv4 uses.
var (
	BFloat16   = DType{DTypeCodeBFloat, 16, 1}
	Float16    = DType{DTypeCodeFloat, 16, 1}
	Float32    = DType{DTypeCodeFloat, 32, 1}
	Float64    = DType{DTypeCodeFloat, 64, 1}
	Int8       = DType{DTypeCodeInt, 8, 1}
	Int32      = DType{DTypeCodeInt, 32, 1}
	Int64      = DType{DTypeCodeInt, 64, 1}
	UInt8      = DType{DTypeCodeUInt, 8, 1}
	UInt16     = DType{DTypeCodeUInt, 16, 1}
	Float8E4M3 = DType{DTypeCodeFloat8E4M3FN, 8, 1}
)

func (d DType) bytes() int { return (int(d.Bits)*int(d.Lanes) + 7) / 8 }

// APIVersion is DSV4_API_VERSION of the header this package was built against.
const APIVersion = uint32(C.DSV4_API_VERSION)

// The header's version (DSV4_VERSION_*); VersionNumber gives the loaded library's.
const (
	HeaderVersionMajor  = uint32(C.DSV4_VERSION_MAJOR)
	HeaderVersionMinor  = uint32(C.DSV4_VERSION_MINOR)
	HeaderVersionPatch  = uint32(C.DSV4_VERSION_PATCH)
	HeaderVersionNumber = uint32(C.DSV4_VERSION_NUMBER)
)
