package tpurt

// Model parallelism (issue 19): replicas of several cores, group modes, meshes with
// named axes, partitioned inputs and outputs; numbers against naive references.

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// The test system's 8 cores as 4 replicas of k = 2 cores.
const (
	coresPerReplica = 2
	mpReplicas      = replicas / coresPerReplica
)

func twoCoreAssignment(t *testing.T, s *System) *DeviceAssignment {
	t.Helper()
	topo := must(s.Topology())
	defer topo.Close()
	a, err := BuildDeviceAssignment(topo, []int32{coresPerReplica, 1, 1, 1}, nil, mpReplicas)
	if err != nil {
		t.Fatalf("BuildDeviceAssignment: %v", err)
	}
	t.Cleanup(a.Close)
	return a
}

// failures collects what the computations found wrong, from every worker thread.
type failures struct {
	mu   sync.Mutex
	list []string
}

func (f *failures) add(format string, args ...interface{}) {
	f.mu.Lock()
	f.list = append(f.list, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *failures) check(t *testing.T) {
	t.Helper()
	for _, m := range f.list {
		t.Error(m)
	}
}

func TestEveryCoreOfAReplicaRuns(t *testing.T) {
	s := newTestSystem(t)
	a := twoCoreAssignment(t, s)
	if k := must(a.NumCoresPerReplica()); k != coresPerReplica {
		t.Fatalf("NumCoresPerReplica %d", k)
	}
	var mu sync.Mutex
	runs := map[[2]int]int{}      // (replica, logical core) -> how often it ran
	onCoreOne := map[[2]int]int{} // where OnLogicalCore(1, ...) ran its function
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		r, c := ctx.ReplicaID(), ctx.LogicalCore()
		if ctx.raw.LogicalCore() != c || ctx.NumCoresPerReplica() != coresPerReplica || ctx.NumReplicas() != mpReplicas {
			return nil, fmt.Errorf("replica %d core %d: context says %d cores of %d replicas", r, c, ctx.NumCoresPerReplica(), ctx.NumReplicas())
		}
		if want := must(a.TPUOrdinal(r, c)); ctx.Core() != want {
			return nil, fmt.Errorf("replica %d core %d runs on system core %d; the assignment names %d", r, c, ctx.Core(), want)
		}
		mu.Lock()
		runs[[2]int{r, c}]++
		mu.Unlock()
		if err := ctx.OnLogicalCore(coresPerReplica, func() error { return nil }); !errors.Is(err, ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "core 2") {
			return nil, fmt.Errorf("OnLogicalCore(2) with 2 cores: %v", err)
		}
		return nil, ctx.OnLogicalCore(1, func() error {
			mu.Lock()
			onCoreOne[[2]int{r, c}]++
			mu.Unlock()
			return nil
		})
	}, mpReplicas, WithDeviceAssignment(a))
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < mpReplicas; r++ {
		for c := 0; c < coresPerReplica; c++ {
			if n := runs[[2]int{r, c}]; n != 1 {
				t.Errorf("replica %d core %d ran %d times, want once", r, c, n)
			}
			want := 0
			if c == 1 {
				want = 1
			}
			if n := onCoreOne[[2]int{r, c}]; n != want {
				t.Errorf("OnLogicalCore(1) ran %d times on replica %d core %d, want %d", n, r, c, want)
			}
		}
	}
	if len(runs) != replicas {
		t.Errorf("%d (replica, core) pairs ran, want %d: %v", len(runs), replicas, runs)
	}
	// A failure on one core names it, and the other cores are released.
	_, err = ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		if err := ctx.OnLogicalCore(1, func() error {
			if ctx.ReplicaID() == 2 {
				return ctx.Fail(CodeNotFound, "no shard here")
			}
			return nil
		}); err != nil {
			return nil, err
		}
		_, err := CrossReplicaSum(ctx, []float32{1}, Collective{GroupMode: CrossReplicaAndPartition})
		return nil, err
	}, mpReplicas, WithDeviceAssignment(a))
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "replica 2 core 1") || !strings.Contains(err.Error(), "no shard here") {
		t.Errorf("a failure on replica 2 core 1: %v", err)
	}
}

