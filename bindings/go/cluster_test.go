package tpurt

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// The cluster surface. One system per process: each test closes its own.

func TestResolverOfGrpcEndpoints(t *testing.T) {
	r := must(NewTPUClusterResolver("grpc://10.0.0.1:8470,10.0.0.2"))
	defer r.Close()
	check := func(what string, got, want interface{}) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	check("Source", must(r.Source()), ResolverTPU)
	check("TPUName", must(r.TPUName()), "grpc://10.0.0.1:8470,10.0.0.2")
	check("NumTasks", must(r.NumTasks("")), 2)
	check("NumTasks(worker)", must(r.NumTasks("worker")), 2)
	check("Master", must(r.Master()), "grpc://10.0.0.1:8470")
	check("MasterOf", must(r.MasterOf("worker", 1, "")), "grpc://10.0.0.2:8470")
	check("ClusterSpec", must(r.ClusterSpec()), `{"worker":["10.0.0.1:8470","10.0.0.2:8470"]}`)
	check("TaskAddress", must(r.TaskAddress("", 1)), "10.0.0.2:8470")
	check("JobName", must(r.JobName()), "worker")
	check("TaskID", must(r.TaskID()), 0)
	check("RPCLayer", must(r.RPCLayer()), "grpc")
	check("Environment", must(r.Environment()), "")
	check("CoordinatorAddress", must(r.CoordinatorAddress()), "10.0.0.1:8470")
	if n := must(r.NumAccelerators()); n <= 0 {
		t.Errorf("NumAccelerators %d", n)
	}
	if _, err := r.NumTasks("ps"); !errors.Is(err, ErrNotFound) {
		t.Errorf("NumTasks(ps): %v", err)
	}
	if _, err := r.TaskAddress("", 2); !errors.Is(err, ErrNotFound) {
		t.Errorf("TaskAddress(2): %v", err)
	}
}

func TestResolverFromOptionsLocalAndCloud(t *testing.T) {
	r := must(NewClusterResolver(ClusterResolverOptions{Source: ResolverTPU, TPU: "grpc://127.0.0.1:9000",
		JobName: "trainer", Environment: "google"}))
	if must(r.JobName()) != "trainer" || must(r.Environment()) != "google" || must(r.NumTasks("trainer")) != 1 {
		t.Errorf("options: job %q environment %q", must(r.JobName()), must(r.Environment()))
	}
	r.Close()
	if _, err := r.JobName(); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("closed resolver: %v", err)
	}
	local := must(NewTPUClusterResolver("local"))
	defer local.Close()
	if m, spec := must(local.Master()), must(local.ClusterSpec()); m != "" || spec != "{}" {
		t.Errorf("local: master %q spec %q", m, spec)
	}
	if _, err := NewTPUClusterResolver("my-cloud-tpu"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a Cloud TPU name: %v", err)
	}
}

func TestResolverEnterAndExit(t *testing.T) {
	r := must(NewTPUClusterResolver("local"))
	defer r.Close()
	if err := r.Exit(); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("exit without enter: %v", err)
	}
	if err := r.Enter(); err != nil {
		t.Fatal(err)
	}
	if err := r.Exit(); err != nil {
		t.Fatal(err)
	}
	leave := must(r.Scope())
	if err := leave(); err != nil {
		t.Fatal(err)
	}
	if err := r.Exit(); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("exit after the scope: %v", err)
	}
}

func TestInitializeTPUSystemWithALocalResolver(t *testing.T) {
	r := must(NewTPUClusterResolver("local"))
	defer r.Close()
	s := must(InitializeTPUSystem(r, SystemOptions{NumCores: 2}, ClusterOptions{}))
	if must(s.NumTasks()) != 1 || must(s.TaskID()) != 0 {
		t.Errorf("tasks %d, task %d", must(s.NumTasks()), must(s.TaskID()))
	}
	topo := must(s.Topology())
	if n, err := try(topo.Raw().NumTasks); err != nil || n != 1 {
		t.Errorf("topology tasks %d %v", n, err)
	}
	topo.Close()
	sum := func(ctx *Context, in []*Tensor) ([]*Tensor, error) {
		total, err := CrossReplicaSum(ctx, []float32{float32(ctx.ReplicaID()), 1})
		if err != nil {
			return nil, err
		}
		out, err := NewTensor([]int64{2}, total)
		return []*Tensor{out}, err
	}
	out := must(ReplicateN(s, sum, 2, WithNumOutputs(1)))
	if v := must(Values[float32](out[1][0])); v[0] != 1 || v[1] != 2 {
		t.Errorf("cross_replica_sum %v", v)
	}
	s.Close()
	s = must(InitializeTPUSystem(nil, SystemOptions{NumCores: 2}, ClusterOptions{InitTimeout: 5 * time.Second}))
	if n := must(s.NumCores()); n != 2 {
		t.Errorf("cores %d", n)
	}
	s.Close()
	if _, err := InitializeTPUSystem(nil, SystemOptions{NumCores: -1}, ClusterOptions{}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("-1 cores: %v", err)
	}
}

