package tpurt

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// The collectives and context members, each checked against its known result.
func TestReplicaContextCollectives(t *testing.T) {
	s := newTestSystem(t)
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		r := ctx.ReplicaID()
		if ctx.raw.ReplicaId() != r || ctx.NumReplicas() != replicas || ctx.raw.NumReplicas() != replicas ||
			ctx.NumCoresPerReplica() != 1 || ctx.raw.NumCoresPerReplica() != 1 || ctx.raw.Core() != ctx.Core() {
			return nil, fmt.Errorf("context members of replica %d", r)
		}
		if name, err := ctx.DeviceName(); err != nil || !strings.Contains(name, "TPU") || ctx.raw.DeviceName() != name {
			return nil, fmt.Errorf("deviceName %q %v", name, err)
		}
		if ctx.raw.NumInputs() != 0 || ctx.raw.NumOutputs() != 0 {
			return nil, fmt.Errorf("inputs/outputs")
		}
		one := func(v float32) *Tensor { return must(NewTensor([]int64{1}, []float32{v})) }
		first := func(x *Tensor, err error) float32 {
			if err != nil {
				panic(err)
			}
			return must(Values[float32](x))[0]
		}
		if v := first(ctx.AllReduce(one(float32(r)), Max)); v != 7 {
			return nil, fmt.Errorf("allReduce max %v", v)
		}
		gathered := must(ctx.AllGather(one(float32(r)), 0))
		if v := must(Values[float32](gathered)); !equal(v, []float32{0, 1, 2, 3, 4, 5, 6, 7}) {
			return nil, fmt.Errorf("allGather %v", v)
		}
		ones := must(NewTensor([]int64{8}, []float32{1, 1, 1, 1, 1, 1, 1, 1}))
		if v := must(Values[float32](must(ctx.ReduceScatter(ones, Sum, 0)))); !equal(v, []float32{8}) {
			return nil, fmt.Errorf("reduceScatter %v", v)
		}
		row := make([]float32, 8)
		for j := range row {
			row[j] = float32(r*8 + j)
		}
		exchanged := must(Values[float32](must(ctx.AllToAll(must(NewTensor([]int64{8}, row)), 0, 0, 8))))
		for j, v := range exchanged {
			if v != float32(j*8+r) {
				return nil, fmt.Errorf("allToAll %v", exchanged)
			}
		}
		if v := first(ctx.Broadcast(one(float32(r)), 3)); v != 3 {
			return nil, fmt.Errorf("broadcast %v", v)
		}
		pairs := make([][2]int32, replicas)
		for i := range pairs {
			pairs[i] = [2]int32{int32(i), int32((i + 1) % replicas)}
		}
		if v := first(ctx.CollectivePermute(one(float32(r)), pairs)); v != float32((r+replicas-1)%replicas) {
			return nil, fmt.Errorf("collectivePermute %v", v)
		}
		halves := Collective{Groups: [][]int32{{0, 1, 2, 3}, {4, 5, 6, 7}}}
		want := float32(6)
		if r >= 4 {
			want = 22
		}
		if v := first(ctx.CrossReplicaSumTensor(one(float32(r)), halves)); v != want {
			return nil, fmt.Errorf("crossReplicaSum in groups %v", v)
		}
		if err := ctx.Barrier(); err != nil {
			return nil, err
		}
		ctx.raw.Bfloat16ScopeEnter()
		ctx.raw.Bfloat16ScopeExit()
		leave, err := Bfloat16Scope(ctx)
		if err != nil {
			return nil, err
		}
		return nil, leave()
	}, replicas)
	if err != nil {
		t.Fatal(err)
	}
	// Input and SetOutput of the raw context.
	out, err := Replicate(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		in := ctx.raw.Input(0)
		defer DeleteRawTensor(in)
		return []*Tensor{wrapTensor(NewRawTensor__SWIG_1(in))}, nil
	}, perReplica(t), WithNumOutputs(1))
	if err != nil || must(Values[float32](out[2][0]))[1] != 4 {
		t.Fatalf("input: %v", err)
	}
}

