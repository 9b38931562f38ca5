// tf.tpu for C#: the seed's static methods (snake_case, TensorFlow's parameter names
// and defaults), PascalCase aliases, and _dyn twins that take object and dispatch at
// run time. Steps run on the system from initialize_system unless `system` is given.
// The C ABI needs each step's output count up front: num_outputs says it.
using System;
using System.Collections;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Reflection;
using System.Runtime.InteropServices;
using System.Threading;

namespace Tpurt {

public static partial class tpu {
  static TpuSystem defaultSystem;

  // ---- system ------------------------------------------------------------------

  // tf.tpu.initialize_system: starts a system (the default for the step functions);
  // its SerializedTopology() is TensorFlow's TopologyProto.
  public static TpuSystem initialize_system(byte[] embedding_config = null, string job = null,
                                            int num_cores = 0) {
    if (num_cores < 0) throw new ArgumentOutOfRangeException(nameof(num_cores), num_cores, "must not be negative");
    using (var options = new SystemOptions()) {
      options.NumCores = num_cores;
      if (job != null) options.JobName = job;
      if (embedding_config != null) options.EmbeddingConfig = new ByteVector(embedding_config);
      TpuSystem system = TpuSystem.InitializeSystem(options);
      defaultSystem = system;
      return system;
    }
  }
  // tf.tpu.shutdown_system: shuts the system down (a step on it then fails with
  // FailedPreconditionError); Dispose still releases it.
  public static void shutdown_system(string job = null, TpuSystem system = null) {
    TpuSystem s = SystemOrDefault(system);
    if (job != null && job != s.JobName())
      throw new ArgumentException("the system's job is \"" + s.JobName() + "\", not \"" + job + "\"", nameof(job));
    s.Shutdown();
  }
  public static string core(int num) { return TpurtNative.Core(num); }

  static TpuSystem SystemOrDefault(TpuSystem system) {
    TpuSystem s = system ?? defaultSystem;
    if (s == null) throw new FailedPreconditionError("no TPU system: call tpu.initialize_system first or pass system");
    if (s.IsDisposed) throw new ObjectDisposedException(nameof(TpuSystem));
    return s;
  }
  internal static void UseAsDefault(TpuSystem system) { defaultSystem = system; }
  internal static void ForgetDefault(TpuSystem system) {
    Interlocked.CompareExchange(ref defaultSystem, null, system);
  }

  // ---- steps -------------------------------------------------------------------

  static ReplicaComputation Adapt(Func<Tensor[], Tensor[]> computation) {
    if (computation == null) throw new ArgumentNullException(nameof(computation));
    return (ctx, inputs) => computation(inputs);
  }

  static readonly ConcurrentBag<DelegateComputation> idleDirectors = new ConcurrentBag<DelegateComputation>();

  // Runs one step on a pooled director. A failed step's director may still run late
  // replicas: it leaves the pool and stays alive until the system is disposed.
  static TensorVector Step(TpuSystem system, ReplicaComputation computation, Func<NativeComputation, TensorVector> run) {
    if (computation == null) throw new ArgumentNullException(nameof(computation));
    if (!idleDirectors.TryTake(out DelegateComputation director)) director = new DelegateComputation();
    director.body = computation;
    try {
      TensorVector outputs = run(director);
      director.body = null;
      idleDirectors.Add(director);
      return outputs;
    } catch {
      system.KeepUntilDispose(director);
      throw;
    }
  }

  static TensorVector Vector(IEnumerable<Tensor> tensors, string what) {
    var v = new TensorVector();
    if (tensors == null) return v;
    int i = 0;
    foreach (Tensor t in tensors) {
      if (t == null) throw new ArgumentNullException(what, what + "[" + i + "] is null");
      v.Add(t);
      ++i;
    }
    return v;
  }
  // The vector's elements as an array; disposes the vector, whose own references
  // would otherwise hold the tensors' buffers until the GC finalizes it.
  static Tensor[] Array(TensorVector v) {
    using (v) {
      var a = new Tensor[v.Count];
      v.CopyTo(a);
      return a;
    }
  }

