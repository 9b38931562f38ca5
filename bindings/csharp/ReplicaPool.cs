// Replicas on the binding's own managed threads (tpu_step_join / tpu_step_leave, 1.4):
// one background thread per core of the system, started at its first step, each
// joining its core and running whatever participant a step hands it. No computation
// is then a callback from a foreign thread into Mono (a director upcall and its
// proxies per replica). TpuSystem.UseCallbacks = true runs steps the old way.
using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Threading;

namespace Tpurt {

public partial class TpuSystem {
  ReplicaPool pool;
  bool useCallbacks;

  // false (the default): replicas run on the binding's threads, one per core, named
  // "tpurt replica core C". true: as callbacks from tpurt's worker threads (and the
  // pool, if it ran, stops: its cores are free for TpuSystem.StepJoin).
  public bool UseCallbacks {
    get { return useCallbacks; }
    set {
      ReplicaPool stopping = null;
      lock (this) {
        if (IsDisposed) throw new ObjectDisposedException(nameof(TpuSystem));
        useCallbacks = value;
        if (value) {
          stopping = pool;
          pool = null;
        }
      }
      stopping?.Stop(shutDown: false);
    }
  }

  // One step of `computation` on this system, on the pool (joined) or as callbacks.
  // A failed step's computation stays reachable from a late replica: on the pool
  // through the thread's own reference, as a callback through KeepUntilDispose.
  internal T RunStep<T>(ReplicaComputation computation, Func<NativeComputation, T> callbacks, Func<long, T> joined) {
    ReplicaPool p = useCallbacks ? null : StartPool();
    if (p == null) return tpu.StepOnDirector(this, computation, callbacks);
    p.ThrowIfAThreadEnded();
    long key = ReplicaPool.Register(computation, this);
    StepStarted();
    try {
      return joined(key);
    } finally {
      StepEnded();
      ReplicaPool.Unregister(key);
    }
  }

  ReplicaPool StartPool() {
    ReplicaPool p = Volatile.Read(ref pool);
    if (p != null) return p;
    lock (this) {
      if (IsDisposed) throw new ObjectDisposedException(nameof(TpuSystem));
      if (useCallbacks) return null;
      return pool ?? (pool = new ReplicaPool(this));
    }
  }

  // tpu.replicate's step with default options on the pool (a key from RunStep): one
  // P/Invoke, no SWIG vectors. inputs[replica * numInputs + i]; outputs likewise.
  internal Tensor[][] ReplicateJoined(long key, int numReplicas, int numInputs, List<Tensor> inputs, int numOutputs) {
    var inHandles = new IntPtr[inputs.Count];
    for (int i = 0; i < inHandles.Length; ++i) inHandles[i] = Tensor.getCPtr(inputs[i]).Handle;
    var outHandles = new IntPtr[numReplicas * numOutputs];
    int st = ReplicaPool.Native.TpurtCsReplicateJoined(swigCPtr, key, numReplicas, numInputs, inHandles, numOutputs, outHandles);
    GC.KeepAlive(inputs);
    if (st != 0) throw OpError.FromCode((Status)st, Marshal.PtrToStringAnsi(ReplicaPool.Native.TpurtCsLastError()));
    var result = new Tensor[numReplicas][];
    for (int r = 0; r < numReplicas; ++r) {
      result[r] = new Tensor[numOutputs];
      for (int j = 0; j < numOutputs; ++j) result[r][j] = new Tensor(outHandles[r * numOutputs + j], true);
    }
    return result;
  }

  // Shuts down and releases the system (idempotent); the pool's threads end first.
  public void Close() {
    lock (this) {
      StopPool();
      CloseNative();
    }
  }

  // A replica of a failed step may still run on the pool.
  internal bool PoolBusy { get { ReplicaPool p = pool; return p != null && p.Running; } }

  // Called by Dispose before the system is released: a shutdown wakes the pool's
  // threads (tpu_step_join returns CANCELLED), which must have left it first.
  void StopPool() {
    ReplicaPool p;
    lock (this) {
      p = pool;
      pool = null;
    }
    p?.Stop(shutDown: true);
  }
}

internal sealed class ReplicaPool {
  // How long a thread waits in tpu_step_join before it looks whether the pool stops.
  // A shutdown wakes it at once; this bounds UseCallbacks = true (no shutdown).
  internal const int JoinTimeoutMs = 200;
  const string ThreadName = "tpurt replica core ";

  static readonly ConcurrentDictionary<long, Entry> steps = new ConcurrentDictionary<long, Entry>();
  static long nextKey;

  sealed class Entry {
    internal ReplicaComputation body;
    internal TpuSystem system;
  }

  // The step's key (its tpu_joined_step.user_data), registered while its call runs.
  internal static long Register(ReplicaComputation computation, TpuSystem system) {
    long key = Interlocked.Increment(ref nextKey);
    steps[key] = new Entry { body = computation, system = system };
    return key;
  }
  internal static void Unregister(long key) {
    steps.TryRemove(key, out Entry _);
  }

  readonly TpuSystem system;
  readonly HandleRef native; // the support layer's tpurt::TpuSystem*
  readonly Thread[] threads;
  // ended[c]: why core c's thread ended on an unexpected join status (a programming
  // error, not a busy core): the next step throws it (ThrowIfAThreadEnded).
  readonly OpError[] ended;
  volatile bool stopping;
  int running;

