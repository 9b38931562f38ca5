// PascalCase aliases and the _dyn twins: object parameters checked at run time, with
// an ArgumentException naming the type a parameter cannot take.
using System;
using System.Collections.Generic;

namespace Tpurt {

public static partial class tpu {
  public static Tensor CrossReplicaSum(Tensor x, object group_assignment = null, GroupMode? group_mode = null) { return cross_replica_sum(x, group_assignment, null, group_mode); }
  public static Tensor CrossReplicaSum(PerReplica x, object group_assignment = null, GroupMode? group_mode = null) { return cross_replica_sum(x, group_assignment, null, group_mode); }
  public static Tensor CrossReplicaSum(float[] x, object group_assignment = null, GroupMode? group_mode = null) { return cross_replica_sum(x, group_assignment, null, group_mode); }
  public static Tensor CrossReplicaSum(double[] x, object group_assignment = null, GroupMode? group_mode = null) { return cross_replica_sum(x, group_assignment, null, group_mode); }
  public static Tensor CrossReplicaSum(int[] x, object group_assignment = null, GroupMode? group_mode = null) { return cross_replica_sum(x, group_assignment, null, group_mode); }
  public static Tensor CrossReplicaSum(long[] x, object group_assignment = null, GroupMode? group_mode = null) { return cross_replica_sum(x, group_assignment, null, group_mode); }
  public static Tensor CrossReplicaSum(ValueTuple<object, object> x, object group_assignment = null, GroupMode? group_mode = null) { return cross_replica_sum(x, group_assignment, null, group_mode); }
  public static Tensor CrossReplicaSum(IEnumerable<object> x, object group_assignment = null, GroupMode? group_mode = null) { return cross_replica_sum(x, group_assignment, null, group_mode); }
  public static Tensor CrossReplicaSum(IDictionary<object, object> x, object group_assignment = null, GroupMode? group_mode = null) { return cross_replica_sum(x, group_assignment, null, group_mode); }
  public static Tensor CrossReplicaSum(object x, object group_assignment = null, GroupMode? group_mode = null) { return cross_replica_sum(x, group_assignment, null, group_mode); }
  public static Tensor CrossReplicaSum(object x, Mesh mesh, string axis, params string[] more_axes) {
    if (mesh == null) throw new ArgumentNullException(nameof(mesh));
    return cross_replica_sum(x, Axes(mesh, axis, more_axes));
  }
  public static Tensor[][] Replicate(Func<Tensor[], Tensor[]> computation, IEnumerable<IEnumerable<Tensor>> inputs = null,
                                     InfeedQueue infeed_queue = null, DeviceAssignment device_assignment = null,
                                     int num_outputs = 0, int num_replicas = 0, TpuSystem system = null,
                                     int[][] input_partition_dims = null, int[][] output_partition_dims = null) {
    return replicate(computation, inputs, infeed_queue, device_assignment, num_outputs: num_outputs, num_replicas: num_replicas, system: system,
                     input_partition_dims: input_partition_dims, output_partition_dims: output_partition_dims);
  }
  public static Tensor[] Rewrite(Func<Tensor[], Tensor[]> computation, IEnumerable<Tensor> inputs = null, int num_outputs = 0, TpuSystem system = null) {
    return rewrite(computation, inputs, null, null, null, num_outputs, system);
  }
  public static Tensor[] Shard(Func<Tensor[], Tensor[]> computation, IEnumerable<Tensor> inputs = null, int num_shards = 1, int num_outputs = 0, TpuSystem system = null) {
    return shard(computation, inputs, num_shards, num_outputs: num_outputs, system: system);
  }
  public static Tensor[] BatchParallel(Func<Tensor[], Tensor[]> computation, IEnumerable<Tensor> inputs = null, int num_shards = 1, int num_outputs = 0, TpuSystem system = null) {
    return batch_parallel(computation, inputs, num_shards, num_outputs: num_outputs, system: system);
  }
  public static TpuSystem InitializeSystem(byte[] embedding_config = null, string job = null, int num_cores = 0) {
    return initialize_system(embedding_config, job, num_cores);
  }
  public static void ShutdownSystem(string job = null, TpuSystem system = null) { shutdown_system(job, system); }
  public static string Core(int num) { return core(num); }
  public static IDisposable Bfloat16Scope() { return bfloat16_scope(); }
  public static object OutsideCompilation(Delegate computation, params object[] args) { return outside_compilation(computation, args); }
  public static object OutsideCompilation(Delegate computation, IDictionary<string, object> kwargs, params object[] args) {
    return outside_compilation(computation, kwargs, args);
  }

  // ---- _dyn ---------------------------------------------------------------------