// inSameGroup is XLA's participant rule written out: whether (r2, c2) is in the group
// of (r, c) under mode, k cores per replica (nil groups: one group of every id).
func inSameGroup(mode GroupMode, groups [][]int32, k, r, c, r2, c2 int) bool {
	together := func(a, b int) bool {
		if groups == nil {
			return true
		}
		for _, g := range groups {
			hasA, hasB := false, false
			for _, id := range g {
				hasA = hasA || int(id) == a
				hasB = hasB || int(id) == b
			}
			if hasA && hasB {
				return true
			}
		}
		return false
	}
	switch mode {
	case CrossReplica:
		return c == c2 && together(r, r2)
	case CrossPartition:
		return r == r2 && together(c, c2)
	case CrossReplicaAndPartition:
		return together(r, r2)
	case FlattenedID:
		return together(r*k+c, r2*k+c2)
	}
	panic(mode)
}

func TestCollectivesInEveryGroupMode(t *testing.T) {
	s := newTestSystem(t)
	a := twoCoreAssignment(t, s)
	value := func(r, c int) float32 { return float32(10*r + c + 1) }
	cases := []Collective{
		{GroupMode: CrossPartition},
		{GroupMode: CrossPartition, Groups: [][]int32{{0}, {1}}},
		{GroupMode: CrossPartition, Groups: [][]int32{{1, 0}}},
		{}, // CrossReplica: per logical core, over the replicas
		{GroupMode: CrossReplica, Groups: [][]int32{{0, 3}, {1, 2}}},
		{GroupMode: CrossReplicaAndPartition, Groups: [][]int32{{0, 1}, {2, 3}}},
		{GroupMode: CrossReplicaAndPartition},
		{GroupMode: FlattenedID, Groups: [][]int32{{0, 3, 4, 7}, {1, 2, 5, 6}}},
	}
	var bad failures
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		r, c := ctx.ReplicaID(), ctx.LogicalCore()
		for _, opt := range cases {
			got, err := CrossReplicaSum(ctx, []float32{value(r, c), 1}, opt)
			if err != nil {
				return nil, err
			}
			var want, members float32
			for r2 := 0; r2 < mpReplicas; r2++ {
				for c2 := 0; c2 < coresPerReplica; c2++ {
					if inSameGroup(opt.GroupMode, opt.Groups, coresPerReplica, r, c, r2, c2) {
						want += value(r2, c2)
						members++
					}
				}
			}
			if got[0] != want || got[1] != members {
				bad.add("%v groups %v, replica %d core %d: sum %v, want [%v %v]", opt.GroupMode, opt.Groups, r, c, got, want, members)
			}
		}
		// The other collectives take the mode too: the cores of a replica gather, and swap.
		cores := Collective{GroupMode: CrossPartition}
		mine := must(NewTensor([]int64{1}, []float32{value(r, c)}))
		if got := must(Values[float32](must(ctx.AllGather(mine, 0, cores)))); !equal(got, []float32{value(r, 0), value(r, 1)}) {
			bad.add("replica %d core %d: AllGather over the cores %v", r, c, got)
		}
		swapped := must(Values[float32](must(ctx.CollectivePermute(mine, [][2]int32{{0, 1}, {1, 0}}, cores))))
		if !equal(swapped, []float32{value(r, 1-c)}) {
			bad.add("replica %d core %d: CollectivePermute between the cores %v", r, c, swapped)
		}
		return nil, nil
	}, mpReplicas, WithDeviceAssignment(a))
	if err != nil {
		t.Fatal(err)
	}
	bad.check(t)
}

