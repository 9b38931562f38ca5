package tpurt

import (
	"runtime"
	"sync"
	"time"
)

// ResolverSource says where a ClusterResolver takes the cluster from.
type ResolverSource int

// The sources of tpu_resolver_source.
const (
	ResolverAuto     ResolverSource = 0 // DTENSOR_JOBS, TF_CONFIG, Slurm, Open MPI, the TPU name, else local
	ResolverTPU      ResolverSource = 1 // TPUClusterResolver
	ResolverTFConfig ResolverSource = 2 // TFConfigClusterResolver
	ResolverDTensor  ResolverSource = 3 // DTENSOR_JOBS, DTENSOR_CLIENT_ID, DTENSOR_JOB_NAME
	ResolverSlurm    ResolverSource = 4 // SlurmClusterResolver
	ResolverOpenMPI  ResolverSource = 5 // OMPI_COMM_WORLD_*
)

// ClusterResolverOptions configures a ClusterResolver; zero values are the defaults.
type ClusterResolverOptions struct {
	Source             ResolverSource
	TPU                string // TPU source: "" environment, "local", "grpc://host[:port],..."
	JobName            string // "": the source's default ("worker")
	CoordinatorName    string // an extra job in the cluster spec ...
	CoordinatorAddress string // ... at this host:port
	TaskType           string // TF_CONFIG: overrides task.type
	TaskID             int    // TF_CONFIG: overrides task.index when >= 0 (0 without TaskType: none)
	RPCLayer           string // "": the source's
	Environment        string
	PortBase           int // Slurm and Open MPI: 0 = 8888
}

func (o ClusterResolverOptions) raw() RawClusterResolverOptions {
	r := NewRawClusterResolverOptions()
	r.SetSource(TpurtResolverSource(o.Source))
	r.SetTpu(o.TPU)
	r.SetJobName(o.JobName)
	r.SetCoordinatorName(o.CoordinatorName)
	r.SetCoordinatorAddress(o.CoordinatorAddress)
	r.SetTaskType(o.TaskType)
	taskID := o.TaskID
	if o.TaskType == "" && taskID == 0 {
		taskID = -1
	}
	r.SetTaskId(taskID)
	r.SetRpcLayer(o.RPCLayer)
	r.SetEnvironment(o.Environment)
	r.SetPortBase(o.PortBase)
	return r
}

// ClusterResolver is TensorFlow's ClusterResolver: a snapshot of the cluster taken
// when it is made. Close it; a finalizer closes a dropped one.
type ClusterResolver struct {
	mu  sync.Mutex
	raw RawClusterResolver
}

// NewClusterResolver resolves the cluster now.
func NewClusterResolver(opts ClusterResolverOptions) (*ClusterResolver, error) {
	o := opts.raw()
	defer DeleteRawClusterResolverOptions(o)
	raw, err := try(func() RawClusterResolver { return NewRawClusterResolver(o) })
	if err != nil {
		return nil, err
	}
	r := &ClusterResolver{raw: raw}
	runtime.SetFinalizer(r, (*ClusterResolver).Close)
	return r, nil
}

// NewTPUClusterResolver is tf.distribute.cluster_resolver.TPUClusterResolver(tpu): ""
// reads KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS or TPU_NAME; "local"; "grpc://host[:port],...".
// A Cloud TPU name is ErrNotFound (tpurt has no Cloud TPU API).
func NewTPUClusterResolver(tpu string) (*ClusterResolver, error) {
	return NewClusterResolver(ClusterResolverOptions{Source: ResolverTPU, TPU: tpu})
}

// TPUClusterResolverOptions are tf.distribute.cluster_resolver.TPUClusterResolver's
// parameters, in its order. Zone, Project, Credentials, Service and DiscoveryURL are
// Cloud TPU API parameters: as in TensorFlow (tpu/client/client.py uses them only for a
// name that is not grpc://, and TPUClusterResolver('local') makes no client) they change
// nothing for "local" and grpc:// names; a Cloud TPU name is ErrNotFound whatever they
// say, since tpurt has no Cloud TPU API.
type TPUClusterResolverOptions struct {
	TPU                string // "": KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS, else TPU_NAME
	Zone               string
	Project            string
	JobName            string // "": "worker"
	CoordinatorName    string
	CoordinatorAddress string
	Credentials        string // TensorFlow's default is "default"
	Service            any
	DiscoveryURL       string
}

