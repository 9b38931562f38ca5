package tpurt

import (
	"errors"
	"strings"
	"testing"
)

// Nil data is not zeros: a constructor given none for a shape with elements fails.
func TestNilDataForANonEmptyShapeIsAnError(t *testing.T) {
	for name, err := range map[string]error{
		"float32":      second(NewTensor[float32]([]int64{2}, nil)),
		"float64":      second(NewTensor[float64]([]int64{2, 1}, nil)),
		"int32":        second(NewTensor[int32]([]int64{3}, nil)),
		"int64":        second(NewTensor[int64]([]int64{1}, nil)),
		"scalar":       second(NewTensor[float32](nil, nil)),
		"empty slice":  second(NewTensor([]int64{2}, []float32{})),
		"NewTensorDyn": second(NewTensorDyn([]int64{2}, []float32(nil))),
		"WrapFloat32":  second(WrapFloat32([]int64{2}, nil)),
		"Write":        Write(must(NewTensor([]int64{2}, []int32{1, 2})), []int32(nil)),
		"Read":         Read(must(NewTensor([]int64{2}, []int32{1, 2})), []int32(nil)),
	} {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", name, err)
		}
	}
	var e *Error
	if _, err := NewTensor[float32]([]int64{2}, nil); !errors.As(err, &e) || !strings.Contains(e.Message, "8 bytes") {
		t.Errorf("the message names what the shape needs: %v", err)
	}
	// No elements: nil is the empty tensor.
	empty, err := NewTensor[float32]([]int64{0}, nil)
	if err != nil {
		t.Fatalf("an empty shape with nil data: %v", err)
	}
	if n, _ := empty.NumElements(); n != 0 {
		t.Errorf("empty tensor has %d elements", n)
	}
	zeros := must(Values[float32](must(Zeros(Float32, []int64{2}))))
	if !equal(zeros, []float32{0, 0}) {
		t.Errorf("Zeros: %v", zeros)
	}
}
