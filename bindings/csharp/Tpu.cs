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
    // TensorFlow places the shutdown op on /job:{job}/device:TPU_SYSTEM:0: a job the
    // cluster lacks fails placement with InvalidArgumentError, and nothing shuts down.
    if (job != null && job != s.JobName())
      throw new InvalidArgumentError(WrongJob(job, s.JobName()));
    s.Shutdown();
  }
  internal static string WrongJob(string job, string own) {
    return "Cannot assign a device for operation ShutdownDistributedTPU: Could not satisfy explicit device specification '/job:" +
           job + "/device:TPU_SYSTEM:0' because no devices matching that specification are registered in this process; " +
           "the TPU system's job is \"" + own + "\"";
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

  // Runs one step: on the system's replica pool (ReplicaPool.cs) unless it uses
  // callbacks. callbacks runs it on a director, joined with a registry key.
  static T Step<T>(TpuSystem system, ReplicaComputation computation, Func<NativeComputation, T> callbacks, Func<long, T> joined) {
    if (computation == null) throw new ArgumentNullException(nameof(computation));
    return system.RunStep(computation, callbacks, joined);
  }

  // Runs one step on a pooled director. A failed step's director may still run late
  // replicas: it leaves the pool and stays alive until the system is disposed.
  internal static T StepOnDirector<T>(TpuSystem system, ReplicaComputation computation, Func<NativeComputation, T> run) {
    if (!idleDirectors.TryTake(out DelegateComputation director)) director = new DelegateComputation();
    director.body = computation;
    director.system = system;
    try {
      T outputs = run(director);
      director.body = null;
      director.system = null;
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

  // A step with no options and no inputs passes these (per thread: a step reads them, no
  // step writes them): a new StepOptions and TensorVector and their disposal cost more
  // than the rest of an empty step's managed work (about 2.8 and 1.8 us on Mono 6.8).
  [ThreadStatic] static StepOptions defaultOptions;
  [ThreadStatic] static TensorVector noInputs;
  static TensorVector NoInputs { get { return noInputs ?? (noInputs = new TensorVector()); } }

  // Disposes a step's own options or inputs, not the thread's shared ones.
  struct StepOwned : IDisposable {
    readonly IDisposable owned;
    internal StepOwned(IDisposable d) { owned = ReferenceEquals(d, defaultOptions) || ReferenceEquals(d, noInputs) ? null : d; }
    public void Dispose() { owned?.Dispose(); }
  }

  static StepOptions Options(InfeedQueue infeed_queue, DeviceAssignment device_assignment, IEnumerable<Shape> maximum_shapes,
                             int[][] input_partition_dims = null, int[][] output_partition_dims = null) {
    if (infeed_queue == null && device_assignment == null && maximum_shapes == null && input_partition_dims == null &&
        output_partition_dims == null)
      return defaultOptions ?? (defaultOptions = new StepOptions());
    var o = new StepOptions();
    if (input_partition_dims != null)
      using (Int32VectorVector p = Partitions(input_partition_dims)) o.InputPartitions = p;
    if (output_partition_dims != null)
      using (Int32VectorVector p = Partitions(output_partition_dims)) o.OutputPartitions = p;
    o.InfeedQueue = infeed_queue;
    o.DeviceAssignment = device_assignment;
    if (maximum_shapes != null) {
      var shapes = new ShapeVector();
      foreach (Shape s in maximum_shapes) shapes.Add(s);
      o.MaximumShapes = shapes;
    }
    return o;
  }

  // TPUEstimator's input_partition_dims / output_partition_dims: one entry per input
  // (output), each the number of pieces along every dimension of it, or null for whole
  // (include/tpurt/replicate.h, tpu_partition_spec).
  static Int32VectorVector Partitions(int[][] dims) {
    var v = new Int32VectorVector();
    foreach (int[] d in dims)
      using (var entry = new Int32Vector(d ?? new int[0])) v.Add(entry);
    return v;
  }

  // inputs[replica][i]; returns outputs[replica][j]. inputs null is TensorFlow's [[]]:
  // one replica with no inputs (or num_replicas, or the device assignment's replicas,
  // each with none); an empty list is zero replicas and returns none, as in
  // TensorFlow. num_outputs 0: each replica returns what the computation returned, as
  // many as it returned (TensorFlow counts them). With k cores per replica, the
  // computation runs on each (replica, logical core) and input_partition_dims /
  // output_partition_dims say how an input is cut over a replica's cores and an output
  // assembled from them.
  static Tensor[][] Replicate(ReplicaComputation computation, IEnumerable<IEnumerable<Tensor>> inputs,
                              InfeedQueue infeed_queue, DeviceAssignment device_assignment,
                              IEnumerable<Shape> maximum_shapes, int num_outputs, int num_replicas, TpuSystem system,
                              int[][] input_partition_dims = null, int[][] output_partition_dims = null) {
    if (computation == null) throw new ArgumentNullException(nameof(computation));
    TpuSystem s = SystemOrDefault(system);
    if (num_outputs < 0) throw new ArgumentOutOfRangeException(nameof(num_outputs), num_outputs, "must not be negative");
    var flat = new List<Tensor>();
    int replicas = 0, perReplica = -1;
    if (inputs != null) {
      foreach (IEnumerable<Tensor> replicaInputs in inputs) {
        int before = flat.Count;
        if (replicaInputs != null) {
          int i = 0;
          foreach (Tensor t in replicaInputs) {
            if (t == null) throw new ArgumentNullException("inputs", "inputs[" + i + "] is null");
            flat.Add(t);
            ++i;
          }
        }
        int n = flat.Count - before;
        if (perReplica >= 0 && n != perReplica)
          throw new ArgumentException("replica " + replicas + " has " + n + " inputs, replica 0 has " + perReplica, nameof(inputs));
        perReplica = n;
        ++replicas;
      }
    }
    if (replicas == 0) {
      replicas = num_replicas != 0 ? num_replicas : device_assignment != null ? device_assignment.NumReplicas() : inputs == null ? 1 : 0;
      if (replicas == 0) return new Tensor[0][]; // TensorFlow: inputs [] runs nothing
    } else if (num_replicas != 0 && num_replicas != replicas) {
      throw new ArgumentException(replicas + " replicas of inputs but num_replicas is " + num_replicas, nameof(num_replicas));
    }
    if (replicas < 0) throw new ArgumentOutOfRangeException(nameof(num_replicas), num_replicas, "must not be negative");
    // Partitioned outputs are assembled by the library, which needs their number.
    if (num_outputs == 0 && output_partition_dims != null) num_outputs = output_partition_dims.Length;
    Tensor[][] counted = num_outputs == 0 ? new Tensor[replicas][] : null;
    ReplicaComputation body = counted == null ? computation : Counting(computation, counted);
    int perRep = Math.Max(perReplica, 0);
    StepOptions options = Options(infeed_queue, device_assignment, maximum_shapes, input_partition_dims, output_partition_dims);
    // Default options on the pool: one P/Invoke (TpuSystem.ReplicateJoined).
    bool direct = ReferenceEquals(options, defaultOptions);
    Tensor[][] outputs;
    using (new StepOwned(options))
      outputs = Step(s, body, c => Split(Flat(flat, v => s.Replicate(c, replicas, perRep, v, num_outputs, options)), replicas, num_outputs),
                     k => direct ? s.ReplicateJoined(k, replicas, perRep, flat, num_outputs)
                                 : Split(Flat(flat, v => s.ReplicateOnJoinedThreads(k, replicas, perRep, v, num_outputs, options)), replicas, num_outputs));
    return counted == null ? outputs : Rows(counted);
  }

  static readonly Tensor[] NoOutputs = new Tensor[0];

  // The computation as a step with no outputs (the C ABI needs their number up front):
  // what each replica's computation returns (its logical core 0's) is kept in
  // outputs[replica], each tensor a reference of its own (the step disposes its inputs
  // and collective results when the computation returns). A null output stays null.
  static ReplicaComputation Counting(ReplicaComputation computation, Tensor[][] outputs) {
    return (ctx, inputs) => {
      Tensor[] result = computation(ctx, inputs);
      if (result == null || ctx.LogicalCore != 0) return NoOutputs;
      var own = result.Length == 0 ? NoOutputs : new Tensor[result.Length];
      for (int j = 0; j < result.Length; ++j) own[j] = result[j] == null ? null : new Tensor(result[j]);
      int replica = ctx.ReplicaId();
      if (replica >= 0 && replica < outputs.Length) outputs[replica] = own;
      return NoOutputs;
    };
  }
  // A replica that returned null (or ran on another task) has no outputs.
  static Tensor[][] Rows(Tensor[][] counted) {
    for (int r = 0; r < counted.Length; ++r) counted[r] = counted[r] ?? NoOutputs;
    return counted;
  }

  // run(the tensors as a TensorVector, disposed after).
  static TensorVector Flat(List<Tensor> tensors, Func<TensorVector, TensorVector> run) {
    if (tensors.Count == 0) return run(NoInputs);
    using (var v = new TensorVector()) {
      foreach (Tensor t in tensors) v.Add(t);
      return run(v);
    }
  }
  // outputs[replica * numOutputs + j] as outputs[replica][j]; disposes the vector.
  static Tensor[][] Split(TensorVector outputs, int replicas, int numOutputs) {
    using (outputs) {
      var result = new Tensor[replicas][];
      for (int r = 0; r < replicas; ++r) {
        result[r] = new Tensor[numOutputs];
        for (int j = 0; j < numOutputs; ++j) result[r][j] = outputs[r * numOutputs + j];
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
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null,
                                     int[][] input_partition_dims = null, int[][] output_partition_dims = null) {
    return Replicate(Adapt(computation), inputs, infeed_queue, device_assignment, Shapes(maximum_shapes), num_outputs, num_replicas, system,
                     input_partition_dims, output_partition_dims);
  }
  // The computation receives its ReplicaContext.
  public static Tensor[][] replicate(ReplicaComputation computation, IEnumerable<IEnumerable<Tensor>> inputs = null,
                                     InfeedQueue infeed_queue = null, DeviceAssignment device_assignment = null,
                                     string name = null, IEnumerable<TensorShape> maximum_shapes = null,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null,
                                     int[][] input_partition_dims = null, int[][] output_partition_dims = null) {
    return Replicate(computation, inputs, infeed_queue, device_assignment, Shapes(maximum_shapes), num_outputs, num_replicas, system,
                     input_partition_dims, output_partition_dims);
  }
  // One size: the single input's rank-1 bound.
  public static Tensor[][] replicate(Func<Tensor[], Tensor[]> computation, [Optional] IEnumerable<IEnumerable<Tensor>> inputs,
                                     [Optional] InfeedQueue infeed_queue, [Optional] DeviceAssignment device_assignment,
                                     [Optional] string name, int maximum_shapes,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null,
                                     int[][] input_partition_dims = null, int[][] output_partition_dims = null) {
    return Replicate(Adapt(computation), inputs, infeed_queue, device_assignment, Shapes(maximum_shapes), num_outputs, num_replicas, system,
                     input_partition_dims, output_partition_dims);
  }
  public static Tensor[][] replicate(ReplicaComputation computation, [Optional] IEnumerable<IEnumerable<Tensor>> inputs,
                                     [Optional] InfeedQueue infeed_queue, [Optional] DeviceAssignment device_assignment,
                                     [Optional] string name, int maximum_shapes,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null,
                                     int[][] input_partition_dims = null, int[][] output_partition_dims = null) {
    return Replicate(computation, inputs, infeed_queue, device_assignment, Shapes(maximum_shapes), num_outputs, num_replicas, system,
                     input_partition_dims, output_partition_dims);
  }
  public static Tensor[][] replicate(Func<Tensor[], Tensor[]> computation, [Optional] IEnumerable<IEnumerable<Tensor>> inputs,
                                     [Optional] InfeedQueue infeed_queue, [Optional] DeviceAssignment device_assignment,
                                     [Optional] string name, TensorShape maximum_shapes,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null,
                                     int[][] input_partition_dims = null, int[][] output_partition_dims = null) {
    return Replicate(Adapt(computation), inputs, infeed_queue, device_assignment, new[] { maximum_shapes.ToShape() }, num_outputs, num_replicas, system,
                     input_partition_dims, output_partition_dims);
  }
  public static Tensor[][] replicate(ReplicaComputation computation, [Optional] IEnumerable<IEnumerable<Tensor>> inputs,
                                     [Optional] InfeedQueue infeed_queue, [Optional] DeviceAssignment device_assignment,
                                     [Optional] string name, TensorShape maximum_shapes,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null,
                                     int[][] input_partition_dims = null, int[][] output_partition_dims = null) {
    return Replicate(computation, inputs, infeed_queue, device_assignment, new[] { maximum_shapes.ToShape() }, num_outputs, num_replicas, system,
                     input_partition_dims, output_partition_dims);
  }
  public static Tensor[][] replicate(Func<Tensor[], Tensor[]> computation, [Optional] IEnumerable<IEnumerable<Tensor>> inputs,
                                     [Optional] InfeedQueue infeed_queue, [Optional] DeviceAssignment device_assignment,
                                     [Optional] string name, Dimension maximum_shapes,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null,
                                     int[][] input_partition_dims = null, int[][] output_partition_dims = null) {
    return Replicate(Adapt(computation), inputs, infeed_queue, device_assignment, Shapes(maximum_shapes.Value ?? -1), num_outputs, num_replicas, system,
                     input_partition_dims, output_partition_dims);
  }
  public static Tensor[][] replicate(ReplicaComputation computation, [Optional] IEnumerable<IEnumerable<Tensor>> inputs,
                                     [Optional] InfeedQueue infeed_queue, [Optional] DeviceAssignment device_assignment,
                                     [Optional] string name, Dimension maximum_shapes,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null,
                                     int[][] input_partition_dims = null, int[][] output_partition_dims = null) {
    return Replicate(computation, inputs, infeed_queue, device_assignment, Shapes(maximum_shapes.Value ?? -1), num_outputs, num_replicas, system,
                     input_partition_dims, output_partition_dims);
  }
  // The seed's PythonClassContainer: a nested structure of shapes.
  public static Tensor[][] replicate(Func<Tensor[], Tensor[]> computation, [Optional] IEnumerable<IEnumerable<Tensor>> inputs,
                                     [Optional] InfeedQueue infeed_queue, [Optional] DeviceAssignment device_assignment,
                                     [Optional] string name, ShapeStructure maximum_shapes,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null,
                                     int[][] input_partition_dims = null, int[][] output_partition_dims = null) {
    return Replicate(Adapt(computation), inputs, infeed_queue, device_assignment, Shapes(maximum_shapes.Flatten()), num_outputs, num_replicas, system,
                     input_partition_dims, output_partition_dims);
  }
  public static Tensor[][] replicate(ReplicaComputation computation, [Optional] IEnumerable<IEnumerable<Tensor>> inputs,
                                     [Optional] InfeedQueue infeed_queue, [Optional] DeviceAssignment device_assignment,
                                     [Optional] string name, ShapeStructure maximum_shapes,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null,
                                     int[][] input_partition_dims = null, int[][] output_partition_dims = null) {
    return Replicate(computation, inputs, infeed_queue, device_assignment, Shapes(maximum_shapes.Flatten()), num_outputs, num_replicas, system,
                     input_partition_dims, output_partition_dims);
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
    if (computation == null) throw new ArgumentNullException(nameof(computation));
    TpuSystem s = SystemOrDefault(system);
    if (num_outputs < 0) throw new ArgumentOutOfRangeException(nameof(num_outputs), num_outputs, "must not be negative");
    Tensor[][] counted = num_outputs == 0 ? new Tensor[1][] : null;
    ReplicaComputation body = counted == null ? computation : Counting(computation, counted);
    TensorVector flat = inputs == null ? NoInputs : Vector(inputs, nameof(inputs));
    StepOptions options = Options(infeed_queue, device_assignment, null);
    Tensor[] outputs;
    using (new StepOwned(flat))
    using (new StepOwned(options))
      outputs = Array(Step(s, body, c => s.Rewrite(c, flat, num_outputs, options),
                           k => s.RewriteOnJoinedThreads(k, flat, num_outputs, options)));
    return counted == null ? outputs : Rows(counted)[0];
  }

  // tf.tpu.shard: null axes mean TensorFlow's defaults (0; every output concatenated).
  // num_outputs 0: as many as the computation returns (outputs_from_all_shards or
  // output_shard_axes, if given, say how many).
  public static Tensor[] shard(Func<Tensor[], Tensor[]> computation, IEnumerable<Tensor> inputs = null, int num_shards = 1,
                               int[] input_shard_axes = null, bool[] outputs_from_all_shards = null,
                               int[] output_shard_axes = null, InfeedQueue infeed_queue = null,
                               DeviceAssignment device_assignment = null, string name = null,
                               int num_outputs = 0, TpuSystem system = null) {
    if (num_outputs == 0 && outputs_from_all_shards != null) num_outputs = outputs_from_all_shards.Length;
    if (num_outputs == 0 && output_shard_axes != null) num_outputs = output_shard_axes.Length;
    if (outputs_from_all_shards != null && output_shard_axes != null && outputs_from_all_shards.Length != output_shard_axes.Length)
      throw new InvalidArgumentError("outputs_from_all_shards has " + outputs_from_all_shards.Length + " entries but output_shard_axes has " +
                                     output_shard_axes.Length + "; both have one per output");
    return Shard(computation, inputs, num_shards, input_shard_axes, outputs_from_all_shards, output_shard_axes, infeed_queue,
                 device_assignment, num_outputs, system, gatherAll: true);
  }

  // gatherAll: with the outputs counted (num_outputs 0), whether they are joined from
  // every shard (TensorFlow's default) or are shard 0's (outputs_from_all_shards=False).
  static Tensor[] Shard(Func<Tensor[], Tensor[]> computation, IEnumerable<Tensor> inputs, int num_shards,
                        int[] input_shard_axes, bool[] outputs_from_all_shards, int[] output_shard_axes,
                        InfeedQueue infeed_queue, DeviceAssignment device_assignment, int num_outputs, TpuSystem system,
                        bool gatherAll) {
    TpuSystem s = SystemOrDefault(system);
    ReplicaComputation body = Adapt(computation);
    if (num_outputs < 0) throw new ArgumentOutOfRangeException(nameof(num_outputs), num_outputs, "must not be negative");
    if (num_shards <= 0) throw new InvalidArgumentError("num_shards must be a positive integer, not " + num_shards);
    Tensor[][] counted = num_outputs == 0 ? new Tensor[num_shards][] : null;
    if (counted != null) body = Counting(body, counted);
    TensorVector flat = inputs == null ? NoInputs : Vector(inputs, nameof(inputs));
    var fromAll = new Int32Vector();
    if (outputs_from_all_shards != null) foreach (bool b in outputs_from_all_shards) fromAll.Add(b ? 1 : 0);
    var inAxes = input_shard_axes == null ? new Int32Vector() : new Int32Vector(input_shard_axes);
    var outAxes = output_shard_axes == null ? new Int32Vector() : new Int32Vector(output_shard_axes);
    StepOptions options = Options(infeed_queue, device_assignment, null);
    Tensor[] outputs;
    using (new StepOwned(flat))
    using (new StepOwned(options))
      outputs = Array(Step(s, body, c => s.Shard(c, flat, num_shards, inAxes, fromAll, outAxes, num_outputs, options),
                           k => s.ShardOnJoinedThreads(k, flat, num_shards, inAxes, fromAll, outAxes, num_outputs, options)));
    return counted == null ? outputs : JoinShards(counted, gatherAll);
  }

  // tf.tpu.batch_parallel: inputs split along dimension 0, outputs concatenated.
  public static Tensor[] batch_parallel(Func<Tensor[], Tensor[]> computation, IEnumerable<Tensor> inputs = null,
                                        int num_shards = 1, InfeedQueue infeed_queue = null,
                                        DeviceAssignment device_assignment = null, string name = null,
                                        int num_outputs = 0, TpuSystem system = null) {
    if (num_outputs != 0) {
      TpuSystem s = SystemOrDefault(system);
      ReplicaComputation body = Adapt(computation);
      TensorVector flat = inputs == null ? NoInputs : Vector(inputs, nameof(inputs));
      StepOptions options = Options(infeed_queue, device_assignment, null);
      using (new StepOwned(flat))
      using (new StepOwned(options))
        return Array(Step(s, body, c => s.BatchParallel(c, flat, num_shards, num_outputs, options),
                          k => s.BatchParallelOnJoinedThreads(k, flat, num_shards, num_outputs, options)));
    }
    // Counted: shard with every axis 0 and every output concatenated.
    return Shard(computation, inputs, num_shards, null, null, null, infeed_queue, device_assignment, 0, system, gatherAll: true);
  }

  // The counted outputs of shard / batch_parallel, joined as TensorFlow's shard does by
  // default: output j of every shard concatenated along axis 0 in shard order (scalar
  // outputs stacked into a [num_shards] vector); or shard 0's outputs (gatherAll false).
  static Tensor[] JoinShards(Tensor[][] shards, bool gatherAll) {
    for (int s = 0; s < shards.Length; ++s)
      if (shards[s] == null)
        throw new InvalidArgumentError("shard " + s + " returned no outputs to this task (it returned null, or ran on another task): " +
                                       "pass num_outputs to have the library join the shards' outputs");
    int k = shards[0].Length;
    for (int s = 1; s < shards.Length; ++s)
      if (shards[s].Length != k)
        throw new InvalidArgumentError("shard " + s + " returned " + shards[s].Length + " outputs, shard 0 returned " + k);
    if (!gatherAll) {
      for (int s = 1; s < shards.Length; ++s) Release(shards[s]);
      return shards[0];
    }
    var joined = new Tensor[k];
    try {
      for (int j = 0; j < k; ++j) joined[j] = Concatenated(shards, j);
    } finally {
      foreach (Tensor[] outputs in shards) Release(outputs);
    }
    return joined;
  }
  static void Release(Tensor[] tensors) {
    foreach (Tensor t in tensors) t?.Dispose();
  }
  static Tensor Concatenated(Tensor[][] shards, int j) {
    Tensor first = shards[0][j];
    if (first == null) throw new InvalidArgumentError("shard 0's output " + j + " is null; a concatenated output cannot be");
    DType dtype = first.Dtype();
    long[] dims = first.DimsArray;
    long rows = 0;
    using (var bytes = new ByteVector()) {
      for (int s = 0; s < shards.Length; ++s) {
        Tensor t = shards[s][j];
        if (t == null) throw new InvalidArgumentError("shard " + s + "'s output " + j + " is null; a concatenated output cannot be");
        long[] d = t.DimsArray;
        bool same = t.Dtype() == dtype && d.Length == dims.Length;
        for (int a = 1; same && a < d.Length; ++a) same = d[a] == dims[a];
        if (!same)
          throw new InvalidArgumentError("shard " + s + "'s output " + j + " (" + t.Dtype() + " [" + string.Join(", ", d) +
                                         "]) cannot be concatenated with shard 0's (" + dtype + " [" + string.Join(", ", dims) + "])");
        rows += d.Length == 0 ? 1 : d[0];
        using (ByteVector b = t.ToBytes()) bytes.AddRange(b);
      }
      long[] joined = dims.Length == 0 ? new[] { rows } : (long[])dims.Clone();
      joined[0] = rows;
      using (var v = new Int64Vector(joined)) return Tensor.FromBytes(dtype, v, bytes);
    }
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

  // tf.tpu.cross_replica_sum: every form returns one Tensor, as the seed's do.
  // group_assignment: null (one group), int[][], int[,], any nested IEnumerable<int>, a
  // GroupAssignment or mesh axes (mesh["model"]); group_mode (1.3): what its ids are,
  // null for cross-replica (or the mesh axes' mode).
  public static Tensor cross_replica_sum(Tensor x, object group_assignment = null, string name = null, GroupMode? group_mode = null) {
    if (x == null) throw new ArgumentNullException(nameof(x));
    ReplicaContext ctx = current_replica;
    using (var call = new CollectiveCall(group_assignment, group_mode, nameof(group_assignment)))
      return DelegateComputation.Own(ctx.CrossReplicaSum(x, call.Groups, call.Options));
  }
  public static Tensor cross_replica_sum(PerReplica x, object group_assignment = null, string name = null, GroupMode? group_mode = null) {
    if (x == null) throw new ArgumentNullException(nameof(x));
    int replica = current_replica.ReplicaId();
    if (replica >= x.Values.Count)
      throw new ArgumentException("PerReplica has " + x.Values.Count + " values; replica " + replica + " has none", nameof(x));
    return cross_replica_sum(x.Values[replica], group_assignment, name, group_mode);
  }
  public static Tensor cross_replica_sum(float[] x, object group_assignment = null, string name = null, GroupMode? group_mode = null) {
    return cross_replica_sum(Converted(x, nameof(x)), group_assignment, name, group_mode);
  }
  public static Tensor cross_replica_sum(double[] x, object group_assignment = null, string name = null, GroupMode? group_mode = null) {
    return cross_replica_sum(Converted(x, nameof(x)), group_assignment, name, group_mode);
  }
  public static Tensor cross_replica_sum(int[] x, object group_assignment = null, string name = null, GroupMode? group_mode = null) {
    return cross_replica_sum(Converted(x, nameof(x)), group_assignment, name, group_mode);
  }
  public static Tensor cross_replica_sum(long[] x, object group_assignment = null, string name = null, GroupMode? group_mode = null) {
    return cross_replica_sum(Converted(x, nameof(x)), group_assignment, name, group_mode);
  }
  // A structure is one tensor, as tf.convert_to_tensor packs it: its leaves (same
  // dtype and shape) stacked along a new first axis, summed in one collective.
  public static Tensor cross_replica_sum(ValueTuple<object, object> x, object group_assignment = null, string name = null, GroupMode? group_mode = null) {
    return cross_replica_sum(Converted(x, nameof(x)), group_assignment, name, group_mode);
  }
  public static Tensor cross_replica_sum(IEnumerable<object> x, object group_assignment = null, string name = null, GroupMode? group_mode = null) {
    return cross_replica_sum(Converted(x, nameof(x)), group_assignment, name, group_mode);
  }
  // A dictionary's values in key order (tf.nest's order for a dict).
  public static Tensor cross_replica_sum(IDictionary<object, object> x, object group_assignment = null, string name = null, GroupMode? group_mode = null) {
    return cross_replica_sum(Converted(x, nameof(x)), group_assignment, name, group_mode);
  }
  // Any of the above, chosen at run time.
  public static Tensor cross_replica_sum(object x, object group_assignment = null, string name = null, GroupMode? group_mode = null) {
    return cross_replica_sum(Converted(x, nameof(x)), group_assignment, name, group_mode);
  }

  // The sum over named axes of a mesh: cross_replica_sum(x, mesh, "model"), one form per
  // x. A null mesh with one string is the seed's positional (x, null, name), which these
  // overloads would otherwise capture.
  public static Tensor cross_replica_sum(Tensor x, Mesh mesh, string axis, params string[] more_axes) { return cross_replica_sum(x, Axes(mesh, axis, more_axes), MeshName(mesh, axis)); }
  public static Tensor cross_replica_sum(PerReplica x, Mesh mesh, string axis, params string[] more_axes) { return cross_replica_sum(x, Axes(mesh, axis, more_axes), MeshName(mesh, axis)); }
  public static Tensor cross_replica_sum(float[] x, Mesh mesh, string axis, params string[] more_axes) { return cross_replica_sum(x, Axes(mesh, axis, more_axes), MeshName(mesh, axis)); }
  public static Tensor cross_replica_sum(double[] x, Mesh mesh, string axis, params string[] more_axes) { return cross_replica_sum(x, Axes(mesh, axis, more_axes), MeshName(mesh, axis)); }
  public static Tensor cross_replica_sum(int[] x, Mesh mesh, string axis, params string[] more_axes) { return cross_replica_sum(x, Axes(mesh, axis, more_axes), MeshName(mesh, axis)); }
  public static Tensor cross_replica_sum(long[] x, Mesh mesh, string axis, params string[] more_axes) { return cross_replica_sum(x, Axes(mesh, axis, more_axes), MeshName(mesh, axis)); }
  public static Tensor cross_replica_sum(ValueTuple<object, object> x, Mesh mesh, string axis, params string[] more_axes) { return cross_replica_sum(x, Axes(mesh, axis, more_axes), MeshName(mesh, axis)); }
  public static Tensor cross_replica_sum(IEnumerable<object> x, Mesh mesh, string axis, params string[] more_axes) { return cross_replica_sum(x, Axes(mesh, axis, more_axes), MeshName(mesh, axis)); }
  public static Tensor cross_replica_sum(IDictionary<object, object> x, Mesh mesh, string axis, params string[] more_axes) { return cross_replica_sum(x, Axes(mesh, axis, more_axes), MeshName(mesh, axis)); }
  public static Tensor cross_replica_sum(object x, Mesh mesh, string axis, params string[] more_axes) { return cross_replica_sum(x, Axes(mesh, axis, more_axes), MeshName(mesh, axis)); }

  static MeshAxes Axes(Mesh mesh, string axis, string[] more_axes) {
    if (mesh == null && (more_axes == null || more_axes.Length == 0)) return null;
    if (mesh == null) throw new ArgumentNullException(nameof(mesh));
    var axes = new List<string> { axis };
    if (more_axes != null) axes.AddRange(more_axes);
    return new MeshAxes(mesh, axes.ToArray());
  }
  static string MeshName(Mesh mesh, string axis) { return mesh == null ? axis : null; }

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
