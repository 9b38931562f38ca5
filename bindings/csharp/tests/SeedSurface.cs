// One method per overload of tf.tpu in seed 004 (the .NET surface), named after it,
// calling tpurt's tpu with the seed's parameter names as named arguments, once with
// every parameter and once with TensorFlow's defaults, the way the seed writes the
// call (no num_outputs, no system: the default one from initialize_system). Each
// method runs its calls and checks what they return; SeedSurfaceTests runs every
// method on a fresh default system of Cores cores.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Reflection;
using NUnit.Framework;
using Tpurt;

static class SeedSurface {
  internal const int Cores = 2;
  static readonly Func<Tensor[], Tensor[]> f = x => x;
  static readonly ReplicaComputation fc = (ctx, x) => x;
  static readonly Func<Tensor[], Tensor[]> twice = x => new[] { Tensor.Of(x[0].ToFloatArray().Select(v => 2 * v).ToArray(), x[0].DimsArray) };
  static readonly Func<Tensor[], Tensor[]> seven = x => new[] { Tensor.Of(new float[] { 7 }) };
  static readonly InfeedQueue q = null;
  static readonly DeviceAssignment da = null;

  static Tensor F(params float[] values) { return Tensor.Of(values); }
  // inputs[r] = { [r + 1] }: the seed's [replica][input] list.
  static IEnumerable<IEnumerable<Tensor>> Replicas() {
    return Enumerable.Range(0, Cores).Select(r => (IEnumerable<Tensor>)new[] { F(r + 1) }).ToList();
  }
  static Tensor[] Inputs() { return new[] { F(1, 2, 3, 4) }; }
  static void AreEqual(float[] expected, Tensor t, string what) { CollectionAssert.AreEqual(expected, t.ToFloatArray(), what); }
  // Each replica's outputs are its inputs (the identity computation).
  static void AreTheInputs(Tensor[][] o, string what) {
    Assert.AreEqual(Cores, o.Length, what);
    for (int r = 0; r < Cores; ++r) {
      Assert.AreEqual(1, o[r].Length, what + ": replica " + r);
      AreEqual(new float[] { r + 1 }, o[r][0], what + ": replica " + r);
    }
  }
  // One replica with no inputs and no outputs: TensorFlow's inputs=None ([[]]).
  static void IsOneEmptyReplica(Tensor[][] o, string what) {
    Assert.AreEqual(1, o.Length, what);
    Assert.AreEqual(0, o[0].Length, what);
  }
  // body on every core; returns what each replica's body returned.
  static Tensor[][] OnEveryReplica(Func<Tensor> body) {
    return tpu.replicate(computation: x => new[] { body() }, inputs: Enumerable.Range(0, Cores).Select(_ => new Tensor[0]).ToList());
  }
  static void EveryReplicaGets(float[] expected, Func<Tensor> body) {
    Tensor[][] o = OnEveryReplica(body);
    Assert.AreEqual(Cores, o.Length);
    foreach (Tensor[] r in o) AreEqual(expected, r[0], "a replica's result");
  }
  static void SumIs(float[] expected, Func<Tensor> body) { EveryReplicaGets(expected, body); }