  static StepOptions Options(InfeedQueue infeed_queue, DeviceAssignment device_assignment, IEnumerable<Shape> maximum_shapes) {
    var o = new StepOptions();
    o.InfeedQueue = infeed_queue;
    o.DeviceAssignment = device_assignment;
    if (maximum_shapes != null) {
      var shapes = new ShapeVector();
      foreach (Shape s in maximum_shapes) shapes.Add(s);
      o.MaximumShapes = shapes;
    }
    return o;
  }

  // inputs[replica][i]; returns outputs[replica][j]. No inputs: num_replicas replicas.
  static Tensor[][] Replicate(ReplicaComputation computation, IEnumerable<IEnumerable<Tensor>> inputs,
                              InfeedQueue infeed_queue, DeviceAssignment device_assignment,
                              IEnumerable<Shape> maximum_shapes, int num_outputs, int num_replicas, TpuSystem system) {
    TpuSystem s = SystemOrDefault(system);
    if (num_outputs < 0) throw new ArgumentOutOfRangeException(nameof(num_outputs), num_outputs, "must not be negative");
    var flat = new TensorVector();
    int replicas = 0, perReplica = -1;
    if (inputs != null) {
      foreach (IEnumerable<Tensor> replicaInputs in inputs) {
        int before = flat.Count;
        using (TensorVector v = Vector(replicaInputs, "inputs"))
          foreach (Tensor t in v) flat.Add(t);
        int n = flat.Count - before;
        if (perReplica >= 0 && n != perReplica)
          throw new ArgumentException("replica " + replicas + " has " + n + " inputs, replica 0 has " + perReplica, nameof(inputs));
        perReplica = n;
        ++replicas;
      }
    }
    if (replicas == 0) replicas = num_replicas;
    else if (num_replicas != 0 && num_replicas != replicas)
      throw new ArgumentException(replicas + " replicas of inputs but num_replicas is " + num_replicas, nameof(num_replicas));
    if (replicas <= 0) throw new ArgumentException("no inputs and no num_replicas: how many replicas?", nameof(num_replicas));
    using (flat)
    using (StepOptions options = Options(infeed_queue, device_assignment, maximum_shapes))
    using (TensorVector outputs = Step(s, computation, c => s.Replicate(c, replicas, Math.Max(perReplica, 0), flat, num_outputs, options))) {
      var result = new Tensor[replicas][];
      for (int r = 0; r < replicas; ++r) {
        result[r] = new Tensor[num_outputs];
        for (int j = 0; j < num_outputs; ++j) result[r][j] = outputs[r * num_outputs + j];
      }
      return result;
    }
  }

  // maximum_shapes: null means none (no padding).
  static IEnumerable<Shape> Shapes(IEnumerable<TensorShape> shapes) {
    if (shapes == null) return null;
    var list = new List<Shape>();
    foreach (TensorShape t in shapes) list.Add(t.ToShape());
    return list;
  }
  static IEnumerable<Shape> Shapes(long size) {
    if (size < -1) throw new ArgumentOutOfRangeException("maximum_shapes", size, "a size is -1 (unknown) or >= 0");
    return new[] { Shape.Of(new Int64Vector(new[] { size })) };
  }

