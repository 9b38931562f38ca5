package tpurt

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// Steps on the caller's threads (1.4): the raw tpu_step_join / tpu_step_leave with the
// pool off, and the pool that runs every step by default.

const rawTimeout = 300 * time.Millisecond

// newCallbackSystem has no pool: the test's own goroutines join its cores.
func newCallbackSystem(t *testing.T, cores int) *System {
	t.Helper()
	s, err := NewSystem(SystemOptions{NumCores: cores, CallbackReplicas: true, CollectiveTimeout: rawTimeout})
	if err != nil {
		t.Fatalf("NewSystem: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// startRawStep starts an empty caller-threads step of n replicas keyed `key`; its
// error arrives on the channel.
func startRawStep(t *testing.T, s *System, key int64, n int) <-chan error {
	t.Helper()
	o, err := StepOptions{CollectiveTimeout: rawTimeout}.raw(0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		defer DeleteRawStepOptions(o)
		in := NewTensorVector()
		defer DeleteTensorVector(in)
		_, err := try(func() TensorVector { return s.raw.ReplicateOnJoinedThreads(key, n, 0, in, 0, o) })
		done <- err
	}()
	return done
}

// joinAndLeave joins core on a locked goroutine, sums replica+1 over the step's
// replicas with the joined context, and leaves; the sum or error arrives on the channel.
func joinAndLeave(s *System, core int, key int64) <-chan error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		j, err := try(func() RawJoinedStep { return s.raw.StepJoin(core, 5000) })
		for errors.Is(err, ErrAlreadyExists) { // a probe holds the core for a moment
			time.Sleep(time.Millisecond)
			j, err = try(func() RawJoinedStep { return s.raw.StepJoin(core, 5000) })
		}
		if err != nil {
			done <- err
			return
		}
		defer DeleteRawJoinedStep(j)
		if j.UserData() != key {
			done <- newError(CodeInternal, "user data %d, want %d", j.UserData(), key)
		}
		ctx := &Context{raw: j.Context()}
		sum, err := CrossReplicaSumValue(ctx, float32(ctx.ReplicaID()+1))
		if err == nil && sum != 3 {
			err = newError(CodeInternal, "core %d: sum %v, want 3", core, sum)
		}
		if err := try0(func() { j.Leave(RawStatus_Ok) }); err != nil {
			done <- err
			return
		}
		// Leaving twice is an error, not a second participant.
		if err := try0(func() { j.Leave(RawStatus_Ok) }); !errors.Is(err, ErrFailedPrecondition) {
			done <- newError(CodeInternal, "a second Leave gave %v, want ErrFailedPrecondition", err)
			return
		}
		done <- err
	}()
	return done
}

func TestRawStepJoinAndLeave(t *testing.T) {
	s := newCallbackSystem(t, 2)
	if _, err := try(func() RawJoinedStep { return s.raw.StepJoin(0, 0) }); !errors.Is(err, ErrDeadlineExceeded) {
		t.Fatalf("joining with no step waiting: %v, want ErrDeadlineExceeded", err)
	}
	if _, err := try(func() RawJoinedStep { return s.raw.StepJoin(2, 0) }); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "core is 2") {
		t.Fatalf("joining core 2 of 2: %v, want ErrInvalidArgument naming it", err)
	}
	for round := 0; round < 3; round++ {
		step := startRawStep(t, s, 42, 2)
		a, b := joinAndLeave(s, 0, 42), joinAndLeave(s, 1, 42)
		for _, c := range []<-chan error{a, b, step} {
			if err := <-c; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	if s.pool != nil {
		t.Fatal("a system with CallbackReplicas started a pool")
	}
}

// A core another thread has joined is ErrAlreadyExists (the one error the pool retries
// on), not ErrInvalidArgument, which stays a programming error (a core out of range).
// The goroutine that joined first gets the step.
func TestBusyCoreIsAlreadyExistsAndCoreOutOfRangeInvalidArgument(t *testing.T) {
	s := newCallbackSystem(t, 2)
	a, b := joinAndLeave(s, 0, 43), joinAndLeave(s, 1, 43)
	// Until core 0's goroutine waits in its join, a probe finds no step.
	var busy error
	for until := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		j, err := try(func() RawJoinedStep { return s.raw.StepJoin(0, 0) })
		if err == nil {
			DeleteRawJoinedStep(j)
			t.Fatal("the probe joined core 0 with no step started")
		}
		if !errors.Is(err, ErrDeadlineExceeded) {
			busy = err
			break
		}
		if time.Now().After(until) {
			t.Fatal("core 0's goroutine never joined")
		}
	}
	if !errors.Is(busy, ErrAlreadyExists) || !strings.Contains(busy.Error(), "core 0 has been joined by another thread") {
		t.Errorf("joining core 0 while another thread has: %v, want ErrAlreadyExists naming it", busy)
	}
	if _, err := try(func() RawJoinedStep { return s.raw.StepJoin(2, 0) }); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "core is 2") {
		t.Errorf("joining core 2 of 2: %v, want ErrInvalidArgument naming it", err)
	}
	step := startRawStep(t, s, 43, 2)
	for _, c := range []<-chan error{a, b, step} {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
}

func TestGoroutinePanickingBeforeJoiningFailsTheStep(t *testing.T) {
	s := newCallbackSystem(t, 2)
	start := time.Now()
	step := startRawStep(t, s, 7, 2)
	left := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		j, err := try(func() RawJoinedStep { return s.raw.StepJoin(0, 5000) })
		if err == nil {
			defer DeleteRawJoinedStep(j)
			err = try0(func() { j.Leave(RawStatus_Ok) })
		}
		left <- err
	}()
	recovered := make(chan interface{}, 1)
	go func() {
		defer func() { recovered <- recover() }()
		panic("the goroutine for core 1 fails before it joins")
	}()
	if r := <-recovered; r == nil {
		t.Fatal("no panic")
	}
	err := <-step
	if !errors.Is(err, ErrDeadlineExceeded) || !strings.Contains(err.Error(), "replica 1 (core 1) never started") {
		t.Fatalf("got %v, want ErrDeadlineExceeded naming replica 1 (core 1)", err)
	}
	if elapsed := time.Since(start); elapsed > 10*rawTimeout {
		t.Errorf("the step failed after %v, the deadline is %v", elapsed, rawTimeout)
	}
	if err := <-left; err != nil {
		t.Fatalf("core 0: %v", err)
	}
}

