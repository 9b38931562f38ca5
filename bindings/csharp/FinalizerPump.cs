// Keeps GC.WaitForPendingFinalizers() usable inside a computation on Mono.
//
// Why it hangs without this: no tpurt finalizer waits for anything. Mono 6.8's
// WaitForPendingFinalizers (metadata/gc.c) sleeps on one condition variable until the
// finalizer thread ends a pass, and that thread *signals* it (wakes one waiter), it does
// not broadcast. Replicas that call it together are served one per pass; a pass only
// happens when something prods the finalizer thread. The one replica woken goes on to
// a collective and waits there for the others, who wait for a pass nobody asks for:
// every thread sleeps for good. Plain managed threads hang the same way (with a Barrier
// instead of a collective) once there are objects to finalize, and a step always has
// some (each replica's ReplicaContext and tensor proxies are finalizable).
// The pump prods the finalizer thread every PeriodMs while a step runs, so each waiter
// gets its pass. A pass with nothing to do costs microseconds.
using System;
using System.Runtime.InteropServices;
using System.Threading;

namespace Tpurt {

internal static class FinalizerPump {
  const int PeriodMs = 10;
  // Mono exports it from the runtime (the mono executable or libmonosgen); elsewhere
  // (.NET's runtime has no such wait) the pump stays off.
  [DllImport("__Internal", EntryPoint = "mono_gc_finalize_notify")]
  static extern void NotifyFinalizerThread();

  static bool enabled = Type.GetType("Mono.Runtime") != null;
  static int steps;
  static readonly object gate = new object();
  static Thread thread;

  internal static void StepStarted() {
    if (!enabled || Interlocked.Increment(ref steps) != 1) return;
    lock (gate) {
      if (thread == null) {
        thread = new Thread(Run) { IsBackground = true, Name = "tpurt finalizer pump" };
        thread.Start();
      }
      Monitor.Pulse(gate);
    }
  }
  internal static void StepEnded() {
    if (enabled) Interlocked.Decrement(ref steps);
  }

  static void Run() {
    try {
      while (true) {
        lock (gate)
          while (Volatile.Read(ref steps) == 0) Monitor.Wait(gate);
        Thread.Sleep(PeriodMs);
        if (Volatile.Read(ref steps) > 0) NotifyFinalizerThread();
      }
    } catch (Exception e) when (e is EntryPointNotFoundException || e is DllNotFoundException) {
      enabled = false;
    }
  }
}

}
