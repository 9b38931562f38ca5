package tpurt

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// tf.tpu's shutdown_system(job) and PerReplica values (seed 004).
func TestShutdownSystemOfAJob(t *testing.T) {
	s := newTestSystem(t)
	err := ShutdownSystem(s, "no_such_job")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "no_such_job") {
		t.Errorf("another job: %v", err)
	}
	if err := ShutdownSystemDyn(s, 3); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "int") {
		t.Errorf("ShutdownSystemDyn with an int job: %v", err)
	}
	if closed, err := s.IsClosed(); err != nil || closed {
		t.Fatalf("a refused shutdown closed the system: %v %v", closed, err)
	}
	job := must(s.JobName())
	if err := ShutdownSystemDyn(s, job); err != nil {
		t.Fatalf("ShutdownSystemDyn(%q): %v", job, err)
	}
	if closed, err := s.IsClosed(); err != nil || !closed {
		t.Errorf("IsClosed after ShutdownSystem(%q): %v %v", job, closed, err)
	}
	if err := ShutdownSystem(nil, ""); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil system: %v", err)
	}
}

func TestCrossReplicaSumPerReplica(t *testing.T) {
	s := newTestSystem(t)
	values := make([]*Tensor, replicas)
	for r := range values {
		values[r] = must(NewTensor([]int64{1}, []float32{float32(r)}))
	}
	pr := must(NewPerReplica(values...))
	halves := Collective{Groups: [][]int32{{0, 1, 2, 3}, {4, 5, 6, 7}}}
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		r := ctx.ReplicaID()
		if v := must(Values[float32](must(CrossReplicaSumPerReplica(ctx, pr)))); v[0] != 28 {
			return nil, fmt.Errorf("sum %v", v)
		}
		want := float32(6)
		if r >= 4 {
			want = 22
		}
		if v := must(Values[float32](must(CrossReplicaSumPerReplica(ctx, pr, halves)))); v[0] != want {
			return nil, fmt.Errorf("sum over halves %v", v)
		}
		dyn := must(CrossReplicaSumDyn(ctx, pr)).(*Tensor)
		if v := must(Values[float32](dyn)); v[0] != 28 {
			return nil, fmt.Errorf("dyn sum %v", v)
		}
		return nil, nil
	}, replicas)
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.Values()) != replicas || must(pr.Get(3)) != values[3] {
		t.Errorf("Values/Get")
	}
	if _, err := NewPerReplica(values[0], nil); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "replica 1") {
		t.Errorf("a nil value: %v", err)
	}
	short := must(NewPerReplica(values[:4]...))
	_, err = ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		_, err := CrossReplicaSumPerReplica(ctx, short)
		return nil, err
	}, replicas)
	if !errors.Is(err, ErrInvalidArgument) || !regexp.MustCompile(`replica [4-7] has no value \(the PerReplica holds 4\)`).MatchString(err.Error()) {
		t.Errorf("a replica without a value: %v", err)
	}
}
