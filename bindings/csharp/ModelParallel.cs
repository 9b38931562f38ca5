// The cores of a replica (model parallelism): which logical core a computation runs
// on, and "this part runs on logical core n" (TensorFlow's `with tf.device(tpu.core(n))`).
using System;

namespace Tpurt {

public partial class ReplicaContext {
  // The logical core within the replica: XLA's partition id, tpu.core(n)'s n.
  public int LogicalCore { get { return joinedLogicalCore >= 0 ? joinedLogicalCore : GetLogicalCore(); } }
  // This replica's index in [0, NumReplicas()).
  public int ReplicaId() { return joinedReplicaId >= 0 ? joinedReplicaId : GetReplicaId(); }

  // The participant's ids from the pool's join (ReplicaPool.Serve sets them for the
  // participant and clears them after): -1 asks the native context.
  internal int joinedReplicaId = -1, joinedLogicalCore = -1;

  // Runs `body` on logical core n of every replica (the other cores skip it) and says
  // whether it ran here. Every participant of a step makes the same sequence of
  // collectives (include/tpurt/collectives.h): keep collectives out of `body` (one in
  // it fails the step with an InvalidArgumentError naming the cores that disagree).
  public bool OnCore(int n, Action body) {
    if (body == null) throw new ArgumentNullException(nameof(body));
    if (!IsCore(n)) return false;
    body();
    return true;
  }
  // body's result on logical core n, `otherwise` on the other cores.
  public T OnCore<T>(int n, Func<T> body, T otherwise = default(T)) {
    if (body == null) throw new ArgumentNullException(nameof(body));
    return IsCore(n) ? body() : otherwise;
  }
  // device: a name tpu.core(n) returns.
  public bool OnCore(string device, Action body) { return OnCore(CoreOf(device), body); }
  public T OnCore<T>(string device, Func<T> body, T otherwise = default(T)) { return OnCore(CoreOf(device), body, otherwise); }

  bool IsCore(int n) {
    int cores = NumCoresPerReplica();
    if (n < 0 || n >= cores)
      throw new ArgumentOutOfRangeException(nameof(n), n, "logical core " + n + " is outside [0, " + cores + "): the step has " +
                                            cores + " cores per replica");
    return LogicalCore == n;
  }

  // n of "device:TPU_REPLICATED_CORE:n" (tpu.core(n)), with or without a leading '/'.
  internal static int CoreOf(string device) {
    if (device == null) throw new ArgumentNullException(nameof(device));
    const string prefix = "device:TPU_REPLICATED_CORE:";
    string d = device.StartsWith("/") ? device.Substring(1) : device;
    if (!d.StartsWith(prefix, StringComparison.Ordinal) ||
        !int.TryParse(d.Substring(prefix.Length), System.Globalization.NumberStyles.None,
                      System.Globalization.CultureInfo.InvariantCulture, out int n))
      throw new ArgumentException("\"" + device + "\" is not a replicated core's device name (tpu.core(n): \"" + prefix + "n\")",
                                  nameof(device));
    return n;
  }
}

public static partial class tpu {
  // `with tf.device(tpu.core(n)):` inside a computation: runs body on logical core n of
  // the current replica only; true where it ran.
  public static bool on_core(int num, Action body) { return current_replica.OnCore(num, body); }
  public static bool on_core(string device, Action body) { return current_replica.OnCore(device, body); }
  public static bool OnCore(int num, Action body) { return on_core(num, body); }
  public static bool OnCore(string device, Action body) { return on_core(device, body); }
}

}
