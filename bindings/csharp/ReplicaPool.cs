// Replicas on the binding's own managed threads (tpu_step_join / tpu_step_leave, 1.4):
// one background thread per core of the system, started at its first step, each
// joining its core and running whatever participant a step hands it. No computation
// is then a callback from a foreign thread into Mono (a director upcall and its
// proxies per replica). TpuSystem.UseCallbacks = true runs steps the old way.
using System;
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
  const string ThreadName = "tpurt replica core ";

  // The steps registered, key k in slot k mod Slots: a participant finds its body with
  // one volatile read (a ConcurrentDictionary's lookup, add and remove cost more than
  // the rest of the registry's work per step).
  const int Slots = 64; // steps at once in the process (callers waiting for a step lock too)
  static readonly Entry[] steps = new Entry[Slots];
  static long nextKey;

  sealed class Entry {
    internal long key;
    internal ReplicaComputation body;
    internal TpuSystem system;
  }

  // The step's key (its tpu_joined_step.user_data), registered while its call runs.
  internal static long Register(ReplicaComputation computation, TpuSystem system) {
    var entry = new Entry { body = computation, system = system };
    for (;;) {
      entry.key = Interlocked.Increment(ref nextKey);
      if (Interlocked.CompareExchange(ref steps[entry.key % Slots], entry, null) == null) return entry.key;
      Thread.Yield(); // the slot is another step's: try the next key
    }
  }
  internal static void Unregister(long key) {
    Volatile.Write(ref steps[key % Slots], null);
  }

  readonly HandleRef native; // the support layer's tpurt::TpuSystem*
  readonly IntPtr pool;      // the one replica pool (replica_pool.hpp) the threads sit in
  readonly int[] endedCores; // ThrowIfAThreadEnded's buffer: no allocation per step
  int stopped;
  int freed;  // the finalizer ran: a system finalized in the same collection must not call in

  // A replica of a failed step may still run on the pool.
  internal bool Running { get { return Volatile.Read(ref freed) == 0 && Native.TpurtCsPoolRunning(pool) > 0; } }

  internal ReplicaPool(TpuSystem system) : this(system, system.NumCores()) {}

  // One thread per core 0 to cores - 1 (the tests give it a core the system lacks).
  internal ReplicaPool(TpuSystem system, int cores) {
    native = TpuSystem.getCPtr(system);
    endedCores = new int[Math.Max(cores, 1)];
    pool = Native.TpurtCsPoolNew(native, cores);
    if (pool == IntPtr.Zero)
      throw OpError.FromCode(Status.FailedPrecondition, Marshal.PtrToStringAnsi(Native.TpurtCsLastError()));
    for (int c = 0; c < cores; ++c) Start(c);
  }

  void Start(int core) {
    new Thread(() => Serve(core)) { IsBackground = true, Name = ThreadName + core }.Start();
  }

  // A thread that ended on an unexpected tpu_step_join status is reported by the next
  // step, before it starts: it throws that status's OpError naming the core, and a new
  // thread serves the core (the step after runs, or reports the error again).
  // Nothing spins or fails silently.
  internal void ThrowIfAThreadEnded() {
    int code = Native.TpurtCsPoolTakeEnded(pool, endedCores, endedCores.Length, out int count);
    if (code == 0) return;
    string message = Marshal.PtrToStringAnsi(Native.TpurtCsLastError());
    for (int i = 0; i < count; ++i) Start(endedCores[i]);
    throw OpError.FromCode((Status)code, message);
  }

  // Ends the threads: the pool cancels their joins (after a shutdown, if asked), and
  // returns once none is inside tpu_step_join; a thread still inside a late computation
  // ends when it leaves it.
  internal void Stop(bool shutDown) {
    if (Volatile.Read(ref freed) != 0 || Interlocked.Exchange(ref stopped, 1) != 0) return;
    if (shutDown) Native.TpurtCsShutdown(native);
    Native.TpurtCsPoolStop(pool);
  }

  // Freed once no thread can use it: its threads hold this object.
  ~ReplicaPool() {
    Volatile.Write(ref freed, 1);
    Native.TpurtCsPoolFree(pool);
  }

  void Serve(int core) {
    IntPtr seat = Native.TpurtCsSeat(pool, core);
    if (seat == IntPtr.Zero) return;
    // One proxy for every step's context (the seat re-points the native one): a new
    // finalizable proxy per step allocates on Mono's slow path.
    var ctx = new ReplicaContext(Native.TpurtCsSeatContext(seat), false);
    GC.SuppressFinalize(ctx);
    bool inStep = false;
    try {
      Status status = Status.Ok;
      while (Native.TpurtCsNext(seat, (int)status, out long key, out int numInputs, out int numOutputs,
                                out ctx.joinedReplicaId, out ctx.joinedLogicalCore) == 0) {
        inStep = true;
        Entry entry = Volatile.Read(ref steps[key % Slots]);
        if (entry != null && entry.key == key) {
          status = DelegateComputation.RunReplica(entry.body, entry.system, ctx, numInputs, numOutputs);
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
        ctx.joinedReplicaId = ctx.joinedLogicalCore = -1; // a context kept past its step asks the native one
      }
    } finally {
      // A thread aborted inside a computation: freeing its seat fails the participant;
      // a new thread serves the core.
      Native.TpurtCsSeatFree(seat);
      if (inStep && Volatile.Read(ref stopped) == 0) Start(core);
    }
  }

  // The hot path by hand-written P/Invoke into the glue (tpurt_csharp.i): one call to
  // join, one to leave, with the native context and outputs reused across steps.
  internal static class Native {
    const string Glue = "tpurt_csharp";
    [DllImport(Glue)] internal static extern IntPtr TpurtCsPoolNew(HandleRef system, int cores);
    [DllImport(Glue)] internal static extern void TpurtCsPoolStop(IntPtr pool);
    [DllImport(Glue)] internal static extern void TpurtCsPoolFree(IntPtr pool);
    [DllImport(Glue)] internal static extern int TpurtCsPoolRunning(IntPtr pool);
    [DllImport(Glue)] internal static extern int TpurtCsPoolTakeEnded(IntPtr pool, [Out] int[] cores, int capacity, out int count);
    [DllImport(Glue)] internal static extern IntPtr TpurtCsSeat(IntPtr pool, int core);
    [DllImport(Glue)] internal static extern void TpurtCsSeatFree(IntPtr seat);
    [DllImport(Glue)] internal static extern IntPtr TpurtCsSeatContext(IntPtr seat);
    [DllImport(Glue)] internal static extern int TpurtCsNext(IntPtr seat, int status, out long key, out int numInputs,
                                                            out int numOutputs, out int replicaId, out int logicalCore);
    [DllImport(Glue)] internal static extern int TpurtCsShutdown(HandleRef system);
    [DllImport(Glue)] internal static extern int TpurtCsReplicateJoined(HandleRef system, long key, int numReplicas, int numInputs,
                                                                       IntPtr[] inputs, int numOutputs, [Out] IntPtr[] outputs);
    [DllImport(Glue)] internal static extern IntPtr TpurtCsLastError();
  }
}

}
