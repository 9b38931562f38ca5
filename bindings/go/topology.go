package tpurt

import (
	"math"
	"runtime"
)

// Topology is the mesh of cores. Raw() exposes every query of the support layer.
type Topology struct{ raw RawTopology }

func wrapTopology(raw RawTopology) *Topology {
	t := &Topology{raw: raw}
	runtime.SetFinalizer(t, (*Topology).Close)
	return t
}

// ParseTopology reads a serialized TopologyProto.
func ParseTopology(data []byte) (*Topology, error) {
	v := NewByteVector()
	defer DeleteByteVector(v)
	for _, b := range data {
		v.Add(b)
	}
	raw, err := try(func() RawTopology { return RawTopologyParse(v) })
	if err != nil {
		return nil, err
	}
	return wrapTopology(raw), nil
}

// Raw is the SWIG object (valid until Close); its calls panic on failure, so wrap
// them in Try.
func (t *Topology) Raw() RawTopology { return t.raw }

func (t *Topology) handle() (RawTopology, error) {
	if t == nil || t.raw == nil {
		return nil, newError(CodeFailedPrecondition, "the topology is nil or closed")
	}
	return t.raw, nil
}

// MeshShape is the size of each mesh axis.
func (t *Topology) MeshShape() ([]int32, error) {
	raw, err := t.handle()
	if err != nil {
		return nil, err
	}
	return try(func() []int32 { return int32Slice(raw.MeshShape()) })
}

// Serialize is the TopologyProto.
func (t *Topology) Serialize() ([]byte, error) {
	raw, err := t.handle()
	if err != nil {
		return nil, err
	}
	return try(func() []byte { return byteSlice(raw.Serialize()) })
}

// Close releases the topology.
func (t *Topology) Close() {
	if t.raw != nil {
		runtime.SetFinalizer(t, nil)
		DeleteRawTopology(t.raw)
		t.raw = nil
	}
}

// DeviceAssignment maps (replica, logical core) to physical cores.
type DeviceAssignment struct{ raw RawDeviceAssignment }

func wrapDeviceAssignment(raw RawDeviceAssignment) *DeviceAssignment {
	a := &DeviceAssignment{raw: raw}
	runtime.SetFinalizer(a, (*DeviceAssignment).Close)
	return a
}

// BuildDeviceAssignment is tf.tpu's device_assignment(): numReplicas replicas of
// computationShape cores (nil: one core) over topology.
func BuildDeviceAssignment(topology *Topology, computationShape, computationStride []int32, numReplicas int) (*DeviceAssignment, error) {
	if topology == nil || topology.raw == nil {
		return nil, newError(CodeInvalidArgument, "BuildDeviceAssignment: the topology is nil or closed")
	}
	shape, stride := int32Vector(computationShape), int32Vector(computationStride)
	defer DeleteInt32Vector(shape)
	defer DeleteInt32Vector(stride)
	raw, err := try(func() RawDeviceAssignment {
		return RawDeviceAssignmentBuild(topology.raw, shape, stride, numReplicas, RawDeviceOrderMode_Auto)
	})
	if err != nil {
		return nil, err
	}
	return wrapDeviceAssignment(raw), nil
}

// Raw is the SWIG object (valid until Close).
func (a *DeviceAssignment) Raw() RawDeviceAssignment { return a.raw }

// NumReplicas is the number of replicas assigned.
func (a *DeviceAssignment) NumReplicas() (int, error) {
	if a == nil || a.raw == nil {
		return 0, newError(CodeFailedPrecondition, "the device assignment is nil or closed")
	}
	return try(a.raw.NumReplicas)
}

// NumCoresPerReplica is the number of logical cores of each replica.
func (a *DeviceAssignment) NumCoresPerReplica() (int, error) {
	if a == nil || a.raw == nil {
		return 0, newError(CodeFailedPrecondition, "the device assignment is nil or closed")
	}
	return try(a.raw.NumCoresPerReplica)
}

// TPUOrdinal is the system core of (replica, logicalCore).
func (a *DeviceAssignment) TPUOrdinal(replica, logicalCore int) (int, error) {
	if a == nil || a.raw == nil {
		return 0, newError(CodeFailedPrecondition, "the device assignment is nil or closed")
	}
	return try(func() int { return a.raw.TpuOrdinal(replica, logicalCore) })
}

// Close releases the assignment.
func (a *DeviceAssignment) Close() {
	if a.raw != nil {
		runtime.SetFinalizer(a, nil)
		DeleteRawDeviceAssignment(a.raw)
		a.raw = nil
	}
}

// FeedSpec is one element of an infeed or outfeed tuple.
type FeedSpec struct {
	DType DType
	Shape TensorShape
}

