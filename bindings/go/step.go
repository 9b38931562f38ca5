package tpurt

import (
	"time"
)

// TensorShape is a maximum shape for padding; -1 in a dim is an unknown size
// (padded to the largest over the replicas).
type TensorShape []int64

// Dimension is one (maybe unknown) dimension, tf.compat.v1.Dimension.
type Dimension struct {
	Size  int64
	Known bool
}

// UnknownDimension is Dimension(None).
var UnknownDimension = Dimension{}

// KnownDimension is Dimension(n).
func KnownDimension(n int64) Dimension { return Dimension{Size: n, Known: true} }

// StepOptions are what Replicate, Rewrite, Shard and BatchParallel accept.
type StepOptions struct {
	NumOutputs       int
	DeviceAssignment *DeviceAssignment
	InfeedQueue      *InfeedQueue
	// One shape for every input, or one per input; nil: no padding.
	MaximumShapes     []TensorShape
	maximumShapesEach bool
	PadToPowerOfTwo   bool
	CollectiveTimeout time.Duration
	// Mesh runs the step over a mesh's device assignment (instead of DeviceAssignment).
	Mesh *Mesh
	// With several cores per replica: per input, its partition_dims over the cores
	// of its replica (TPUPartitionedInputV2; nil: the whole input to every core), and
	// per output, how the cores' pieces are assembled (nil: logical core 0's). Nil
	// lists: nothing partitioned.
	InputPartitions  [][]int32
	OutputPartitions [][]int32
	err              error
}

// StepOption is a functional option for a step.
type StepOption func(*StepOptions)

// WithNumOutputs sets how many outputs each replica returns. Without it (or with 0)
// a step returns as many as the computation does, as TensorFlow counts them; with it
// the library checks the count and, for Shard and BatchParallel, joins the shards'
// outputs itself (also across the tasks of a multi-task system).
func WithNumOutputs(n int) StepOption { return func(o *StepOptions) { o.NumOutputs = n } }

// WithDeviceAssignment maps replicas onto cores.
func WithDeviceAssignment(a *DeviceAssignment) StepOption {
	return func(o *StepOptions) { o.DeviceAssignment = a }
}

// WithMesh runs the step over mesh's device assignment: the computation runs once
// per (replica, logical core) of it.
func WithMesh(m *Mesh) StepOption { return func(o *StepOptions) { o.Mesh = m } }

// WithInputPartitions splits input i over the cores of each replica, dims[i][d] ways
// along dimension d (TensorFlow's partition_dims; the product is the cores per
// replica). A nil dims[i] gives input i whole to every core.
func WithInputPartitions(dims ...[]int32) StepOption {
	return func(o *StepOptions) { o.InputPartitions = dims }
}

// WithOutputPartitions assembles output i from the cores' tiles, dims[i][d] of them
// along dimension d. A nil dims[i] returns logical core 0's output i.
func WithOutputPartitions(dims ...[]int32) StepOption {
	return func(o *StepOptions) { o.OutputPartitions = dims }
}

// WithInfeedQueue is the queue the computation dequeues from.
func WithInfeedQueue(q *InfeedQueue) StepOption { return func(o *StepOptions) { o.InfeedQueue = q } }

// WithCollectiveTimeout bounds the step's collectives.
func WithCollectiveTimeout(d time.Duration) StepOption {
	return func(o *StepOptions) { o.CollectiveTimeout = d }
}

// WithPadToPowerOfTwo pads unknown dimensions to a power of two.
func WithPadToPowerOfTwo() StepOption { return func(o *StepOptions) { o.PadToPowerOfTwo = true } }

// WithMaximumShape pads every input (rank 1) to length n.
func WithMaximumShape(n int) StepOption {
	return func(o *StepOptions) { o.MaximumShapes = []TensorShape{{int64(n)}} }
}

