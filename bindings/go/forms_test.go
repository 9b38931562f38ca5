package tpurt

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// sumsOf checks CrossReplicaSum[T] for one instantiation: replica r sends [r, 1].
func sumsOf[T Numeric](t *testing.T, s *System) {
	out, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		sum, err := CrossReplicaSum(ctx, []T{T(ctx.ReplicaID()), 1})
		if err != nil {
			return nil, err
		}
		if sum[0] != 28 || sum[1] != replicas {
			return nil, fmt.Errorf("%T sum %v", sum, sum)
		}
		v, err := CrossReplicaSumValue(ctx, T(2))
		if err == nil && v != 2*replicas {
			err = fmt.Errorf("value sum %v", v)
		}
		return nil, err
	}, replicas)
	if err != nil {
		t.Fatalf("%T: %v", *new(T), err)
	}
	if len(out) != replicas {
		t.Fatalf("%d replicas of outputs", len(out))
	}
}

func TestCrossReplicaSumGenericInstantiations(t *testing.T) {
	s := newTestSystem(t)
	sumsOf[float32](t, s)
	sumsOf[float64](t, s)
	sumsOf[int32](t, s)
	sumsOf[int64](t, s)
}

func TestCrossReplicaSumCollectionsAreOneCollective(t *testing.T) {
	s := newTestSystem(t)
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		r := float64(ctx.ReplicaID())
		a, _ := NewTensor([]int64{2, 2}, []float64{r, r, 1, 1})
		b, _ := NewTensor([]int64{3}, []float64{1, 2, 3})
		sums, err := CrossReplicaSumTensors(ctx, []*Tensor{a, b})
		if err != nil {
			return nil, err
		}
		dims, _ := sums[0].Dims()
		va, _ := Values[float64](sums[0])
		vb, _ := Values[float64](sums[1])
		if !equal(dims, []int64{2, 2}) || !equal(va, []float64{28, 28, 8, 8}) || !equal(vb, []float64{8, 16, 24}) {
			return nil, fmt.Errorf("list: %v %v %v", dims, va, vb)
		}
		m, err := CrossReplicaSumMap(ctx, map[string]*Tensor{"w": a, "b": b})
		if err != nil {
			return nil, err
		}
		if vw, _ := Values[float64](m["w"]); !equal(vw, va) {
			return nil, fmt.Errorf("map: %v", vw)
		}
		// A mixed-dtype list is refused before any collective (on every replica alike).
		c, _ := NewTensor([]int64{1}, []int32{1})
		if _, err := CrossReplicaSumTensors(ctx, []*Tensor{a, c}); !errors.Is(err, ErrInvalidArgument) {
			return nil, fmt.Errorf("mixed dtypes: %v", err)
		}
		// The Dyn form takes every shape above and names a wrong type.
		if v, err := CrossReplicaSumDyn(ctx, []int64{1}); err != nil || v.([]int64)[0] != replicas {
			return nil, fmt.Errorf("dyn slice: %v %v", v, err)
		}
		if v, err := CrossReplicaSumDyn(ctx, a); err != nil || v.(*Tensor) == nil {
			return nil, fmt.Errorf("dyn tensor: %v", err)
		}
		if _, err := CrossReplicaSumDyn(ctx, "weights"); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "string") {
			return nil, fmt.Errorf("dyn wrong type: %v", err)
		}
		return nil, nil
	}, replicas)
	if err != nil {
		t.Fatal(err)
	}
}

func TestMaximumShapesForms(t *testing.T) {
	s := newTestSystem(t)
	// Replica r has r+1 elements; padding brings all to the maximum and appends the real size.
	inputs := make([][]*Tensor, replicas)
	for r := range inputs {
		inputs[r] = []*Tensor{must(NewTensor([]int64{int64(r + 1)}, make([]float32, r+1)))}
	}
	check := func(name string, opt StepOption, minLen int64) {
		out, err := Replicate(s, func(ctx *Context, in []*Tensor) ([]*Tensor, error) {
			if len(in) != 2 {
				return nil, fmt.Errorf("%d inputs, want the padded input and its size", len(in))
			}
			n, _ := in[0].Dim(0)
			size, _ := Values[int32](in[1])
			if n < minLen || int(size[0]) != ctx.ReplicaID()+1 {
				return nil, fmt.Errorf("length %d, real size %v", n, size)
			}
			return []*Tensor{in[1]}, nil
		}, inputs, opt, WithNumOutputs(1))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		if v := must(Values[int32](out[7][0])); v[0] != 8 {
			t.Errorf("%s: replica 7 real size %v", name, v)
		}
	}
	check("int", WithMaximumShape(10), 10)
	check("TensorShape", WithMaximumTensorShape(TensorShape{12}), 12)
	check("Dimension known", WithMaximumDimension(KnownDimension(9)), 9)
	check("Dimension unknown", WithMaximumDimension(UnknownDimension), 8)
	check("[]TensorShape", WithMaximumShapes([]TensorShape{{-1}}), 8)
	check("Dyn int", WithMaximumShapesDyn(16), 16)
	check("Dyn []TensorShape", WithMaximumShapesDyn([]TensorShape{{11}}), 11)
	_, err := Replicate(s, sumInput, inputs, WithMaximumShapesDyn(3.5), WithNumOutputs(1))
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "float64") {
		t.Errorf("wrong maximum shapes type: %v", err)
	}
}