func feedArgs(specs []FeedSpec) (Int32Vector, ShapeVector) {
	dtypes := NewInt32Vector()
	shapes := NewShapeVector()
	for _, s := range specs {
		dtypes.Add(int(s.DType))
		d := int64Vector(s.Shape)
		shape := RawShapeOf(d)
		shapes.Add(shape)
		DeleteRawShape(shape)
		DeleteInt64Vector(d)
	}
	return dtypes, shapes
}

// InfeedQueue feeds tuples from the host to each replica.
type InfeedQueue struct{ raw RawInfeedQueue }

// NewInfeedQueue makes a queue of tuples shaped like specs, capacity tuples per replica.
func NewInfeedQueue(s *System, numReplicas int, specs []FeedSpec, capacity int) (*InfeedQueue, error) {
	sys, err := s.handle()
	if err != nil {
		return nil, err
	}
	dtypes, shapes := feedArgs(specs)
	defer DeleteInt32Vector(dtypes)
	defer DeleteShapeVector(shapes)
	raw, err := try(func() RawInfeedQueue { return NewRawInfeedQueue(sys, numReplicas, dtypes, shapes, capacity) })
	if err != nil {
		return nil, err
	}
	q := &InfeedQueue{raw: raw}
	runtime.SetFinalizer(q, (*InfeedQueue).Close)
	return q, nil
}

// Enqueue appends a tuple for replica.
func (q *InfeedQueue) Enqueue(replica int, tuple []*Tensor) error {
	if q == nil || q.raw == nil {
		return newError(CodeInvalidArgument, "Enqueue: the queue is nil or closed")
	}
	v, err := tensorVector(tuple, "tuple")
	if err != nil {
		return err
	}
	defer DeleteTensorVector(v)
	return try0(func() { q.raw.Enqueue(replica, v) })
}

// SetShardDimensions is TensorFlow's InfeedQueue.set_shard_dimensions: the dimension
// each tuple element is cut along over the cores of a replica, one per element (-1:
// the whole element to every core; the default is 0).
func (q *InfeedQueue) SetShardDimensions(dims []int) error {
	if q == nil || q.raw == nil {
		return newError(CodeInvalidArgument, "SetShardDimensions: the queue is nil or closed")
	}
	d := make([]int32, len(dims))
	for i, x := range dims {
		if x < math.MinInt32 || x > math.MaxInt32 {
			return newError(CodeInvalidArgument, "SetShardDimensions: dimension %d (%d) is out of the int32 range", i, x)
		}
		d[i] = int32(x)
	}
	v := int32Vector(d)
	defer DeleteInt32Vector(v)
	return try0(func() { q.raw.SetShardDimensions(v) })
}

// Close releases the queue.
func (q *InfeedQueue) Close() {
	if q.raw != nil {
		runtime.SetFinalizer(q, nil)
		DeleteRawInfeedQueue(q.raw)
		q.raw = nil
	}
}

// OutfeedQueue carries tuples from each replica to the host.
type OutfeedQueue struct{ raw RawOutfeedQueue }

// NewOutfeedQueue makes a queue of tuples shaped like specs.
func NewOutfeedQueue(s *System, numReplicas int, specs []FeedSpec, capacity int) (*OutfeedQueue, error) {
	sys, err := s.handle()
	if err != nil {
		return nil, err
	}
	dtypes, shapes := feedArgs(specs)
	defer DeleteInt32Vector(dtypes)
	defer DeleteShapeVector(shapes)
	raw, err := try(func() RawOutfeedQueue { return NewRawOutfeedQueue(sys, numReplicas, dtypes, shapes, capacity) })
	if err != nil {
		return nil, err
	}
	q := &OutfeedQueue{raw: raw}
	runtime.SetFinalizer(q, (*OutfeedQueue).Close)
	return q, nil
}

// Dequeue takes replica's next tuple.
func (q *OutfeedQueue) Dequeue(replica int) ([]*Tensor, error) {
	if q == nil || q.raw == nil {
		return nil, newError(CodeInvalidArgument, "Dequeue: the queue is nil or closed")
	}
	v, err := try(func() TensorVector { return q.raw.Dequeue(replica) })
	if err != nil {
		return nil, err
	}
	return fromTensorVector(v), nil
}

// Close releases the queue.
func (q *OutfeedQueue) Close() {
	if q.raw != nil {
		runtime.SetFinalizer(q, nil)
		DeleteRawOutfeedQueue(q.raw)
		q.raw = nil
	}
}

// Try runs calls on Raw() objects, turning their failure panics into an error.
func Try(call func()) error { return try0(call) }