// onThreadThatCanExit runs fn on a goroutine locked to a thread that is not the
// process's main thread (which Go never ends: a locked goroutine exiting there wedges it).
func onThreadThatCanExit(fn func()) {
	go func() {
		runtime.LockOSThread()
		if syscall.Gettid() != syscall.Getpid() {
			fn()
			return
		}
		// Hold the main thread while another thread runs fn.
		defer runtime.UnlockOSThread()
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
			fn()
		}()
		<-done
	}()
}

func TestThreadExitingInsideItsParticipantFailsIt(t *testing.T) {
	s := newCallbackSystem(t, 2)
	step := startRawStep(t, s, 9, 2)
	joined := make(chan error, 1)
	onThreadThatCanExit(func() {
		_, err := try(func() RawJoinedStep { return s.raw.StepJoin(1, 5000) })
		joined <- err
		runtime.Goexit() // locked: its thread exits too
	})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if j, err := try(func() RawJoinedStep { return s.raw.StepJoin(0, 5000) }); err == nil {
			j.Leave(RawStatus_Ok)
			DeleteRawJoinedStep(j)
		}
	}()
	if err := <-joined; err != nil {
		t.Fatalf("join: %v", err)
	}
	err := <-step
	if !errors.Is(err, ErrCancelled) || !strings.Contains(err.Error(), "replica 1 exited before tpu_step_leave") {
		t.Fatalf("got %v, want ErrCancelled: the thread running replica 1 exited before tpu_step_leave", err)
	}
}

// The pool ---------------------------------------------------------------------------

// threadsOf records the OS thread each replica ran on.
type threadsOf struct {
	sync.Mutex
	tids map[int]int // replica (or shard) -> tid
}

func (r *threadsOf) record(ctx *Context) {
	r.Lock()
	defer r.Unlock()
	r.tids[ctx.ReplicaID()] = syscall.Gettid()
}