// WithMaximumTensorShape pads every input to shape.
func WithMaximumTensorShape(shape TensorShape) StepOption {
	return func(o *StepOptions) { o.MaximumShapes = []TensorShape{shape} }
}

// WithMaximumDimension pads every (rank 1) input to d, or to the longest if d is unknown.
func WithMaximumDimension(d Dimension) StepOption {
	size := int64(-1)
	if d.Known {
		size = d.Size
	}
	return WithMaximumTensorShape(TensorShape{size})
}

// WithMaximumShapes gives input i the shape shapes[i].
func WithMaximumShapes(shapes []TensorShape) StepOption {
	return func(o *StepOptions) { o.MaximumShapes, o.maximumShapesEach = shapes, true }
}

// WithMaximumShapesDyn accepts any of the forms above in an interface{}.
func WithMaximumShapesDyn(v interface{}) StepOption {
	switch s := v.(type) {
	case int:
		return WithMaximumShape(s)
	case TensorShape:
		return WithMaximumTensorShape(s)
	case Dimension:
		return WithMaximumDimension(s)
	case []TensorShape:
		return WithMaximumShapes(s)
	}
	return func(o *StepOptions) {
		o.err = newError(CodeInvalidArgument, "maximum shapes must be an int, TensorShape, Dimension or []TensorShape, not %T", v)
	}
}

func stepOptions(opts []StepOption) (StepOptions, error) {
	var o StepOptions
	for _, opt := range opts {
		if opt == nil {
			return o, newError(CodeInvalidArgument, "a step option is nil")
		}
		opt(&o)
	}
	if o.NumOutputs < 0 {
		return o, newError(CodeInvalidArgument, "NumOutputs %d is negative", o.NumOutputs)
	}
	if o.Mesh != nil && o.DeviceAssignment != nil {
		return o, newError(CodeInvalidArgument, "a step takes a mesh or a device assignment, not both")
	}
	return o, o.err
}

// plain: no option but the output count and the collectives' timeout, which a step
// on the pool passes in its one cgo call (replicateOnPool).
func (o StepOptions) plain() bool {
	return o.DeviceAssignment == nil && o.InfeedQueue == nil && len(o.MaximumShapes) == 0 && !o.PadToPowerOfTwo &&
		o.Mesh == nil && o.InputPartitions == nil && o.OutputPartitions == nil
}

// int32VectorVector is the SWIG copy of partition dims (the caller deletes it).
func int32VectorVector(dims [][]int32) Int32VectorVector {
	v := NewInt32VectorVector()
	for _, d := range dims {
		inner := int32Vector(d)
		v.Add(inner)
		DeleteInt32Vector(inner)
	}
	return v
}

// raw builds the library's options; numInputs expands a single maximum shape.
func (o StepOptions) raw(numInputs int) (RawStepOptions, error) {
	r := NewRawStepOptions()
	if o.DeviceAssignment != nil {
		if o.DeviceAssignment.raw == nil {
			DeleteRawStepOptions(r)
			return nil, newError(CodeFailedPrecondition, "the device assignment is closed")
		}
		r.SetDeviceAssignment(o.DeviceAssignment.raw)
	}
	if o.InfeedQueue != nil {
		if o.InfeedQueue.raw == nil {
			DeleteRawStepOptions(r)
			return nil, newError(CodeFailedPrecondition, "the infeed queue is closed")
		}
		r.SetInfeedQueue(o.InfeedQueue.raw)
	}
	if len(o.MaximumShapes) > 0 {
		shapes := o.MaximumShapes
		if !o.maximumShapesEach {
			shapes = make([]TensorShape, numInputs)
			for i := range shapes {
				shapes[i] = o.MaximumShapes[0]
			}
		}
		v := NewShapeVector()
		for _, s := range shapes {
			d := int64Vector(s)
			shape := RawShapeOf(d)
			v.Add(shape)
			DeleteRawShape(shape)
			DeleteInt64Vector(d)
		}
		r.SetMaximumShapes(v)
		DeleteShapeVector(v)
	}
	if o.PadToPowerOfTwo {
		r.SetPaddingSpec(RawPaddingSpec_PowerOfTwo)
	}
	r.SetCollectiveTimeoutMs(o.CollectiveTimeout.Milliseconds())
	for _, p := range []struct {
		dims [][]int32
		set  func(Int32VectorVector)
	}{{o.InputPartitions, r.SetInputPartitions}, {o.OutputPartitions, r.SetOutputPartitions}} {
		if p.dims != nil {
			v := int32VectorVector(p.dims)
			p.set(v)
			DeleteInt32VectorVector(v)
		}
	}
	return r, nil
}

