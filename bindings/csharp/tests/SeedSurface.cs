// Compile-only: one method per overload of tf.tpu in seed 004 (the .NET surface),
// named after it, calling tpurt's tpu with the seed's parameter names as named
// arguments, once with every parameter and once with TensorFlow's defaults. mcs
// compiling this file is the test; SeedSurfaceTests only checks that every overload
// has its method. Never run (the calls need a system and, some, a replica).
#pragma warning disable 219 // the results are assigned only to check their types
using System;
using System.Collections.Generic;
using System.Linq;
using System.Reflection;
using NUnit.Framework;
using Tpurt;

static class SeedSurface {
  static readonly Func<Tensor[], Tensor[]> f = x => x;
  static readonly ReplicaComputation fc = (ctx, x) => x;
  static readonly Tensor t = null;
  static readonly IEnumerable<IEnumerable<Tensor>> replicas = new[] { new[] { t } };
  static readonly Tensor[] inputs = { t };
  static readonly InfeedQueue q = null;
  static readonly DeviceAssignment da = null;

  // IList<object> batch_parallel(object computation, object inputs, int num_shards, object infeed_queue, object device_assignment, string name)
  static void batch_parallel() {
    IList<Tensor> all = tpu.batch_parallel(computation: f, inputs: inputs, num_shards: 2, infeed_queue: q, device_assignment: da, name: "n");
    all = tpu.batch_parallel(computation: f);
  }
  // object batch_parallel_dyn(object computation, object inputs, ImplicitContainer<T> num_shards, object infeed_queue, object device_assignment, object name)
  static void batch_parallel_dyn() {
    object o = tpu.batch_parallel_dyn(computation: f, inputs: inputs, num_shards: 2, infeed_queue: q, device_assignment: da, name: "n");
    o = tpu.batch_parallel_dyn(computation: f);
  }
  // IContextManager<T> bfloat16_scope()
  static void bfloat16_scope() { using (tpu.bfloat16_scope()) { } }
  // object bfloat16_scope_dyn()
  static void bfloat16_scope_dyn() { object o = tpu.bfloat16_scope_dyn(); }
  // int core(int num)
  static void core() { string device = tpu.core(num: 1); }
  // object core_dyn(object num)
  static void core_dyn() { object o = tpu.core_dyn(num: 1); }

  // Tensor cross_replica_sum(object x, object group_assignment, string name)
  static void cross_replica_sum__object() {
    Tensor s = tpu.cross_replica_sum(x: (object)1.5f, group_assignment: new int[,] { { 0, 1 } }, name: "n");
    s = tpu.cross_replica_sum(x: (object)t);
  }
  // Tensor cross_replica_sum(IGraphNodeBase x, object group_assignment, string name)
  static void cross_replica_sum__IGraphNodeBase() {
    Tensor s = tpu.cross_replica_sum(x: t, group_assignment: new[] { new[] { 0, 1 } }, name: "n");
    s = tpu.cross_replica_sum(x: t, group_assignment: new List<List<int>> { new List<int> { 0, 1 } });
    s = tpu.cross_replica_sum(x: t, group_assignment: null);
    s = tpu.cross_replica_sum(x: t);
  }
  // Tensor cross_replica_sum(PerReplica x, object group_assignment, string name)
  static void cross_replica_sum__PerReplica() {
    var p = new PerReplica(inputs);
    Tensor s = tpu.cross_replica_sum(x: p, group_assignment: new[] { new[] { 0 } }, name: "n");
    s = tpu.cross_replica_sum(x: p);
  }
  // Tensor cross_replica_sum(ValueTuple<PythonClassContainer, PythonClassContainer> x, object group_assignment, string name)
  static void cross_replica_sum__ValueTuple() {
    ValueTuple<object, object> pair = (t, t);
    Tensor s = tpu.cross_replica_sum(x: pair, group_assignment: null, name: "n");
    s = tpu.cross_replica_sum(x: (t, t));
  }
  // Tensor cross_replica_sum(IEnumerable<object> x, object group_assignment, string name)
  static void cross_replica_sum__IEnumerable() {
    IEnumerable<object> list = new List<object> { t };
    Tensor s = tpu.cross_replica_sum(x: list, group_assignment: null, name: "n");
    s = tpu.cross_replica_sum(x: new List<Tensor> { t });
  }
  // Tensor cross_replica_sum(IDictionary<object, object> x, object group_assignment, string name)
  static void cross_replica_sum__IDictionary() {
    IDictionary<object, object> map = new Dictionary<object, object> { { "w", t } };
    Tensor s = tpu.cross_replica_sum(x: map, group_assignment: null, name: "n");
    s = tpu.cross_replica_sum(x: map);
  }