  static ArgumentException Cannot(string parameter, object value, string expected) {
    return new ArgumentException(parameter + " cannot be a " + (value == null ? "null" : value.GetType().FullName) +
                                 "; expected " + expected, parameter);
  }
  static ReplicaComputation ComputationOf(object computation) {
    if (computation is ReplicaComputation) return (ReplicaComputation)computation;
    if (computation is Func<Tensor[], Tensor[]>) return Adapt((Func<Tensor[], Tensor[]>)computation);
    throw Cannot("computation", computation, "Func<Tensor[], Tensor[]> or ReplicaComputation");
  }
  static T As<T>(string parameter, object value, string expected) where T : class {
    if (value == null) return null;
    if (value is T) return (T)value;
    throw Cannot(parameter, value, expected);
  }
  static int IntOf(string parameter, object value, int fallback) {
    if (value == null) return fallback;
    if (value is int) return (int)value;
    if (value is long && (long)value >= int.MinValue && (long)value <= int.MaxValue) return (int)(long)value;
    throw Cannot(parameter, value, "int");
  }

  public static object cross_replica_sum_dyn(object x, object group_assignment = null, object name = null, object group_mode = null) {
    if (group_mode != null && !(group_mode is GroupMode)) throw Cannot("group_mode", group_mode, "GroupMode");
    return cross_replica_sum(x, group_assignment, As<string>("name", name, "string"), (GroupMode?)group_mode);
  }
  public static object replicate_dyn(object computation, object inputs = null, object infeed_queue = null,
                                     object device_assignment = null, object name = null, object maximum_shapes = null,
                                     object num_outputs = null, object num_replicas = null, object system = null,
                                     object input_partition_dims = null, object output_partition_dims = null) {
    IEnumerable<Shape> shapes;
    if (maximum_shapes == null) shapes = null;
    else if (maximum_shapes is int) shapes = Shapes((int)maximum_shapes);
    else if (maximum_shapes is Dimension) shapes = Shapes(((Dimension)maximum_shapes).Value ?? -1);
    else if (maximum_shapes is TensorShape) shapes = new[] { ((TensorShape)maximum_shapes).ToShape() };
    else if (maximum_shapes is IEnumerable<TensorShape>) shapes = Shapes((IEnumerable<TensorShape>)maximum_shapes);
    else if (maximum_shapes is ShapeStructure) shapes = Shapes(((ShapeStructure)maximum_shapes).Flatten());
    else throw Cannot("maximum_shapes", maximum_shapes, "int, Dimension, TensorShape, IEnumerable<TensorShape> or ShapeStructure");
    return Replicate(ComputationOf(computation),
                     As<IEnumerable<IEnumerable<Tensor>>>("inputs", inputs, "IEnumerable<IEnumerable<Tensor>>"),
                     As<InfeedQueue>("infeed_queue", infeed_queue, "InfeedQueue"),
                     As<DeviceAssignment>("device_assignment", device_assignment, "DeviceAssignment"),
                     shapes, IntOf("num_outputs", num_outputs, 0), IntOf("num_replicas", num_replicas, 0),
                     As<TpuSystem>("system", system, "TpuSystem"), PartitionsOf("input_partition_dims", input_partition_dims),
                     PartitionsOf("output_partition_dims", output_partition_dims));
  }
  public static object rewrite_dyn(object computation, object inputs = null, object infeed_queue = null,
                                   object device_assignment = null, object name = null, object num_outputs = null, object system = null) {
    return rewrite(ComputationOf(computation), As<IEnumerable<Tensor>>("inputs", inputs, "IEnumerable<Tensor>"),
                   As<InfeedQueue>("infeed_queue", infeed_queue, "InfeedQueue"),
                   As<DeviceAssignment>("device_assignment", device_assignment, "DeviceAssignment"), null,
                   IntOf("num_outputs", num_outputs, 0), As<TpuSystem>("system", system, "TpuSystem"));
  }
  // tf.tpu.shard's nine parameters (outputs_from_all_shards: a bool for every output,
  // or one per output), then tpurt's num_outputs and system.
  public static object shard_dyn(object computation, object inputs = null, object num_shards = null,
                                 object input_shard_axes = null, object outputs_from_all_shards = null,
                                 object output_shard_axes = null, object infeed_queue = null,
                                 object device_assignment = null, object name = null,
                                 object num_outputs = null, object system = null) {
    var f = As<Func<Tensor[], Tensor[]>>("computation", computation, "Func<Tensor[], Tensor[]>");
    if (f == null) throw Cannot("computation", computation, "Func<Tensor[], Tensor[]>");
    int outputs = IntOf("num_outputs", num_outputs, 0);
    bool[] fromAll;
    if (outputs_from_all_shards == null || outputs_from_all_shards is bool[]) fromAll = (bool[])outputs_from_all_shards;
    else if (outputs_from_all_shards is bool && !(bool)outputs_from_all_shards && outputs == 0) {
      // False for every output, counted: shard 0's outputs.
      return Shard(f, As<IEnumerable<Tensor>>("inputs", inputs, "IEnumerable<Tensor>"), IntOf("num_shards", num_shards, 1),
                   IntsOf("input_shard_axes", input_shard_axes), null, IntsOf("output_shard_axes", output_shard_axes),
                   As<InfeedQueue>("infeed_queue", infeed_queue, "InfeedQueue"),
                   As<DeviceAssignment>("device_assignment", device_assignment, "DeviceAssignment"), 0,
                   As<TpuSystem>("system", system, "TpuSystem"), gatherAll: false);
    }
    else if (outputs_from_all_shards is bool) fromAll = (bool)outputs_from_all_shards ? null : new bool[Math.Max(outputs, 0)];
    else if (outputs_from_all_shards is IEnumerable<bool>) fromAll = new List<bool>((IEnumerable<bool>)outputs_from_all_shards).ToArray();
    else throw Cannot("outputs_from_all_shards", outputs_from_all_shards, "bool, bool[] or IEnumerable<bool>");
    return shard(f, As<IEnumerable<Tensor>>("inputs", inputs, "IEnumerable<Tensor>"), IntOf("num_shards", num_shards, 1),
                 IntsOf("input_shard_axes", input_shard_axes), fromAll, IntsOf("output_shard_axes", output_shard_axes),
                 As<InfeedQueue>("infeed_queue", infeed_queue, "InfeedQueue"),
                 As<DeviceAssignment>("device_assignment", device_assignment, "DeviceAssignment"),
                 As<string>("name", name, "string"), outputs, As<TpuSystem>("system", system, "TpuSystem"));
  }
  // int[][] or any nested IEnumerable<int> (a null entry: not partitioned).
  static int[][] PartitionsOf(string parameter, object value) {
    if (value == null || value is int[][]) return (int[][])value;
    if (!(value is System.Collections.IEnumerable entries) || value is string)
      throw Cannot(parameter, value, "int[][] or a nested IEnumerable<int>");
    var list = new List<int[]>();
    foreach (object e in entries) {
      if (e != null && !(e is IEnumerable<int>)) throw Cannot(parameter + "[" + list.Count + "]", e, "IEnumerable<int> or null");
      list.Add(e == null ? null : new List<int>((IEnumerable<int>)e).ToArray());
    }
    return list.ToArray();
  }
  static int[] IntsOf(string parameter, object value) {
    if (value == null || value is int[]) return (int[])value;
    if (value is IEnumerable<int>) return new List<int>((IEnumerable<int>)value).ToArray();
    throw Cannot(parameter, value, "int[] or IEnumerable<int>");
  }
  public static object batch_parallel_dyn(object computation, object inputs = null, object num_shards = null,
                                          object infeed_queue = null, object device_assignment = null, object name = null,
                                          object num_outputs = null, object system = null) {
    var f = As<Func<Tensor[], Tensor[]>>("computation", computation, "Func<Tensor[], Tensor[]>");
    if (f == null) throw Cannot("computation", computation, "Func<Tensor[], Tensor[]>");
    return batch_parallel(f, As<IEnumerable<Tensor>>("inputs", inputs, "IEnumerable<Tensor>"), IntOf("num_shards", num_shards, 1),
                          As<InfeedQueue>("infeed_queue", infeed_queue, "InfeedQueue"),
                          As<DeviceAssignment>("device_assignment", device_assignment, "DeviceAssignment"), null,
                          IntOf("num_outputs", num_outputs, 0), As<TpuSystem>("system", system, "TpuSystem"));
  }
  public static object initialize_system_dyn(object embedding_config = null, object job = null, object num_cores = null) {
    return initialize_system(As<byte[]>("embedding_config", embedding_config, "byte[]"), As<string>("job", job, "string"),
                             IntOf("num_cores", num_cores, 0));
  }
  public static object shutdown_system_dyn(object job = null, object system = null) {
    shutdown_system(As<string>("job", job, "string"), As<TpuSystem>("system", system, "TpuSystem"));
    return null;
  }
  public static object core_dyn(object num) { return core(IntOf("num", num ?? throw Cannot("num", null, "int"), 0)); }
  public static object bfloat16_scope_dyn() { return bfloat16_scope(); }
  public static object outside_compilation_dyn(object computation, params object[] args) {
    return outside_compilation(As<Delegate>("computation", computation ?? throw Cannot("computation", null, "Delegate"), "Delegate"), args);
  }
  public static object outside_compilation_dyn(object computation, IDictionary<string, object> kwargs, params object[] args) {
    return outside_compilation(As<Delegate>("computation", computation ?? throw Cannot("computation", null, "Delegate"), "Delegate"), kwargs, args);
  }
}

}
