// System lifetime: live systems are disposed at process exit, and a failed step's
// computation stays referenced until Dispose (a late replica may still call it).
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Runtime.InteropServices;
using System.Threading;

namespace Tpurt {

internal static class SystemRegistry {
  // How long the exit-time dispose waits for steps still running (documented in
  // bindings/csharp/README.md): a background thread's step does not hold the
  // process, as a daemon thread's does not in Java.
  internal const int ExitWaitMs = 500;

  static readonly HashSet<TpuSystem> live = new HashSet<TpuSystem>();

  static SystemRegistry() {
    AppDomain.CurrentDomain.ProcessExit += (sender, args) => DisposeAll();
  }

  internal static void Track(TpuSystem system) {
    lock (live) live.Add(system);
  }
  internal static void Untrack(TpuSystem system) {
    lock (live) live.Remove(system);
  }

  [DllImport("libc", EntryPoint = "_exit")]
  static extern void Exit(int status);

  // Mono waits at exit for the library's worker threads, so idle systems are disposed
  // (which joins them). A system whose step (or late replica) still runs after
  // ExitWaitMs is not (its release would wait for it, up to the system's deadline): the
  // process ends at once with its exit code, as it would in Java or Go.
  static void DisposeAll() {
    TpuSystem[] systems;
    lock (live) systems = new List<TpuSystem>(live).ToArray();
    var clock = Stopwatch.StartNew();
    bool busy = false;
    foreach (TpuSystem s in systems) {
      while (s.Busy && clock.ElapsedMilliseconds < ExitWaitMs) Thread.Sleep(5);
      if (s.Busy) busy = true;
      else s.Dispose();
    }
    if (!busy) return;
    Console.Out.Flush();
    Console.Error.Flush();
    Exit(Environment.ExitCode);
  }
}

public partial class TpuSystem {
  readonly List<object> keptComputations = new List<object>();
  int stepsRunning;

  // A step is running, or a failed step's late replica still is.
  internal bool Busy {
    get {
      if (Volatile.Read(ref stepsRunning) > 0 || PoolBusy) return true;
      lock (keptComputations)
        foreach (object c in keptComputations)
          if (c is DelegateComputation d && d.Running) return true;
      return false;
    }
  }
  // Around every step (the generated Replicate, Rewrite, Shard, BatchParallel).
  void StepStarted() {
    Interlocked.Increment(ref stepsRunning);
    FinalizerPump.StepStarted();
  }
  void StepEnded() {
    FinalizerPump.StepEnded();
    Interlocked.Decrement(ref stepsRunning);
  }

  // A step failed: late replicas may still run `computation`, so it lives until Dispose.
  internal void KeepUntilDispose(object computation) {
    lock (keptComputations) keptComputations.Add(computation);
  }
  // Called by the generated Dispose: a disposed proxy has no native object, and a
  // call through it would pass a null `this` to C++.
  internal bool IsDisposed { get { return swigCPtr.Handle == IntPtr.Zero; } }
  void OnDisposed() {
    lock (keptComputations) keptComputations.Clear();
    SystemRegistry.Untrack(this);
    tpu.ForgetDefault(this);
  }
}

}
