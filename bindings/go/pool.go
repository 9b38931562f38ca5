package tpurt

// #include <stdlib.h>
// #include "pool.h"
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// The replicas' goroutines (1.4): one per core of this task, each locked to its OS
// thread, seated in the library's one replica pool (bindings/replica_pool.hpp), which
// joins the core, leaves it and stops the pool; this file keeps only Go's side: the
// goroutines, the steps' computations by key, and the upcall. A step runs on them
// through the *OnJoinedThreads calls, so no replica is a callback from a library
// thread into Go (which costs cgo an extra M per call, serialised).

// pool is a system's replica goroutines and the registry of the steps in flight.
type pool struct {
	native C.uintptr_t // the tpurt::ReplicaPool*
	cores  int

	mu sync.Mutex
	// The steps' computations by the key a step's caller passes as user data, key k
	// in slot k mod stepSlots: read by every participant at once with one atomic
	// load. (A sync.Map, with a new key per step, took its mutex in the participants'
	// first loads; a locked goroutine that blocks on it hands its thread's P off.)
	steps [stepSlots]atomic.Pointer[stepEntry]
	// tids are the OS threads serving each core (what tests check computations on).
	tids []int
	closed bool // guarded by mu: close freed the native pool
	// takeEnded's buffers (guarded by mu): every step asks, none allocates.
	endedCores   []C.int
	endedMessage [300]C.char

	running int32 // atomic: goroutines alive
	// ended is set (atomic) when a goroutine ended on a join error: only then does a
	// step ask the native pool why (takeEnded, a cgo call and the mutex).
	ended int32
}

// stepSlots is how many steps of one system may be registered at once (callers
// waiting for the library's step lock included).
const stepSlots = 64

type stepEntry struct {
	key int64
	fn  Computation
}

var nextStepKey int64 // atomic: keys are unique in the process

func newPool(system uintptr, cores int) (*pool, error) {
	var code C.int
	var message [200]C.char
	native := C.tpurtgo_pool_new(C.uintptr_t(system), C.int(cores), &code, &message[0], C.int(len(message)))
	if native == 0 {
		return nil, newError(Code(code), "%s", C.GoString(&message[0]))
	}
	p := &pool{native: native, cores: cores, tids: make([]int, cores),
		endedCores: make([]C.int, cores)}
	raiseProcs(cores)
	for c := 0; c < cores; c++ {
		p.start(c)
	}
	return p, nil
}

func (p *pool) start(core int) {
	atomic.AddInt32(&p.running, 1)
	go p.serve(core)
}

// register makes fn findable by the step's participants until unregister(key).
func (p *pool) register(fn Computation) int64 {
	e := &stepEntry{fn: fn}
	for {
		e.key = atomic.AddInt64(&nextStepKey, 1)
		if p.steps[e.key%stepSlots].CompareAndSwap(nil, e) {
			return e.key
		}
		runtime.Gosched() // the slot is another step's: try the next key
	}
}

// unregister ends key's registration (a late participant keeps what it found).
func (p *pool) unregister(key int64) { p.steps[key%stepSlots].Store(nil) }

func (p *pool) lookup(key int64) Computation {
	if e := p.steps[key%stepSlots].Load(); e != nil && e.key == key {
		return e.fn
	}
	return nil
}

// serve is one core's goroutine: one cgo call per participant leaves the last one
// and joins for the next.
func (p *pool) serve(core int) {
	defer atomic.AddInt32(&p.running, -1)
	runtime.LockOSThread()
	p.mu.Lock()
	var seat C.uintptr_t
	if !p.closed { // a goroutine started as the pool closed takes no seat
		seat = C.tpurtgo_seat(p.native, C.int(core))
		p.tids[core] = syscall.Gettid()
	}
	p.mu.Unlock()
	if seat == 0 { // closed, or a core out of the pool's range (never asked for)
		runtime.UnlockOSThread()
		return
	}
	var turn C.tpurtgo_turn
	status := C.int(0)
	for {
		C.tpurtgo_next(seat, status, &turn)
		if turn.turn != C.TPURTGO_RUN { // stopped, or ended on a join error the next step reports
			break
		}
		if !p.run(core, seat, &turn, &status) {
			return // runtime.Goexit: a new goroutine took the core over
		}
	}
	if turn.turn == C.TPURTGO_ENDED {
		atomic.StoreInt32(&p.ended, 1) // the native pool has why, for the next step
	}
	C.tpurtgo_seat_free(seat) // gives the thread its CPUs back before Go has it again
	runtime.UnlockOSThread()
}

// run runs the joined participant's computation into *status; false when the
// computation called runtime.Goexit, which ends this goroutine: it fails and leaves
// the participant first, and unlocks its thread (a thread ending inside a
// participant would fail it too, but the main thread never ends), and a new
// goroutine serves the core.
func (p *pool) run(core int, seat C.uintptr_t, turn *C.tpurtgo_turn, status *C.int) (returned bool) {
	rc := SwigcptrRawReplicaContext(uintptr(turn.ctx))
	defer func() {
		if !returned {
			message := C.CString("the computation called runtime.Goexit: its goroutine ended inside the step")
			C.tpurtgo_abandon(seat, C.int(CodeCancelled), message)
			C.free(unsafe.Pointer(message))
			C.tpurtgo_seat_free(seat)
			runtime.UnlockOSThread()
			p.start(core)
		}
	}()
	fn := p.lookup(int64(turn.key))
	if fn == nil {
		fn = func(*Context, []*Tensor) ([]*Tensor, error) {
			return nil, newError(CodeInternal, "the step's computation is gone (its caller has returned)")
		}
	}
	ctx := &Context{raw: rc, ids: true, replica: int(turn.replica_id), logical: int(turn.logical_core)}
	*status = C.int(runComputation(fn, ctx, int(turn.num_inputs), int(turn.num_outputs)))
	return true
}