func TestTensorMembers(t *testing.T) {
	x := must(NewTensor([]int64{2, 3}, []float32{1, 2, 3, 4, 5, 6}))
	raw := x.raw
	if raw.Rank() != 2 || must(x.Rank()) != 2 || raw.Dim(1) != 3 || must(x.Dim(-1)) != 3 ||
		raw.NumElements() != 6 || raw.ByteSize() != 24 || must(x.ByteSize()) != 24 ||
		TpurtDType(must(x.DType())) != raw.Dtype() || !equal(must(x.Dims()), []int64{2, 3}) {
		t.Fatal("shape members")
	}
	dims := int64Vector([]int64{6})
	defer DeleteInt64Vector(dims)
	direct := RawTensorFromFloat32(dims, []float32{1, 2, 3, 4, 5, 6})
	buf := make([]float32, 6)
	direct.ReadFloat32(buf)
	direct.WriteFloat32([]float32{6, 5, 4, 3, 2, 1})
	direct.ReadFloat32(buf)
	if buf[0] != 6 {
		t.Errorf("readFloat32/writeFloat32 %v", buf)
	}
	direct.Dispose()
	DeleteRawTensor(direct)
	if err := Write(x, []float32{0, 0, 0, 0, 0, 7}); err != nil || must(Values[float32](x))[5] != 7 {
		t.Errorf("Write: %v", err)
	}
	if err := Read(x, make([]float64, 6)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("reading float32 as float64: %v", err)
	}
	back := make([]float32, 6)
	wrapped := must(WrapFloat32([]int64{6}, back))
	if err := Write(wrapped, []float32{1, 2, 3, 4, 5, 6}); err != nil || back[5] != 6 {
		t.Errorf("wrapFloat32 shares memory: %v %v", err, back)
	}
	wrapped.Close()
	if v := must(Values[int32](must(must(x.Reshape([]int64{3, -1})).Cast(Int32)))); v[5] != 7 {
		t.Errorf("reshape/cast %v", v)
	}
	for _, f := range []func() error{
		func() error { return second(Values[float64](must(NewTensor(nil, []float64{1})))) },
		func() error { return second(Values[int64](must(NewTensor([]int64{1}, []int64{1})))) },
		func() error { return second(Zeros(Int64, []int64{4})) },
	} {
		if err := f(); err != nil {
			t.Error(err)
		}
	}
	x.Close()
	if _, err := x.Rank(); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("closed tensor: %v", err)
	}
}

func TestFreeFunctions(t *testing.T) {
	if v := Version(); v == "" || RawVersion() != v {
		t.Error("version")
	}
	if RawStatusName(RawStatus_DeadlineExceeded) != "DEADLINE_EXCEEDED" || CodeAborted.String() != "ABORTED" {
		t.Error("statusName")
	}
	if RawDtypeSize(RawDType_Float64) != 8 || RawDtypeName(RawDType_Int32) == "" || Float32.String() == "" {
		t.Error("dtypeSize/dtypeName")
	}
	// The last error is per thread: keep this goroutine on one for the separate calls.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	RawSetLastError(RawStatus_NotFound, "set by the test")
	if !strings.Contains(RawLastError(), "set by the test") {
		t.Errorf("lastError %q", RawLastError())
	}
	RawClearLastError()
	if RawLastError() != "" {
		t.Errorf("clearLastError left %q", RawLastError())
	}
	if c, err := Core(1); err != nil || !strings.Contains(c, "1") || RawCore(1) != c {
		t.Errorf("core %q %v", c, err)
	}
	if name := RawDeviceName("worker", 0, "TPU", 2); !strings.Contains(name, "worker") {
		t.Errorf("deviceName %q", name)
	}
	floats := NewFloatVector()
	defer DeleteFloatVector(floats)
	floats.Add(1.5)
	floats.Add(-2)
	bf := RawFloatToBfloat16(floats)
	back := RawBfloat16ToFloat(bf)
	half := RawFloatToHalf(floats)
	back2 := RawHalfToFloat(half)
	if back.Get(0) != 1.5 || back2.Get(1) != -2 {
		t.Error("bfloat16/half round trip")
	}
	DeleteUInt16Vector(bf)
	DeleteUInt16Vector(half)
	DeleteFloatVector(back)
	DeleteFloatVector(back2)
	if _, err := try(func() int64 { return RawTensorCacheTrim(0) }); err != nil {
		t.Error(err)
	}
	if _, err := try(func() int64 { return RawTensorCacheTrim(-1) }); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("tensorCacheTrim(-1): %v", err)
	}
	if n := RawNumEnvironmentVariables(); n > 0 {
		v := RawEnvironmentVariableAt(0)
		if !strings.HasPrefix(v.GetName(), "TPU") {
			t.Errorf("environmentVariable %q", v.GetName())
		}
		DeleteRawEnvironmentVariable(v)
	}
	if _, err := try(func() RawEnvironmentVariable { return RawEnvironmentVariableAt(1000) }); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("environmentVariable past the end: %v", err)
	}
	ids := int32Vector([]int32{0, 1, 2, 3})
	defer DeleteInt32Vector(ids)
	g := NewRawGroupAssignment(ids, 2, 2).(RawGroupAssignment)
	defer DeleteRawGroupAssignment(g)
	if err := Try(func() { g.Validate(4) }); err != nil {
		t.Error(err)
	}
	if err := Try(func() { g.Validate(3) }); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("validate: %v", err)
	}
	so := NewRawStepOptions()
	co := NewRawCollectiveOptions()
	opts := NewRawSystemOptions()
	if so.GetCollectiveTimeoutMs() != 0 || co.GetTimeoutMs() != 0 || opts.GetNumCores() != 0 {
		t.Error("StepOptions/CollectiveOptions/SystemOptions defaults")
	}
	DeleteRawStepOptions(so)
	DeleteRawCollectiveOptions(co)
	DeleteRawSystemOptions(opts)
}

