package org.tpurt;

import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.AtomicReferenceArray;

/**
 * The Java threads that run a system's replicas (1.4): one daemon thread per core of this
 * task, named "tpurt-java-core-C", each sitting in the one replica pool
 * (bindings/replica_pool.hpp, through JavaReplicaPool / JavaSeat in tpurt_java.i):
 * seat.next(status) leaves the last participant and joins the next, whose computation
 * is the body its step registered under seat.key(). So no computation is an upcall from
 * a thread the library made. The pool stops without polling: stop() cancels the joins,
 * and a shutdown ends them. Started by a system's first step in this mode.
 */
final class ReplicaThreads {
  /** What a participant runs: returns its status (Ok, or what ctx.fail returned). */
  interface Body {
    Status run(ReplicaContext ctx);
  }

  /** -Dorg.tpurt.callbackMode=true makes callback mode every system's default. */
  static final boolean CALLBACK_MODE_DEFAULT = Boolean.getBoolean("org.tpurt.callbackMode");
  static final String THREAD_NAME = "tpurt-java-core-";

  /**
   * Test hook: the next pool thread handed a participant throws this (once), as an
   * unexpected error outside any body would (an OutOfMemoryError, say). null: off.
   */
  static final AtomicReference<Error> FAIL_ONCE_IN_SERVE = new AtomicReference<>();

  // Keys are unique in the process: a late participant never finds another step's body.
  private static final AtomicLong NEXT_KEY = new AtomicLong(1);
  private static final int SLOTS = 64;  // steps registered at once (callers waiting for the step lock)

  private static final class Entry {
    final long key;
    final Body body;

    Entry(long key, Body body) {
      this.key = key;
      this.body = body;
    }
  }

  // The threads hold this object, so the pool is freed (its finalizer) once none can use it.
  private final JavaReplicaPool pool;
  // The registry: key k in slot k mod SLOTS. A ring, not a map: no boxing or locking
  // on the step's path (a ConcurrentHashMap's put and remove cost 0.3 us per step).
  private final AtomicReferenceArray<Entry> steps = new AtomicReferenceArray<>(SLOTS);
  // died[c]: what ended core c's thread outside any body (the join errors are the pool's).
  private final AtomicReferenceArray<Throwable> died;
  private volatile boolean anyDied;

  /** Threads for cores 0 .. numCores - 1 of system (the tests give it a core the system lacks). */
  ReplicaThreads(TpuSystem system, int numCores) {
    this.pool = new JavaReplicaPool(system, numCores);
    this.died = new AtomicReferenceArray<>(numCores);
    for (int c = 0; c < numCores; c++) start(c);
  }

  private void start(int core) {
    // No inherited thread locals, and the system class loader as an attached worker has:
    // the steps' callers' loaders are set per computation (JavaStep).
    Thread t = new Thread(null, () -> serve(core), THREAD_NAME + core, 0, false);
    t.setDaemon(true);
    t.setContextClassLoader(ClassLoader.getSystemClassLoader());
    t.start();
  }

  /**
   * Called by each step before it starts: a thread that ended on an unexpected join
   * error (InvalidArgument, say: retrying would hide it) or on an unexpected Throwable
   * outside its body is reported here, as an OpError naming the core, and a new thread
   * serves the core (the step after runs, or reports the error again). Nothing spins or
   * fails silently.
   */
  void throwIfAThreadEnded() {
    OpError first = null;
    if (anyDied) {
      anyDied = false;
      for (int c = 0; c < died.length(); c++) {
        Throwable t = died.getAndSet(c, null);
        if (t == null) continue;
        if (!pool.stopping()) start(c);  // stop() called, or a shutdown ended the joins
        if (first == null) {
          int code = t instanceof OpError ? ((OpError) t).code() : Status.Internal.swigValue();
          first = OpError.of(code, "the replica thread of core " + c + " ended: " + JavaStep.messageOf(t));
          first.initCause(t);
        }
      }
    }
    JavaPoolEnded ended = pool.takeEnded();
    if (ended != null) {
      try {
        if (!pool.stopping())
          for (int c : ended.cores()) start(c);
        if (first == null) first = OpError.of(ended.code(), ended.message());
      } finally {
        ended.delete();
      }
    }
    if (first != null) throw first;
  }

  /** Makes body findable by the participants of the step the caller is about to run. */
  long register(Body body) {
    for (;;) {
      long key = NEXT_KEY.getAndIncrement();
      int slot = (int) (key % SLOTS);
      if (steps.get(slot) == null && steps.compareAndSet(slot, null, new Entry(key, body))) return key;
      Thread.onSpinWait();  // a slot in use: the next key's
    }
  }

  /** After the step returned: a late participant keeps the body it found. */
  void unregister(long key) {
    steps.set((int) (key % SLOTS), null);
  }

  private Body registered(long key) {
    Entry e = steps.get((int) (key % SLOTS));
    return e != null && e.key == key ? e.body : null;
  }

  /**
   * Ends the threads: their joins are cancelled; returns when none is inside one (a
   * thread inside a computation ends once it has left). The caller shuts the system
   * down first if it is closing it.
   */
  void stop() {
    // A system and its stopped pool collected together finalize in any order: the
    // pool's delete() (synchronized on it) may have freed the native pool already.
    synchronized (pool) {
      if (JavaReplicaPool.getCPtr(pool) != 0) pool.stop();
    }
  }

  /** An unexpected Throwable ends core's thread: kept as is (no allocation), reported by the next step. */
  private void died(int core, Throwable t) {
    died.set(core, t);
    anyDied = true;
  }

  private void serve(int core) {
    JavaSeat seat;
    try {
      seat = pool.seat(core);
    } catch (Throwable t) {
      died(core, t);
      return;
    }
    try {
      ReplicaContext ctx = seat.context();  // re-pointed by next(): one proxy per thread
      int status = 0;
      while (seat.next(status) == 0) {
        if (FAIL_ONCE_IN_SERVE.get() != null) {
          Error e = FAIL_ONCE_IN_SERVE.getAndSet(null);
          if (e != null) throw e;
        }
        status = run(ctx, seat.key()).swigValue();
      }
      // The pool stopped, or the join failed (the pool keeps why, for the next step).
    } catch (Throwable t) {
      // Outside the body: this thread ends. Recorded before the participant leaves, so
      // a step that fails on it is followed by one that reports it.
      died(core, t);
      try {
        seat.abandon(Status.Internal.swigValue(), "the replica thread of core " + core + " ended: " + JavaStep.messageOf(t));
      } catch (Throwable ignored) {
        // delete() below fails the participant instead.
      }
    } finally {
      seat.delete();  // on this thread: gives its CPUs back
    }
  }

  /** Runs the participant: a Throwable of the body fails it with its message (as in callback mode). */
  private Status run(ReplicaContext ctx, long key) {
    Body body = registered(key);
    if (body == null) return ctx.fail(Status.Internal, "no computation is registered under step key " + key);
    try {
      Status status = body.run(ctx);
      return status != null ? status : ctx.fail(Status.InvalidArgument, "the computation returned a null status");
    } catch (Throwable t) {
      return ctx.fail(JavaStep.statusOf(t), JavaStep.messageOf(t));
    }
  }
}
