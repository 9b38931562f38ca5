package tpurt

import (
	"fmt"
	"sort"
	"time"
)

// Context is one replica's view of a running step. It is valid only inside the
// computation it was passed to.
type Context struct {
	raw    RawReplicaContext
	failed TpurtStatus // set by Fail: the status the director returns
	// The participant's replica and logical core when the pool's join gave them (a
	// computation asks for them often; each cgo call costs the step on 2 CPUs 4x).
	ids     bool
	replica int
	logical int
	// Tensors the context handed out (collective results); closed when the
	// computation returns, so their buffers go back to the library's cache at once
	// instead of at the next GC. An output keeps its own reference.
	owned []*Tensor
}

// Computation is the body run once per replica on the library's worker threads.
// A returned error (or a panic) fails the step with its message and "replica R".
type Computation func(ctx *Context, inputs []*Tensor) ([]*Tensor, error)

// ReplicaID is this replica's index in [0, NumReplicas).
func (c *Context) ReplicaID() int {
	if c.ids {
		return c.replica
	}
	return c.raw.ReplicaId()
}

// NumReplicas is the number of replicas in the step.
func (c *Context) NumReplicas() int { return c.raw.NumReplicas() }

// Core is the physical core running this replica.
func (c *Context) Core() int { return c.raw.Core() }

// NumCoresPerReplica is the number of cores each replica uses.
func (c *Context) NumCoresPerReplica() int { return c.raw.NumCoresPerReplica() }

// LogicalCore is this computation's core within its replica, in
// [0, NumCoresPerReplica()): XLA's partition id, the n of tf.tpu.core(n). With k cores
// per replica the computation runs once per (replica, logical core).
func (c *Context) LogicalCore() int {
	if c.ids {
		return c.logical
	}
	return c.raw.LogicalCore()
}

// OnLogicalCore runs fn only on logical core n of each replica ("this part runs on
// core n", as a tf.tpu.core(n) device scope) and returns its error; the other cores
// skip fn and get nil. fn makes no collectives: every participant of a step makes
// the same sequence of them (the library fails the step naming the ones that
// differ). n outside [0, NumCoresPerReplica()) is an ErrInvalidArgument naming it.
func (c *Context) OnLogicalCore(n int, fn func() error) error {
	if k := c.NumCoresPerReplica(); n < 0 || n >= k {
		return newError(CodeInvalidArgument, "OnLogicalCore: core %d is outside [0, %d) (the cores per replica)", n, k)
	}
	if fn == nil {
		return newError(CodeInvalidArgument, "OnLogicalCore: the function is nil")
	}
	if c.LogicalCore() != n {
		return nil
	}
	return fn()
}

// DeviceName is this replica's TensorFlow device name.
func (c *Context) DeviceName() (string, error) { return try(c.raw.DeviceName) }

// Fail fails the step with code and message (the other replicas are released) and
// returns that error, for `return nil, ctx.Fail(...)`.
func (c *Context) Fail(code Code, message string) error {
	if code == 0 {
		code = CodeUnknown
	}
	if c.failed == 0 {
		c.failed = c.raw.Fail(TpurtStatus(code), message)
	}
	return &Error{Code: code, Message: message}
}

// GroupMode says what the ids of a collective's groups are and who takes part
// when a replica spans several cores: XLA's CollectiveOpGroupMode (tpu_group_mode).
type GroupMode int

// The group modes. With k cores per replica, participant (replica r, logical core c)
// has the flattened id r*k + c.
const (
	// CrossReplica (the default): groups of replica ids, one collective per logical
	// core among the cores with that logical core id.
	CrossReplica GroupMode = iota
	// CrossPartition: groups of logical-core ids, one collective per replica among its cores.
	CrossPartition
	// CrossReplicaAndPartition: groups of replica ids, every core of those replicas taking part.
	CrossReplicaAndPartition
	// FlattenedID: groups of flattened ids.
	FlattenedID
)

func (m GroupMode) String() string {
	switch m {
	case CrossReplica:
		return "CrossReplica"
	case CrossPartition:
		return "CrossPartition"
	case CrossReplicaAndPartition:
		return "CrossReplicaAndPartition"
	case FlattenedID:
		return "FlattenedID"
	}
	return fmt.Sprintf("GroupMode(%d)", int(m))
}