func TestSystemMembersAndTopology(t *testing.T) {
	s, err := InitializeSystem(SystemOptions{NumCores: replicas, JobName: "trainer"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	raw := s.raw
	if must(s.NumCores()) != replicas || raw.NumCores() != replicas || must(s.JobName()) != "trainer" ||
		must(s.DeviceType()) != "TPU" || raw.IsClosed() || len(must(s.EmbeddingConfig())) != 0 {
		t.Fatal("system members")
	}
	topo := must(ParseTopology(must(s.SerializedTopology())))
	defer topo.Close()
	tr := topo.Raw()
	if tr.MeshRank() != 4 || tr.NumTasks() != 1 || tr.NumDevicesPerTask() != replicas || tr.NumMissingDevices() != 0 {
		t.Fatal("topology counts")
	}
	coords := tr.DeviceCoordinates(0, 5)
	if tr.TaskOrdinalAtCoordinates(coords) != 0 || tr.DeviceOrdinalAtCoordinates(coords) != 5 ||
		!strings.Contains(tr.TpuDeviceName(coords, "trainer"), "trainer") || !strings.Contains(tr.CpuDeviceName(coords, ""), "CPU") {
		t.Error("coordinates lookups")
	}
	feature := int32Slice(tr.HardwareFeature())
	if len(feature) != 2 {
		t.Errorf("hardwareFeature %v", feature)
	}
	if err := Try(func() { tr.MissingDevice(0) }); !errors.Is(err, ErrOutOfRange) && !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("missingDevice: %v", err)
	}
	DeleteInt32Vector(coords)
	// A hand-made 2-device topology and a device assignment created from core coordinates.
	mesh, devs := int32Vector([]int32{2, 1, 1, 1}), int32Vector([]int32{0, 0, 0, 0, 1, 0, 0, 0})
	small := RawTopologyCreate(mesh, devs, 1, 2)
	DeleteInt32Vector(mesh)
	DeleteInt32Vector(devs)
	if small.NumDevicesPerTask() != 2 {
		t.Error("Topology.create")
	}
	core := int32Vector([]int32{1, 0, 0, 0, 0, 0, 0, 0})
	created := RawDeviceAssignmentCreate(small, core, 2, 1)
	DeleteInt32Vector(core)
	if created.NumReplicas() != 2 || created.NumCoresPerReplica() != 1 || created.TpuOrdinal(0, 0) != 1 ||
		created.Task(1, 0) != 0 || int32Slice(created.Coordinates(0, 0))[0] != 1 || len(int32Slice(created.CoreAssignment())) != 8 {
		t.Error("DeviceAssignment.create")
	}
	if !strings.Contains(created.TpuDevice(0, 0, "trainer"), "TPU:1") || !strings.Contains(created.HostDevice(0, 0, ""), "CPU") {
		t.Errorf("tpuDevice %q hostDevice %q", created.TpuDevice(0, 0, "trainer"), created.HostDevice(0, 0, ""))
	}
	if replicasOnCore := int32Slice(created.LookupReplicas(0, 0)); len(replicasOnCore) != 2 {
		t.Errorf("lookupReplicas %v", replicasOnCore)
	}
	back := created.Topology()
	if back.NumDevicesPerTask() != 2 {
		t.Error("DeviceAssignment.topology")
	}
	back.Close()
	DeleteRawTopology(back)
	created.Close()
	DeleteRawDeviceAssignment(created)
	small.Close()
	DeleteRawTopology(small)
}