func TestStepsRunOnThePoolByDefault(t *testing.T) {
	s := newTestSystem(t)
	ran := &threadsOf{tids: map[int]int{}}
	out, err := Replicate(s, func(ctx *Context, in []*Tensor) ([]*Tensor, error) {
		ran.record(ctx)
		return sumInput(ctx, in)
	}, perReplica(t), WithNumOutputs(1))
	if err != nil || must(Values[float32](out[0][0]))[0] != 28 {
		t.Fatalf("step: %v", err)
	}
	if s.pool == nil {
		t.Fatal("the step started no pool")
	}
	pool := s.pool.threads()
	for r := 0; r < replicas; r++ {
		if ran.tids[r] == 0 || ran.tids[r] != pool[r] {
			t.Errorf("replica %d ran on thread %d; the pool's goroutine for core %d is on %d", r, ran.tids[r], r, pool[r])
		}
	}
	// Another form, on the same threads.
	shards := &threadsOf{tids: map[int]int{}}
	x := must(NewTensor([]int64{8}, []float32{1, 2, 3, 4, 5, 6, 7, 8}))
	if _, err := BatchParallel(s, func(ctx *Context, in []*Tensor) ([]*Tensor, error) {
		shards.record(ctx)
		return in, nil
	}, []*Tensor{x}, replicas, WithNumOutputs(1)); err != nil {
		t.Fatal(err)
	}
	for shard, tid := range shards.tids {
		if tid != pool[shard] {
			t.Errorf("shard %d ran on thread %d, not its pool thread %d", shard, tid, pool[shard])
		}
	}
	// The callback mode runs none on them (one system at a time per process).
	s.Close()
	cb := newTestSystem(t, func(o *SystemOptions) { o.CallbackReplicas = true })
	other := &threadsOf{tids: map[int]int{}}
	if _, err := ReplicateN(cb, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		other.record(ctx)
		return nil, nil
	}, replicas); err != nil {
		t.Fatal(err)
	}
	if cb.pool != nil {
		t.Error("CallbackReplicas started a pool")
	}
	for r, tid := range other.tids {
		if tid == pool[r] {
			t.Errorf("callback replica %d ran on the closed system's pool thread %d", r, tid)
		}
	}
}

// A pool goroutine whose join fails with anything but a busy core or a shutdown
// ends, and the next step returns its error: a pool of 3 cores on a system of 2,
// whose core 2 is out of range (ErrInvalidArgument), is the one way to get there.
func TestPoolGoroutineEndingOnAJoinErrorIsReportedByTheNextStep(t *testing.T) {
	s := newCallbackSystem(t, 2)
	p, err := newPool(s.raw.Swigcptr(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	for round := 0; round < 2; round++ { // a new goroutine takes the core, and ends the same way
		var err error
		for until := time.Now().Add(5 * time.Second); err == nil; time.Sleep(time.Millisecond) {
			if err = p.takeEnded(); err == nil && time.Now().After(until) {
				t.Fatalf("round %d: core 2's goroutine did not end", round)
			}
		}
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "thread of core 2 ended") ||
			!strings.Contains(err.Error(), "core is 2") {
			t.Fatalf("round %d: %v, want ErrInvalidArgument naming core 2", round, err)
		}
	}
}

// affinity is the CPU mask of OS thread tid.
func affinity(t *testing.T, tid int) [16]uint64 {
	t.Helper()
	var mask [16]uint64
	if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, uintptr(tid), unsafe.Sizeof(mask),
		uintptr(unsafe.Pointer(&mask))); e != 0 {
		t.Fatalf("sched_getaffinity(%d): %v", tid, e)
	}
	return mask
}

// Pinning is the library's: under PinNever no replica's thread is pinned (the pool
// pinned its own before, whatever the option), and under PinAlways each is pinned
// while it runs and gets the process's CPUs back when the pool ends, before Go's
// scheduler runs goroutines on it again.
func TestPoolThreadsArePinnedOnlyByTheLibrary(t *testing.T) {
	whole := affinity(t, syscall.Gettid())
	count := func(m [16]uint64) (n int) {
		for _, w := range m {
			for ; w != 0; w &= w - 1 {
				n++
			}
		}
		return n
	}
	if count(whole) < 2 {
		t.Skip("one usable CPU: nothing to pin to")
	}
	for _, pin := range []ThreadPinning{PinNever, PinAlways} {
		s, err := NewSystem(SystemOptions{NumCores: 8, PinThreads: pin})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		pinned := map[int]int{} // tid -> CPUs while running
		if _, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
			tid := syscall.Gettid()
			n := count(affinity(t, tid))
			mu.Lock()
			pinned[tid] = n
			mu.Unlock()
			return nil, nil
		}, 8); err != nil {
			t.Fatal(err)
		}
		tids := s.pool.threads()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for tid, n := range pinned {
			if pin == PinNever && n != count(whole) {
				t.Errorf("PinNever: replica thread %d ran on %d CPUs, not the process's %d", tid, n, count(whole))
			}
			if pin == PinAlways && n != 1 {
				t.Errorf("PinAlways: replica thread %d ran on %d CPUs, want 1", tid, n)
			}
		}
		for _, tid := range tids {
			// A thread Go has ended is gone: only the live ones are checked.
			var mask [16]uint64
			if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, uintptr(tid), unsafe.Sizeof(mask),
				uintptr(unsafe.Pointer(&mask))); e != 0 {
				continue
			}
			if mask != whole {
				t.Errorf("%v: pool thread %d went back to Go's scheduler on %d CPUs, not the process's %d",
					pin, tid, count(mask), count(whole))
			}
		}
	}
}