  // tf.tpu.replicate: the seed's five maximum_shapes forms, each for both computation
  // types. The forms' types take disjoint arguments, null only IEnumerable<TensorShape>
  // (the form whose maximum_shapes defaults to none), so every call with TensorFlow's
  // names and defaults has one candidate: mcs calls two candidates that both fill in
  // omitted defaults ambiguous. [Optional] lets the other forms default what precedes
  // their (required) maximum_shapes.
  public static Tensor[][] replicate(Func<Tensor[], Tensor[]> computation, IEnumerable<IEnumerable<Tensor>> inputs = null,
                                     InfeedQueue infeed_queue = null, DeviceAssignment device_assignment = null,
                                     string name = null, IEnumerable<TensorShape> maximum_shapes = null,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null) {
    return Replicate(Adapt(computation), inputs, infeed_queue, device_assignment, Shapes(maximum_shapes), num_outputs, num_replicas, system);
  }
  // The computation receives its ReplicaContext.
  public static Tensor[][] replicate(ReplicaComputation computation, IEnumerable<IEnumerable<Tensor>> inputs = null,
                                     InfeedQueue infeed_queue = null, DeviceAssignment device_assignment = null,
                                     string name = null, IEnumerable<TensorShape> maximum_shapes = null,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null) {
    return Replicate(computation, inputs, infeed_queue, device_assignment, Shapes(maximum_shapes), num_outputs, num_replicas, system);
  }
  // One size: the single input's rank-1 bound.
  public static Tensor[][] replicate(Func<Tensor[], Tensor[]> computation, [Optional] IEnumerable<IEnumerable<Tensor>> inputs,
                                     [Optional] InfeedQueue infeed_queue, [Optional] DeviceAssignment device_assignment,
                                     [Optional] string name, int maximum_shapes,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null) {
    return Replicate(Adapt(computation), inputs, infeed_queue, device_assignment, Shapes(maximum_shapes), num_outputs, num_replicas, system);
  }
  public static Tensor[][] replicate(ReplicaComputation computation, [Optional] IEnumerable<IEnumerable<Tensor>> inputs,
                                     [Optional] InfeedQueue infeed_queue, [Optional] DeviceAssignment device_assignment,
                                     [Optional] string name, int maximum_shapes,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null) {
    return Replicate(computation, inputs, infeed_queue, device_assignment, Shapes(maximum_shapes), num_outputs, num_replicas, system);
  }
  public static Tensor[][] replicate(Func<Tensor[], Tensor[]> computation, [Optional] IEnumerable<IEnumerable<Tensor>> inputs,
                                     [Optional] InfeedQueue infeed_queue, [Optional] DeviceAssignment device_assignment,
                                     [Optional] string name, TensorShape maximum_shapes,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null) {
    return Replicate(Adapt(computation), inputs, infeed_queue, device_assignment, new[] { maximum_shapes.ToShape() }, num_outputs, num_replicas, system);
  }
  public static Tensor[][] replicate(ReplicaComputation computation, [Optional] IEnumerable<IEnumerable<Tensor>> inputs,
                                     [Optional] InfeedQueue infeed_queue, [Optional] DeviceAssignment device_assignment,
                                     [Optional] string name, TensorShape maximum_shapes,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null) {
    return Replicate(computation, inputs, infeed_queue, device_assignment, new[] { maximum_shapes.ToShape() }, num_outputs, num_replicas, system);
  }
  public static Tensor[][] replicate(Func<Tensor[], Tensor[]> computation, [Optional] IEnumerable<IEnumerable<Tensor>> inputs,
                                     [Optional] InfeedQueue infeed_queue, [Optional] DeviceAssignment device_assignment,
                                     [Optional] string name, Dimension maximum_shapes,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null) {
    return Replicate(Adapt(computation), inputs, infeed_queue, device_assignment, Shapes(maximum_shapes.Value ?? -1), num_outputs, num_replicas, system);
  }
  public static Tensor[][] replicate(ReplicaComputation computation, [Optional] IEnumerable<IEnumerable<Tensor>> inputs,
                                     [Optional] InfeedQueue infeed_queue, [Optional] DeviceAssignment device_assignment,
                                     [Optional] string name, Dimension maximum_shapes,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null) {
    return Replicate(computation, inputs, infeed_queue, device_assignment, Shapes(maximum_shapes.Value ?? -1), num_outputs, num_replicas, system);
  }
  // The seed's PythonClassContainer: a nested structure of shapes.
  public static Tensor[][] replicate(Func<Tensor[], Tensor[]> computation, [Optional] IEnumerable<IEnumerable<Tensor>> inputs,
                                     [Optional] InfeedQueue infeed_queue, [Optional] DeviceAssignment device_assignment,
                                     [Optional] string name, ShapeStructure maximum_shapes,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null) {
    return Replicate(Adapt(computation), inputs, infeed_queue, device_assignment, Shapes(maximum_shapes.Flatten()), num_outputs, num_replicas, system);
  }
  public static Tensor[][] replicate(ReplicaComputation computation, [Optional] IEnumerable<IEnumerable<Tensor>> inputs,
                                     [Optional] InfeedQueue infeed_queue, [Optional] DeviceAssignment device_assignment,
                                     [Optional] string name, ShapeStructure maximum_shapes,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null) {
    return Replicate(computation, inputs, infeed_queue, device_assignment, Shapes(maximum_shapes.Flatten()), num_outputs, num_replicas, system);
  }