  // IList<object> batch_parallel(object computation, object inputs, int num_shards, object infeed_queue, object device_assignment, string name)
  static void batch_parallel() {
    IList<Tensor> all = tpu.batch_parallel(computation: twice, inputs: Inputs(), num_shards: 2, infeed_queue: q, device_assignment: da, name: "n");
    Assert.AreEqual(1, all.Count);
    AreEqual(new float[] { 2, 4, 6, 8 }, all[0], "batch_parallel");
    all = tpu.batch_parallel(computation: f);
    Assert.AreEqual(0, all.Count);
    all = tpu.batch_parallel(computation: seven);
    AreEqual(new float[] { 7 }, all[0], "batch_parallel with no inputs");
  }
  // object batch_parallel_dyn(object computation, object inputs, ImplicitContainer<T> num_shards, object infeed_queue, object device_assignment, object name)
  static void batch_parallel_dyn() {
    object o = tpu.batch_parallel_dyn(computation: twice, inputs: Inputs(), num_shards: 2, infeed_queue: q, device_assignment: da, name: "n");
    AreEqual(new float[] { 2, 4, 6, 8 }, ((Tensor[])o)[0], "batch_parallel_dyn");
    o = tpu.batch_parallel_dyn(computation: f);
    Assert.AreEqual(0, ((Tensor[])o).Length);
  }
  // IContextManager<T> bfloat16_scope()
  static void bfloat16_scope() {
    SumIs(new float[] { 2 * 1.5f }, () => { using (tpu.bfloat16_scope()) return tpu.cross_replica_sum(F(1.5f)); });
  }
  // object bfloat16_scope_dyn()
  static void bfloat16_scope_dyn() {
    SumIs(new float[] { 2 * 1.5f }, () => { using ((IDisposable)tpu.bfloat16_scope_dyn()) return tpu.cross_replica_sum(F(1.5f)); });
  }
  // int core(int num)
  static void core() { Assert.AreEqual("device:TPU_REPLICATED_CORE:1", tpu.core(num: 1)); }
  // object core_dyn(object num)
  static void core_dyn() { Assert.AreEqual("device:TPU_REPLICATED_CORE:1", tpu.core_dyn(num: 1)); }

  // Tensor cross_replica_sum(object x, object group_assignment, string name)
  static void cross_replica_sum__object() {
    SumIs(new[] { 2 * 1.5f }, () => tpu.cross_replica_sum(x: (object)1.5f, group_assignment: new int[,] { { 0, 1 } }, name: "n"));
    SumIs(new float[] { 2 }, () => tpu.cross_replica_sum(x: (object)F(1)));
  }
  // Tensor cross_replica_sum(IGraphNodeBase x, object group_assignment, string name)
  static void cross_replica_sum__IGraphNodeBase() {
    SumIs(new float[] { 2, 4 }, () => tpu.cross_replica_sum(x: F(1, 2), group_assignment: new[] { new[] { 0, 1 } }, name: "n"));
    SumIs(new float[] { 2 }, () => tpu.cross_replica_sum(x: F(1), group_assignment: new List<List<int>> { new List<int> { 0, 1 } }));
    SumIs(new float[] { 2 }, () => tpu.cross_replica_sum(x: F(1), group_assignment: null));
    SumIs(new float[] { 2 }, () => tpu.cross_replica_sum(x: F(1)));
  }
  // Tensor cross_replica_sum(PerReplica x, object group_assignment, string name)
  static void cross_replica_sum__PerReplica() {
    var p = new PerReplica(Enumerable.Range(0, Cores).Select(r => F(r + 1)));
    Tensor[][] o = OnEveryReplica(() => tpu.cross_replica_sum(x: p, group_assignment: new[] { new[] { 0 }, new[] { 1 } }, name: "n"));
    for (int r = 0; r < Cores; ++r) AreEqual(new float[] { r + 1 }, o[r][0], "a group of one");
    SumIs(new float[] { 3 }, () => tpu.cross_replica_sum(x: p));
  }
  // Tensor cross_replica_sum(ValueTuple<PythonClassContainer, PythonClassContainer> x, object group_assignment, string name)
  static void cross_replica_sum__ValueTuple() {
    SumIs(new float[] { 2, 4 }, () => {
      ValueTuple<object, object> pair = (F(1), F(2));
      return tpu.cross_replica_sum(x: pair, group_assignment: null, name: "n");
    });
    SumIs(new float[] { 2, 4 }, () => tpu.cross_replica_sum(x: (F(1), F(2))));
  }
  // Tensor cross_replica_sum(IEnumerable<object> x, object group_assignment, string name)
  static void cross_replica_sum__IEnumerable() {
    SumIs(new float[] { 2, 4 }, () => tpu.cross_replica_sum(x: new List<object> { F(1), F(2) }, group_assignment: null, name: "n"));
    SumIs(new float[] { 2 }, () => tpu.cross_replica_sum(x: new List<Tensor> { F(1) }));
  }
  // Tensor cross_replica_sum(IDictionary<object, object> x, object group_assignment, string name)
  static void cross_replica_sum__IDictionary() {
    SumIs(new float[] { 2 }, () => tpu.cross_replica_sum(x: new Dictionary<object, object> { { "w", F(1) } }, group_assignment: null, name: "n"));
    SumIs(new float[] { 2 }, () => tpu.cross_replica_sum(x: new Dictionary<object, object> { { "w", F(1) } }));
  }