// runWithInputs converts the inputs and options for one step, runs it and frees them;
// step gets the director, or nil and the pool's key (System.runStep).
func (s *System) runWithInputs(fn Computation, inputs []*Tensor, numInputs int, o StepOptions,
	step func(RawTpuSystem, RawComputation, int64, TensorVector, RawStepOptions) TensorVector) ([]*Tensor, error) {
	v, err := tensorVector(inputs, "inputs")
	if err != nil {
		return nil, err
	}
	defer DeleteTensorVector(v)
	if o.Mesh != nil {
		a, err := o.Mesh.DeviceAssignment()
		if err != nil {
			return nil, err
		}
		defer a.Close()
		o.DeviceAssignment = a
	}
	ro, err := o.raw(numInputs)
	if err != nil {
		return nil, err
	}
	defer DeleteRawStepOptions(ro)
	return s.runStep(fn, func(sys RawTpuSystem, c RawComputation, key int64) TensorVector { return step(sys, c, key, v, ro) })
}

// Replicate runs fn once per replica: inputs[r] are replica r's inputs (all the same
// length); the result is indexed [replica][output]. inputs nil is TensorFlow's None,
// [[]]: one replica with no inputs (or, with WithDeviceAssignment or WithMesh, its
// replicas, each with none); an empty non-nil inputs is zero replicas and runs nothing.
func Replicate(s *System, fn Computation, inputs [][]*Tensor, opts ...StepOption) ([][]*Tensor, error) {
	o, err := stepOptions(opts)
	if err != nil {
		return nil, err
	}
	if inputs == nil {
		n, err := replicasOf(o)
		if err != nil {
			return nil, err
		}
		inputs = make([][]*Tensor, n)
	}
	numReplicas := len(inputs)
	if numReplicas == 0 {
		return [][]*Tensor{}, nil
	}
	numInputs := len(inputs[0])
	var flat []*Tensor
	for r, in := range inputs {
		if len(in) != numInputs {
			return nil, newError(CodeInvalidArgument, "Replicate: replica %d has %d inputs, replica 0 has %d", r, len(in), numInputs)
		}
		flat = append(flat, in...)
	}
	if o.NumOutputs == 0 && o.OutputPartitions != nil {
		o.NumOutputs = len(o.OutputPartitions) // the library assembles them
	}
	var counted [][]*Tensor
	if o.NumOutputs == 0 && fn != nil {
		counted = make([][]*Tensor, numReplicas)
		fn = counting(fn, counted)
	}
	var out []*Tensor
	if o.plain() && s != nil && !s.callbacks {
		out, err = s.replicateOnPool(fn, numReplicas, numInputs, flat, o.NumOutputs, o.CollectiveTimeout)
	} else {
		out, err = s.runWithInputs(fn, flat, numInputs, o, func(sys RawTpuSystem, c RawComputation, key int64, v TensorVector, ro RawStepOptions) TensorVector {
			if c == nil {
				return sys.ReplicateOnJoinedThreads(key, numReplicas, numInputs, v, o.NumOutputs, ro)
			}
			return sys.Replicate(c, numReplicas, numInputs, v, o.NumOutputs, ro)
		})
	}
	if err != nil {
		return nil, err
	}
	if counted != nil {
		return counted, nil
	}
	result := make([][]*Tensor, numReplicas)
	for r := range result {
		result[r] = out[r*o.NumOutputs : (r+1)*o.NumOutputs]
	}
	return result, nil
}