  internal bool Running { get { return Volatile.Read(ref running) > 0; } }

  internal ReplicaPool(TpuSystem system) : this(system, system.NumCores()) {}

  // One thread per core 0 to cores - 1 (the tests give it a core the system lacks).
  internal ReplicaPool(TpuSystem system, int cores) {
    this.system = system;
    native = TpuSystem.getCPtr(system);
    threads = new Thread[cores];
    ended = new OpError[cores];
    for (int c = 0; c < cores; ++c) Start(c);
  }

  void Start(int core) {
    var t = new Thread(() => Serve(core)) { IsBackground = true, Name = ThreadName + core };
    threads[core] = t;
    t.Start();
  }

  // A thread that ended on an unexpected tpu_step_join status (ended[c], set by Serve)
  // is reported by the next step, before it starts: it throws that status's OpError
  // naming the core, and a new thread serves the core (the step after runs, or
  // reports the error again). Nothing spins or fails silently.
  internal void ThrowIfAThreadEnded() {
    OpError first = null;
    for (int c = 0; c < ended.Length; ++c) {
      OpError e = Interlocked.Exchange(ref ended[c], null);
      if (e == null) continue;
      if (!stopping) Start(c);
      if (first == null) first = e;
    }
    if (first != null) throw first;
  }

  // Ends the threads: a shutdown wakes them at once, else each ends at its join's
  // timeout. A thread still inside a late computation is not waited for beyond that.
  internal void Stop(bool shutDown) {
    stopping = true;
    if (shutDown) Native.TpurtCsShutdown(native);
    foreach (Thread t in threads)
      if (t != Thread.CurrentThread) t.Join(2 * JoinTimeoutMs);
  }

  void Serve(int core) {
    IntPtr joined = Native.TpurtCsJoinedNew();
    // One proxy for every step's context (the glue re-points the native one): a new
    // finalizable proxy per step allocates on Mono's slow path.
    var ctx = new ReplicaContext(Native.TpurtCsJoinedContext(joined), false);
    GC.SuppressFinalize(ctx);
    bool inStep = false;
    try {
      while (!stopping) {
        Status st = (Status)Native.TpurtCsJoin(native, core, JoinTimeoutMs, joined, out long key, out int numInputs,
                                               out int numOutputs);
        if (st == Status.Cancelled || st == Status.FailedPrecondition) break; // shut down
        if (st == Status.DeadlineExceeded) continue;                          // no step came
        if (st == Status.AlreadyExists) {
          // Another thread holds the core (a raw TpuSystem.StepJoin, or this core's
          // previous thread, killed, not yet gone): try again shortly.
          Thread.Sleep(JoinTimeoutMs);
          continue;
        }
        if (st != Status.Ok) {
          // InvalidArgument or anything else is a programming error: retrying would
          // hide it. This thread ends, and the next step reports why.
          string message = Marshal.PtrToStringAnsi(Native.TpurtCsLastError());
          Volatile.Write(ref ended[core], OpError.FromCode(st, "the replica thread of core " + core +
                                                               " ended: tpu_step_join failed: " + message));
          break;
        }
        inStep = true;
        Status status;
        if (steps.TryGetValue(key, out Entry entry)) {
          Interlocked.Increment(ref running);
          try {
            status = DelegateComputation.RunReplica(entry.body, entry.system, ctx, numInputs, numOutputs);
          } finally {
            Interlocked.Decrement(ref running);
          }
        } else {
          // Only a step that failed and returned leaves a participant behind. (An
          // exception escaping a thread would end the process.)
          try {
            status = ctx.Fail(Status.Aborted, "the step ended before this replica started");
          } catch (Exception) {
            status = Status.Aborted;
          }
        }
        inStep = false;
        Native.TpurtCsLeave(joined, (int)status);
      }
    } finally {
      // A thread aborted inside a computation never left: its thread's exit fails the
      // participant ("exited before tpu_step_leave"); a new thread serves the core.
      Native.TpurtCsJoinedDelete(joined);
      if (inStep && !stopping) Start(core);
    }
  }

  // The hot path by hand-written P/Invoke into the glue (tpurt_csharp.i): one call to
  // join, one to leave, with the native context and outputs reused across steps.
  internal static class Native {
    const string Glue = "tpurt_csharp";
    [DllImport(Glue)] internal static extern IntPtr TpurtCsJoinedNew();
    [DllImport(Glue)] internal static extern void TpurtCsJoinedDelete(IntPtr joined);
    [DllImport(Glue)] internal static extern IntPtr TpurtCsJoinedContext(IntPtr joined);
    [DllImport(Glue)] internal static extern int TpurtCsJoin(HandleRef system, int core, long timeoutMs, IntPtr joined, out long key,
                                                            out int numInputs, out int numOutputs);
    [DllImport(Glue)] internal static extern int TpurtCsLeave(IntPtr joined, int status);
    [DllImport(Glue)] internal static extern int TpurtCsShutdown(HandleRef system);
    [DllImport(Glue)] internal static extern int TpurtCsReplicateJoined(HandleRef system, long key, int numReplicas, int numInputs,
                                                                       IntPtr[] inputs, int numOutputs, [Out] IntPtr[] outputs);
    [DllImport(Glue)] internal static extern IntPtr TpurtCsLastError();
  }
}

}