  // Tensor initialize_system(object embedding_config, string job)
  static void initialize_system() {
    using (TpuSystem s = tpu.initialize_system(embedding_config: null, job: "worker")) {
      Assert.AreEqual("worker", s.JobName());
      Assert.Greater(s.SerializedTopology().Count, 0);
      AreEqual(new float[] { 3 }, tpu.rewrite(computation: f, inputs: new[] { F(3) })[0], "a step on it (the default system)");
    }
    using (TpuSystem s = tpu.initialize_system()) Assert.AreEqual("localhost", s.JobName());
  }
  // object initialize_system_dyn(object embedding_config, object job)
  static void initialize_system_dyn() {
    using (var s = (TpuSystem)tpu.initialize_system_dyn(embedding_config: null, job: "worker")) Assert.AreEqual("worker", s.JobName());
    using (var s = (TpuSystem)tpu.initialize_system_dyn()) Assert.AreEqual("localhost", s.JobName());
  }
  // object outside_compilation(PythonFunctionContainer computation, IDictionary<string, object> kwargs, Object[] args)
  static void outside_compilation__kwargs() {
    Func<float, float> host = v => 2 * v;
    EveryReplicaGets(new float[] { 2 }, () => {
      object o = tpu.outside_compilation(computation: host, kwargs: new Dictionary<string, object> { { "v", 1f } }, args: new object[0]);
      return F((float)o);
    });
    Func<float> constant = () => 3;
    EveryReplicaGets(new float[] { 3 }, () => F((float)tpu.outside_compilation(constant, new Dictionary<string, object>())));
    // A Tensor the host returns comes back as a Tensor.
    Func<Tensor, Tensor> scale = v => Tensor.Of(v.ToFloatArray().Select(e => 3 * e).ToArray());
    EveryReplicaGets(new float[] { 6 }, () => (Tensor)tpu.outside_compilation(scale, new Dictionary<string, object> { { "v", F(2) } }));
  }
  // object outside_compilation(PythonFunctionContainer computation, Object[] args)
  static void outside_compilation__args() {
    Func<float, float> host = v => 2 * v;
    EveryReplicaGets(new float[] { 2 }, () => F((float)tpu.outside_compilation(computation: host, args: new object[] { 1f })));
    EveryReplicaGets(new float[] { 2 }, () => F((float)tpu.outside_compilation(host, 1f)));
  }
  // object outside_compilation_dyn(object computation, Object[] args)
  static void outside_compilation_dyn__args() {
    EveryReplicaGets(new float[] { 2 }, () => F((float)tpu.outside_compilation_dyn(computation: (Func<float, float>)(v => 2 * v), args: new object[] { 1f })));
  }
  // object outside_compilation_dyn(object computation, IDictionary<string, object> kwargs, Object[] args)
  static void outside_compilation_dyn__kwargs() {
    EveryReplicaGets(new float[] { 2 }, () => F((float)tpu.outside_compilation_dyn(computation: (Func<float, float>)(v => 2 * v),
                                                                              kwargs: new Dictionary<string, object> { { "v", 1f } }, args: new object[0])));
  }