// replicasOf is how many replicas inputs nil stands for: the device assignment's or
// the mesh's, else TensorFlow's one.
func replicasOf(o StepOptions) (int, error) {
	if o.DeviceAssignment != nil {
		return o.DeviceAssignment.NumReplicas()
	}
	if o.Mesh != nil {
		a, err := o.Mesh.DeviceAssignment()
		if err != nil {
			return 0, err
		}
		defer a.Close()
		return a.NumReplicas()
	}
	return 1, nil
}

// counting is fn as a step with no outputs (the C ABI needs their number up front):
// what each replica's computation returns (its logical core 0's) is kept in
// outputs[replica], each tensor a reference of its own (the step closes its inputs
// and collective results when fn returns). A nil output stays nil.
func counting(fn Computation, outputs [][]*Tensor) Computation {
	return func(ctx *Context, inputs []*Tensor) ([]*Tensor, error) {
		out, err := fn(ctx, inputs)
		if err != nil || ctx.LogicalCore() != 0 {
			return nil, err
		}
		own := make([]*Tensor, len(out))
		for j, t := range out {
			if t == nil {
				continue
			}
			raw, err := t.handle()
			if err != nil {
				return nil, newError(CodeInvalidArgument, "output %d: %v", j, err.(*Error).Message)
			}
			own[j] = wrapTensor(NewRawTensor__SWIG_1(raw))
		}
		if r := ctx.ReplicaID(); r >= 0 && r < len(outputs) {
			outputs[r] = own
		}
		return nil, nil
	}
}

// ReplicateN runs fn on numReplicas replicas that have no inputs.
func ReplicateN(s *System, fn Computation, numReplicas int, opts ...StepOption) ([][]*Tensor, error) {
	if numReplicas <= 0 {
		return nil, newError(CodeInvalidArgument, "ReplicateN: numReplicas %d must be positive", numReplicas)
	}
	return Replicate(s, fn, make([][]*Tensor, numReplicas), opts...)
}

// ReplicateDyn takes the computation and inputs as interface{}: fn must be a
// Computation (or its func type), inputs a [][]*Tensor or nil.
func ReplicateDyn(s *System, fn interface{}, inputs interface{}, opts ...StepOption) ([][]*Tensor, error) {
	c, err := computationDyn(fn)
	if err != nil {
		return nil, err
	}
	switch in := inputs.(type) {
	case [][]*Tensor:
		return Replicate(s, c, in, opts...)
	case nil:
		return Replicate(s, c, nil, opts...)
	}
	return nil, newError(CodeInvalidArgument, "ReplicateDyn: inputs must be [][]*Tensor, not %T", inputs)
}

func computationDyn(fn interface{}) (Computation, error) {
	switch f := fn.(type) {
	case Computation:
		return f, nil
	case func(*Context, []*Tensor) ([]*Tensor, error):
		return f, nil
	}
	return nil, newError(CodeInvalidArgument, "the computation must be a func(*Context, []*Tensor) ([]*Tensor, error), not %T", fn)
}

// Rewrite runs fn once, on one core.
func Rewrite(s *System, fn Computation, inputs []*Tensor, opts ...StepOption) ([]*Tensor, error) {
	o, err := stepOptions(opts)
	if err != nil {
		return nil, err
	}
	var counted [][]*Tensor
	if o.NumOutputs == 0 && fn != nil {
		counted = make([][]*Tensor, 1)
		fn = counting(fn, counted)
	}
	out, err := s.runWithInputs(fn, inputs, len(inputs), o, func(sys RawTpuSystem, c RawComputation, key int64, v TensorVector, ro RawStepOptions) TensorVector {
		if c == nil {
			return sys.RewriteOnJoinedThreads(key, v, o.NumOutputs, ro)
		}
		return sys.Rewrite(c, v, o.NumOutputs, ro)
	})
	if err != nil || counted == nil {
		return out, err
	}
	return counted[0], nil
}

