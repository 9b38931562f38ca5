package tpurt

// #include <stdlib.h>
// #include "pool.h"
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
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
	// The steps' computations by the key a step's caller passes as user data: read by
	// every participant at once, without a lock.
	steps sync.Map
	// tids are the OS threads serving each core (what tests check computations on).
	tids []int
	closed bool // guarded by mu: close freed the native pool
	// takeEnded's buffers (guarded by mu): every step asks, none allocates.
	endedCores   []C.int
	endedMessage [300]C.char

	running int32 // atomic: goroutines alive
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

// register makes fn findable by the step's participants until the returned func runs.
func (p *pool) register(fn Computation) (int64, func()) {
	key := atomic.AddInt64(&nextStepKey, 1)
	p.steps.Store(key, fn)
	return key, func() { p.steps.Delete(key) }
}

func (p *pool) lookup(key int64) Computation {
	fn, _ := p.steps.Load(key)
	c, _ := fn.(Computation)
	return c
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
		if turn.turn != 0 { // stopped, or ended on a join error the next step reports
			break
		}
		if !p.run(core, seat, &turn, &status) {
			return // runtime.Goexit: a new goroutine took the core over
		}
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

// takeEnded is called by each step before it starts: the error of a goroutine that
// ended on an unexpected tpu_step_join error (the first, if several), and a new
// goroutine serves each such core (the step after runs, or returns the error again).
// Nothing spins or fails silently.
func (p *pool) takeEnded() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return newError(CodeFailedPrecondition, "the system is closed")
	}
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
