package tpurt

import (
	"fmt"
	"runtime"
)

// Numeric is an element type a Tensor can be built from and read into.
type Numeric interface {
	float32 | float64 | int32 | int64
}

// DType is a tensor element type.
type DType int

// The element types.
const (
	Float32  DType = 1
	Float64  DType = 2
	Int32    DType = 3
	UInt8    DType = 4
	Int16    DType = 5
	Int8     DType = 6
	Int64    DType = 9
	Bool     DType = 10
	BFloat16 DType = 14
	Half     DType = 19
)

func (d DType) String() string {
	name, err := try(func() string { return RawDtypeName(TpurtDType(d)) })
	if err != nil {
		return fmt.Sprintf("DType(%d)", int(d))
	}
	return name
}

func dtypeOf[T Numeric]() DType {
	var zero T
	switch any(zero).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case int32:
		return Int32
	default:
		return Int64
	}
}

// Tensor is a reference to a library tensor. Close releases it; a finalizer does
// so for tensors that are dropped.
type Tensor struct {
	raw RawTensor
}

func wrapTensor(raw RawTensor) *Tensor {
	t := &Tensor{raw: raw}
	runtime.SetFinalizer(t, (*Tensor).Close)
	return t
}

// Close releases the tensor; later calls fail with ErrFailedPrecondition.
func (t *Tensor) Close() {
	if t == nil || t.raw == nil {
		return
	}
	runtime.SetFinalizer(t, nil)
	DeleteRawTensor(t.raw)
	t.raw = nil
}

func (t *Tensor) handle() (RawTensor, error) {
	if t == nil {
		return nil, newError(CodeInvalidArgument, "the tensor is nil")
	}
	if t.raw == nil {
		return nil, newError(CodeFailedPrecondition, "the tensor is closed")
	}
	return t.raw, nil
}

func int64Vector(values []int64) Int64Vector {
	v := NewInt64Vector()
	for _, x := range values {
		v.Add(x)
	}
	return v
}

func int32Vector(values []int32) Int32Vector {
	v := NewInt32Vector()
	for _, x := range values {
		v.Add(int(x))
	}
	return v
}

// NewTensor copies data into a new tensor of shape dims (nil dims: a scalar).
func NewTensor[T Numeric](dims []int64, data []T) (*Tensor, error) {
	d := int64Vector(dims)
	defer DeleteInt64Vector(d)
	raw, err := try(func() RawTensor {
		switch v := any(data).(type) {
		case []float32:
			return RawTensorFromFloat32(d, v)
		case []float64:
			return RawTensorFromFloat64(d, v)
		case []int32:
			return RawTensorFromInt32(d, v)
		default:
			return RawTensorFromInt64(d, any(data).([]int64))
		}
	})
	if err != nil {
		return nil, err
	}
	return wrapTensor(raw), nil
}

// NewTensorDyn builds a tensor from a []float32, []float64, []int32 or []int64 held
// in an interface{}; any other type is an ErrInvalidArgument naming it.
func NewTensorDyn(dims []int64, data interface{}) (*Tensor, error) {
	switch v := data.(type) {
	case []float32:
		return NewTensor(dims, v)
	case []float64:
		return NewTensor(dims, v)
	case []int32:
		return NewTensor(dims, v)
	case []int64:
		return NewTensor(dims, v)
	}
	return nil, newError(CodeInvalidArgument, "tensor data must be []float32, []float64, []int32 or []int64, not %T", data)
}

// Zeros is a zero-filled tensor.
func Zeros(dtype DType, dims []int64) (*Tensor, error) {
	d := int64Vector(dims)
	defer DeleteInt64Vector(d)
	raw, err := try(func() RawTensor { return RawTensorZeros(TpurtDType(dtype), d) })
	if err != nil {
		return nil, err
	}
	return wrapTensor(raw), nil
}

// WrapFloat32 makes a tensor over data without copying. The library keeps the
// pointer after this call, which cgo's rules do not cover: Go's heap does not move,
// but the caller must keep data referenced (runtime.KeepAlive) for the tensor's life
// and must not write it while a step reads it. NewTensor copies and is always safe.
func WrapFloat32(dims []int64, data []float32) (*Tensor, error) {
	d := int64Vector(dims)
	defer DeleteInt64Vector(d)
	raw, err := try(func() RawTensor { return RawTensorWrapFloat32(d, data) })
	if err != nil {
		return nil, err
	}
	return wrapTensor(raw), nil
}

