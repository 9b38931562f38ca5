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
	// TensorFlow's placement error for the shutdown op on a job the cluster lacks.
	err := ShutdownSystem(s, "no_such_job")
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "'/job:no_such_job/device:TPU_SYSTEM:0'") {
		t.Errorf("another job: %v", err)
	}
	if err := ShutdownSystemDyn(s, "no_such_job"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("ShutdownSystemDyn of another job: %v", err)
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

// The seed's step forms as the seed writes them: no WithNumOutputs (TensorFlow counts
// what the computation returns) and inputs nil (TensorFlow's None, [[]]).
func TestSeedStepFormsCountTheirOutputs(t *testing.T) {
	s := newTestSystem(t)
	x := must(NewTensor([]int64{replicas}, []float32{0, 1, 2, 3, 4, 5, 6, 7}))
	// Three outputs: the input, its first element's double, and a scalar.
	three := func(ctx *Context, in []*Tensor) ([]*Tensor, error) {
		v, err := Values[float32](in[0])
		if err != nil {
			return nil, err
		}
		double, err := NewTensor([]int64{1}, []float32{2 * v[0]})
		if err != nil {
			return nil, err
		}
		scalar, err := NewTensor(nil, []float32{float32(ctx.ReplicaID())})
		return []*Tensor{in[0], double, scalar}, err
	}
	rows := make([][]*Tensor, replicas)
	for r := range rows {
		rows[r] = []*Tensor{must(NewTensor([]int64{1}, []float32{float32(r)}))}
	}
	out, err := Replicate(s, three, rows)
	if err != nil {
		t.Fatalf("Replicate: %v", err)
	}
	for r := range out {
		if len(out[r]) != 3 || must(Values[float32](out[r][1]))[0] != float32(2*r) {
			t.Fatalf("Replicate: replica %d returned %d outputs", r, len(out[r]))
		}
	}
	if dyn, err := ReplicateDyn(s, Computation(three), rows); err != nil || len(dyn[replicas-1]) != 3 {
		t.Fatalf("ReplicateDyn: %v", err)
	}
	one, err := Rewrite(s, three, []*Tensor{x})
	if err != nil || len(one) != 3 || !equal(must(Values[float32](one[0])), []float32{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("Rewrite: %v %v", one, err)
	}
	if dyn, err := RewriteDyn(s, Computation(three), []*Tensor{x}); err != nil || len(dyn) != 3 {
		t.Fatalf("RewriteDyn: %v", err)
	}
	for name, run := range map[string]func() ([]*Tensor, error){
		"Shard":            func() ([]*Tensor, error) { return Shard(s, three, []*Tensor{x}, replicas, ShardSpec{}) },
		"ShardDyn":         func() ([]*Tensor, error) { return ShardDyn(s, Computation(three), []*Tensor{x}, replicas) },
		"BatchParallel":    func() ([]*Tensor, error) { return BatchParallel(s, three, []*Tensor{x}, replicas) },
		"BatchParallelDyn": func() ([]*Tensor, error) { return BatchParallelDyn(s, Computation(three), []*Tensor{x}, replicas) },
	} {
		joined, err := run()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(joined) != 3 {
			t.Fatalf("%s: %d outputs", name, len(joined))
		}
		if v := must(Values[float32](joined[0])); !equal(v, []float32{0, 1, 2, 3, 4, 5, 6, 7}) {
			t.Errorf("%s: output 0 is %v", name, v)
		}
		if v := must(Values[float32](joined[1])); !equal(v, []float32{0, 2, 4, 6, 8, 10, 12, 14}) {
			t.Errorf("%s: output 1 is %v", name, v)
		}
		// Scalars are stacked into a [numShards] vector, as TensorFlow's shard does.
		if d := must(joined[2].Dims()); !equal(d, []int64{replicas}) {
			t.Errorf("%s: the stacked scalars have shape %v", name, d)
		}
	}
	// outputs_from_all_shards given: as many outputs as it has flags.
	flagged, err := Shard(s, three, []*Tensor{x}, replicas, ShardSpec{OutputsFromAllShards: []bool{true, false, true}})
	if err != nil || len(flagged) != 3 || !equal(must(Values[float32](flagged[1])), []float32{0}) {
		t.Fatalf("Shard with outputs_from_all_shards: %v %v", flagged, err)
	}
}

// inputs nil is TensorFlow's None, [[]]: one replica with no inputs; an empty list is
// zero replicas, which run nothing.
func TestReplicateInputsNilIsOneReplica(t *testing.T) {
	s := newTestSystem(t)
	calls := 0
	out, err := Replicate(s, func(ctx *Context, in []*Tensor) ([]*Tensor, error) {
		calls++
		if len(in) != 0 || ctx.NumReplicas() != 1 {
			return nil, fmt.Errorf("%d inputs, %d replicas", len(in), ctx.NumReplicas())
		}
		x, err := NewTensor([]int64{1}, []float32{1})
		return []*Tensor{x}, err
	}, nil)
	if err != nil || calls != 1 || len(out) != 1 || len(out[0]) != 1 {
		t.Fatalf("Replicate(nil): %v calls %d %v", out, calls, err)
	}
	if dyn, err := ReplicateDyn(s, func(*Context, []*Tensor) ([]*Tensor, error) { return nil, nil }, nil); err != nil || len(dyn) != 1 {
		t.Fatalf("ReplicateDyn(nil): %v %v", dyn, err)
	}
	if none, err := Replicate(s, func(*Context, []*Tensor) ([]*Tensor, error) { return nil, errors.New("ran") }, [][]*Tensor{}); err != nil || len(none) != 0 {
		t.Fatalf("Replicate([]): %v %v", none, err)
	}
}
