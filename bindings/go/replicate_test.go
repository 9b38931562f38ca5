package tpurt

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

const replicas = 8

func newTestSystem(t *testing.T, opts ...func(*SystemOptions)) *System {
	t.Helper()
	o := SystemOptions{NumCores: replicas}
	for _, f := range opts {
		f(&o)
	}
	s, err := NewSystem(o)
	if err != nil {
		t.Fatalf("NewSystem: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// must fails the test (by panicking) on an unexpected error.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// perReplica gives replica r the input [r, 2r, 1].
func perReplica(t *testing.T) [][]*Tensor {
	in := make([][]*Tensor, replicas)
	for r := range in {
		in[r] = []*Tensor{must(NewTensor([]int64{3}, []float32{float32(r), float32(2 * r), 1}))}
	}
	return in
}

func sumInput(ctx *Context, inputs []*Tensor) ([]*Tensor, error) {
	out, err := ctx.CrossReplicaSumTensor(inputs[0])
	return []*Tensor{out}, err
}

func TestReplicatedCrossReplicaSum(t *testing.T) {
	s := newTestSystem(t)
	out, err := Replicate(s, sumInput, perReplica(t), WithNumOutputs(1))
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{28, 56, 8}
	for r := 0; r < replicas; r++ {
		got := must(Values[float32](out[r][0]))
		if !equal(got, want) {
			t.Errorf("replica %d: got %v, want %v", r, got, want)
		}
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestComputationErrorFailsStepWithMessage(t *testing.T) {
	s := newTestSystem(t)
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		if ctx.ReplicaID() == 3 {
			return nil, errors.New("weights missing")
		}
		_, err := CrossReplicaSum(ctx, []float32{1})
		return nil, err
	}, replicas)
	if err == nil || !strings.Contains(err.Error(), "weights missing") || !strings.Contains(err.Error(), "replica 3") {
		t.Fatalf("got %v", err)
	}
	if !errors.Is(err, ErrUnknown) {
		t.Errorf("a plain Go error should be UNKNOWN: %v", err)
	}
	if _, err := Replicate(s, sumInput, perReplica(t), WithNumOutputs(1)); err != nil {
		t.Fatalf("the next step failed: %v", err)
	}
}

func TestComputationPanicIsRecovered(t *testing.T) {
	s := newTestSystem(t)
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		if ctx.ReplicaID() == 5 {
			panic("index out of range in the model")
		}
		_, err := CrossReplicaSum(ctx, []float64{1})
		return nil, err
	}, replicas)
	if err == nil || !strings.Contains(err.Error(), "index out of range in the model") || !strings.Contains(err.Error(), "replica 5") {
		t.Fatalf("got %v", err)
	}
	out, err := Replicate(s, sumInput, perReplica(t), WithNumOutputs(1))
	if err != nil || must(Values[float32](out[0][0]))[0] != 28 {
		t.Fatalf("next step: %v", err)
	}
}

func TestDeadlineExceededFromSkippingReplica(t *testing.T) {
	s := newTestSystem(t)
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		if ctx.ReplicaID() == 0 {
			time.Sleep(300 * time.Millisecond) // late: the others' collective times out
			return nil, nil
		}
		_, err := CrossReplicaSum(ctx, []int32{1}, Collective{Timeout: 50 * time.Millisecond})
		return nil, err
	}, replicas, WithCollectiveTimeout(200*time.Millisecond))
	if !errors.Is(err, ErrDeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
}

// The longest time.Duration (math.MaxInt64, 292 years) is no deadline, as the system's,
// the step's and the call's timeout: a replica 200 ms late is waited for.
func TestLongestDurationIsNoDeadline(t *testing.T) {
	s := newTestSystem(t, func(o *SystemOptions) { o.CollectiveTimeout = math.MaxInt64 })
	for _, step := range []time.Duration{0, math.MaxInt64} {
		for _, call := range []time.Duration{0, math.MaxInt64} {
			_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
				if ctx.ReplicaID() == 0 {
					time.Sleep(200 * time.Millisecond)
				}
				_, err := CrossReplicaSum(ctx, []int32{1}, Collective{Timeout: call})
				return nil, err
			}, replicas, WithCollectiveTimeout(step))
			if err != nil {
				t.Fatalf("step timeout %v, call timeout %v: %v", step, call, err)
			}
		}
	}
}

// A collective result is the step's: closed when the computation returns, while the
// outputs the step returns keep their own reference.
func TestCollectiveResultsEndWithTheStep(t *testing.T) {
	s := newTestSystem(t)
	kept := make([]*Tensor, replicas)
	out, err := Replicate(s, func(ctx *Context, in []*Tensor) ([]*Tensor, error) {
		sum, err := ctx.CrossReplicaSumTensor(in[0])
		if err != nil {
			return nil, err
		}
		kept[ctx.ReplicaID()], err = ctx.CrossReplicaSumTensor(in[0])
		return []*Tensor{sum}, err
	}, perReplica(t), WithNumOutputs(1))
	if err != nil {
		t.Fatal(err)
	}
	for r := range out {
		if got := must(Values[float32](out[r][0])); got[0] != 28 || got[1] != 56 || got[2] != 8 {
			t.Errorf("replica %d: output %v, want [28 56 8]", r, got)
		}
		if _, err := Values[float32](kept[r]); !errors.Is(err, ErrFailedPrecondition) {
			t.Errorf("replica %d: a result kept past the step gave %v, want ErrFailedPrecondition", r, err)
		}
	}
}