// NewTPUClusterResolverWithOptions is TPUClusterResolver(tpu, zone, project, job_name,
// coordinator_name, coordinator_address, credentials, service, discovery_url).
func NewTPUClusterResolverWithOptions(opts TPUClusterResolverOptions) (*ClusterResolver, error) {
	return NewClusterResolver(ClusterResolverOptions{
		Source: ResolverTPU, TPU: opts.TPU, JobName: opts.JobName,
		CoordinatorName: opts.CoordinatorName, CoordinatorAddress: opts.CoordinatorAddress,
	})
}

// Close releases the resolver.
func (r *ClusterResolver) Close() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.raw == nil {
		return nil
	}
	runtime.SetFinalizer(r, nil)
	err := try0(func() { DeleteRawClusterResolver(r.raw) })
	r.raw = nil
	return err
}

// call runs one getter of the raw resolver, or fails for a nil or closed one.
func resolverCall[T any](r *ClusterResolver, get func(RawClusterResolver) T) (T, error) {
	var zero T
	if r == nil {
		return zero, newError(CodeInvalidArgument, "the cluster resolver is nil")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.raw == nil {
		return zero, newError(CodeFailedPrecondition, "the cluster resolver is closed")
	}
	return try(func() T { return get(r.raw) })
}

// Source is the source that resolved the cluster (never ResolverAuto).
func (r *ClusterResolver) Source() (ResolverSource, error) {
	return resolverCall(r, func(x RawClusterResolver) ResolverSource { return ResolverSource(x.Source()) })
}

// TPUName is the TPU name ("local", the grpc:// string, ...).
func (r *ClusterResolver) TPUName() (string, error) {
	return resolverCall(r, func(x RawClusterResolver) string { return x.TpuName() })
}

// ClusterSpec is cluster_spec() as JSON: {"job": ["host:port", ...]}; "{}" when local.
func (r *ClusterResolver) ClusterSpec() (string, error) {
	return resolverCall(r, func(x RawClusterResolver) string { return x.ClusterSpec() })
}

// NumTasks is the number of tasks of job ("": the resolver's job).
func (r *ClusterResolver) NumTasks(job string) (int, error) {
	return resolverCall(r, func(x RawClusterResolver) int { return x.NumTasks(job) })
}

// TaskAddress is host:port of task taskID of job ("": the resolver's job).
func (r *ClusterResolver) TaskAddress(job string, taskID int) (string, error) {
	return resolverCall(r, func(x RawClusterResolver) string { return x.TaskAddress(job, taskID) })
}

// Master is master() for this task (TensorFlow's defaults).
func (r *ClusterResolver) Master() (string, error) { return r.MasterOf("", -1, "") }

// MasterOf is master(task_type, task_id, rpc_layer); "" and -1 mean the resolver's own.
func (r *ClusterResolver) MasterOf(taskType string, taskID int, rpcLayer string) (string, error) {
	return resolverCall(r, func(x RawClusterResolver) string { return x.Master(taskType, taskID, rpcLayer) })
}

// GetMaster is get_master(): Master() with the resolver's own task.
func (r *ClusterResolver) GetMaster() (string, error) {
	return resolverCall(r, func(x RawClusterResolver) string { return x.GetMaster() })
}

// NumAcceleratorsOf is num_accelerators(task_type, task_id): "" and -1 mean the
// resolver's own; a task not in the spec is ErrInvalidArgument, as MasterOf's.
func (r *ClusterResolver) NumAcceleratorsOf(taskType string, taskID int) (int, error) {
	return resolverCall(r, func(x RawClusterResolver) int { return x.NumAcceleratorsOf(taskType, taskID) })
}

// JobName is get_job_name() (the task type).
func (r *ClusterResolver) JobName() (string, error) {
	return resolverCall(r, func(x RawClusterResolver) string { return x.JobName() })
}

// TaskID is this task's index in its job.
func (r *ClusterResolver) TaskID() (int, error) {
	return resolverCall(r, func(x RawClusterResolver) int { return x.TaskId() })
}

// RPCLayer is the rpc layer ("grpc").
func (r *ClusterResolver) RPCLayer() (string, error) {
	return resolverCall(r, func(x RawClusterResolver) string { return x.RpcLayer() })
}

// Environment is the environment property ("" unless set).
func (r *ClusterResolver) Environment() (string, error) {
	return resolverCall(r, func(x RawClusterResolver) string { return x.Environment() })
}

// CoordinatorAddress is the coordination service's host:port ("" when local).
func (r *ClusterResolver) CoordinatorAddress() (string, error) {
	return resolverCall(r, func(x RawClusterResolver) string { return x.CoordinatorAddress() })
}

// NumAccelerators is the number of logical cores of each task.
func (r *ClusterResolver) NumAccelerators() (int, error) {
	return resolverCall(r, func(x RawClusterResolver) int { return x.NumAccelerators() })
}

// Enter and Exit are the context manager; they nest, and Exit without Enter is
// ErrFailedPrecondition.
func (r *ClusterResolver) Enter() error {
	_, err := resolverCall(r, func(x RawClusterResolver) bool { x.Enter(); return true })
	return err
}

func (r *ClusterResolver) Exit() error {
	_, err := resolverCall(r, func(x RawClusterResolver) bool { x.Exit(); return true })
	return err
}

// Scope enters the resolver and returns the func that exits it (defer it).
func (r *ClusterResolver) Scope() (func() error, error) {
	if err := r.Enter(); err != nil {
		return nil, err
	}
	return r.Exit, nil
}

// ClusterOptions says how the tasks join; zero values are the defaults (or the
// environment's TPURT_* variables).
type ClusterOptions struct {
	InitTimeout            time.Duration
	HeartbeatInterval      time.Duration
	HeartbeatTimeout       time.Duration
	ShutdownBarrierTimeout time.Duration
	Token                  string // "": TPURT_CLUSTER_TOKEN
	DisableAuthentication  bool   // no token, whatever the environment says
}

func (o ClusterOptions) raw() RawClusterOptions {
	r := NewRawClusterOptions()
	r.SetInitTimeoutMs(o.InitTimeout.Milliseconds())
	r.SetHeartbeatIntervalMs(o.HeartbeatInterval.Milliseconds())
	r.SetHeartbeatTimeoutMs(o.HeartbeatTimeout.Milliseconds())
	r.SetShutdownBarrierTimeoutMs(o.ShutdownBarrierTimeout.Milliseconds())
	r.SetToken(o.Token)
	r.SetDisableAuthentication(o.DisableAuthentication)
	return r
}

// InitializeTPUSystem is tf.tpu.experimental.initialize_tpu_system(cluster_resolver):
// joins the resolver's cluster (nil: resolved from the environment, as under tpurt
// launch; nothing set gives a one-process system). Topology() is the global topology.
func InitializeTPUSystem(resolver *ClusterResolver, opts SystemOptions, cluster ClusterOptions) (*System, error) {
	o := opts.raw()
	defer DeleteRawSystemOptions(o)
	c := cluster.raw()
	defer DeleteRawClusterOptions(c)
	var raw RawTpuSystem
	var err error
	if resolver == nil {
		raw, err = try(func() RawTpuSystem { return RawTpuSystemInitializeTpuSystem(nil, o, c) })
	} else {
		raw, err = resolverCall(resolver, func(x RawClusterResolver) RawTpuSystem {
			return RawTpuSystemInitializeTpuSystem(x, o, c)
		})
	}
	if err != nil {
		return nil, err
	}
	return newSystem(raw, opts), nil
}

// AcceleratorOptions are DTensor's initialize_accelerator_system arguments; the zero
// value is DTensor's defaults.
type AcceleratorOptions struct {
	DisableCoordinationService bool // refused when DTENSOR_JOBS names more than one client
	NumLogicalCPUDevices       int  // 0: the default
	ExperimentalResetContext   bool // shuts down a live system of this process first
}

// InitializeAcceleratorSystem is DTensor's initialize_accelerator_system (DTENSOR_*
// variables; local without DTENSOR_JOBS): the system and the device type chosen
// ("TPU" or "CPU"). deviceType "" is the preferred ("TPU"); "GPU" is ErrInvalidArgument.
func InitializeAcceleratorSystem(deviceType string, opts AcceleratorOptions) (*System, string, error) {
	return accelerator(RawTpuSystemInitializeAcceleratorSystem, deviceType, opts)
}

// InitializeMultiClient is DTensor's alias of InitializeAcceleratorSystem.
func InitializeMultiClient(deviceType string, opts AcceleratorOptions) (*System, string, error) {
	return accelerator(RawTpuSystemInitializeMultiClient, deviceType, opts)
}

func accelerator(start func(string, bool, int, bool) RawTpuSystem, deviceType string, opts AcceleratorOptions) (*System, string, error) {
	raw, err := try(func() RawTpuSystem {
		return start(deviceType, !opts.DisableCoordinationService, opts.NumLogicalCPUDevices, opts.ExperimentalResetContext)
	})
	if err != nil {
		return nil, "", err
	}
	s := newSystem(raw, SystemOptions{})
	chosen, err := s.DeviceType()
	if err != nil {
		s.Close()
		return nil, "", err
	}
	return s, chosen, nil
}

// ShutdownAcceleratorSystem is DTensor's shutdown_accelerator_system: shuts s down
// (ErrFailedPrecondition with several clients: every task closes its system instead).
// Close still releases it.
func ShutdownAcceleratorSystem(s *System) error {
	raw, err := s.handle()
	if err != nil {
		return err
	}
	return try0(raw.ShutdownAcceleratorSystem)
}

// NumTasks is the number of tasks of the system (1 for a one-task system).
func (s *System) NumTasks() (int, error) {
	raw, err := s.handle()
	if err != nil {
		return 0, err
	}
	return try(raw.NumTasks)
}

// TaskID is this task's id (0 for a one-task system).
func (s *System) TaskID() (int, error) {
	raw, err := s.handle()
	if err != nil {
		return 0, err
	}
	return try(raw.TaskId)
}

func byteVector(values []byte) ByteVector {
	v := NewByteVector()
	for _, b := range values {
		v.Add(b)
	}
	return v
}

// KVSet sets key in the coordination service's store; ErrAlreadyExists if it is set.
func (s *System) KVSet(key string, value []byte) error {
	raw, err := s.handle()
	if err != nil {
		return err
	}
	v := byteVector(value)
	defer DeleteByteVector(v)
	return try0(func() { raw.KvSet(key, v) })
}

// KVSetString is KVSet of a string value.
func (s *System) KVSetString(key, value string) error {
	raw, err := s.handle()
	if err != nil {
		return err
	}
	return try0(func() { raw.KvSetString(key, value) })
}

// KVGet waits up to timeout for key (ErrDeadlineExceeded naming it).
func (s *System) KVGet(key string, timeout time.Duration) ([]byte, error) {
	raw, err := s.handle()
	if err != nil {
		return nil, err
	}
	return try(func() []byte { return byteSlice(raw.KvGet(key, timeout.Milliseconds())) })
}

// KVGetString is KVGet of a string value.
func (s *System) KVGetString(key string, timeout time.Duration) (string, error) {
	raw, err := s.handle()
	if err != nil {
		return "", err
	}
	return try(func() string { return raw.KvGetString(key, timeout.Milliseconds()) })
}

// KVTryGet does not wait: ErrNotFound when key is not set (TensorFlow's TryGet).
func (s *System) KVTryGet(key string) ([]byte, error) {
	raw, err := s.handle()
	if err != nil {
		return nil, err
	}
	return try(func() []byte { return byteSlice(raw.KvTryGet(key)) })
}

// KVTryGetString is KVTryGet of a string value.
func (s *System) KVTryGetString(key string) (string, error) {
	raw, err := s.handle()
	if err != nil {
		return "", err
	}
	return try(func() string { return raw.KvTryGetString(key) })
}

// KVDelete removes key and every key under key/; removing nothing is no error.
func (s *System) KVDelete(key string) error {
	raw, err := s.handle()
	if err != nil {
		return err
	}
	return try0(func() { raw.KvDelete(key) })
}

// WaitAtBarrier waits until the listed tasks (none: all) reach barrier id.
func (s *System) WaitAtBarrier(id string, timeout time.Duration, tasks ...int32) error {
	raw, err := s.handle()
	if err != nil {
		return err
	}
	v := int32Vector(tasks)
	defer DeleteInt32Vector(v)
	return try0(func() { raw.WaitAtBarrier(id, timeout.Milliseconds(), v) })
}
