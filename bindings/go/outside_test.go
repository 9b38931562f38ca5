package tpurt

import (
	"errors"
	"strings"
	"testing"
)

// OutsideCompilationTensors: the replica's tensors reach the host function through the
// C call's inputs, and the host's come back through its outputs.
func TestOutsideCompilationTensors(t *testing.T) {
	s := newTestSystem(t)
	out, err := Replicate(s, func(ctx *Context, in []*Tensor) ([]*Tensor, error) {
		return OutsideCompilationTensors(ctx, func(replica int, inputs []*Tensor) ([]*Tensor, error) {
			v, err := Values[float32](inputs[0])
			if err != nil {
				return nil, err
			}
			scaled, err := NewTensor([]int64{int64(len(v))}, []float32{v[0] * 3, v[1] * 3, v[2] * 3})
			if err != nil {
				return nil, err
			}
			id, err := NewTensor([]int64{1}, []float32{float32(replica)})
			return []*Tensor{scaled, id}, err
		}, in[0])
	}, perReplica(t), WithNumOutputs(2))
	if err != nil {
		t.Fatal(err)
	}
	for r := range out {
		got := must(Values[float32](out[r][0]))
		if got[0] != float32(3*r) || got[1] != float32(6*r) || got[2] != 3 {
			t.Errorf("replica %d: the host's first tensor is %v", r, got)
		}
		if id := must(Values[float32](out[r][1])); id[0] != float32(r) {
			t.Errorf("replica %d: the host's second tensor is %v", r, id)
		}
	}
	// A failing host function fails the step with its code and message.
	_, err = ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		return OutsideCompilationTensors(ctx, func(replica int, _ []*Tensor) ([]*Tensor, error) {
			return nil, &Error{Code: CodeDataLoss, Message: "no tensor today"}
		})
	}, replicas)
	if !errors.Is(err, ErrDataLoss) || !strings.Contains(err.Error(), "no tensor today") {
		t.Fatalf("failing host function: %v", err)
	}
}

// OutsideCompilation's *Tensor arguments go to the host function through the C ABI.
func TestOutsideCompilationWithTensorArgs(t *testing.T) {
	s := newTestSystem(t)
	seen := make([]float32, replicas)
	_, err := Replicate(s, func(ctx *Context, in []*Tensor) ([]*Tensor, error) {
		_, err := OutsideCompilation(ctx, func(replica int, args []interface{}, kwargs map[string]interface{}) ([]*Tensor, error) {
			v, err := Values[float32](args[1].(*Tensor))
			seen[replica] = v[1] * float32(kwargs["scale"].(int))
			return nil, err
		}, []interface{}{"x", in[0]}, map[string]interface{}{"scale": 10})
		return nil, err
	}, perReplica(t))
	if err != nil {
		t.Fatal(err)
	}
	for r, v := range seen {
		if v != float32(20*r) {
			t.Errorf("replica %d: the host saw %v", r, v)
		}
	}
}

// OutsideCompilation returns the host function's tensors, as tf.tpu.outside_compilation
// returns what the computation returns (and C#'s and Java's do).
func TestOutsideCompilationReturnsTheHostsTensors(t *testing.T) {
	s := newTestSystem(t)
	out, err := Replicate(s, func(ctx *Context, in []*Tensor) ([]*Tensor, error) {
		return OutsideCompilation(ctx, func(replica int, args []interface{}, kwargs map[string]interface{}) ([]*Tensor, error) {
			v, err := Values[float32](args[0].(*Tensor))
			if err != nil {
				return nil, err
			}
			scaled, err := NewTensor([]int64{1}, []float32{v[2] * float32(kwargs["scale"].(int))})
			if err != nil {
				return nil, err
			}
			id, err := NewTensor([]int64{1}, []int32{int32(replica)})
			return []*Tensor{scaled, id}, err
		}, []interface{}{in[0]}, map[string]interface{}{"scale": 5})
	}, perReplica(t))
	if err != nil {
		t.Fatal(err)
	}
	for r := range out {
		if len(out[r]) != 2 {
			t.Fatalf("replica %d: %d tensors from the host", r, len(out[r]))
		}
		if v := must(Values[float32](out[r][0])); v[0] != 5 {
			t.Errorf("replica %d: the host's first tensor is %v", r, v)
		}
		if v := must(Values[int32](out[r][1])); v[0] != int32(r) {
			t.Errorf("replica %d: the host's second tensor is %v", r, v)
		}
	}
	got, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		return OutsideCompilationArgs(ctx, func(replica int, args []interface{}) ([]*Tensor, error) {
			x, err := NewTensor([]int64{1}, []float32{float32(args[0].(int))})
			return []*Tensor{x}, err
		}, 7)
	}, replicas)
	if err != nil {
		t.Fatal(err)
	}
	if v := must(Values[float32](got[replicas-1][0])); v[0] != 7 {
		t.Errorf("OutsideCompilationArgs: %v", v)
	}
	dyn, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		return OutsideCompilationDyn(ctx, func(replica int, _ []interface{}) ([]*Tensor, error) {
			x, err := NewTensor([]int64{1}, []float32{3})
			return []*Tensor{x}, err
		}, nil, nil)
	}, replicas)
	if err != nil {
		t.Fatal(err)
	}
	if v := must(Values[float32](dyn[0][0])); v[0] != 3 {
		t.Errorf("OutsideCompilationDyn: %v", v)
	}
}