// Collective tunes one collective: groups (nil: the mode's default, everyone), what
// their ids are (GroupMode) and a timeout (0: the step's deadline). OverAxes builds
// one for a mesh's named axes.
type Collective struct {
	Groups    [][]int32
	GroupMode GroupMode
	Timeout   time.Duration
	err       error // from OverAxes: reported by the collective it is passed to
}

func (c Collective) raw() (RawGroupAssignment, RawCollectiveOptions, error) {
	if c.err != nil {
		return nil, nil, c.err
	}
	opts := NewRawCollectiveOptions()
	opts.SetTimeoutMs(c.Timeout.Milliseconds())
	opts.SetGroupMode(TpurtGroupMode(c.GroupMode))
	if len(c.Groups) == 0 {
		return NewRawGroupAssignment(), opts, nil
	}
	var ids, sizes []int32
	ragged := false
	for _, g := range c.Groups {
		ragged = ragged || len(g) != len(c.Groups[0])
		sizes = append(sizes, int32(len(g)))
		ids = append(ids, g...)
	}
	v, s := int32Vector(ids), int32Vector(sizes)
	defer DeleteInt32Vector(v)
	defer DeleteInt32Vector(s)
	// Rows of different lengths ({{0, 1, 2}, {3}}): AllReduce, CrossReplicaSum and
	// Broadcast take them, as XLA does; AllGather, ReduceScatter and AllToAll refuse them
	// (CodeInvalidArgument).
	g, err := try(func() RawGroupAssignment {
		if ragged {
			return RawGroupAssignmentRagged(v, s)
		}
		return NewRawGroupAssignment(v, len(c.Groups), len(c.Groups[0])).(RawGroupAssignment)
	})
	if err != nil {
		DeleteRawCollectiveOptions(opts)
		return nil, nil, err
	}
	return g, opts, nil
}

// collective runs one raw collective with the options and groups built and freed here.
func (c *Context) collective(x *Tensor, opt []Collective, call func(RawTensor, RawGroupAssignment, RawCollectiveOptions) RawTensor) (*Tensor, error) {
	raw, err := x.handle()
	if err != nil {
		return nil, err
	}
	var o Collective
	if len(opt) > 0 {
		o = opt[0]
	}
	g, opts, err := o.raw()
	if err != nil {
		return nil, err
	}
	defer DeleteRawGroupAssignment(g)
	defer DeleteRawCollectiveOptions(opts)
	out, err := try(func() RawTensor { return call(raw, g, opts) })
	if err != nil {
		return nil, err
	}
	t := wrapTensor(out)
	c.owned = append(c.owned, t)
	return t, nil
}

// ReduceOp is how AllReduce and ReduceScatter combine values.
type ReduceOp int

// The reductions.
const (
	Sum ReduceOp = iota
	Prod
	Min
	Max
	Mean
)

// CrossReplicaSumTensor sums x over the replicas (of its group).
func (c *Context) CrossReplicaSumTensor(x *Tensor, opt ...Collective) (*Tensor, error) {
	return c.collective(x, opt, func(t RawTensor, g RawGroupAssignment, o RawCollectiveOptions) RawTensor {
		return c.raw.CrossReplicaSum(t, g, o)
	})
}

// AllReduce combines x over the replicas with op.
func (c *Context) AllReduce(x *Tensor, op ReduceOp, opt ...Collective) (*Tensor, error) {
	return c.collective(x, opt, func(t RawTensor, g RawGroupAssignment, o RawCollectiveOptions) RawTensor {
		return c.raw.AllReduce(t, TpurtReduceOp(op), g, o)
	})
}

// AllGather concatenates every replica's x along axis.
func (c *Context) AllGather(x *Tensor, axis int, opt ...Collective) (*Tensor, error) {
	return c.collective(x, opt, func(t RawTensor, g RawGroupAssignment, o RawCollectiveOptions) RawTensor {
		return c.raw.AllGather(t, axis, g, o)
	})
}

// ReduceScatter reduces x over the replicas and gives each its slice along axis.
func (c *Context) ReduceScatter(x *Tensor, op ReduceOp, axis int, opt ...Collective) (*Tensor, error) {
	return c.collective(x, opt, func(t RawTensor, g RawGroupAssignment, o RawCollectiveOptions) RawTensor {
		return c.raw.ReduceScatter(t, TpurtReduceOp(op), axis, g, o)
	})
}