// Groups of different sizes (issue 29): XLA's verifier allows them for all-reduce only
// (CheckReplicaGroups' uniform_replica_group_size in xla/service/hlo_verifier.cc);
// broadcast checks no groups (HandleCollectiveBroadcast); all-gather refuses them.
func TestGroupsOfDifferentSizes(t *testing.T) {
	ids, sizes := int32Vector([]int32{3, 0, 1, 2}), int32Vector([]int32{3, 1})
	defer DeleteInt32Vector(ids)
	defer DeleteInt32Vector(sizes)
	g := RawGroupAssignmentRagged(ids, sizes)
	defer DeleteRawGroupAssignment(g)
	if err := Try(func() { g.Validate(4) }); err != nil || g.GroupSize() != -1 || !g.IsRagged() || g.GroupSizes().Size() != 2 {
		t.Errorf("RawGroupAssignmentRagged: %v, group size %d", err, g.GroupSize())
	}
	zero := int32Vector([]int32{1, 0, 1})
	defer DeleteInt32Vector(zero)
	if _, err := try(func() RawGroupAssignment { return RawGroupAssignmentRagged(ids, zero) }); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a group of 0 ids: %v", err)
	}

	s := newTestSystem(t)
	a := twoCoreAssignment(t, s)
	value := func(r, c int) float32 { return float32(10*r + c + 1) }
	cases := []Collective{
		{GroupMode: CrossReplica, Groups: [][]int32{{3, 0, 1}, {2}}},
		{GroupMode: CrossReplicaAndPartition, Groups: [][]int32{{2}, {1, 3, 0}}},
		{GroupMode: FlattenedID, Groups: [][]int32{{7, 2, 4}, {1}, {0, 5, 3, 6}}},
	}
	var bad failures
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		r, c := ctx.ReplicaID(), ctx.LogicalCore()
		for _, opt := range cases {
			got, err := CrossReplicaSum(ctx, []float32{value(r, c), 1}, opt)
			if err != nil {
				return nil, err
			}
			var want, members float32
			first := -1.0
			for r2 := 0; r2 < mpReplicas; r2++ {
				for c2 := 0; c2 < coresPerReplica; c2++ {
					if inSameGroup(opt.GroupMode, opt.Groups, coresPerReplica, r, c, r2, c2) {
						want += value(r2, c2)
						members++
					}
				}
			}
			if got[0] != want || got[1] != members {
				bad.add("%v groups %v, replica %d core %d: sum %v, want [%v %v]", opt.GroupMode, opt.Groups, r, c, got, want, members)
			}
			// Broadcast from position 0 of each group: its first id's participant.
			for _, row := range opt.Groups {
				for _, id := range row {
					p := int(row[0])
					switch opt.GroupMode {
					case CrossReplica:
						if int(id) == r {
							first = float64(value(p, c))
						}
					case CrossReplicaAndPartition:
						if int(id) == r {
							first = float64(value(p, 0))
						}
					case FlattenedID:
						if int(id) == r*coresPerReplica+c {
							first = float64(value(p/coresPerReplica, p%coresPerReplica))
						}
					}
				}
			}
			mine := must(NewTensor([]int64{1}, []float32{value(r, c)}))
			if got := must(Values[float32](must(ctx.Broadcast(mine, 0, opt)))); !equal(got, []float32{float32(first)}) {
				bad.add("%v groups %v, replica %d core %d: Broadcast %v, want %v", opt.GroupMode, opt.Groups, r, c, got, first)
			}
		}
		return nil, nil
	}, mpReplicas, WithDeviceAssignment(a))
	if err != nil {
		t.Fatal(err)
	}
	bad.check(t)
	_, err = ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		_, err := ctx.AllGather(must(NewTensor([]int64{1}, []float32{1})), 0, cases[0])
		return nil, err
	}, mpReplicas, WithDeviceAssignment(a))
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "Replica groups expected to be of uniform size") ||
		!strings.Contains(err.Error(), "{{3,0,1},{2}}") {
		t.Errorf("AllGather over groups of different sizes: %v", err)
	}
}