// RewriteDyn is Rewrite with the computation and inputs as interface{}.
func RewriteDyn(s *System, fn interface{}, inputs interface{}, opts ...StepOption) ([]*Tensor, error) {
	c, err := computationDyn(fn)
	if err != nil {
		return nil, err
	}
	switch in := inputs.(type) {
	case []*Tensor:
		return Rewrite(s, c, in, opts...)
	case nil:
		return Rewrite(s, c, nil, opts...)
	}
	return nil, newError(CodeInvalidArgument, "RewriteDyn: inputs must be []*Tensor, not %T", inputs)
}

// ShardSpec says along which axes Shard splits inputs and joins outputs; nil
// slices mean axis 0 and "concatenate from all shards".
type ShardSpec struct {
	InputShardAxes       []int32
	OutputsFromAllShards []bool
	OutputShardAxes      []int32
}

// Shard splits each input into numShards pieces, runs fn on each and joins the outputs.
func Shard(s *System, fn Computation, inputs []*Tensor, numShards int, spec ShardSpec, opts ...StepOption) ([]*Tensor, error) {
	o, err := stepOptions(opts)
	if err != nil {
		return nil, err
	}
	inAxes := int32Vector(spec.InputShardAxes)
	defer DeleteInt32Vector(inAxes)
	var fromAll []int32
	for _, b := range spec.OutputsFromAllShards {
		if b {
			fromAll = append(fromAll, 1)
		} else {
			fromAll = append(fromAll, 0)
		}
	}
	fromAllV := int32Vector(fromAll)
	defer DeleteInt32Vector(fromAllV)
	outAxes := int32Vector(spec.OutputShardAxes)
	defer DeleteInt32Vector(outAxes)
	// Without WithNumOutputs the flags or the axes, if given, say how many outputs.
	if o.NumOutputs == 0 {
		o.NumOutputs = len(spec.OutputsFromAllShards)
	}
	if o.NumOutputs == 0 {
		o.NumOutputs = len(spec.OutputShardAxes)
	}
	var counted [][]*Tensor
	if o.NumOutputs == 0 && fn != nil {
		if numShards <= 0 {
			return nil, newError(CodeInvalidArgument, "Shard: numShards %d must be positive", numShards)
		}
		counted = make([][]*Tensor, numShards)
		fn = counting(fn, counted)
	}
	out, err := s.runWithInputs(fn, inputs, len(inputs), o, func(sys RawTpuSystem, c RawComputation, key int64, v TensorVector, ro RawStepOptions) TensorVector {
		if c == nil {
			return sys.ShardOnJoinedThreads(key, v, numShards, inAxes, fromAllV, outAxes, o.NumOutputs, ro)
		}
		return sys.Shard(c, v, numShards, inAxes, fromAllV, outAxes, o.NumOutputs, ro)
	})
	if err != nil || counted == nil {
		return out, err
	}
	return joinShards(counted)
}

// joinShards joins the counted outputs of Shard or BatchParallel as TensorFlow's
// shard does by default: output j of every shard concatenated along axis 0 in shard
// order, scalar outputs stacked into a [numShards] vector. It closes the shards'.
func joinShards(shards [][]*Tensor) ([]*Tensor, error) {
	defer func() {
		for _, out := range shards {
			for _, t := range out {
				t.Close()
			}
		}
	}()
	for i, out := range shards {
		if out == nil {
			return nil, newError(CodeInvalidArgument, "shard %d returned no outputs to this task (it returned nil, or ran on another task): "+
				"pass WithNumOutputs to have the library join the shards' outputs", i)
		}
		if len(out) != len(shards[0]) {
			return nil, newError(CodeInvalidArgument, "shard %d returned %d outputs, shard 0 returned %d", i, len(out), len(shards[0]))
		}
	}
	joined := make([]*Tensor, len(shards[0]))
	for j := range joined {
		t, err := concatenated(shards, j)
		if err != nil {
			for _, done := range joined[:j] {
				done.Close()
			}
			return nil, err
		}
		joined[j] = t
	}
	return joined, nil
}