  // tf.tpu.rewrite: one replica.
  public static Tensor[] rewrite(Func<Tensor[], Tensor[]> computation, IEnumerable<Tensor> inputs = null,
                                 InfeedQueue infeed_queue = null, DeviceAssignment device_assignment = null,
                                 string name = null, int num_outputs = 0, TpuSystem system = null) {
    return rewrite(Adapt(computation), inputs, infeed_queue, device_assignment, name, num_outputs, system);
  }
  public static Tensor[] rewrite(ReplicaComputation computation, IEnumerable<Tensor> inputs = null,
                                 InfeedQueue infeed_queue = null, DeviceAssignment device_assignment = null,
                                 string name = null, int num_outputs = 0, TpuSystem system = null) {
    TpuSystem s = SystemOrDefault(system);
    TensorVector flat = Vector(inputs, nameof(inputs));
    using (flat)
    using (StepOptions options = Options(infeed_queue, device_assignment, null))
      return Array(Step(s, computation, c => s.Rewrite(c, flat, num_outputs, options)));
  }

  // tf.tpu.shard: null axes mean TensorFlow's defaults (0; every output concatenated).
  public static Tensor[] shard(Func<Tensor[], Tensor[]> computation, IEnumerable<Tensor> inputs = null, int num_shards = 1,
                               int[] input_shard_axes = null, bool[] outputs_from_all_shards = null,
                               int[] output_shard_axes = null, InfeedQueue infeed_queue = null,
                               DeviceAssignment device_assignment = null, string name = null,
                               int num_outputs = 0, TpuSystem system = null) {
    TpuSystem s = SystemOrDefault(system);
    ReplicaComputation body = Adapt(computation);
    TensorVector flat = Vector(inputs, nameof(inputs));
    var fromAll = new Int32Vector();
    if (outputs_from_all_shards != null) foreach (bool b in outputs_from_all_shards) fromAll.Add(b ? 1 : 0);
    var inAxes = input_shard_axes == null ? new Int32Vector() : new Int32Vector(input_shard_axes);
    var outAxes = output_shard_axes == null ? new Int32Vector() : new Int32Vector(output_shard_axes);
    using (flat)
    using (StepOptions options = Options(infeed_queue, device_assignment, null))
      return Array(Step(s, body, c => s.Shard(c, flat, num_shards, inAxes, fromAll, outAxes, num_outputs, options)));
  }

  // tf.tpu.batch_parallel: inputs split along dimension 0, outputs concatenated.
  public static Tensor[] batch_parallel(Func<Tensor[], Tensor[]> computation, IEnumerable<Tensor> inputs = null,
                                        int num_shards = 1, InfeedQueue infeed_queue = null,
                                        DeviceAssignment device_assignment = null, string name = null,
                                        int num_outputs = 0, TpuSystem system = null) {
    TpuSystem s = SystemOrDefault(system);
    ReplicaComputation body = Adapt(computation);
    TensorVector flat = Vector(inputs, nameof(inputs));
    using (flat)
    using (StepOptions options = Options(infeed_queue, device_assignment, null))
      return Array(Step(s, body, c => s.BatchParallel(c, flat, num_shards, num_outputs, options)));
  }