  // Tensor initialize_system(object embedding_config, string job)
  static void initialize_system() {
    TpuSystem s = tpu.initialize_system(embedding_config: new byte[0], job: "worker");
    s = tpu.initialize_system();
  }
  // object initialize_system_dyn(object embedding_config, object job)
  static void initialize_system_dyn() {
    object s = tpu.initialize_system_dyn(embedding_config: new byte[0], job: "worker");
    s = tpu.initialize_system_dyn();
  }
  // object outside_compilation(PythonFunctionContainer computation, IDictionary<string, object> kwargs, Object[] args)
  static void outside_compilation__kwargs() {
    Func<float, float> host = v => v;
    object o = tpu.outside_compilation(computation: host, kwargs: new Dictionary<string, object> { { "v", 1f } }, args: new object[0]);
    o = tpu.outside_compilation(host, new Dictionary<string, object>());
  }
  // object outside_compilation(PythonFunctionContainer computation, Object[] args)
  static void outside_compilation__args() {
    Func<float, float> host = v => v;
    object o = tpu.outside_compilation(computation: host, args: new object[] { 1f });
    o = tpu.outside_compilation(host, 1f);
  }
  // object outside_compilation_dyn(object computation, Object[] args)
  static void outside_compilation_dyn__args() {
    object o = tpu.outside_compilation_dyn(computation: (Func<float, float>)(v => v), args: new object[] { 1f });
  }
  // object outside_compilation_dyn(object computation, IDictionary<string, object> kwargs, Object[] args)
  static void outside_compilation_dyn__kwargs() {
    object o = tpu.outside_compilation_dyn(computation: (Func<float, float>)(v => v),
                                           kwargs: new Dictionary<string, object> { { "v", 1f } }, args: new object[0]);
  }

