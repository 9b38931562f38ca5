package org.tpurt;

import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReferenceArray;

/**
 * The Java threads that run a system's replicas (1.4): one daemon thread per core of this
 * task, named "tpurt-java-core-C", each looping tpu_step_join (TpuSystem.stepJoin) ->
 * the computation its step registered under JoinedStep.userData() -> tpu_step_leave. So
 * no computation is an upcall from a thread the library made: the steps run at the
 * speed of the JVM's own threads. Started by a system's first step in this mode.
 */
final class ReplicaThreads {
  /** What a participant runs: returns its status (Ok, or what ctx.fail returned). */
  interface Body {
    Status run(ReplicaContext ctx);
  }

  /** How long one tpu_step_join waits: bounds how late a thread sees setCallbackMode(true). */
  static final long JOIN_TIMEOUT_MS = 100;
  /** -Dorg.tpurt.callbackMode=true makes callback mode every system's default. */
  static final boolean CALLBACK_MODE_DEFAULT = Boolean.getBoolean("org.tpurt.callbackMode");
  static final String THREAD_NAME = "tpurt-java-core-";

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

  private final TpuSystem system;
  // The registry: key k in slot k mod SLOTS. A ring, not a map: no boxing or locking
  // on the step's path (a ConcurrentHashMap's put and remove cost 0.3 us per step).
  private final AtomicReferenceArray<Entry> steps = new AtomicReferenceArray<>(SLOTS);
  private final Object[] guards;  // held by thread c while it is inside stepJoin
  // ended[c]: why core c's thread ended on an unexpected stepJoin error (a programming
  // error, not a busy core); the next step throws it (throwIfAThreadEnded).
  private final AtomicReferenceArray<OpError> ended;
  private volatile boolean stopping;

  ReplicaThreads(TpuSystem system, int numCores) {
    this.system = system;
    this.guards = new Object[numCores];
    this.ended = new AtomicReferenceArray<>(numCores);
    for (int c = 0; c < numCores; c++) {
      guards[c] = new Object();
      start(c);
    }
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
   * Called by each step before it starts: a thread that ended on an unexpected stepJoin
   * error (InvalidArgument, say: retrying would hide it) is reported here, as that
   * error's OpError naming the core, and a new thread serves the core (the step after
   * runs, or reports the error again). Nothing spins or fails silently.
   */
  void throwIfAThreadEnded() {
    OpError first = null;
    for (int c = 0; c < ended.length(); c++) {
      OpError e = ended.getAndSet(c, null);
      if (e == null) continue;
      if (!stopping) start(c);
      if (first == null) first = e;
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
   * Ends the threads: each leaves its core at once if shutDown (the system's shutdown
   * wakes tpu_step_join with Cancelled), else within JOIN_TIMEOUT_MS; returns when none
   * is inside stepJoin any more. A thread inside a computation exits once it has left.
   */
  void stop(boolean shutDown) {
    stopping = true;
    if (shutDown) {
      try {
        system.shutdown();
      } catch (RuntimeException e) {
        // Closed already, or called from inside a computation: the release that follows decides.
      }
    }
    for (Object guard : guards) {
      synchronized (guard) {
        // Waits for the thread to return from stepJoin; it sees stopping next time.
      }
    }
  }

  private void serve(int core) {
    final Object guard = guards[core];
    for (;;) {
      JoinedStep joined = null;
      synchronized (guard) {
        if (stopping) return;
        try {
          joined = system.stepJoin(core, JOIN_TIMEOUT_MS);
        } catch (DeadlineExceededError e) {
          continue;  // no step came: ask again
        } catch (AlreadyExistsError e) {
          // Another thread holds the core (raw stepJoin): try again later.
        } catch (CancelledError | FailedPreconditionError e) {
          return;  // shut down, or closed: the pool ends
        } catch (Throwable e) {
          // InvalidArgument or anything else is a programming error: this thread ends,
          // and the next step reports it.
          String why = "the replica thread of core " + core + " ended: stepJoin failed: " + e.getMessage();
          OpError report = OpError.of(e instanceof OpError ? ((OpError) e).code() : Status.Internal.swigValue(), why);
          report.initCause(e);
          ended.set(core, report);
          return;
        }
      }
      if (joined == null) {
        try {
          Thread.sleep(JOIN_TIMEOUT_MS);
        } catch (InterruptedException e) {
          return;
        }
        continue;
      }
      run(joined);
    }
  }

  /** Runs the participant and leaves: a Throwable fails it with its message (as in callback mode). */
  private void run(JoinedStep joined) {
    try {
      Body body = registered(joined.userData());
      if (body == null) {
        joined.leaveFailed(Status.Internal, "no computation is registered under step key " + joined.userData());
        return;
      }
      Status status;
      try {
        status = body.run(joined.context());
      } catch (Throwable t) {
        joined.leaveFailed(JavaStep.statusOf(t), JavaStep.messageOf(t));
        return;
      }
      joined.leave(status);
    } catch (Throwable t) {
      // leave failed the participant itself (a wrong output count): the step reports it.
    } finally {
      joined.delete();
    }
  }
}