// AllToAll splits x along splitDim into splitCount pieces, exchanges them and
// concatenates what arrives along concatDim.
func (c *Context) AllToAll(x *Tensor, concatDim, splitDim, splitCount int, opt ...Collective) (*Tensor, error) {
	return c.collective(x, opt, func(t RawTensor, g RawGroupAssignment, o RawCollectiveOptions) RawTensor {
		return c.raw.AllToAll(t, concatDim, splitDim, splitCount, g, o)
	})
}

// Broadcast gives every replica root's x.
func (c *Context) Broadcast(x *Tensor, root int, opt ...Collective) (*Tensor, error) {
	return c.collective(x, opt, func(t RawTensor, g RawGroupAssignment, o RawCollectiveOptions) RawTensor {
		return c.raw.Broadcast(t, root, g, o)
	})
}

// CollectivePermute sends x from each pair's source to its target ([2]int32{src, dst}).
func (c *Context) CollectivePermute(x *Tensor, pairs [][2]int32, opt ...Collective) (*Tensor, error) {
	flat := make([]int32, 0, 2*len(pairs))
	for _, p := range pairs {
		flat = append(flat, p[0], p[1])
	}
	v := int32Vector(flat)
	defer DeleteInt32Vector(v)
	return c.collective(x, opt, func(t RawTensor, _ RawGroupAssignment, o RawCollectiveOptions) RawTensor {
		return c.raw.CollectivePermute(t, v, o)
	})
}

// Barrier waits for every replica.
func (c *Context) Barrier(opt ...Collective) error {
	var o Collective
	if len(opt) > 0 {
		o = opt[0]
	}
	g, opts, err := o.raw()
	if err != nil {
		return err
	}
	defer DeleteRawGroupAssignment(g)
	defer DeleteRawCollectiveOptions(opts)
	return try0(func() { c.raw.Barrier(opts) })
}

// Bfloat16Scope enters the replica's bfloat16 scope; call the returned func to leave it.
func (c *Context) Bfloat16Scope() (func() error, error) {
	if err := try0(c.raw.Bfloat16ScopeEnter); err != nil {
		return nil, err
	}
	return func() error { return try0(c.raw.Bfloat16ScopeExit) }, nil
}

// Bfloat16Scope is the package-level form of ctx.Bfloat16Scope.
func Bfloat16Scope(ctx *Context) (func() error, error) {
	if ctx == nil {
		return nil, newError(CodeInvalidArgument, "Bfloat16Scope: the context is nil")
	}
	return ctx.Bfloat16Scope()
}

// CrossReplicaSum sums a slice element-wise over all replicas: one collective.
func CrossReplicaSum[T Numeric](ctx *Context, x []T, opt ...Collective) ([]T, error) {
	if ctx == nil {
		return nil, newError(CodeInvalidArgument, "CrossReplicaSum: the context is nil")
	}
	t, err := NewTensor([]int64{int64(len(x))}, x)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	sum, err := ctx.CrossReplicaSumTensor(t, opt...)
	if err != nil {
		return nil, err
	}
	defer sum.Close()
	return Values[T](sum)
}

// CrossReplicaSumValue sums one value per replica.
func CrossReplicaSumValue[T Numeric](ctx *Context, x T, opt ...Collective) (T, error) {
	sum, err := CrossReplicaSum(ctx, []T{x}, opt...)
	if err != nil {
		return 0, err
	}
	return sum[0], nil
}

// PerReplica holds one tensor per replica (TensorFlow's PerReplica): the collectives
// that take one use the calling replica's value.
type PerReplica struct {
	values []*Tensor
}

// NewPerReplica takes values[r] for replica r; a nil one is an ErrInvalidArgument naming it.
func NewPerReplica(values ...*Tensor) (*PerReplica, error) {
	for r, v := range values {
		if v == nil {
			return nil, newError(CodeInvalidArgument, "NewPerReplica: the value of replica %d is nil", r)
		}
	}
	return &PerReplica{values: append([]*Tensor(nil), values...)}, nil
}

// Values are the tensors, indexed by replica.
func (p *PerReplica) Values() []*Tensor {
	if p == nil {
		return nil
	}
	return append([]*Tensor(nil), p.values...)
}