func TestBadGroupModeIsInvalidArgumentWithMessage(t *testing.T) {
	s := newTestSystem(t)
	a := twoCoreAssignment(t, s)
	for _, tc := range []struct {
		opt  Collective
		want []string
	}{
		{Collective{GroupMode: GroupMode(7)}, []string{"group_mode is 7"}},
		{Collective{GroupMode: CrossPartition, Groups: [][]int32{{0, 2}}}, []string{"logical core 2", "CROSS_PARTITION"}},
	} {
		_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
			_, err := CrossReplicaSum(ctx, []float32{1}, tc.opt)
			return nil, err
		}, mpReplicas, WithDeviceAssignment(a))
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidArgument || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%v groups %v: got %v, want an *Error with CodeInvalidArgument", tc.opt.GroupMode, tc.opt.Groups, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(e.Message, w) {
				t.Errorf("%v: the message %q does not say %q", tc.opt.GroupMode, e.Message, w)
			}
		}
	}
	if GroupMode(7).String() != "GroupMode(7)" || CrossPartition.String() != "CrossPartition" {
		t.Errorf("GroupMode.String: %v %v", GroupMode(7), CrossPartition)
	}
}

// tileRange is TPUEstimator's split of n into p pieces: ceil(n/p) while they fit,
// then the remainder, then empty ones.
func tileRange(n, p, i int) (int, int) {
	size := (n + p - 1) / p
	start := i * size
	if start > n {
		start = n
	}
	end := start + size
	if end > n {
		end = n
	}
	return start, end
}

// tile cuts the row-major [rows, cols] data into a [p0, p1] grid and returns tile c
// (row-major in the grid) and its dims: the naive reference for partitioned inputs.
func tile(data []float32, rows, cols, p0, p1, c int) ([]float32, []int64) {
	r0, r1 := tileRange(rows, p0, c/p1)
	c0, c1 := tileRange(cols, p1, c%p1)
	var out []float32
	for i := r0; i < r1; i++ {
		out = append(out, data[i*cols+c0:i*cols+c1]...)
	}
	return out, []int64{int64(r1 - r0), int64(c1 - c0)}
}

func TestPartitionedInputsAndOutputsRoundTrip(t *testing.T) {
	s := newTestSystem(t)
	a := twoCoreAssignment(t, s)
	// Input 0 is [4, 6] cut {1, 2} (columns 0-2 and 3-5); input 1 is [5, 3] cut {2, 1}
	// (rows 0-2 and 3-4: 5 does not divide by 2); input 2 goes whole to both cores.
	shapes := [][2]int{{4, 6}, {5, 3}}
	cuts := [][]int32{{1, 2}, {2, 1}}
	data := func(r, i int) []float32 {
		d := make([]float32, shapes[i][0]*shapes[i][1])
		for j := range d {
			d[j] = float32(1000*r + 100*i + j)
		}
		return d
	}
	inputs := make([][]*Tensor, mpReplicas)
	for r := range inputs {
		for i, sh := range shapes {
			inputs[r] = append(inputs[r], must(NewTensor([]int64{int64(sh[0]), int64(sh[1])}, data(r, i))))
		}
		inputs[r] = append(inputs[r], must(NewTensor([]int64{2}, []int32{int32(r), 7})))
	}
	var bad failures
	out, err := Replicate(s, func(ctx *Context, in []*Tensor) ([]*Tensor, error) {
		r, c := ctx.ReplicaID(), ctx.LogicalCore()
		for i, sh := range shapes {
			want, dims := tile(data(r, i), sh[0], sh[1], int(cuts[i][0]), int(cuts[i][1]), c)
			if got := must(Values[float32](in[i])); !equal(got, want) || !equal(must(in[i].Dims()), dims) {
				bad.add("replica %d core %d input %d: %v %v, want %v %v", r, c, i, must(in[i].Dims()), got, dims, want)
			}
		}
		if got := must(Values[int32](in[2])); !equal(got, []int32{int32(r), 7}) {
			bad.add("replica %d core %d: the unpartitioned input is %v", r, c, got)
		}
		own := must(NewTensor([]int64{1}, []int32{int32(10*c + r)}))
		return []*Tensor{in[0], in[1], own}, nil
	}, inputs, WithDeviceAssignment(a), WithNumOutputs(3),
		WithInputPartitions(cuts[0], cuts[1], nil), WithOutputPartitions(cuts[0], cuts[1], nil))
	if err != nil {
		t.Fatal(err)
	}
	bad.check(t)
	for r := range out {
		for i, sh := range shapes {
			if got := must(Values[float32](out[r][i])); !equal(got, data(r, i)) ||
				!equal(must(out[r][i].Dims()), []int64{int64(sh[0]), int64(sh[1])}) {
				t.Errorf("replica %d output %d: %v %v, want the input back", r, i, must(out[r][i].Dims()), got)
			}
		}
		if got := must(Values[int32](out[r][2])); !equal(got, []int32{int32(r)}) {
			t.Errorf("replica %d: the unpartitioned output is %v, want logical core 0's [%d]", r, got, r)
		}
	}
	// Counts whose product is not the cores per replica name the input.
	_, err = Replicate(s, func(*Context, []*Tensor) ([]*Tensor, error) { return nil, nil }, inputs,
		WithDeviceAssignment(a), WithInputPartitions([]int32{2, 2}, nil, nil))
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "input_partitions[0]") {
		t.Errorf("partition counts 2x2 on 2 cores: %v", err)
	}
}