// replicateOnPool is Replicate's step with plain options (StepOptions.plain) on the
// pool: one cgo call, the tensors passed as their C++ pointers (no SWIG vectors or
// options). inputs[replica*numInputs+i]; returns outputs[replica*numOutputs+j].
func (s *System) replicateOnPool(fn Computation, numReplicas, numInputs int, inputs []*Tensor, numOutputs int,
	timeout time.Duration) ([]*Tensor, error) {
	raw, err := s.handle()
	if err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, newError(CodeInvalidArgument, "the computation is nil")
	}
	p, err := s.replicaPool(raw)
	if err != nil {
		return nil, err
	}
	if err := p.takeEnded(); err != nil {
		return nil, err
	}
	var in, out *C.uintptr_t
	handles := make([]C.uintptr_t, len(inputs)+numReplicas*numOutputs)
	for i, t := range inputs {
		h, err := t.handle()
		if err != nil {
			return nil, newError(CodeInvalidArgument, "inputs[%d]: %v", i, err.(*Error).Message)
		}
		handles[i] = C.uintptr_t(h.Swigcptr())
	}
	if len(inputs) > 0 {
		in = &handles[0]
	}
	outputs := handles[len(inputs):]
	if len(outputs) > 0 {
		out = &outputs[0]
	}
	key := p.register(fn)
	st := C.tpurtgo_replicate_joined(C.uintptr_t(raw.Swigcptr()), C.int64_t(key), C.int(numReplicas), C.int(numInputs),
		in, C.int(numOutputs), out, C.int64_t(timeout.Milliseconds()))
	p.unregister(key) // a late participant holds fn itself
	runtime.KeepAlive(inputs)
	if st.code != 0 {
		message := C.GoString(st.message)
		C.free(unsafe.Pointer(st.message))
		return nil, &Error{Code: Code(st.code), Message: message}
	}
	result := make([]*Tensor, len(outputs))
	for i, h := range outputs {
		result[i] = wrapTensor(SwigcptrRawTensor(h))
	}
	return result, nil
}

// takeEnded is called by each step before it starts: the error of a goroutine that
// ended on an unexpected tpu_step_join error (the first, if several), and a new
// goroutine serves each such core (the step after runs, or returns the error again).
// Nothing spins or fails silently.
func (p *pool) takeEnded() error {
	if atomic.LoadInt32(&p.ended) == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return newError(CodeFailedPrecondition, "the system is closed")
	}
	atomic.StoreInt32(&p.ended, 0) // before asking: an end after this sets it again
	var n C.int
	code := C.tpurtgo_pool_take_ended(p.native, &p.endedMessage[0], C.int(len(p.endedMessage)), &p.endedCores[0],
		C.int(len(p.endedCores)), &n)
	if code == 0 {
		return nil
	}
	for _, c := range p.endedCores[:n] {
		p.start(int(c))
	}
	return newError(Code(code), "%s", C.GoString(&p.endedMessage[0]))
}

// close stops the goroutines: the library cancels their joins, and once none joins
// the system may go (a goroutine still inside a late computation ends when it
// leaves it; its participant holds what it needs).
func (p *pool) close() {
	defer lowerProcs()
	C.tpurtgo_pool_stop(p.native)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true // the seats keep what they need; nothing here touches the pool again
	C.tpurtgo_pool_free(p.native)
}

// threads are the OS thread ids serving the cores (0 for one not started yet).
func (p *pool) threads() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.tids...)
}

// GOMAXPROCS while pools exist: every replica goroutine returning from tpu_step_join
// needs a P at once, and the step's caller one more; with fewer, a returning locked
// thread waits until sysmon retakes a P from a thread blocked in C (20 µs or more).
// One P more stays idle, so sysmon does not retake Ps from the threads waiting in C
// (it does when no P is idle, and starts a spinning M for each).
var procs struct {
	sync.Mutex
	pools, saved, set int
}

func raiseProcs(cores int) {
	procs.Lock()
	defer procs.Unlock()
	if procs.pools == 0 {
		procs.saved, procs.set = runtime.GOMAXPROCS(0), 0
	}
	procs.pools++
	if want := cores + 2; want > runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(want)
		procs.set = want
	}
}

// lowerProcs restores GOMAXPROCS when the last pool ends, unless the program changed it.
func lowerProcs() {
	procs.Lock()
	defer procs.Unlock()
	procs.pools--
	if procs.pools == 0 && procs.set != 0 && runtime.GOMAXPROCS(0) == procs.set {
		runtime.GOMAXPROCS(procs.saved)
	}
}