  // object replicate(object computation, IEnumerable<object> inputs, object infeed_queue, DeviceAssignment device_assignment, string name, PythonClassContainer maximum_shapes)
  static void replicate__PythonClassContainer() {
    var shapes = new ShapeStructure(new TensorShape(4));
    AreTheInputs(tpu.replicate(computation: f, inputs: Replicas(), infeed_queue: q, device_assignment: da, name: "n", maximum_shapes: shapes), "every parameter");
    AreTheInputs(tpu.replicate(computation: f, inputs: Replicas(), maximum_shapes: shapes), "inputs and maximum_shapes");
    IsOneEmptyReplica(tpu.replicate(computation: fc, maximum_shapes: new ShapeStructure()), "no inputs");
  }
  // object replicate(..., int maximum_shapes)
  static void replicate__int() {
    AreTheInputs(tpu.replicate(computation: f, inputs: Replicas(), infeed_queue: q, device_assignment: da, name: "n", maximum_shapes: 4), "every parameter");
    AreTheInputs(tpu.replicate(computation: f, inputs: Replicas(), maximum_shapes: 4), "inputs and maximum_shapes");
    AreTheInputs(tpu.replicate(computation: fc, inputs: Replicas(), maximum_shapes: 4), "a ReplicaComputation");
    AreTheInputs(tpu.replicate(f, Replicas(), null, null, null, 4), "positional");
  }
  // object replicate(..., TensorShape maximum_shapes)
  static void replicate__TensorShape() {
    AreTheInputs(tpu.replicate(computation: f, inputs: Replicas(), infeed_queue: q, device_assignment: da, name: "n", maximum_shapes: new TensorShape(4)), "every parameter");
    AreTheInputs(tpu.replicate(computation: f, inputs: Replicas(), maximum_shapes: new TensorShape(4)), "inputs and maximum_shapes");
    AreTheInputs(tpu.replicate(computation: fc, inputs: Replicas(), maximum_shapes: new TensorShape(4)), "a ReplicaComputation");
  }
  // object replicate(..., Dimension maximum_shapes)
  static void replicate__Dimension() {
    AreTheInputs(tpu.replicate(computation: f, inputs: Replicas(), infeed_queue: q, device_assignment: da, name: "n", maximum_shapes: new Dimension(4)), "every parameter");
    AreTheInputs(tpu.replicate(computation: f, inputs: Replicas(), maximum_shapes: new Dimension(null)), "an unknown dimension");
    AreTheInputs(tpu.replicate(computation: fc, inputs: Replicas(), maximum_shapes: new Dimension(4)), "a ReplicaComputation");
  }
  // object replicate(..., IEnumerable<TensorShape> maximum_shapes)
  static void replicate__IEnumerable_TensorShape() {
    AreTheInputs(tpu.replicate(computation: f, inputs: Replicas(), infeed_queue: q, device_assignment: da, name: "n", maximum_shapes: new[] { new TensorShape(4) }), "every parameter");
    AreTheInputs(tpu.replicate(computation: fc, inputs: Replicas(), maximum_shapes: new[] { new TensorShape(4) }), "a ReplicaComputation");
    AreTheInputs(tpu.replicate(computation: f, inputs: Replicas(), maximum_shapes: null), "maximum_shapes null");
    IsOneEmptyReplica(tpu.replicate(computation: fc, maximum_shapes: null), "no inputs, maximum_shapes null");
    AreTheInputs(tpu.replicate(computation: f, inputs: Replicas()), "inputs only");
    IsOneEmptyReplica(tpu.replicate(computation: fc), "the computation only");
    IsOneEmptyReplica(tpu.replicate(computation: f, inputs: null), "inputs null");
    Assert.AreEqual(0, tpu.replicate(computation: f, inputs: new List<Tensor[]>()).Length, "inputs [] (zero replicas)");
  }
  // object replicate_dyn(object computation, object inputs, object infeed_queue, object device_assignment, object name, object maximum_shapes)
  static void replicate_dyn() {
    AreTheInputs((Tensor[][])tpu.replicate_dyn(computation: f, inputs: Replicas(), infeed_queue: q, device_assignment: da, name: "n", maximum_shapes: 4), "every parameter");
    IsOneEmptyReplica((Tensor[][])tpu.replicate_dyn(computation: f), "the computation only");
  }
  // object rewrite(object computation, Nullable<ValueTuple<object>> inputs, object infeed_queue, object device_assignment, string name)
  static void rewrite() {
    Tensor[] o = tpu.rewrite(computation: f, inputs: new[] { F(3) }, infeed_queue: q, device_assignment: da, name: "n");
    Assert.AreEqual(1, o.Length);
    AreEqual(new float[] { 3 }, o[0], "rewrite");
    Assert.AreEqual(0, tpu.rewrite(computation: f).Length);
    Assert.AreEqual(0, tpu.rewrite(computation: fc).Length);
    AreEqual(new float[] { 7 }, tpu.rewrite(computation: seven)[0], "rewrite with no inputs");
  }
  // object rewrite_dyn(object computation, object inputs, object infeed_queue, object device_assignment, object name)
  static void rewrite_dyn() {
    object o = tpu.rewrite_dyn(computation: f, inputs: new[] { F(3) }, infeed_queue: q, device_assignment: da, name: "n");
    AreEqual(new float[] { 3 }, ((Tensor[])o)[0], "rewrite_dyn");
    Assert.AreEqual(0, ((Tensor[])tpu.rewrite_dyn(computation: f)).Length);
  }
  // tf.tpu.shard(computation, inputs, num_shards, input_shard_axes, outputs_from_all_shards, output_shard_axes, infeed_queue, device_assignment, name)
  static void shard() {
    Tensor[] o = tpu.shard(computation: twice, inputs: Inputs(), num_shards: 2, input_shard_axes: new[] { 0 }, outputs_from_all_shards: new[] { true },
                           output_shard_axes: new[] { 0 }, infeed_queue: q, device_assignment: da, name: "n");
    AreEqual(new float[] { 2, 4, 6, 8 }, o[0], "shard");
    o = tpu.shard(computation: twice, inputs: Inputs(), num_shards: 2);
    AreEqual(new float[] { 2, 4, 6, 8 }, o[0], "shard, counted");
    Assert.AreEqual(0, tpu.shard(computation: f).Length);
  }
  // shard_dyn: the same nine, as object.
  static void shard_dyn() {
    object o = tpu.shard_dyn(computation: twice, inputs: Inputs(), num_shards: 2, input_shard_axes: new[] { 0 }, outputs_from_all_shards: true,
                             output_shard_axes: new[] { 0 }, infeed_queue: q, device_assignment: da, name: "n");
    AreEqual(new float[] { 2, 4, 6, 8 }, ((Tensor[])o)[0], "shard_dyn");
    o = tpu.shard_dyn(computation: twice, inputs: Inputs(), num_shards: 2, outputs_from_all_shards: false);
    AreEqual(new float[] { 2, 4 }, ((Tensor[])o)[0], "shard_dyn, shard 0's");
    Assert.AreEqual(0, ((Tensor[])tpu.shard_dyn(computation: f)).Length);
  }
  // object shutdown_system(object job)
  static void shutdown_system() {
    using (TpuSystem s = tpu.initialize_system(job: "worker")) {
      tpu.shutdown_system(job: "worker");
      Assert.IsTrue(s.IsClosed());
    }
    using (TpuSystem s = tpu.initialize_system()) {
      tpu.shutdown_system();
      Assert.IsTrue(s.IsClosed());
    }
  }
  // object shutdown_system_dyn(object job)
  static void shutdown_system_dyn() {
    using (TpuSystem s = tpu.initialize_system(job: "worker")) {
      Assert.IsNull(tpu.shutdown_system_dyn(job: "worker"));
      Assert.IsTrue(s.IsClosed());
    }
    using (TpuSystem s = tpu.initialize_system()) {
      Assert.IsNull(tpu.shutdown_system_dyn());
      Assert.IsTrue(s.IsClosed());
    }
  }
}

