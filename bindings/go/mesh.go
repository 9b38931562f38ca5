package tpurt

import "runtime"

// MeshAxis is one named axis of a mesh and its size, as DTensor's create_mesh's
// (name, size) pairs.
type MeshAxis struct {
	Name string
	Size int64
}

// Mesh lays the participants of a device assignment, (replica r, logical core c)
// with flattened id r*k + c, over named axes in row-major order (DTensor's and JAX's
// Mesh): with axes {"batch", R} and {"model", k}, "model" runs over the cores of a
// replica. Immutable; Close it (a finalizer is only the safety net).
type Mesh struct{ raw RawMesh }

func meshAxes(axes []MeshAxis) (StringVector, Int64Vector) {
	names := NewStringVector()
	sizes := make([]int64, len(axes))
	for i, a := range axes {
		names.Add(a.Name)
		sizes[i] = a.Size
	}
	return names, int64Vector(sizes)
}

func newMesh(create func(StringVector, Int64Vector) RawMesh, axes []MeshAxis) (*Mesh, error) {
	names, sizes := meshAxes(axes)
	defer DeleteStringVector(names)
	defer DeleteInt64Vector(sizes)
	raw, err := try(func() RawMesh { return create(names, sizes) })
	if err != nil {
		return nil, err
	}
	m := &Mesh{raw: raw}
	runtime.SetFinalizer(m, (*Mesh).Close)
	return m, nil
}

// NewMesh is a mesh over assignment's participants; the sizes' product must be
// num_replicas * num_cores_per_replica. TensorFlow's Mesh rules: bad names or sizes
// are an ErrInvalidArgument naming them.
func NewMesh(assignment *DeviceAssignment, axes ...MeshAxis) (*Mesh, error) {
	if assignment == nil || assignment.raw == nil {
		return nil, newError(CodeInvalidArgument, "NewMesh: the device assignment is nil or closed")
	}
	return newMesh(func(n StringVector, s Int64Vector) RawMesh { return RawMeshCreate(assignment.raw, n, s) }, axes)
}

// NewMeshFromTopology is a mesh over every core of topology, one replica per core
// (DTensor's mesh of all TPU devices).
func NewMeshFromTopology(topology *Topology, axes ...MeshAxis) (*Mesh, error) {
	if topology == nil || topology.raw == nil {
		return nil, newError(CodeInvalidArgument, "NewMeshFromTopology: the topology is nil or closed")
	}
	return newMesh(func(n StringVector, s Int64Vector) RawMesh { return RawMeshCreateFromTopology(topology.raw, n, s) }, axes)
}

// Raw is the SWIG object (valid until Close); its calls panic on failure, so wrap
// them in Try.
func (m *Mesh) Raw() RawMesh { return m.raw }

func (m *Mesh) handle() (RawMesh, error) {
	if m == nil || m.raw == nil {
		return nil, newError(CodeFailedPrecondition, "the mesh is nil or closed")
	}
	return m.raw, nil
}

// Close releases the mesh.
func (m *Mesh) Close() {
	if m != nil && m.raw != nil {
		runtime.SetFinalizer(m, nil)
		DeleteRawMesh(m.raw)
		m.raw = nil
	}
}

// meshCall runs one query of the raw mesh, its failure as an error.
func meshCall[T any](m *Mesh, call func(RawMesh) T) (T, error) {
	raw, err := m.handle()
	if err != nil {
		var zero T
		return zero, err
	}
	return try(func() T { return call(raw) })
}

// DeviceAssignment is a new handle on the mesh's device assignment (Close it); a
// step runs over the mesh with WithMesh or WithDeviceAssignment of it.
func (m *Mesh) DeviceAssignment() (*DeviceAssignment, error) {
	raw, err := meshCall(m, RawMesh.DeviceAssignment)
	if err != nil {
		return nil, err
	}
	return wrapDeviceAssignment(raw), nil
}

// NumAxes is the number of axes.
func (m *Mesh) NumAxes() (int, error) { return meshCall(m, RawMesh.NumAxes) }

// Size is the number of participants: num_replicas * num_cores_per_replica.
func (m *Mesh) Size() (int64, error) { return meshCall(m, RawMesh.Size) }

// AxisName is the name of axis i (ErrOutOfRange outside [0, NumAxes())).
func (m *Mesh) AxisName(i int) (string, error) {
	return meshCall(m, func(r RawMesh) string { return r.AxisName(i) })
}

// AxisSize is the size of axis i.
func (m *Mesh) AxisSize(i int) (int64, error) {
	return meshCall(m, func(r RawMesh) int64 { return r.AxisSize(i) })
}

// AxisIndex is the index of the axis called name (ErrNotFound naming it).
func (m *Mesh) AxisIndex(name string) (int, error) {
	return meshCall(m, func(r RawMesh) int { return r.AxisIndex(name) })
}

// Axes are the mesh's axes in order.
func (m *Mesh) Axes() ([]MeshAxis, error) {
	n, err := m.NumAxes()
	if err != nil {
		return nil, err
	}
	axes := make([]MeshAxis, n)
	for i := range axes {
		if axes[i].Name, err = m.AxisName(i); err != nil {
			return nil, err
		}
		if axes[i].Size, err = m.AxisSize(i); err != nil {
			return nil, err
		}
	}
	return axes, nil
}

// Coordinates are the mesh coordinates of participant (replica, logicalCore), one per
// axis (ErrOutOfRange outside the assignment).
func (m *Mesh) Coordinates(replica, logicalCore int) ([]int64, error) {
	return meshCall(m, func(r RawMesh) []int64 { return int64Slice(r.Coordinates(replica, logicalCore)) })
}

// AxisGroups are the groups of a collective over the named axes (participants that
// differ only in those axes form one group, row-major over the axes in the order
// given) and the group mode they are in. OverAxes passes both to a collective.
func (m *Mesh) AxisGroups(axes ...string) ([][]int32, GroupMode, error) {
	names := NewStringVector()
	defer DeleteStringVector(names)
	for _, a := range axes {
		names.Add(a)
	}
	g, err := meshCall(m, func(r RawMesh) RawGroupAssignment { return r.AxisGroups(names) })
	if err != nil {
		return nil, 0, err
	}
	defer DeleteRawGroupAssignment(g)
	mode, err := meshCall(m, func(r RawMesh) TpurtGroupMode { return r.AxisGroupMode(names) })
	if err != nil {
		return nil, 0, err
	}
	ids, size := int32Slice(g.ReplicaIds()), g.GroupSize()
	groups := make([][]int32, g.NumGroups())
	for i := range groups {
		groups[i] = ids[i*size : (i+1)*size]
	}
	return groups, GroupMode(mode), nil
}

// OverAxes is the Collective over mesh's named axes, so "sum over the model axis" is
// ctx.CrossReplicaSumTensor(x, tpurt.OverAxes(mesh, "model")). A bad axis is the
// error of the collective it is passed to.
func OverAxes(mesh *Mesh, axes ...string) Collective {
	groups, mode, err := mesh.AxisGroups(axes...)
	return Collective{Groups: groups, GroupMode: mode, err: err}
}
