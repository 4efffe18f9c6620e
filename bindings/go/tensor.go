package dsv4

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"unsafe"
)

// BF16 holds bfloat16 bits; F16 IEEE binary16 bits.
type (
	BF16 uint16
	F16  uint16
)

// Element is an element type a slice tensor may hold.
type Element interface {
	BF16 | F16 | float32 | float64 | int8 | int32 | int64 | uint8 | uint16
}

func dtypeOf[T Element]() DType {
	var zero T
	switch any(zero).(type) {
	case BF16:
		return BFloat16
	case F16:
		return Float16
	case float32:
		return Float32
	case float64:
		return Float64
	case int8:
		return Int8
	case int32:
		return Int32
	case int64:
		return Int64
	case uint8:
		return UInt8
	default:
		return UInt16
	}
}

// Tensor is a borrowed dsv4_tensor: a Go slice (held only for the duration of a call) or a raw
// address (device memory), with its dtype, shape and strides (in elements; nil = compact).
type Tensor struct {
	ptr        unsafe.Pointer // first element of a Go slice, or nil
	addr       uintptr        // raw address, when ptr is nil
	bytes      int            // the slice's bytes; -1 for a raw address
	keep       interface{}    // the slice itself, so that it stays alive with the tensor
	Device     Device
	DType      DType
	Shape      []int64
	Strides    []int64
	ByteOffset uint64
}

// NewTensor views data with shape (compact row-major). It fails when data is shorter than the
// shape.
func NewTensor[T Element](data []T, shape ...int64) (*Tensor, error) {
	var zero T
	t := &Tensor{bytes: len(data) * int(unsafe.Sizeof(zero)), keep: data, Device: CPU,
		DType: dtypeOf[T](), Shape: append([]int64(nil), shape...)}
	if len(data) > 0 {
		t.ptr = unsafe.Pointer(&data[0])
	}
	return t, t.checkExtent("dsv4.NewTensor")
}

// TensorFromBytes views bytes as dtype with shape.
func TensorFromBytes(data []byte, dtype DType, shape ...int64) (*Tensor, error) {
	t, err := NewTensor(data, shape...)
	if err != nil {
		return nil, err
	}
	t.DType = dtype
	return t, t.checkExtent("dsv4.TensorFromBytes")
}

// RawTensor describes memory Go cannot see (e.g. from cudaMalloc). The caller keeps it valid and
// on device for as long as libdsv4 may use it.
func RawTensor(addr uintptr, device Device, dtype DType, shape []int64, strides []int64) *Tensor {
	return &Tensor{addr: addr, bytes: -1, Device: device, DType: dtype,
		Shape: append([]int64(nil), shape...), Strides: append([]int64(nil), strides...)}
}

// WithStrides sets strides in elements (one non-negative stride per dimension); for slices the
// farthest element must lie inside the slice.
func (t *Tensor) WithStrides(strides ...int64) (*Tensor, error) {
	c := *t
	c.Strides = append([]int64(nil), strides...)
	return &c, c.checkExtent("dsv4.Tensor.WithStrides")
}

// WithDType reinterprets the same bytes as a dtype of the same width (bf16 held in uint16).
func (t *Tensor) WithDType(dtype DType) (*Tensor, error) {
	if dtype.bytes() != t.DType.bytes() {
		return nil, invalid("dsv4.Tensor.WithDType", "dtype of another width")
	}
	c := *t
	c.DType = dtype
	return &c, nil
}

func (t *Tensor) checkExtent(function string) error {
	if len(t.Shape) > 8 {
		return invalid(function, "%d dimensions: at most 8", len(t.Shape))
	}
	if t.Strides != nil && len(t.Strides) != len(t.Shape) {
		return invalid(function, "%d strides for %d dimensions", len(t.Strides), len(t.Shape))
	}
	if t.bytes < 0 {
		return nil
	}
	element := int64(t.DType.bytes())
	needed := element
	for i, extent := range t.Shape {
		if extent == 0 {
			return nil
		}
		if extent < 0 {
			return invalid(function, "shape[%d] = %d is negative", i, extent)
		}
		stride := int64(1)
		if t.Strides != nil {
			stride = t.Strides[i]
			if stride < 0 {
				return invalid(function, "strides[%d] = %d is negative", i, stride)
			}
		} else {
			for _, d := range t.Shape[i+1:] {
				stride *= d
			}
		}
		needed += (extent - 1) * stride * element
	}
	if needed > int64(t.bytes) {
		return invalid(function, "buffer of %d bytes is shorter than its shape %v needs (%d bytes)",
			t.bytes, t.Shape, needed)
	}
	return nil
}

// call marshals one call's tensors into C memory (see shim.h): their metadata in the arena, the
// data of Go slices as the shim's arguments.
type call struct {
	arena *C.dsv4go_arena
	data  [C.DSV4GO_TENSORS]unsafe.Pointer
	keep  []interface{}
	n     int
}

func newCall() *call {
	return &call{arena: (*C.dsv4go_arena)(C.calloc(1, C.sizeof_dsv4go_arena))}
}

func (c *call) free() { C.free(unsafe.Pointer(c.arena)) }

// tensor fills the next C tensor from t (nil: NULL). Outputs must not be shared with inputs'
// storage in other calls running at the same time; libdsv4 checks the rest.
func (c *call) tensor(t *Tensor, field string) (*C.dsv4_tensor, error) {
	if t == nil {
		return nil, nil
	}
	if c.n == int(C.DSV4GO_TENSORS) {
		return nil, invalid(field, "too many tensors in one call")
	}
	if err := t.checkExtent(field); err != nil {
		return nil, err
	}
	i := c.n
	c.n++
	ct := &c.arena.tensors[i]
	ct.device.device_type = C.int32_t(t.Device.Type)
	ct.device.device_id = C.int32_t(t.Device.ID)
	ct.ndim = C.int32_t(len(t.Shape))
	ct.dtype.code = C.uint8_t(t.DType.Code)
	ct.dtype.bits = C.uint8_t(t.DType.Bits)
	ct.dtype.lanes = C.uint16_t(t.DType.Lanes)
	ct.byte_offset = C.uint64_t(t.ByteOffset)
	dims := &c.arena.dims[i]
	for d, extent := range t.Shape {
		dims[d] = C.int64_t(extent)
	}
	ct.shape = &dims[0]
	if t.Strides != nil {
		for d, stride := range t.Strides {
			dims[8+d] = C.int64_t(stride)
		}
		ct.strides = &dims[8]
	}
	if t.ptr != nil {
		c.data[i] = t.ptr
		c.keep = append(c.keep, t.keep)
	} else {
		C.dsv4go_set_address(ct, C.uintptr_t(t.addr))
	}
	return ct, nil
}

// invoke runs one shim operation with the call's tensors and an optional Go workspace.
func (c *call) invoke(op C.int, handle, args unsafe.Pointer, workspace []byte, function string) error {
	var m message
	var ws unsafe.Pointer
	if len(workspace) > 0 {
		ws = unsafe.Pointer(&workspace[0])
	}
	d := &c.data
	status := C.dsv4go_call(op, handle, args, &c.arena.run, &c.arena.tensors[0], ws, m.ptr(),
		d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12], d[13],
		d[14], d[15], d[16], d[17], d[18], d[19], d[20], d[21], d[22], d[23])
	return check(status, function, &m)
}
