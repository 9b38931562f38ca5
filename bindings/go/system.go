package tpurt

import (
	"runtime"
	"sync"
	"time"
)

// SystemOptions configures a System; zero values take the library's defaults.
type SystemOptions struct {
	NumCores                 int
	MeshShape                []int32
	JobName                  string
	DeviceType               string
	CollectiveTimeout        time.Duration
	CloseOnFailure           bool
	EmbeddingConfig          []byte
	PrivateCollectiveResults bool
	// CallbackReplicas runs computations as callbacks from the library's worker
	// threads (the mode before 1.4) instead of on the system's goroutines locked to
	// their threads (tpu_step_join). The default (false) is faster.
	CallbackReplicas bool
	// PinThreads says where the library places the threads running replicas (its
	// workers, and the pool's goroutines while they run a participant): PinAuto
	// (the default) pins core N to usable CPU N mod C when cores outnumber the CPUs.
	// A pool goroutine's thread gets its CPUs back before Go's scheduler has it again.
	PinThreads ThreadPinning
	// TracePath names the file that receives a Chrome trace-event trace of every
	// step (docs/TRACING.md); empty: the environment's TPURT_TRACE, else none.
	TracePath string
}

// ThreadPinning is tpu_thread_pinning (tpurt/system.h).
type ThreadPinning int

const (
	PinAuto   ThreadPinning = 0
	PinAlways ThreadPinning = 1
	PinNever  ThreadPinning = 2
)

func (o SystemOptions) raw() RawSystemOptions {
	r := NewRawSystemOptions()
	r.SetNumCores(o.NumCores)
	mesh := int32Vector(o.MeshShape)
	r.SetMeshShape(mesh)
	DeleteInt32Vector(mesh)
	r.SetJobName(o.JobName)
	r.SetDeviceType(o.DeviceType)
	r.SetCollectiveTimeoutMs(o.CollectiveTimeout.Milliseconds())
	r.SetCloseOnFailure(o.CloseOnFailure)
	r.SetPinThreads(TpurtThreadPinning(o.PinThreads))
	emb := NewByteVector()
	for _, b := range o.EmbeddingConfig {
		emb.Add(b)
	}
	r.SetEmbeddingConfig(emb)
	DeleteByteVector(emb)
	r.SetPrivateCollectiveResults(o.PrivateCollectiveResults)
	r.SetTracePath(o.TracePath)
	return r
}

// System is a running tpurt system (its worker threads). Close it; a finalizer
// closes a dropped one.
type System struct {
	mu  sync.Mutex
	raw RawTpuSystem
	// Directors of failed steps: a late replica may still call them, so they live
	// until Close.
	pinned []RawComputation
	// The replicas' goroutines (pool.go), started at the first step; nil in the
	// callback mode.
	callbacks bool
	pool      *pool
}

func newSystem(raw RawTpuSystem, opts SystemOptions) *System {
	s := &System{raw: raw, callbacks: opts.CallbackReplicas}
	runtime.SetFinalizer(s, (*System).Close)
	return s
}

// NewSystem starts a system.
func NewSystem(opts SystemOptions) (*System, error) {
	o := opts.raw()
	defer DeleteRawSystemOptions(o)
	raw, err := try(func() RawTpuSystem { return NewRawTpuSystem(o) })
	if err != nil {
		return nil, err
	}
	return newSystem(raw, opts), nil
}

// InitializeSystem starts a system the tf.tpu way (tpu_initialize_system); its
// SerializedTopology is the TopologyProto.
func InitializeSystem(opts SystemOptions) (*System, error) {
	o := opts.raw()
	defer DeleteRawSystemOptions(o)
	raw, err := try(func() RawTpuSystem { return RawTpuSystemInitializeSystem(o) })
	if err != nil {
		return nil, err
	}
	return newSystem(raw, opts), nil
}

// ShutdownSystem is tf.tpu.shutdown_system(job): it stops the workers of s, whose
// job must be job ("": s's own, as None); later steps fail with ErrFailedPrecondition.
// Another job is TensorFlow's error for it, an ErrInvalidArgument (the shutdown op
// placed on /job:{job}/device:TPU_SYSTEM:0 fails placement), and s keeps running.
func ShutdownSystem(s *System, job string) error {
	if s == nil {
		return newError(CodeInvalidArgument, "ShutdownSystem: the system is nil")
	}
	if job != "" {
		own, err := s.JobName()
		if err != nil {
			return err
		}
		if job != own {
			return newError(CodeInvalidArgument, "Cannot assign a device for operation ShutdownDistributedTPU: "+
				"Could not satisfy explicit device specification '/job:%s/device:TPU_SYSTEM:0' because no devices matching "+
				"that specification are registered in this process; the TPU system's job is %q", job, own)
		}
	}
	return s.Shutdown()
}

func (s *System) handle() (RawTpuSystem, error) {
	if s == nil {
		return nil, newError(CodeInvalidArgument, "the system is nil")
	}
	if s.raw == nil {
		return nil, newError(CodeFailedPrecondition, "the system is closed")
	}
	return s.raw, nil
}

// Close releases the system and every director it kept alive.
func (s *System) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.raw == nil {
		return nil
	}
	runtime.SetFinalizer(s, nil)
	var err error
	if s.pool != nil {
		// No goroutine joins once this returns; one inside a late computation holds
		// its participant, not the handle.
		s.pool.close()
		s.pool = nil
	}
	err = try0(func() { DeleteRawTpuSystem(s.raw) })
	s.raw = nil
	for _, d := range s.pinned {
		DeleteDirectorRawComputation(d)
	}
	s.pinned = nil
	return err
}