  // object replicate(object computation, IEnumerable<object> inputs, object infeed_queue, DeviceAssignment device_assignment, string name, PythonClassContainer maximum_shapes)
  static void replicate__PythonClassContainer() {
    var shapes = new ShapeStructure(new TensorShape(4));
    Tensor[][] o = tpu.replicate(computation: f, inputs: replicas, infeed_queue: q, device_assignment: da, name: "n", maximum_shapes: shapes);
    o = tpu.replicate(computation: f, inputs: replicas, maximum_shapes: shapes);
    o = tpu.replicate(computation: fc, maximum_shapes: shapes);
  }
  // object replicate(..., int maximum_shapes)
  static void replicate__int() {
    Tensor[][] o = tpu.replicate(computation: f, inputs: replicas, infeed_queue: q, device_assignment: da, name: "n", maximum_shapes: 4);
    o = tpu.replicate(computation: f, inputs: replicas, maximum_shapes: 4);
    o = tpu.replicate(computation: fc, inputs: replicas, maximum_shapes: 4);
    o = tpu.replicate(f, replicas, null, null, null, 4);
  }
  // object replicate(..., TensorShape maximum_shapes)
  static void replicate__TensorShape() {
    Tensor[][] o = tpu.replicate(computation: f, inputs: replicas, infeed_queue: q, device_assignment: da, name: "n", maximum_shapes: new TensorShape(4));
    o = tpu.replicate(computation: f, inputs: replicas, maximum_shapes: new TensorShape(4));
    o = tpu.replicate(computation: fc, maximum_shapes: new TensorShape(4));
  }
  // object replicate(..., Dimension maximum_shapes)
  static void replicate__Dimension() {
    Tensor[][] o = tpu.replicate(computation: f, inputs: replicas, infeed_queue: q, device_assignment: da, name: "n", maximum_shapes: new Dimension(4));
    o = tpu.replicate(computation: f, inputs: replicas, maximum_shapes: new Dimension(null));
    o = tpu.replicate(computation: fc, maximum_shapes: new Dimension(4));
  }
  // object replicate(..., IEnumerable<TensorShape> maximum_shapes)
  static void replicate__IEnumerable_TensorShape() {
    Tensor[][] o = tpu.replicate(computation: f, inputs: replicas, infeed_queue: q, device_assignment: da, name: "n", maximum_shapes: new[] { new TensorShape(4) });
    o = tpu.replicate(computation: f, inputs: replicas, maximum_shapes: new List<TensorShape>());
    o = tpu.replicate(computation: fc, inputs: replicas, maximum_shapes: new[] { new TensorShape(4) });
    o = tpu.replicate(computation: f, inputs: replicas, maximum_shapes: null);
    o = tpu.replicate(computation: fc, maximum_shapes: null);
    o = tpu.replicate(computation: f, inputs: replicas);
    o = tpu.replicate(computation: fc);
  }
  // object replicate_dyn(object computation, object inputs, object infeed_queue, object device_assignment, object name, object maximum_shapes)
  static void replicate_dyn() {
    object o = tpu.replicate_dyn(computation: f, inputs: replicas, infeed_queue: q, device_assignment: da, name: "n", maximum_shapes: 4);
    o = tpu.replicate_dyn(computation: f);
  }
  // object rewrite(object computation, Nullable<ValueTuple<object>> inputs, object infeed_queue, object device_assignment, string name)
  static void rewrite() {
    Tensor[] o = tpu.rewrite(computation: f, inputs: inputs, infeed_queue: q, device_assignment: da, name: "n");
    o = tpu.rewrite(computation: f);
    o = tpu.rewrite(computation: fc);
  }
  // object rewrite_dyn(object computation, object inputs, object infeed_queue, object device_assignment, object name)
  static void rewrite_dyn() {
    object o = tpu.rewrite_dyn(computation: f, inputs: inputs, infeed_queue: q, device_assignment: da, name: "n");
    o = tpu.rewrite_dyn(computation: f);
  }
  // tf.tpu.shard(computation, inputs, num_shards, input_shard_axes, outputs_from_all_shards, output_shard_axes, infeed_queue, device_assignment, name)
  static void shard() {
    Tensor[] o = tpu.shard(computation: f, inputs: inputs, num_shards: 2, input_shard_axes: new[] { 0 }, outputs_from_all_shards: new[] { true },
                           output_shard_axes: new[] { 0 }, infeed_queue: q, device_assignment: da, name: "n");
    o = tpu.shard(computation: f);
  }
  // shard_dyn: the same nine, as object.
  static void shard_dyn() {
    object o = tpu.shard_dyn(computation: f, inputs: inputs, num_shards: 2, input_shard_axes: new[] { 0 }, outputs_from_all_shards: true,
                             output_shard_axes: new[] { 0 }, infeed_queue: q, device_assignment: da, name: "n");
    o = tpu.shard_dyn(computation: f);
  }
  // object shutdown_system(object job)
  static void shutdown_system() {
    tpu.shutdown_system(job: "worker");
    tpu.shutdown_system();
  }
  // object shutdown_system_dyn(object job)
  static void shutdown_system_dyn() {
    object o = tpu.shutdown_system_dyn(job: "worker");
    o = tpu.shutdown_system_dyn();
  }
}

[TestFixture]
public class SeedSurfaceTests {
  // Seed 004 lists 30 overloads (cross_replica_sum 6, replicate 5, outside_compilation
  // and its _dyn 2 each, everything else 1).
  [Test]
  public void EveryOverloadOfTheSeedHasItsCompileOnlyMethod() {
    MethodInfo[] methods = typeof(SeedSurface).GetMethods(BindingFlags.Static | BindingFlags.NonPublic | BindingFlags.DeclaredOnly)
        .Where(m => m.ReturnType == typeof(void) && !m.Name.StartsWith("<")).ToArray();
    Assert.AreEqual(30, methods.Length, string.Join(", ", methods.Select(m => m.Name)));
    foreach (string name in new[] { "cross_replica_sum", "replicate", "outside_compilation", "outside_compilation_dyn" })
      Assert.AreEqual(name == "cross_replica_sum" ? 6 : name == "replicate" ? 5 : 2,
                      methods.Count(m => m.Name.StartsWith(name + "__")), name);
  }
}