func TestDynFormsNameWrongTypes(t *testing.T) {
	s := newTestSystem(t)
	for name, err := range map[string]error{
		"ReplicateDyn fn":       second(ReplicateDyn(s, 42, nil)),
		"ReplicateDyn inputs":   second(ReplicateDyn(s, Computation(sumInput), []int{1})),
		"RewriteDyn":            second(RewriteDyn(s, "f", nil)),
		"ShardDyn":              second(ShardDyn(s, 1.5, nil, 8)),
		"BatchParallelDyn":      second(BatchParallelDyn(s, Computation(sumInput), nil, "8")),
		"CoreDyn":               second(CoreDyn("zero")),
		"NewTensorDyn":          second(NewTensorDyn([]int64{1}, []string{"x"})),
		"OutsideCompilationDyn": second(OutsideCompilationDyn(&Context{}, 7, nil, nil)),
		"InitializeSystemDyn":   second(InitializeSystemDyn("8 cores")),
		"ShutdownSystemDyn":     ShutdownSystemDyn(s.raw, nil),
		"Bfloat16ScopeDyn":      second(Bfloat16ScopeDyn(3)),
		"nil system":            second(ReplicateN(nil, sumInput, replicas)),
		"nil computation":       second(ReplicateN(s, nil, replicas)),
		"nil option":            second(ReplicateN(s, sumInput, replicas, nil)),
		"ragged inputs":         second(Replicate(s, sumInput, [][]*Tensor{{}, {nil}})),
	} {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: got %v", name, err)
		}
	}
	if _, err := ReplicateDyn(s, func(ctx *Context, in []*Tensor) ([]*Tensor, error) { return nil, nil }, make([][]*Tensor, replicas)); err != nil {
		t.Errorf("ReplicateDyn: %v", err)
	}
	if _, err := (&Topology{}).MeshShape(); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("closed topology: %v", err)
	}
	if d, err := CoreDyn(int64(1)); err != nil || d == "" {
		t.Errorf("CoreDyn: %q %v", d, err)
	}
	if _, err := NewTensorDyn([]int64{2}, []float64{1, 2}); err != nil {
		t.Errorf("NewTensorDyn: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

func TestRewriteShardBatchParallel(t *testing.T) {
	s := newTestSystem(t)
	x := must(NewTensor([]int64{8, 2}, []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}))
	double := func(ctx *Context, in []*Tensor) ([]*Tensor, error) {
		v, err := Values[float32](in[0])
		if err != nil {
			return nil, err
		}
		for i := range v {
			v[i] *= 2
		}
		dims, _ := in[0].Dims()
		out, err := NewTensor(dims, v)
		return []*Tensor{out}, err
	}
	out, err := Rewrite(s, double, []*Tensor{x}, WithNumOutputs(1))
	if err != nil || must(Values[float32](out[0]))[15] != 30 {
		t.Fatalf("Rewrite: %v", err)
	}
	out, err = BatchParallel(s, double, []*Tensor{x}, 8, WithNumOutputs(1))
	if err != nil || !equal(must(out[0].Dims()), []int64{8, 2}) || must(Values[float32](out[0]))[15] != 30 {
		t.Fatalf("BatchParallel: %v", err)
	}
	wide := must(x.Reshape([]int64{2, 8}))
	out, err = Shard(s, double, []*Tensor{wide}, 8, ShardSpec{InputShardAxes: []int32{1}, OutputShardAxes: []int32{1}}, WithNumOutputs(1))
	if err != nil || !equal(must(out[0].Dims()), []int64{2, 8}) || must(Values[float32](out[0]))[3] != 6 {
		t.Fatalf("Shard: %v", err)
	}
	if _, err = ShardDyn(s, Computation(double), []*Tensor{x}, 8, WithNumOutputs(1)); err != nil {
		t.Fatalf("ShardDyn: %v", err)
	}
	if _, err = BatchParallelDyn(s, Computation(double), []*Tensor{x}, 8, WithNumOutputs(1)); err != nil {
		t.Fatalf("BatchParallelDyn: %v", err)
	}
	if _, err = RewriteDyn(s, Computation(double), []*Tensor{x}, WithNumOutputs(1)); err != nil {
		t.Fatalf("RewriteDyn: %v", err)
	}
}

func TestOutsideCompilationWithArgsAndKwargs(t *testing.T) {
	s := newTestSystem(t)
	seen := make([]int, replicas)
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		_, err := OutsideCompilation(ctx, func(replica int, args []interface{}, kwargs map[string]interface{}) ([]*Tensor, error) {
			seen[replica] = args[0].(int) + kwargs["scale"].(int)*replica
			return nil, nil
		}, []interface{}{1}, map[string]interface{}{"scale": 10})
		if err != nil {
			return nil, err
		}
		_, err = OutsideCompilationArgs(ctx, func(replica int, args []interface{}) ([]*Tensor, error) {
			if len(args) != 2 || args[1] != "two" {
				return nil, fmt.Errorf("args %v", args)
			}
			return nil, nil
		}, 1, "two")
		if err != nil {
			return nil, err
		}
		leave, err := Bfloat16ScopeDyn(ctx)
		if err != nil {
			return nil, err
		}
		if err := leave(); err != nil {
			return nil, err
		}
		_, err = OutsideCompilationDyn(ctx, func(replica int) error { return nil }, nil, nil)
		return nil, err
	}, replicas)
	if err != nil {
		t.Fatal(err)
	}
	for r, v := range seen {
		if v != 1+10*r {
			t.Errorf("replica %d: host function saw %d", r, v)
		}
	}
	// A failing host function fails the step with its code and message.
	_, err = ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		_, err := OutsideCompilation(ctx, func(replica int, _ []interface{}, _ map[string]interface{}) ([]*Tensor, error) {
			if replica == 2 {
				return nil, &Error{Code: CodeNotFound, Message: "no checkpoint on the host"}
			}
			return nil, nil
		}, nil, nil)
		return nil, err
	}, replicas)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "no checkpoint on the host") {
		t.Fatalf("failing host function: %v", err)
	}
}