[TestFixture]
public class SeedSurfaceTests {
  TpuSystem system;

  // Each seed form runs on the default system, as the seed's calls do.
  [SetUp]
  public void StartSystem() { system = tpu.initialize_system(num_cores: SeedSurface.Cores); }
  [TearDown]
  public void StopSystem() { system.Dispose(); }

  static MethodInfo[] Methods() {
    return typeof(SeedSurface).GetMethods(BindingFlags.Static | BindingFlags.NonPublic | BindingFlags.DeclaredOnly)
        .Where(m => m.ReturnType == typeof(void) && m.GetParameters().Length == 0 && !m.Name.StartsWith("<")).ToArray();
  }
  static IEnumerable<string> SeedForms() { return Methods().Select(m => m.Name); }

  // Seed 004 lists 30 overloads (cross_replica_sum 6, replicate 5, outside_compilation
  // and its _dyn 2 each, everything else 1).
  [Test]
  public void EveryOverloadOfTheSeedHasItsMethod() {
    MethodInfo[] methods = Methods();
    Assert.AreEqual(30, methods.Length, string.Join(", ", methods.Select(m => m.Name)));
    foreach (string name in new[] { "cross_replica_sum", "replicate", "outside_compilation", "outside_compilation_dyn" })
      Assert.AreEqual(name == "cross_replica_sum" ? 6 : name == "replicate" ? 5 : 2,
                      methods.Count(m => m.Name.StartsWith(name + "__")), name);
  }