// Values copies the tensor's elements out; T must match its dtype.
func Values[T Numeric](t *Tensor) ([]T, error) {
	raw, err := t.handle()
	if err != nil {
		return nil, err
	}
	n, err := try(raw.NumElements)
	if err != nil {
		return nil, err
	}
	out := make([]T, n)
	return out, Read(t, out)
}

// Read fills out (len = number of elements) with the tensor's elements.
func Read[T Numeric](t *Tensor, out []T) error {
	raw, err := t.handle()
	if err != nil {
		return err
	}
	return try0(func() {
		switch v := any(out).(type) {
		case []float32:
			raw.ReadFloat32(v)
		case []float64:
			raw.ReadFloat64(v)
		case []int32:
			raw.ReadInt32(v)
		default:
			raw.ReadInt64(any(out).([]int64))
		}
	})
}

// Write overwrites the tensor's elements with data (same count and dtype).
func Write[T Numeric](t *Tensor, data []T) error {
	raw, err := t.handle()
	if err != nil {
		return err
	}
	return try0(func() {
		switch v := any(data).(type) {
		case []float32:
			raw.WriteFloat32(v)
		case []float64:
			raw.WriteFloat64(v)
		case []int32:
			raw.WriteInt32(v)
		default:
			raw.WriteInt64(any(data).([]int64))
		}
	})
}

// DType is the element type.
func (t *Tensor) DType() (DType, error) {
	raw, err := t.handle()
	if err != nil {
		return 0, err
	}
	d, err := try(raw.Dtype)
	return DType(d), err
}

// Rank is the number of dimensions.
func (t *Tensor) Rank() (int, error) {
	raw, err := t.handle()
	if err != nil {
		return 0, err
	}
	return try(raw.Rank)
}

// Dims is the shape.
func (t *Tensor) Dims() ([]int64, error) {
	raw, err := t.handle()
	if err != nil {
		return nil, err
	}
	return try(func() []int64 {
		v := raw.Dims()
		defer DeleteInt64Vector(v)
		out := make([]int64, v.Size())
		for i := range out {
			out[i] = v.Get(int(i))
		}
		return out
	})
}

// Dim is the size of one axis; negative axes count from the end.
func (t *Tensor) Dim(axis int) (int64, error) {
	raw, err := t.handle()
	if err != nil {
		return 0, err
	}
	return try(func() int64 { return raw.Dim(axis) })
}

// NumElements is the product of the dims.
func (t *Tensor) NumElements() (int64, error) {
	raw, err := t.handle()
	if err != nil {
		return 0, err
	}
	return try(raw.NumElements)
}

// ByteSize is the size of the data in bytes.
func (t *Tensor) ByteSize() (int64, error) {
	raw, err := t.handle()
	if err != nil {
		return 0, err
	}
	return try(raw.ByteSize)
}

// Reshape is a tensor sharing this one's data with new dims (one may be -1).
func (t *Tensor) Reshape(dims []int64) (*Tensor, error) {
	raw, err := t.handle()
	if err != nil {
		return nil, err
	}
	d := int64Vector(dims)
	defer DeleteInt64Vector(d)
	r, err := try(func() RawTensor { return raw.Reshape(d) })
	if err != nil {
		return nil, err
	}
	return wrapTensor(r), nil
}

// Cast converts the elements to dtype.
func (t *Tensor) Cast(dtype DType) (*Tensor, error) {
	raw, err := t.handle()
	if err != nil {
		return nil, err
	}
	r, err := try(func() RawTensor { return raw.Cast(TpurtDType(dtype)) })
	if err != nil {
		return nil, err
	}
	return wrapTensor(r), nil
}

// Bytes copies the raw data out.
func (t *Tensor) Bytes() ([]byte, error) {
	raw, err := t.handle()
	if err != nil {
		return nil, err
	}
	return try(func() []byte {
		v := raw.ToBytes()
		defer DeleteByteVector(v)
		out := make([]byte, v.Size())
		for i := range out {
			out[i] = v.Get(int(i))
		}
		return out
	})
}

func tensorVector(tensors []*Tensor, what string) (TensorVector, error) {
	v := NewTensorVector()
	for i, t := range tensors {
		raw, err := t.handle()
		if err != nil {
			DeleteTensorVector(v)
			return nil, newError(CodeInvalidArgument, "%s[%d]: %v", what, i, err.(*Error).Message)
		}
		v.Add(raw)
	}
	return v, nil
}

// fromTensorVector takes ownership of every element: copies share the tensor.
func fromTensorVector(v TensorVector) []*Tensor {
	defer DeleteTensorVector(v)
	out := make([]*Tensor, v.Size())
	for i := range out {
		out[i] = wrapTensor(NewRawTensor__SWIG_1(v.Get(int(i))))
	}
	return out
}
