// System lifetime: live systems are disposed at process exit, and a failed step's
// computation stays referenced until Dispose (a late replica may still call it).
using System;
using System.Collections.Generic;

namespace Tpurt {

internal static class SystemRegistry {
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
  static void DisposeAll() {
    TpuSystem[] systems;
    lock (live) systems = new List<TpuSystem>(live).ToArray();
    foreach (TpuSystem s in systems) s.Dispose();
  }
}

public partial class TpuSystem {
  readonly List<object> keptComputations = new List<object>();

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