// Get is replica's value; a replica it holds none for is an ErrInvalidArgument.
func (p *PerReplica) Get(replica int) (*Tensor, error) {
	if p == nil {
		return nil, newError(CodeInvalidArgument, "the PerReplica is nil")
	}
	if replica < 0 || replica >= len(p.values) {
		return nil, newError(CodeInvalidArgument, "replica %d has no value (the PerReplica holds %d)", replica, len(p.values))
	}
	return p.values[replica], nil
}

// CrossReplicaSumPerReplica sums each replica's own value of x.
func CrossReplicaSumPerReplica(ctx *Context, x *PerReplica, opt ...Collective) (*Tensor, error) {
	if ctx == nil {
		return nil, newError(CodeInvalidArgument, "CrossReplicaSumPerReplica: the context is nil")
	}
	v, err := x.Get(ctx.ReplicaID())
	if err != nil {
		return nil, err
	}
	return ctx.CrossReplicaSumTensor(v, opt...)
}

// CrossReplicaSumTensors sums several tensors (one dtype) in ONE collective: they are
// flattened and concatenated, summed, then split back into their shapes.
func CrossReplicaSumTensors(ctx *Context, xs []*Tensor, opt ...Collective) ([]*Tensor, error) {
	if ctx == nil {
		return nil, newError(CodeInvalidArgument, "CrossReplicaSumTensors: the context is nil")
	}
	if len(xs) == 0 {
		return nil, nil
	}
	dtype, err := xs[0].DType()
	if err != nil {
		return nil, newError(CodeInvalidArgument, "tensor 0: %v", err)
	}
	dims := make([][]int64, len(xs))
	for i, x := range xs {
		d, err := x.DType()
		if err != nil {
			return nil, newError(CodeInvalidArgument, "tensor %d: %v", i, err)
		}
		if d != dtype {
			return nil, newError(CodeInvalidArgument, "tensor %d is %v, tensor 0 is %v", i, d, dtype)
		}
		if dims[i], err = x.Dims(); err != nil {
			return nil, err
		}
	}
	switch dtype {
	case Float32:
		return sumFused[float32](ctx, xs, dims, opt)
	case Float64:
		return sumFused[float64](ctx, xs, dims, opt)
	case Int32:
		return sumFused[int32](ctx, xs, dims, opt)
	case Int64:
		return sumFused[int64](ctx, xs, dims, opt)
	}
	return nil, newError(CodeInvalidArgument, "CrossReplicaSumTensors: %v tensors cannot be summed here (float32, float64, int32 or int64)", dtype)
}

// sumFused concatenates the tensors' elements, sums them in one collective and
// splits the result back into tensors of the original dims.
func sumFused[T Numeric](ctx *Context, xs []*Tensor, dims [][]int64, opt []Collective) ([]*Tensor, error) {
	counts := make([]int, len(xs))
	total := 0
	for i, x := range xs {
		n, err := x.NumElements()
		if err != nil {
			return nil, err
		}
		counts[i] = int(n)
		total += int(n)
	}
	flat := make([]T, total)
	offset := 0
	for i, x := range xs {
		if err := Read(x, flat[offset:offset+counts[i]]); err != nil {
			return nil, err
		}
		offset += counts[i]
	}
	sum, err := CrossReplicaSum(ctx, flat, opt...)
	if err != nil {
		return nil, err
	}
	out := make([]*Tensor, len(xs))
	offset = 0
	for i := range xs {
		if out[i], err = NewTensor(dims[i], sum[offset:offset+counts[i]]); err != nil {
			return nil, err
		}
		offset += counts[i]
	}
	return out, nil
}

// CrossReplicaSumMap is CrossReplicaSumTensors over a map, in key order.
func CrossReplicaSumMap(ctx *Context, xs map[string]*Tensor, opt ...Collective) (map[string]*Tensor, error) {
	keys := make([]string, 0, len(xs))
	for k := range xs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	list := make([]*Tensor, len(keys))
	for i, k := range keys {
		if xs[k] == nil {
			return nil, newError(CodeInvalidArgument, "CrossReplicaSumMap: tensor %q is nil", k)
		}
		list[i] = xs[k]
	}
	sums, err := CrossReplicaSumTensors(ctx, list, opt...)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*Tensor, len(keys))
	for i, k := range keys {
		out[k] = sums[i]
	}
	return out, nil
}