// newTestMesh is the mesh create makes, closed when the test ends.
func newTestMesh(t *testing.T, create func() (*Mesh, error)) *Mesh {
	t.Helper()
	m, err := create()
	if err != nil {
		t.Fatalf("creating the mesh: %v", err)
	}
	t.Cleanup(m.Close)
	return m
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// meshCoordinates is the naive row-major split of a flattened id over axis sizes.
func meshCoordinates(id int, sizes []int64) []int64 {
	coords := make([]int64, len(sizes))
	for d := len(sizes) - 1; d >= 0; d-- {
		coords[d] = int64(id) % sizes[d]
		id /= int(sizes[d])
	}
	return coords
}

func TestMeshAxisSums(t *testing.T) {
	s := newTestSystem(t)
	a := twoCoreAssignment(t, s)
	axes := []MeshAxis{{"x", 2}, {"y", 2}, {"z", 2}}
	sizes := []int64{2, 2, 2}
	mesh := newTestMesh(t, func() (*Mesh, error) { return NewMesh(a, axes...) })
	if got := must(mesh.Axes()); len(got) != 3 || got[1] != axes[1] || must(mesh.NumAxes()) != 3 || must(mesh.Size()) != replicas {
		t.Fatalf("mesh axes %v", got)
	}
	if must(mesh.AxisIndex("z")) != 2 || must(mesh.AxisName(0)) != "x" || must(mesh.AxisSize(1)) != 2 {
		t.Error("AxisIndex/AxisName/AxisSize")
	}
	value := func(id int) float32 { return float32(id*id + 1) }
	sums := [][]string{{"z"}, {"y"}, {"x", "z"}, {"z", "x"}, {"x", "y", "z"}}
	var bad failures
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		r, c := ctx.ReplicaID(), ctx.LogicalCore()
		id := r*coresPerReplica + c
		coords := meshCoordinates(id, sizes)
		if got := must(mesh.Coordinates(r, c)); !equal(got, coords) {
			bad.add("replica %d core %d: coordinates %v, want %v", r, c, got, coords)
		}
		for _, named := range sums {
			x := must(NewTensor([]int64{1}, []float32{value(id)}))
			sum, err := ctx.CrossReplicaSumTensor(x, OverAxes(mesh, named...))
			if err != nil {
				return nil, err
			}
			var want float32
			for other := 0; other < replicas; other++ {
				oc, same := meshCoordinates(other, sizes), true
				for d, axis := range axes {
					if !contains(named, axis.Name) && oc[d] != coords[d] {
						same = false
					}
				}
				if same {
					want += value(other)
				}
			}
			if got := must(Values[float32](sum))[0]; got != want {
				bad.add("participant %d: sum over %v is %v, want %v", id, named, got, want)
			}
		}
		return nil, nil
	}, mpReplicas, WithMesh(mesh))
	if err != nil {
		t.Fatal(err)
	}
	bad.check(t)
}

