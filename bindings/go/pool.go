package tpurt

// #include "pool.h"
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The replicas' goroutines (1.4): one per core of this task, each locked to its OS
// thread, looping tpu_step_join -> the step's computation -> tpu_step_leave. A step
// runs on them through the *OnJoinedThreads calls, so no replica is a callback from
// a library thread into Go (which costs cgo an extra M per call, serialised).

// poolJoinTimeout bounds each wait in tpu_step_join: an idle pool goroutine wakes
// this often to see whether its system was closed.
const poolJoinTimeout = 250 * time.Millisecond

// poolCloseWait bounds how long Close waits for the pool's goroutines to leave; one
// still inside a computation then frees the system when it leaves.
const poolCloseWait = 2 * time.Second

// pool is a system's replica goroutines and the registry of the steps in flight.
type pool struct {
	system uintptr // the tpurt::TpuSystem*
	cores  int

	mu    sync.Mutex
	steps map[int64]Computation // by the key a step's caller passes as user data
	// tids are the OS threads serving each core (what tests check computations on).
	tids []int
	// ended[c]: why core c's goroutine ended on an unexpected tpu_step_join error (a
	// programming error, not a busy core); the next step returns it (takeEnded).
	ended []error

	closing  int32          // atomic: Close has begun; goroutines exit
	live     sync.WaitGroup // goroutines running
	orphaned func()         // set when Close gave up waiting: the last goroutine frees the system
	running  int32          // atomic count of goroutines
}

var nextStepKey int64 // atomic: keys are unique in the process

func newPool(system uintptr, cores int) *pool {
	p := &pool{system: system, cores: cores, steps: map[int64]Computation{}, tids: make([]int, cores), ended: make([]error, cores)}
	raiseProcs(cores)
	for c := 0; c < cores; c++ {
		p.start(c)
	}
	return p
}

func (p *pool) start(core int) {
	p.live.Add(1)
	atomic.AddInt32(&p.running, 1)
	go p.serve(core)
}

// register makes fn findable by the step's participants until the returned func runs.
func (p *pool) register(fn Computation) (int64, func()) {
	key := atomic.AddInt64(&nextStepKey, 1)
	p.mu.Lock()
	p.steps[key] = fn
	p.mu.Unlock()
	return key, func() {
		p.mu.Lock()
		delete(p.steps, key)
		p.mu.Unlock()
	}
}

func (p *pool) lookup(key int64) Computation {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.steps[key]
}

// serve is one core's goroutine. One cgo call per step leaves the last participant
// and joins the next.
func (p *pool) serve(core int) {
	runtime.LockOSThread()
	C.tpurtgo_pin(C.int(core), C.int(p.cores))
	p.mu.Lock()
	p.tids[core] = syscall.Gettid()
	p.mu.Unlock()
	var j C.tpurtgo_joined
	var step C.uintptr_t
	status := C.int(0)
	for {
		if atomic.LoadInt32(&p.closing) != 0 {
			C.tpurtgo_leave(step, status) // touches the participant only, not the system
			break
		}
		C.tpurtgo_leave_join(C.uintptr_t(p.system), step, status, C.int(core), C.int64_t(poolJoinTimeout.Milliseconds()), &j)
		step = 0
		if j.code != 0 {
			switch Code(j.code) {
			case CodeDeadlineExceeded:
				continue // idle: look at closing again
			case CodeCancelled, CodeFailedPrecondition:
				atomic.StoreInt32(&p.closing, 1) // shut down: later steps fail before joining
			case CodeAlreadyExists:
				// Another thread holds the core: a raw StepJoin, or this core's
				// previous thread (killed inside a participant) not gone yet.
				time.Sleep(time.Millisecond)
				continue
			default:
				// ErrInvalidArgument or anything else is a programming error: retrying
				// would hide it. This goroutine ends, and the next step returns why.
				p.mu.Lock()
				p.ended[core] = newError(Code(j.code), "the replica goroutine of core %d ended: tpu_step_join failed: %s",
					core, C.GoString(&j.message[0]))
				p.mu.Unlock()
			}
			break
		}
		step = j.step
		if !p.run(core, &j, &status) {
			return // runtime.Goexit: a new goroutine took the core over
		}
	}
	C.tpurtgo_unpin()
	runtime.UnlockOSThread()
	p.exited()
}

// run runs the joined participant's computation into *status; false when the
// computation called runtime.Goexit, which ends this goroutine: it fails and leaves
// the participant first, and unlocks its thread (a thread ending inside a
// participant would fail it too, but the main thread never ends), and a new
// goroutine serves the core.
func (p *pool) run(core int, j *C.tpurtgo_joined, status *C.int) (returned bool) {
	rc := SwigcptrRawReplicaContext(uintptr(j.ctx))
	defer func() {
		if !returned {
			failed, _ := try(func() TpurtStatus {
				return rc.Fail(TpurtStatus(CodeCancelled), "the computation called runtime.Goexit: its goroutine ended inside the step")
			})
			C.tpurtgo_leave(j.step, C.int(failed))
			C.tpurtgo_unpin()
			runtime.UnlockOSThread()
			p.start(core)
			p.exited()
		}
	}()
	fn := p.lookup(int64(j.key))
	if fn == nil {
		fn = func(*Context, []*Tensor) ([]*Tensor, error) {
			return nil, newError(CodeInternal, "the step's computation is gone (its caller has returned)")
		}
	}
	*status = C.int(runComputation(fn, rc, int(j.num_inputs), int(j.num_outputs)))
	return true
}

// takeEnded is called by each step before it starts: the error of a goroutine that
// ended on an unexpected tpu_step_join error (the first, if several), and a new
// goroutine serves each such core (the step after runs, or returns the error again).
// Nothing spins or fails silently.
func (p *pool) takeEnded() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	for c, err := range p.ended {
		if err == nil {
			continue
		}
		p.ended[c] = nil
		if atomic.LoadInt32(&p.closing) == 0 {
			p.start(c)
		}
		if first == nil {
			first = err
		}
	}
	return first
}

func (p *pool) exited() {
	if atomic.AddInt32(&p.running, -1) == 0 {
		p.mu.Lock()
		free := p.orphaned
		p.mu.Unlock()
		if free != nil {
			free()
		}
	}
	p.live.Done()
}

// close stops the goroutines after shutdown has woken them, then frees the system
// with free: now (true), or when the last one leaves a computation it is still
// inside (false).
func (p *pool) close(free func()) (freed bool) {
	defer lowerProcs()
	atomic.StoreInt32(&p.closing, 1)
	done := make(chan struct{})
	go func() { p.live.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(poolCloseWait):
		p.mu.Lock()
		if atomic.LoadInt32(&p.running) != 0 {
			p.orphaned = free
			p.mu.Unlock()
			return false
		}
		p.mu.Unlock()
		<-done
	}
	free()
	return true
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