func TestInfeedAndOutfeed(t *testing.T) {
	s := newTestSystem(t)
	spec := []FeedSpec{{DType: Float32, Shape: TensorShape{2}}}
	in := must(NewInfeedQueue(s, replicas, spec, 2))
	defer in.Close()
	out := must(NewOutfeedQueue(s, replicas, spec, 2))
	defer out.Close()
	for r := 0; r < replicas; r++ {
		for k := 0; k < 2; k++ {
			if err := in.Enqueue(r, []*Tensor{must(NewTensor([]int64{2}, []float32{float32(r), float32(k)}))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The step's infeed queue appends one tuple to the inputs; the second is dequeued explicitly.
	_, err := ReplicateN(s, func(ctx *Context, inputs []*Tensor) ([]*Tensor, error) {
		if len(inputs) != 1 {
			return nil, fmt.Errorf("%d inputs from the infeed", len(inputs))
		}
		next, err := ctx.InfeedDequeue(in)
		if err != nil {
			return nil, err
		}
		return nil, ctx.OutfeedEnqueue(out, []*Tensor{inputs[0], next[0]}[1:])
	}, replicas, WithInfeedQueue(in))
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < replicas; r++ {
		tuple := must(out.Dequeue(r))
		if v := must(Values[float32](tuple[0])); !equal(v, []float32{float32(r), 1}) {
			t.Errorf("replica %d outfeed %v", r, v)
		}
	}
}

func TestDeviceAssignmentAndTopology(t *testing.T) {
	s := newTestSystem(t)
	topo := must(s.Topology())
	defer topo.Close()
	mesh := must(topo.MeshShape())
	if mesh[0] != replicas {
		t.Errorf("mesh %v", mesh)
	}
	parsed := must(ParseTopology(must(topo.Serialize())))
	defer parsed.Close()
	if !equal(must(parsed.MeshShape()), mesh) {
		t.Error("parsed topology differs")
	}
	a := must(BuildDeviceAssignment(topo, nil, nil, 4))
	defer a.Close()
	if n := must(a.NumReplicas()); n != 4 {
		t.Errorf("%d replicas", n)
	}
	cores := make([]int, 4)
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		cores[ctx.ReplicaID()] = ctx.Core()
		_, err := CrossReplicaSum(ctx, []float32{1})
		return nil, err
	}, 4, WithDeviceAssignment(a))
	if err != nil {
		t.Fatal(err)
	}
	d := must(s.DefaultDeviceAssignment(replicas))
	defer d.Close()
	if must(d.NumReplicas()) != replicas {
		t.Error("default assignment")
	}
}

// One test per status code: real library errors where it raises them, ctx.Fail otherwise.
func TestErrorSentinels(t *testing.T) {
	closed := newTestSystem(t)
	if _, err := NewSystem(SystemOptions{NumCores: 2}); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("second system: %v", err)
	}
	rawOptions := SystemOptions{NumCores: 2}.raw()
	if _, err := try(func() RawTpuSystem { return NewRawTpuSystem(rawOptions) }); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("second TpuSystem: %v", err)
	}
	DeleteRawSystemOptions(rawOptions)
	if _, err := NewTensor([]int64{-3}, []float32{1}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bad dims: %v", err)
	}
	var tErr *Error
	if _, err := NewTensor([]int64{5}, []float32{1}); !errors.As(err, &tErr) || tErr.Code != CodeInvalidArgument || tErr.Message == "" {
		t.Errorf("errors.As: %v", err)
	}
	if err := ShutdownSystemDyn(closed, nil); err != nil {
		t.Fatal(err)
	}
	if c, err := closed.IsClosed(); err != nil || !c {
		t.Errorf("IsClosed after shutdown: %v %v", c, err)
	}
	if _, err := ReplicateN(closed, sumInput, replicas); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("closed system: %v", err)
	}
	closed.Close()
	if _, err := closed.NumCores(); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("released system: %v", err)
	}
	s := newTestSystem(t)
	sentinels := map[Code]error{
		CodeCancelled: ErrCancelled, CodeUnknown: ErrUnknown, CodeInvalidArgument: ErrInvalidArgument,
		CodeDeadlineExceeded: ErrDeadlineExceeded, CodeNotFound: ErrNotFound, CodeAlreadyExists: ErrAlreadyExists,
		CodePermissionDenied: ErrPermissionDenied, CodeResourceExhausted: ErrResourceExhausted,
		CodeFailedPrecondition: ErrFailedPrecondition, CodeAborted: ErrAborted, CodeOutOfRange: ErrOutOfRange,
		CodeUnimplemented: ErrUnimplemented, CodeInternal: ErrInternal, CodeUnavailable: ErrUnavailable,
		CodeDataLoss: ErrDataLoss, CodeUnauthenticated: ErrUnauthenticated,
	}
	for code, sentinel := range sentinels {
		code, sentinel := code, sentinel
		t.Run(code.String(), func(t *testing.T) {
			_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
				if ctx.ReplicaID() == 1 {
					ctx.Fail(code, "failing with "+code.String())
					return nil, nil
				}
				return nil, nil
			}, replicas)
			if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), "failing with "+code.String()) {
				t.Errorf("got %v", err)
			}
			for other, o := range sentinels {
				if other != code && errors.Is(err, o) {
					t.Errorf("%v also matches %v", err, other)
				}
			}
		})
	}
}

func rssBytes(t *testing.T) int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm")
	}
	pages, _ := strconv.ParseInt(strings.Fields(string(data))[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func TestTenThousandEmptyStepsDoNotGrowMemory(t *testing.T) {
	s := newTestSystem(t)
	empty := func(*Context, []*Tensor) ([]*Tensor, error) { return nil, nil }
	step := func(n int) {
		for i := 0; i < n; i++ {
			if _, err := ReplicateN(s, empty, replicas); err != nil {
				t.Fatal(err)
			}
		}
	}
	var before, after runtime.MemStats
	step(500)
	runtime.GC()
	runtime.ReadMemStats(&before)
	rss := rssBytes(t)
	step(10000)
	runtime.GC()
	runtime.ReadMemStats(&after)
	const limit = 64 << 20
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > limit {
		t.Errorf("Go heap grew by %d bytes", grown)
	}
	if grown := rssBytes(t) - rss; grown > limit {
		t.Errorf("RSS grew by %d bytes", grown)
	}
}