func TestMeshGroupsAndDeviceAssignment(t *testing.T) {
	s := newTestSystem(t)
	a := twoCoreAssignment(t, s)
	mesh := newTestMesh(t, func() (*Mesh, error) {
		return NewMesh(a, MeshAxis{"batch", mpReplicas}, MeshAxis{"model", coresPerReplica})
	})
	for _, tc := range []struct {
		axes []string
		want [][]int32
	}{
		{[]string{"model"}, [][]int32{{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
		{[]string{"batch"}, [][]int32{{0, 2, 4, 6}, {1, 3, 5, 7}}},
		{[]string{"model", "batch"}, [][]int32{{0, 2, 4, 6, 1, 3, 5, 7}}},
	} {
		groups, mode, err := mesh.AxisGroups(tc.axes...)
		if err != nil || mode != FlattenedID || fmt.Sprint(groups) != fmt.Sprint(tc.want) {
			t.Errorf("AxisGroups(%v): %v %v %v, want %v in FlattenedID", tc.axes, groups, mode, err, tc.want)
		}
	}
	da := must(mesh.DeviceAssignment())
	if must(da.NumReplicas()) != mpReplicas || must(da.NumCoresPerReplica()) != coresPerReplica || must(da.TPUOrdinal(3, 1)) != must(a.TPUOrdinal(3, 1)) {
		t.Error("the mesh's device assignment is not the one it was built from")
	}
	da.Close()

	// Bad names and sizes, as TensorFlow's Mesh: ErrInvalidArgument naming them.
	for _, tc := range []struct {
		axes []MeshAxis
		want string
	}{
		{[]MeshAxis{{"batch", 3}, {"model", 2}}, "multiply to 6"},
		{[]MeshAxis{{"a", 4}, {"a", 2}}, `axis_names[1] is "a"`},
		{[]MeshAxis{{"unsharded", 8}}, `"unsharded"`},
		{[]MeshAxis{{"", 8}}, "axis_names[0] is empty"},
		{[]MeshAxis{{"batch", 0}, {"model", 8}}, `axis_sizes[0] is 0 (axis "batch")`},
		{nil, "at least one axis"},
	} {
		if m, err := NewMesh(a, tc.axes...); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewMesh(%v): %v, want ErrInvalidArgument naming %q", tc.axes, err, tc.want)
			m.Close()
		}
	}
	if _, err := mesh.AxisIndex("nosuch"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("AxisIndex(nosuch): %v", err)
	}
	if _, err := mesh.AxisName(2); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("AxisName(2): %v", err)
	}
	if _, err := mesh.Coordinates(mpReplicas, 0); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("Coordinates past the replicas: %v", err)
	}
	if _, _, err := mesh.AxisGroups("model", "model"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("AxisGroups(model, model): %v", err)
	}
	// A bad axis is the error of the collective it is passed to.
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		_, err := CrossReplicaSum(ctx, []float32{1}, OverAxes(mesh, "nosuch"))
		return nil, err
	}, mpReplicas, WithMesh(mesh))
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("a collective over a missing axis: %v", err)
	}
	if _, err := ReplicateN(s, func(*Context, []*Tensor) ([]*Tensor, error) { return nil, nil }, mpReplicas,
		WithMesh(mesh), WithDeviceAssignment(a)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a mesh and a device assignment: %v", err)
	}
	mesh.Close()
	mesh.Close()
	if _, err := mesh.Size(); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("a closed mesh: %v", err)
	}
}