  // The seed's calls run as the seed writes them and return what TensorFlow's would.
  [Test, TestCaseSource("SeedForms")]
  public void RunsAsTheSeedWritesIt(string form) {
    MethodInfo m = typeof(SeedSurface).GetMethod(form, BindingFlags.Static | BindingFlags.NonPublic);
    // One system per process: these start their own.
    if (form.StartsWith("initialize_system") || form.StartsWith("shutdown_system")) system.Dispose();
    try {
      m.Invoke(null, null);
    } catch (TargetInvocationException e) {
      throw e.InnerException;
    }
  }

  // A job the system lacks: TensorFlow's placement error (InvalidArgumentError), and
  // the system keeps running.
  [Test]
  public void ShutdownSystemOfAnotherJobIsInvalidArgument() {
    var e = Assert.Throws<InvalidArgumentError>(() => tpu.shutdown_system(job: "no_such_job"));
    StringAssert.Contains("/job:no_such_job/device:TPU_SYSTEM:0", e.Message);
    Assert.Throws<InvalidArgumentError>(() => tpu.shutdown_system_dyn(job: "no_such_job"));
    Assert.IsFalse(system.IsClosed());
  }

  // inputs=None is [[]]: one replica with no inputs, in every form that takes inputs.
  [Test]
  public void InputsNullIsOneReplicaWithNoInputs() {
    int calls = 0;
    Tensor[][] o = tpu.replicate(computation: (ctx, x) => {
      System.Threading.Interlocked.Increment(ref calls);
      Assert.AreEqual(0, x.Length);
      Assert.AreEqual(1, ctx.NumReplicas());
      return new[] { Tensor.Of(new float[] { ctx.ReplicaId() }) };
    }, inputs: null);
    Assert.AreEqual(1, calls);
    Assert.AreEqual(1, o.Length);
    CollectionAssert.AreEqual(new float[] { 0 }, o[0][0].ToFloatArray());
    Assert.AreEqual(1, ((Tensor[][])tpu.replicate_dyn(computation: (Func<Tensor[], Tensor[]>)(x => x), inputs: null)).Length);
  }

  // No num_outputs: each form returns as many outputs as the computation does.
  [Test]
  public void OutputsAreCountedWithoutNumOutputs() {
    Func<Tensor[], Tensor[]> three = x => new[] { x[0], x[0], Tensor.Scalar(5) };
    var inputs = new[] { Tensor.Of(new float[] { 1, 2 }) };
    Tensor[][] r = tpu.replicate(three, new[] { inputs, inputs });
    Assert.AreEqual(2, r.Length);
    foreach (Tensor[] o in r) Assert.AreEqual(3, o.Length);
    Tensor[] w = tpu.rewrite(three, inputs);
    Assert.AreEqual(3, w.Length);
    CollectionAssert.AreEqual(new float[] { 5 }, w[2].ToFloatArray());
    Tensor[] s = tpu.shard(three, inputs, num_shards: 2);
    Assert.AreEqual(3, s.Length);
    CollectionAssert.AreEqual(new float[] { 1, 2 }, s[0].ToFloatArray());
    CollectionAssert.AreEqual(new float[] { 5, 5 }, s[2].ToFloatArray()); // scalars stacked
    Tensor[] b = tpu.batch_parallel(three, inputs, num_shards: 2);
    Assert.AreEqual(3, b.Length);
    CollectionAssert.AreEqual(new float[] { 1, 2 }, b[1].ToFloatArray());
    Assert.AreEqual(3, ((Tensor[])tpu.shard_dyn(three, inputs, 2)).Length);
    Assert.AreEqual(3, ((Tensor[])tpu.batch_parallel_dyn(three, inputs, 2)).Length);
    Assert.AreEqual(3, ((Tensor[])tpu.rewrite_dyn(three, inputs)).Length);
    Assert.AreEqual(3, ((Tensor[][])tpu.replicate_dyn(three, new[] { inputs, inputs }))[1].Length);
  }
}