func TestCloseEndsThePool(t *testing.T) {
	s, err := NewSystem(SystemOptions{NumCores: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReplicateN(s, func(*Context, []*Tensor) ([]*Tensor, error) { return nil, nil }, 4); err != nil {
		t.Fatal(err)
	}
	p := s.pool
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Close returns once no goroutine joins; they end right after.
	for giveUp := time.Now().Add(5 * time.Second); atomic.LoadInt32(&p.running) != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(giveUp) {
			t.Fatalf("%d pool goroutines still run 5 s after Close", atomic.LoadInt32(&p.running))
		}
	}
	if _, err := ReplicateN(s, func(*Context, []*Tensor) ([]*Tensor, error) { return nil, nil }, 4); !errors.Is(err, ErrFailedPrecondition) {
		t.Fatalf("a step after Close: %v", err)
	}
}

func TestComputationCallingGoexitFailsItsReplicaAndThePoolGoesOn(t *testing.T) {
	s := newTestSystem(t, func(o *SystemOptions) { o.CollectiveTimeout = 2 * time.Second })
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		if ctx.ReplicaID() == 3 {
			runtime.Goexit() // its locked thread exits with it
		}
		return nil, nil
	}, replicas)
	if !errors.Is(err, ErrCancelled) || !strings.Contains(err.Error(), "runtime.Goexit") || !strings.Contains(err.Error(), "replica 3") {
		t.Fatalf("got %v, want ErrCancelled naming replica 3 and runtime.Goexit", err)
	}
	for i := 0; i < 3; i++ {
		out, err := Replicate(s, sumInput, perReplica(t), WithNumOutputs(1))
		if err != nil || must(Values[float32](out[3][0]))[0] != 28 {
			t.Fatalf("step %d after: %v", i, err)
		}
	}
}

func TestAbandonedReplicaFailsTheStepAndTheNextRunsAfterItLeaves(t *testing.T) {
	s := newTestSystem(t, func(o *SystemOptions) { o.CollectiveTimeout = rawTimeout })
	release := make(chan struct{})
	_, err := ReplicateN(s, func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		if ctx.ReplicaID() == 0 {
			<-release // does not leave in time
		}
		return nil, nil
	}, replicas)
	if !errors.Is(err, ErrDeadlineExceeded) {
		t.Fatalf("got %v, want ErrDeadlineExceeded", err)
	}
	close(release)
	out, err := Replicate(s, sumInput, perReplica(t), WithNumOutputs(1))
	if err != nil || must(Values[float32](out[0][0]))[0] != 28 {
		t.Fatalf("the next step: %v", err)
	}
}

// StepJoinCancel ends a raw join waiting with no limit (ErrCancelled); the next join of
// the core waits as usual, and a core out of range is named.
func TestStepJoinCancelEndsAWaitingJoin(t *testing.T) {
	s := newCallbackSystem(t, 2)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for giveUp := time.Now().Add(10 * time.Second); time.Now().Before(giveUp); time.Sleep(time.Millisecond) {
			_, err := try(func() RawJoinedStep { return s.raw.StepJoin(1, -1) })
			if errors.Is(err, ErrAlreadyExists) {
				continue // the test's probe held the core for a moment
			}
			done <- err
			return
		}
		done <- errors.New("never joined")
	}()
	for giveUp := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		_, err := try(func() RawJoinedStep { return s.raw.StepJoin(1, 0) })
		if errors.Is(err, ErrAlreadyExists) {
			break // the waiter holds core 1
		}
		if time.Now().After(giveUp) {
			t.Fatal("the waiter never joined core 1")
		}
	}
	if err := try0(func() { s.raw.StepJoinCancel(1) }); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrCancelled) || !strings.Contains(err.Error(), "tpu_step_join_cancel") {
			t.Fatalf("the cancelled join returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled join did not return")
	}
	if _, err := try(func() RawJoinedStep { return s.raw.StepJoin(1, 0) }); !errors.Is(err, ErrDeadlineExceeded) {
		t.Fatalf("the next join: %v, want ErrDeadlineExceeded", err)
	}
	if err := try0(func() { s.raw.StepJoinCancel(2) }); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "core is 2") {
		t.Fatalf("core 2: %v", err)
	}
}