func concatenated(shards [][]*Tensor, j int) (*Tensor, error) {
	var dtype DType
	var dims []int64
	var data []byte
	rows := int64(0)
	for i, out := range shards {
		t := out[j]
		if t == nil {
			return nil, newError(CodeInvalidArgument, "shard %d's output %d is nil; a concatenated output cannot be", i, j)
		}
		dt, err := t.DType()
		if err != nil {
			return nil, err
		}
		d, err := t.Dims()
		if err != nil {
			return nil, err
		}
		if i == 0 {
			dtype, dims = dt, d
		}
		same := dt == dtype && len(d) == len(dims)
		for a := 1; same && a < len(d); a++ {
			same = d[a] == dims[a]
		}
		if !same {
			return nil, newError(CodeInvalidArgument, "shard %d's output %d (%v %v) cannot be concatenated with shard 0's (%v %v)", i, j, dt, d, dtype, dims)
		}
		if len(d) == 0 {
			rows++
		} else {
			rows += d[0]
		}
		b, err := t.Bytes()
		if err != nil {
			return nil, err
		}
		data = append(data, b...)
	}
	shape := []int64{rows} // scalars stacked
	if len(dims) > 0 {
		shape = append([]int64(nil), dims...)
		shape[0] = rows
	}
	d := int64Vector(shape)
	defer DeleteInt64Vector(d)
	b := NewByteVector()
	defer DeleteByteVector(b)
	for _, x := range data {
		b.Add(x)
	}
	raw, err := try(func() RawTensor { return RawTensorFromBytes(TpurtDType(dtype), d, b) })
	if err != nil {
		return nil, err
	}
	return wrapTensor(raw), nil
}

// ShardDyn is Shard with the computation as interface{}.
func ShardDyn(s *System, fn interface{}, inputs []*Tensor, numShards int, opts ...StepOption) ([]*Tensor, error) {
	c, err := computationDyn(fn)
	if err != nil {
		return nil, err
	}
	return Shard(s, c, inputs, numShards, ShardSpec{}, opts...)
}

// BatchParallel splits every input along axis 0 into numShards and concatenates the outputs.
func BatchParallel(s *System, fn Computation, inputs []*Tensor, numShards int, opts ...StepOption) ([]*Tensor, error) {
	o, err := stepOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.NumOutputs == 0 {
		// Counted: Shard with every axis 0 and every output concatenated.
		return Shard(s, fn, inputs, numShards, ShardSpec{}, opts...)
	}
	return s.runWithInputs(fn, inputs, len(inputs), o, func(sys RawTpuSystem, c RawComputation, key int64, v TensorVector, ro RawStepOptions) TensorVector {
		if c == nil {
			return sys.BatchParallelOnJoinedThreads(key, v, numShards, o.NumOutputs, ro)
		}
		return sys.BatchParallel(c, v, numShards, o.NumOutputs, ro)
	})
}

// BatchParallelDyn is BatchParallel with the computation and numShards as interface{}.
func BatchParallelDyn(s *System, fn interface{}, inputs []*Tensor, numShards interface{}, opts ...StepOption) ([]*Tensor, error) {
	c, err := computationDyn(fn)
	if err != nil {
		return nil, err
	}
	n, ok := numShards.(int)
	if !ok {
		return nil, newError(CodeInvalidArgument, "BatchParallelDyn: numShards must be an int, not %T", numShards)
	}
	return BatchParallel(s, c, inputs, n, opts...)
}