// CrossReplicaSumDyn accepts any of the forms above in an interface{}: *Tensor,
// *PerReplica, []*Tensor, map[string]*Tensor, a numeric slice or a numeric value. Another type is
// an ErrInvalidArgument naming it.
func CrossReplicaSumDyn(ctx *Context, x interface{}, opt ...Collective) (interface{}, error) {
	switch v := x.(type) {
	case *Tensor:
		if ctx == nil {
			return nil, newError(CodeInvalidArgument, "CrossReplicaSumDyn: the context is nil")
		}
		return ctx.CrossReplicaSumTensor(v, opt...)
	case *PerReplica:
		return CrossReplicaSumPerReplica(ctx, v, opt...)
	case []*Tensor:
		return CrossReplicaSumTensors(ctx, v, opt...)
	case map[string]*Tensor:
		return CrossReplicaSumMap(ctx, v, opt...)
	case []float32:
		return CrossReplicaSum(ctx, v, opt...)
	case []float64:
		return CrossReplicaSum(ctx, v, opt...)
	case []int32:
		return CrossReplicaSum(ctx, v, opt...)
	case []int64:
		return CrossReplicaSum(ctx, v, opt...)
	case float32:
		return CrossReplicaSumValue(ctx, v, opt...)
	case float64:
		return CrossReplicaSumValue(ctx, v, opt...)
	case int32:
		return CrossReplicaSumValue(ctx, v, opt...)
	case int64:
		return CrossReplicaSumValue(ctx, v, opt...)
	}
	return nil, newError(CodeInvalidArgument, "CrossReplicaSumDyn: cannot sum a %T", x)
}

// InfeedDequeue takes this replica's next tuple from q.
func (c *Context) InfeedDequeue(q *InfeedQueue) ([]*Tensor, error) {
	if q == nil || q.raw == nil {
		return nil, newError(CodeInvalidArgument, "InfeedDequeue: the queue is nil or closed")
	}
	v, err := try(func() TensorVector { return c.raw.InfeedDequeue(q.raw) })
	if err != nil {
		return nil, err
	}
	return fromTensorVector(v), nil
}

// OutfeedEnqueue appends tuple to this replica's outfeed.
func (c *Context) OutfeedEnqueue(q *OutfeedQueue, tuple []*Tensor) error {
	if q == nil || q.raw == nil {
		return newError(CodeInvalidArgument, "OutfeedEnqueue: the queue is nil or closed")
	}
	v, err := tensorVector(tuple, "tuple")
	if err != nil {
		return err
	}
	defer DeleteTensorVector(v)
	return try0(func() { c.raw.OutfeedEnqueue(q.raw, v) })
}

// computation is the SWIG director wrapping a Computation.
type computation struct {
	fn Computation
}

// Run is called on a worker thread (the callback mode); no panic may leave it (C
// frames are above).
func (d *computation) Run(rc RawReplicaContext) TpurtStatus {
	return runComputation(d.fn, &Context{raw: rc}, rc.NumInputs(), rc.NumOutputs())
}

// runComputation runs fn as one participant on ctx (numInputs inputs, numOutputs
// outputs) and returns its status; an error or a panic fails it through ctx.
func runComputation(fn Computation, ctx *Context, numInputs, numOutputs int) (status TpurtStatus) {
	rc := ctx.raw
	defer func() { ctx.raw = nil }() // rc dies with this call: a kept ctx must not reach it
	fail := func(err error) TpurtStatus {
		code, msg := codeOf(err)
		ctx.Fail(code, msg)
		return ctx.failed
	}
	defer func() {
		if r := recover(); r != nil {
			status = fail(fromPanic(r))
		}
	}()
	inputs := make([]*Tensor, numInputs)
	for i := range inputs {
		inputs[i] = wrapTensor(rc.Input(i))
	}
	defer func() {
		for _, t := range inputs {
			t.Close()
		}
		for _, t := range ctx.owned {
			t.Close()
		}
	}()
	outputs, err := fn(ctx, inputs)
	if err != nil || ctx.failed != 0 {
		if err == nil {
			return ctx.failed
		}
		return fail(err)
	}
	if len(outputs) != numOutputs {
		return fail(newError(CodeInvalidArgument, "the computation returned %d outputs, the step expects %d", len(outputs), numOutputs))
	}
	for i, t := range outputs {
		raw, err := t.handle()
		if err != nil {
			return fail(newError(CodeInvalidArgument, "output %d: %v", i, err))
		}
		rc.SetOutput(i, raw)
	}
	return RawStatus_Ok
}