// Replicate's plain step (no option but the output count and the collectives'
// timeout) is one cgo call (replicateOnPool); a device assignment takes the general
// path through SWIG's vectors and options. Both return the same outputs, bit for bit,
// and the same errors: a failing replica named, a closed input named, a late replica's
// deadline.
func TestPlainStepEqualsTheGeneralPath(t *testing.T) {
	s := newTestSystem(t)
	assignment := must(s.DefaultDeviceAssignment(replicas))
	defer assignment.Close()
	general := WithDeviceAssignment(assignment)
	step := func(ctx *Context, in []*Tensor) ([]*Tensor, error) {
		sum, err := ctx.CrossReplicaSumTensor(in[0])
		return []*Tensor{sum, in[1]}, err
	}
	inputs := make([][]*Tensor, replicas)
	for r := range inputs {
		inputs[r] = []*Tensor{must(NewTensor([]int64{3}, []float32{0.1 * float32(r), 1e-7, float32(r) / 3})),
			must(NewTensor([]int64{2}, []int32{int32(r), -1}))}
	}
	for _, numOutputs := range []int{2, 0} { // counted outputs too
		plain := must(Replicate(s, step, inputs, WithNumOutputs(numOutputs)))
		other := must(Replicate(s, step, inputs, WithNumOutputs(numOutputs), general))
		for r := 0; r < replicas; r++ {
			if a, b := must(plain[r][0].Bytes()), must(other[r][0].Bytes()); string(a) != string(b) {
				t.Errorf("%d outputs, replica %d: the plain step's sum %x, the general path's %x", numOutputs, r, a, b)
			}
			if got := must(Values[int32](plain[r][1])); !equal(got, []int32{int32(r), -1}) {
				t.Errorf("%d outputs, replica %d: output 1 is %v", numOutputs, r, got)
			}
		}
	}
	failing := func(ctx *Context, in []*Tensor) ([]*Tensor, error) {
		if ctx.ReplicaID() == 6 {
			return nil, newError(CodeOutOfRange, "batch 6 is past the end")
		}
		_, err := ctx.CrossReplicaSumTensor(in[0])
		return nil, err
	}
	// (A replica that had not joined when the step failed is noted after the error.)
	for _, opts := range [][]StepOption{nil, {general}} {
		if _, err := Replicate(s, failing, inputs, opts...); !errors.Is(err, ErrOutOfRange) ||
			!strings.HasPrefix(err.Error(), "OUT_OF_RANGE: replica 6: batch 6 is past the end") {
			t.Errorf("a failing replica, options %v: %v", opts, err)
		}
	}
	closed := must(NewTensor([]int64{1}, []float32{1}))
	closed.Close()
	inputs[3][1] = closed
	if _, err := Replicate(s, step, inputs, WithNumOutputs(2)); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "inputs[7]") || !strings.Contains(err.Error(), "closed") {
		t.Errorf("a closed input: %v, want ErrInvalidArgument naming inputs[7]", err)
	}
	late := func(ctx *Context, _ []*Tensor) ([]*Tensor, error) {
		if ctx.ReplicaID() == 2 {
			time.Sleep(300 * time.Millisecond)
			return nil, nil
		}
		_, err := CrossReplicaSum(ctx, []int32{1})
		return nil, err
	}
	if _, err := ReplicateN(s, late, replicas, WithCollectiveTimeout(100*time.Millisecond)); !errors.Is(err, ErrDeadlineExceeded) ||
		!strings.Contains(err.Error(), "2") {
		t.Errorf("a late replica: %v, want ErrDeadlineExceeded naming it", err)
	}
	if out, err := Replicate(s, sumInput, perReplica(t), WithNumOutputs(1)); err != nil || must(Values[float32](out[0][0]))[0] != 28 {
		t.Fatalf("the step after: %v", err)
	}
}