  // ---- inside a computation -------------------------------------------------------

  // The replica whose computation runs on this thread (TensorFlow's API has no ctx).
  public static ReplicaContext current_replica {
    get {
      ReplicaContext ctx = DelegateComputation.Current;
      if (ctx == null) throw new FailedPreconditionError("not inside a replicated computation");
      return ctx;
    }
  }

  // group_assignment: null (one group), int[][], int[,] or any nested IEnumerable<int>.
  static GroupAssignment Groups(object group_assignment) {
    if (group_assignment == null) return new GroupAssignment();
    var rows = new List<int[]>();
    if (group_assignment is int[,] grid) {
      for (int g = 0; g < grid.GetLength(0); ++g) {
        var row = new int[grid.GetLength(1)];
        for (int i = 0; i < row.Length; ++i) row[i] = grid[g, i];
        rows.Add(row);
      }
    } else if (group_assignment is IEnumerable groups && !(group_assignment is string)) {
      foreach (object g in groups) {
        if (!(g is IEnumerable<int> ids))
          throw new ArgumentException("group_assignment[" + rows.Count + "] is a " + (g == null ? "null" : g.GetType().FullName) +
                                      ", not a list of replica ids", nameof(group_assignment));
        rows.Add(new List<int>(ids).ToArray());
      }
    } else {
      throw Cannot("group_assignment", group_assignment, "int[][], int[,] or a nested IEnumerable<int>");
    }
    int size = rows.Count == 0 ? 0 : rows[0].Length;
    var flat = new Int32Vector();
    for (int g = 0; g < rows.Count; ++g) {
      if (rows[g].Length != size)
        throw new ArgumentException("group " + g + " has " + rows[g].Length + " replicas, group 0 has " + size, nameof(group_assignment));
      foreach (int id in rows[g]) flat.Add(id);
    }
    return new GroupAssignment(flat, rows.Count, size);
  }

  // tf.tpu.cross_replica_sum: every form returns one Tensor, as the seed's do.
  public static Tensor cross_replica_sum(Tensor x, object group_assignment = null, string name = null) {
    if (x == null) throw new ArgumentNullException(nameof(x));
    ReplicaContext ctx = current_replica;
    using (GroupAssignment groups = Groups(group_assignment))
    using (var options = new CollectiveOptions())
      return DelegateComputation.Own(ctx.CrossReplicaSum(x, groups, options));
  }
  public static Tensor cross_replica_sum(PerReplica x, object group_assignment = null, string name = null) {
    if (x == null) throw new ArgumentNullException(nameof(x));
    int replica = current_replica.ReplicaId();
    if (replica >= x.Values.Count)
      throw new ArgumentException("PerReplica has " + x.Values.Count + " values; replica " + replica + " has none", nameof(x));
    return cross_replica_sum(x.Values[replica], group_assignment, name);
  }
  public static Tensor cross_replica_sum(float[] x, object group_assignment = null, string name = null) {
    return cross_replica_sum(Converted(x, nameof(x)), group_assignment, name);
  }
  public static Tensor cross_replica_sum(double[] x, object group_assignment = null, string name = null) {
    return cross_replica_sum(Converted(x, nameof(x)), group_assignment, name);
  }
  public static Tensor cross_replica_sum(int[] x, object group_assignment = null, string name = null) {
    return cross_replica_sum(Converted(x, nameof(x)), group_assignment, name);
  }
  public static Tensor cross_replica_sum(long[] x, object group_assignment = null, string name = null) {
    return cross_replica_sum(Converted(x, nameof(x)), group_assignment, name);
  }
  // A structure is one tensor, as tf.convert_to_tensor packs it: its leaves (same
  // dtype and shape) stacked along a new first axis, summed in one collective.
  public static Tensor cross_replica_sum(ValueTuple<object, object> x, object group_assignment = null, string name = null) {
    return cross_replica_sum(Converted(x, nameof(x)), group_assignment, name);
  }
  public static Tensor cross_replica_sum(IEnumerable<object> x, object group_assignment = null, string name = null) {
    return cross_replica_sum(Converted(x, nameof(x)), group_assignment, name);
  }
  // A dictionary's values in key order (tf.nest's order for a dict).
  public static Tensor cross_replica_sum(IDictionary<object, object> x, object group_assignment = null, string name = null) {
    return cross_replica_sum(Converted(x, nameof(x)), group_assignment, name);
  }
  // Any of the above, chosen at run time.
  public static Tensor cross_replica_sum(object x, object group_assignment = null, string name = null) {
    return cross_replica_sum(Converted(x, nameof(x)), group_assignment, name);
  }