// The mesh of every core of a topology, and the raw layer's constructors.
func TestMeshFromTopology(t *testing.T) {
	s := newTestSystem(t)
	topo := must(s.Topology())
	defer topo.Close()
	mesh := newTestMesh(t, func() (*Mesh, error) { return NewMeshFromTopology(topo, MeshAxis{"batch", 4}, MeshAxis{"x", 2}) })
	da := must(mesh.DeviceAssignment())
	defer da.Close()
	if must(da.NumReplicas()) != replicas || must(da.NumCoresPerReplica()) != 1 || must(mesh.Size()) != replicas {
		t.Errorf("a mesh over the topology: %d replicas of %d cores", must(da.NumReplicas()), must(da.NumCoresPerReplica()))
	}
	out, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		sum, err := ctx.CrossReplicaSumTensor(must(NewTensor([]int64{1}, []float32{float32(ctx.ReplicaID())})), OverAxes(mesh, "x"))
		return []*Tensor{sum}, err
	}, replicas, WithMesh(mesh), WithNumOutputs(1))
	if err != nil {
		t.Fatal(err)
	}
	for r := range out {
		if got := must(Values[float32](out[r][0]))[0]; got != float32(4*(r/2)+1) {
			t.Errorf("replica %d: sum over x %v, want %v", r, got, 4*(r/2)+1)
		}
	}
	names := NewStringVector()
	defer DeleteStringVector(names)
	names.Add("all")
	size := int64Vector([]int64{replicas})
	defer DeleteInt64Vector(size)
	if err := Try(func() {
		raw := RawMeshCreateFromTopology(topo.Raw(), names, size)
		defer DeleteRawMesh(raw)
		fromDA := RawMeshCreate(da.Raw(), names, size)
		defer DeleteRawMesh(fromDA)
		if raw.NumAxes() != 1 || fromDA.AxisName(0) != "all" || raw.AxisGroupMode(names) != RawGroupMode_FlattenedId {
			t.Error("the raw meshes")
		}
		fromDA.Close()
	}); err != nil {
		t.Error(err)
	}
}

// An infeed queue with replicas of 2 cores: each core gets its piece of every tuple
// element, cut along the element's shard dimension, or the whole element for -1, as
// TensorFlow's InfeedQueue.set_shard_dimensions and its sharding policy
// (tpu_sharding.py get_sharded_shape) say.
func TestInfeedShardDimensionsOverTheCoresOfAReplica(t *testing.T) {
	s := newTestSystem(t)
	a := twoCoreAssignment(t, s)
	spec := []FeedSpec{{DType: Float32, Shape: TensorShape{4}}, {DType: Float32, Shape: TensorShape{2}}}
	in := must(NewInfeedQueue(s, mpReplicas, spec, 2))
	defer in.Close()
	if err := in.SetShardDimensions([]int{0}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("one shard dimension for two elements: %v", err)
	}
	if err := in.SetShardDimensions([]int{0, -1}); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < mpReplicas; r++ {
		f := float32(10 * r)
		tuple := []*Tensor{must(NewTensor([]int64{4}, []float32{f, f + 1, f + 2, f + 3})), must(NewTensor([]int64{2}, []float32{f, 7}))}
		if err := in.Enqueue(r, tuple); err != nil {
			t.Fatal(err)
		}
	}
	var bad failures
	_, err := ReplicateN(s, func(ctx *Context, inputs []*Tensor) ([]*Tensor, error) {
		r, c := ctx.ReplicaID(), ctx.LogicalCore()
		f := float32(10*r + 2*c)
		piece, whole := must(Values[float32](inputs[0])), must(Values[float32](inputs[1]))
		if !equal(piece, []float32{f, f + 1}) || !equal(whole, []float32{float32(10 * r), 7}) {
			bad.add("replica %d core %d got %v and %v", r, c, piece, whole)
		}
		return nil, nil
	}, mpReplicas, WithDeviceAssignment(a), WithInfeedQueue(in))
	if err != nil {
		t.Fatal(err)
	}
	bad.check(t)
}