// Shutdown stops the workers but keeps the handle (IsClosed reports true).
func (s *System) Shutdown() error {
	raw, err := s.handle()
	if err != nil {
		return err
	}
	return try0(raw.Shutdown)
}

// IsClosed tells whether the system was shut down or closed itself after a failure.
func (s *System) IsClosed() (bool, error) {
	raw, err := s.handle()
	if err != nil {
		return false, err
	}
	return try(raw.IsClosed)
}

// NumCores is the number of cores (worker threads).
func (s *System) NumCores() (int, error) {
	raw, err := s.handle()
	if err != nil {
		return 0, err
	}
	return try(raw.NumCores)
}

// JobName is the job in the device names.
func (s *System) JobName() (string, error) {
	raw, err := s.handle()
	if err != nil {
		return "", err
	}
	return try(raw.JobName)
}

// DeviceType is the device type in the device names.
func (s *System) DeviceType() (string, error) {
	raw, err := s.handle()
	if err != nil {
		return "", err
	}
	return try(raw.DeviceType)
}

// Transport is the data plane between the system's tasks: "none" for one task, else
// "tcp", "shm" or "mpi".
func (s *System) Transport() (string, error) {
	raw, err := s.handle()
	if err != nil {
		return "", err
	}
	return try(raw.Transport)
}

// TransportReason says, for people, why that transport was chosen.
func (s *System) TransportReason() (string, error) {
	raw, err := s.handle()
	if err != nil {
		return "", err
	}
	return try(raw.TransportReason)
}

func byteSlice(v ByteVector) []byte {
	defer DeleteByteVector(v)
	out := make([]byte, v.Size())
	for i := range out {
		out[i] = v.Get(i)
	}
	return out
}

func int32Slice(v Int32Vector) []int32 {
	defer DeleteInt32Vector(v)
	out := make([]int32, v.Size())
	for i := range out {
		out[i] = int32(v.Get(i))
	}
	return out
}

func int64Slice(v Int64Vector) []int64 {
	defer DeleteInt64Vector(v)
	out := make([]int64, v.Size())
	for i := range out {
		out[i] = v.Get(i)
	}
	return out
}

// SerializedTopology is the system's TopologyProto.
func (s *System) SerializedTopology() ([]byte, error) {
	raw, err := s.handle()
	if err != nil {
		return nil, err
	}
	return try(func() []byte { return byteSlice(raw.SerializedTopology()) })
}

// EmbeddingConfig is the embedding configuration the system was started with.
func (s *System) EmbeddingConfig() ([]byte, error) {
	raw, err := s.handle()
	if err != nil {
		return nil, err
	}
	return try(func() []byte { return byteSlice(raw.EmbeddingConfig()) })
}

// Topology is the system's topology.
func (s *System) Topology() (*Topology, error) {
	raw, err := s.handle()
	if err != nil {
		return nil, err
	}
	t, err := try(raw.Topology)
	if err != nil {
		return nil, err
	}
	return wrapTopology(t), nil
}

// DefaultDeviceAssignment maps numReplicas one-core replicas onto the cores.
func (s *System) DefaultDeviceAssignment(numReplicas int) (*DeviceAssignment, error) {
	raw, err := s.handle()
	if err != nil {
		return nil, err
	}
	a, err := try(func() RawDeviceAssignment { return raw.DefaultDeviceAssignment(numReplicas) })
	if err != nil {
		return nil, err
	}
	return wrapDeviceAssignment(a), nil
}

// Core is the device name of logical core num in a replicated computation.
func Core(num int) (string, error) {
	return try(func() string { return RawCore(num) })
}

// CoreDyn is Core with num given as any Go integer; another type is an error naming it.
func CoreDyn(num interface{}) (string, error) {
	switch n := num.(type) {
	case int:
		return Core(n)
	case int32:
		return Core(int(n))
	case int64:
		return Core(int(n))
	}
	return "", newError(CodeInvalidArgument, "CoreDyn: num must be an integer, not %T", num)
}

// Version is the library's version string.
func Version() string { return RawVersion() }

// runStep runs one step: on the system's goroutines (the pool, started here at the
// first step), or in the callback mode through a fresh director. step gets the
// director, or nil and the key the pool finds fn by.
func (s *System) runStep(fn Computation, step func(RawTpuSystem, RawComputation, int64) TensorVector) ([]*Tensor, error) {
	raw, err := s.handle()
	if err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, newError(CodeInvalidArgument, "the computation is nil")
	}
	if !s.callbacks {
		p, err := s.replicaPool(raw)
		if err != nil {
			return nil, err
		}
		if err := p.takeEnded(); err != nil {
			return nil, err
		}
		key := p.register(fn)
		defer p.unregister(key) // a late participant holds fn itself
		out, err := try(func() TensorVector { return step(raw, nil, key) })
		if err != nil {
			return nil, err
		}
		return fromTensorVector(out), nil
	}
	// After a failure a late replica may still be inside the director, so the
	// system keeps it until Close.
	director := NewDirectorRawComputation(&computation{fn: fn})
	out, err := try(func() TensorVector { return step(raw, director, 0) })
	if err != nil {
		s.mu.Lock()
		s.pinned = append(s.pinned, director)
		s.mu.Unlock()
		return nil, err
	}
	DeleteDirectorRawComputation(director)
	return fromTensorVector(out), nil
}

// replicaPool is the system's pool, started at the first step.
func (s *System) replicaPool(raw RawTpuSystem) (*pool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pool != nil {
		return s.pool, nil
	}
	if s.raw == nil {
		return nil, newError(CodeFailedPrecondition, "the system is closed")
	}
	cores, err := try(raw.NumCores)
	if err != nil {
		return nil, err
	}
	if s.pool, err = newPool(raw.Swigcptr(), cores); err != nil {
		return nil, err
	}
	return s.pool, nil
}