  // x as one tensor owned by the step (released when the computation returns).
  static Tensor Converted(object x, string what) {
    if (x == null) throw new ArgumentNullException(what);
    if (x is Tensor t) return t;
    if (x is PerReplica p) {
      int replica = current_replica.ReplicaId();
      if (replica >= p.Values.Count)
        throw new ArgumentException("PerReplica has " + p.Values.Count + " values; replica " + replica + " has none", what);
      return p.Values[replica];
    }
    return DelegateComputation.Own(TensorConversion.ToTensor(x, what));
  }

  // tf.tpu.outside_compilation: runs `computation(args)` on the host (one call per
  // replica, in order) and returns its result.
  public static object outside_compilation(Delegate computation, params object[] args) {
    if (computation == null) throw new ArgumentNullException(nameof(computation));
    return OnHostWithTensors(computation, args ?? new object[0]);
  }
  // kwargs bind the computation's parameters by name after the positional args.
  public static object outside_compilation(Delegate computation, IDictionary<string, object> kwargs, params object[] args) {
    if (computation == null) throw new ArgumentNullException(nameof(computation));
    if (kwargs == null) throw new ArgumentNullException(nameof(kwargs));
    return OnHostWithTensors(computation, Bind(computation.Method, kwargs, args ?? new object[0]));
  }
  static object[] Bind(MethodInfo method, IDictionary<string, object> kwargs, object[] args) {
    ParameterInfo[] parameters = method.GetParameters();
    if (args.Length > parameters.Length)
      throw new ArgumentException(args.Length + " positional arguments for " + parameters.Length + " parameters", nameof(args));
    var bound = new object[parameters.Length];
    var used = new HashSet<string>();
    for (int i = 0; i < parameters.Length; ++i) {
      string n = parameters[i].Name;
      if (i < args.Length) {
        if (kwargs.ContainsKey(n)) throw new ArgumentException("parameter \"" + n + "\" given twice", nameof(kwargs));
        bound[i] = args[i];
      } else if (kwargs.TryGetValue(n, out object v)) {
        bound[i] = v;
        used.Add(n);
      } else if (parameters[i].HasDefaultValue) {
        bound[i] = parameters[i].DefaultValue;
      } else {
        throw new ArgumentException("parameter \"" + n + "\" has no value", nameof(kwargs));
      }
    }
    foreach (string k in kwargs.Keys)
      if (!used.Contains(k)) throw new ArgumentException("the computation has no parameter \"" + k + "\"", nameof(kwargs));
    return bound;
  }

  // tf.tpu.bfloat16_scope: bfloat16 inside the using block of this replica.
  public static IDisposable bfloat16_scope() {
    return new ReplicaBfloat16Scope(current_replica);
  }
  sealed class ReplicaBfloat16Scope : IDisposable {
    ReplicaContext ctx;
    internal ReplicaBfloat16Scope(ReplicaContext ctx) {
      ctx.Bfloat16ScopeEnter();
      this.ctx = ctx;
    }
    public void Dispose() {
      if (ctx == null) return;
      ctx.Bfloat16ScopeExit();
      ctx = null;
    }
  }
}

}