func TestTransportOfAOneTaskSystem(t *testing.T) {
	s := must(InitializeTPUSystem(nil, SystemOptions{NumCores: 2}, ClusterOptions{}))
	defer s.Close()
	if name := must(s.Transport()); name != "none" {
		t.Errorf("transport %q, want none", name)
	}
	if reason := must(s.TransportReason()); reason == "" {
		t.Error("no reason for the transport")
	}
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transport(); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("transport after shutdown: %v", err)
	}
	if _, err := s.TransportReason(); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("reason after shutdown: %v", err)
	}
}

func TestAcceleratorSystemInLocalMode(t *testing.T) {
	s, device, err := InitializeAcceleratorSystem("", AcceleratorOptions{})
	if err != nil || device != "TPU" {
		t.Fatalf("InitializeAcceleratorSystem: %q %v", device, err)
	}
	if err := ShutdownAcceleratorSystem(s); err != nil {
		t.Fatal(err)
	}
	if closed := must(s.IsClosed()); !closed {
		t.Error("not closed after ShutdownAcceleratorSystem")
	}
	if err := ShutdownAcceleratorSystem(s); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("second shutdown: %v", err)
	}
	s.Close()
	if _, _, err := InitializeAcceleratorSystem("gpu", AcceleratorOptions{}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("gpu: %v", err)
	}
	s, device, err = InitializeMultiClient("cpu", AcceleratorOptions{NumLogicalCPUDevices: 2})
	if err != nil || device != "CPU" || must(s.NumCores()) != 2 {
		t.Fatalf("InitializeMultiClient: %q %v", device, err)
	}
	s.Close()
}

func TestKeyValueStoreAndBarriers(t *testing.T) {
	s := must(InitializeTPUSystem(nil, SystemOptions{NumCores: 1}, ClusterOptions{}))
	defer s.Close()
	if err := s.KVSetString("a/b", "one"); err != nil {
		t.Fatal(err)
	}
	if v := must(s.KVGetString("///a//b/", time.Second)); v != "one" {
		t.Errorf("get %q", v)
	}
	if err := s.KVSetString("a/b", "two"); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("second set: %v", err)
	}
	bin := []byte{0, 1, 255}
	if err := s.KVSet("a/c", bin); err != nil {
		t.Fatal(err)
	}
	if v := must(s.KVGet("a/c", time.Second)); !bytes.Equal(v, bin) {
		t.Errorf("get bytes %v", v)
	}
	if v := must(s.KVTryGet("a/c")); !bytes.Equal(v, bin) {
		t.Errorf("try get bytes %v", v)
	}
	if v := must(s.KVTryGetString("a/b")); v != "one" {
		t.Errorf("try get %q", v)
	}
	if _, err := s.KVTryGet("missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("try get missing: %v", err)
	}
	if _, err := s.KVGet("missing", 50*time.Millisecond); !errors.Is(err, ErrDeadlineExceeded) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("blocking get: %v", err)
	}
	if err := s.KVDelete("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.KVTryGetString("a/b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a/b after delete: %v", err)
	}
	if _, err := s.KVTryGet("a/c"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a/c after delete: %v", err)
	}
	if err := s.WaitAtBarrier("all", time.Second); err != nil {
		t.Error(err)
	}
	if err := s.WaitAtBarrier("all", time.Second, 0); err != nil {
		t.Error(err)
	}
	if err := s.WaitAtBarrier("bad", time.Second, 5); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("task 5: %v", err)
	}
}

// TensorFlow's TPUClusterResolver(tpu, zone, project, job_name, coordinator_name,
// coordinator_address, credentials, service, discovery_url), get_master() and
// ClusterResolver.num_accelerators(task_type, task_id); client.py's port 8470 for a
// grpc:// name without one; master() of a task not in the spec is ClusterSpec's ValueError.
func TestTPUClusterResolverInTensorFlowsOrder(t *testing.T) {
	r := must(NewTPUClusterResolverWithOptions(TPUClusterResolverOptions{
		TPU: "grpc://10.240.1.2", Zone: "us-central1-b", Project: "p", JobName: "tpu_worker",
		CoordinatorName: "coordinator", CoordinatorAddress: "10.0.0.9:1234", Credentials: "default",
	}))
	defer r.Close()
	if m := must(r.GetMaster()); m != "grpc://10.240.1.2:8470" {
		t.Errorf("GetMaster %q", m)
	}
	if m := must(r.MasterOf("", -1, "http")); m != "grpc://10.240.1.2:8470" {
		t.Errorf("MasterOf with rpc layer http: %q", m)
	}
	if spec := must(r.ClusterSpec()); spec != `{"coordinator":["10.0.0.9:1234"],"tpu_worker":["10.240.1.2:8470"]}` {
		t.Errorf("ClusterSpec %s", spec)
	}
	if _, err := r.MasterOf("tpu_worker", 1, ""); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("MasterOf a missing task: %v", err)
	}
	n := must(r.NumAccelerators())
	if got := must(r.NumAcceleratorsOf("coordinator", 0)); got != n {
		t.Errorf("NumAcceleratorsOf(coordinator, 0) %d, want %d", got, n)
	}
	if _, err := r.NumAcceleratorsOf("tpu_worker", 3); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("NumAcceleratorsOf a missing task: %v", err)
	}
	if _, err := NewTPUClusterResolverWithOptions(TPUClusterResolverOptions{TPU: "my-tpu", Zone: "z"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("a Cloud TPU name: %v", err)
	}
}
