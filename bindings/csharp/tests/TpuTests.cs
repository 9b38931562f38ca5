// NUnit 2.6 tests of the C# binding: tf.tpu's overloads and _dyn twins, the typed
// errors, lifetime, feeds, sharding, topology, and every member of bindings/api_map.txt.
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Threading;
using NUnit.Framework;
using Tpurt;

[TestFixture]
public class TpuTests {
  const int Replicas = 8;
  TpuSystem system;

  [TestFixtureSetUp]
  public void StartSystem() { system = tpu.initialize_system(num_cores: Replicas); }
  [TestFixtureTearDown]
  public void StopSystem() { system.Dispose(); }

  static Tensor F(params float[] values) { return Tensor.Of(values); }

  // inputs[r] = {x_r} with x_r = [r, 2r, 1].
  static IEnumerable<IEnumerable<Tensor>> PerReplicaInputs() {
    return Enumerable.Range(0, Replicas).Select(r => (IEnumerable<Tensor>)new[] { F(r, 2 * r, 1) }).ToList();
  }
  static readonly float[] ExpectedSum = { 28, 56, 8 };

  Tensor[][] Run(Func<Tensor[], Tensor[]> computation, int numOutputs = 1) {
    return tpu.replicate(computation, PerReplicaInputs(), num_outputs: numOutputs, system: system);
  }
  static void AssertAll(Tensor[][] outputs, float[] expected) {
    Assert.AreEqual(Replicas, outputs.Length);
    foreach (Tensor[] o in outputs) CollectionAssert.AreEqual(expected, o[0].ToFloatArray());
  }

  // ---- cross_replica_sum: every form and its _dyn twin ----------------------------

  [Test]
  public void CrossReplicaSumOfTensorOnEightCores() {
    AssertAll(Run(x => new[] { tpu.cross_replica_sum(x[0]) }), ExpectedSum);
    AssertAll(Run(x => new[] { tpu.CrossReplicaSum(x[0]) }), ExpectedSum);
    AssertAll(Run(x => new[] { (Tensor)tpu.cross_replica_sum_dyn(x[0]) }), ExpectedSum);
  }

  [Test]
  public void CollectiveResultsEndWithTheStepOutputsStay() {
    var kept = new Tensor[Replicas];
    Tensor[][] outputs = Run(x => {
      Tensor sum = tpu.cross_replica_sum(x[0]);
      kept[tpu.current_replica.ReplicaId()] = tpu.cross_replica_sum(x[0]);
      return new[] { sum };
    });
    AssertAll(outputs, ExpectedSum); // an output keeps its own reference
    foreach (Tensor t in kept) // released with the step
      Assert.AreEqual("Tensor", Assert.Throws<ObjectDisposedException>(() => t.ToFloatArray()).ObjectName);
  }

  [Test]
  public void CrossReplicaSumWithGroupsOfEachForm() {
    int[][] jagged = { new[] { 0, 1, 2, 3 }, new[] { 4, 5, 6, 7 } };
    int[,] grid = { { 0, 1, 2, 3 }, { 4, 5, 6, 7 } };
    var lists = new List<List<int>> { new List<int> { 0, 1, 2, 3 }, new List<int> { 4, 5, 6, 7 } };
    IEnumerable<IEnumerable<int>> lazy = Enumerable.Range(0, 2).Select(g => Enumerable.Range(4 * g, 4));
    foreach (object groups in new object[] { jagged, grid, lists, lazy }) {
      Tensor[][] o = Run(x => new[] { tpu.cross_replica_sum(x[0], groups), tpu.cross_replica_sum(x: x[0], group_assignment: groups, name: "s") }, 2);
      CollectionAssert.AreEqual(new float[] { 6, 12, 4 }, o[0][0].ToFloatArray(), groups.GetType().Name);
      CollectionAssert.AreEqual(new float[] { 22, 44, 4 }, o[7][1].ToFloatArray(), groups.GetType().Name);
    }
    // Thrown in the computation: the step fails with the ArgumentException's message.
    var e = Assert.Throws<UnknownError>(() => Run(x => new[] { tpu.cross_replica_sum(x[0], "0,1") }));
    StringAssert.Contains("group_assignment cannot be a System.String", e.Message);
    e = Assert.Throws<UnknownError>(() => Run(x => new[] { tpu.cross_replica_sum(x[0], new object[] { new[] { 0 }, 1.5 }) }));
    StringAssert.Contains("group_assignment[1] is a System.Double", e.Message);
  }

  [Test]
  public void CrossReplicaSumOfPerReplica() {
    var values = new PerReplica(Enumerable.Range(0, Replicas).Select(r => F(r)));
    AssertAll(Run(x => new[] { tpu.cross_replica_sum(values) }), new float[] { 28 });
    AssertAll(Run(x => new[] { (Tensor)tpu.cross_replica_sum_dyn(values) }), new float[] { 28 });
  }

  [Test]
  public void CrossReplicaSumOfArrays() {
    Tensor[][] o = Run(x => new[] {
      tpu.cross_replica_sum(new float[] { 1, 2 }), tpu.cross_replica_sum(new double[] { 0.5 }),
      tpu.cross_replica_sum(new[] { 3 }), tpu.cross_replica_sum(new long[] { 1L << 40 }),
      (Tensor)tpu.cross_replica_sum_dyn(new float[] { 1 }), (Tensor)tpu.cross_replica_sum_dyn(new double[] { 1 }),
      (Tensor)tpu.cross_replica_sum_dyn(new[] { 1 }), (Tensor)tpu.cross_replica_sum_dyn(new long[] { 1 }) }, 8);
    CollectionAssert.AreEqual(new float[] { 8, 16 }, o[3][0].ToFloatArray());
    CollectionAssert.AreEqual(new[] { 4.0 }, o[3][1].ToDoubleArray());
    CollectionAssert.AreEqual(new[] { 24 }, o[3][2].ToIntArray());
    CollectionAssert.AreEqual(new[] { 8L << 40 }, o[3][3].ToLongArray());
    CollectionAssert.AreEqual(new float[] { 8 }, o[0][4].ToFloatArray());
    CollectionAssert.AreEqual(new[] { 8.0 }, o[0][5].ToDoubleArray());
    CollectionAssert.AreEqual(new[] { 8 }, o[0][6].ToIntArray());
    CollectionAssert.AreEqual(new[] { 8L }, o[0][7].ToLongArray());
  }

  [Test]
  public void PascalCaseAliasesOfEveryForm() {
    var values = new PerReplica(Enumerable.Range(0, Replicas).Select(r => F(r)));
    Tensor[][] o = Run(x => {
      return new[] {
        tpu.CrossReplicaSum(values), tpu.CrossReplicaSum(new float[] { 1 }), tpu.CrossReplicaSum(new double[] { 1 }),
        tpu.CrossReplicaSum(new[] { 1 }), tpu.CrossReplicaSum(new long[] { 1 }), tpu.CrossReplicaSum((F(1), F(2))),
        tpu.CrossReplicaSum(new List<Tensor> { F(3) }),
        tpu.CrossReplicaSum(new Dictionary<object, object> { { "k", F(4) } }),
        F((float)tpu.OutsideCompilation((Func<float, float>)(v => v + 1), new Dictionary<string, object> { { "v", 1f } })),
      };
    }, 9);
    CollectionAssert.AreEqual(new float[] { 28 }, o[1][0].ToFloatArray());
    CollectionAssert.AreEqual(new float[] { 8 }, o[1][1].ToFloatArray());
    CollectionAssert.AreEqual(new[] { 8.0 }, o[1][2].ToDoubleArray());
    CollectionAssert.AreEqual(new[] { 8 }, o[1][3].ToIntArray());
    CollectionAssert.AreEqual(new[] { 8L }, o[1][4].ToLongArray());
    CollectionAssert.AreEqual(new float[] { 8, 16 }, o[1][5].ToFloatArray());
    CollectionAssert.AreEqual(new float[] { 24 }, o[1][6].ToFloatArray());
    CollectionAssert.AreEqual(new float[] { 32 }, o[1][7].ToFloatArray());
    CollectionAssert.AreEqual(new float[] { 2 }, o[1][8].ToFloatArray());
  }

  [Test]
  public void AlreadyExistsFromASecondSystem() {
    var e = Assert.Throws<AlreadyExistsError>(() => tpu.initialize_system(num_cores: 2));
    Assert.AreEqual(Status.AlreadyExists, e.Code);
  }

  // A structure is one tensor (tf.convert_to_tensor): leaves stacked on a new axis.
  [Test]
  public void CrossReplicaSumOfAStructureIsOneStackedTensor() {
    Tensor[][] o = Run(x => {
      ValueTuple<Tensor, Tensor> pair = (x[0], F(1, 2, 3));
      return new[] {
        tpu.cross_replica_sum((x[0], F(1, 2, 3))), tpu.cross_replica_sum(pair),
        tpu.cross_replica_sum(new List<Tensor> { x[0], F(0, 0, 1) }),
        tpu.cross_replica_sum(new List<object> { 1, 2 }),
        tpu.cross_replica_sum(new Dictionary<object, object> { { "w", F(2) }, { "b", F(1) } }),
        tpu.cross_replica_sum(new Dictionary<string, float[]> { { "w", new float[] { 2 } }, { "b", new float[] { 1 } } }),
        tpu.cross_replica_sum((object)new List<float> { 0.5f, 1 }),
        tpu.cross_replica_sum((object)x[0]), tpu.cross_replica_sum((object)3L),
        (Tensor)tpu.cross_replica_sum_dyn((F(1), F(2))),
        (Tensor)tpu.cross_replica_sum_dyn(new List<Tensor> { F(3) }, null, "n"),
      };
    }, 11);
    CollectionAssert.AreEqual(new long[] { 2, 3 }, o[5][0].DimsArray);
    CollectionAssert.AreEqual(new float[] { 28, 56, 8, 8, 16, 24 }, o[5][0].ToFloatArray());
    CollectionAssert.AreEqual(o[5][0].ToFloatArray(), o[5][1].ToFloatArray());
    CollectionAssert.AreEqual(new float[] { 28, 56, 8, 0, 0, 8 }, o[5][2].ToFloatArray());
    CollectionAssert.AreEqual(new[] { 8, 16 }, o[5][3].ToIntArray());
    CollectionAssert.AreEqual(new float[] { 8, 16 }, o[5][4].ToFloatArray()); // keys sorted: b, w
    CollectionAssert.AreEqual(new long[] { 2, 1 }, o[5][5].DimsArray);
    CollectionAssert.AreEqual(new float[] { 8, 16 }, o[5][5].ToFloatArray());
    CollectionAssert.AreEqual(new float[] { 4, 8 }, o[5][6].ToFloatArray());
    CollectionAssert.AreEqual(ExpectedSum, o[5][7].ToFloatArray());
    CollectionAssert.AreEqual(new[] { 24L }, o[5][8].ToLongArray());
    CollectionAssert.AreEqual(new float[] { 8, 16 }, o[5][9].ToFloatArray());
    CollectionAssert.AreEqual(new float[] { 24 }, o[5][10].ToFloatArray());
    // Leaves that do not match cannot be one tensor.
    var e = Assert.Throws<UnknownError>(() => Run(x => new[] { tpu.cross_replica_sum((x[0], F(1))) }));
    StringAssert.Contains("x[1] is float32[1], x[0] is float32[3]", e.Message);
    e = Assert.Throws<UnknownError>(() => Run(x => new[] { tpu.cross_replica_sum(new List<object> { 1, 2.0 }) }));
    StringAssert.Contains("x[1] is float64[], x[0] is int32[]", e.Message);
    e = Assert.Throws<UnknownError>(() => Run(x => new[] { tpu.cross_replica_sum(new List<object>()) }));
    StringAssert.Contains("empty structure", e.Message);
  }

  [Test]
  public void DynTwinsNameTheTypeTheyCannotTake() {
    var e = Assert.Throws<ArgumentException>(() => tpu.cross_replica_sum_dyn("a string"));
    StringAssert.Contains("System.String", e.Message);
    e = Assert.Throws<ArgumentException>(() => tpu.replicate_dyn(42, num_replicas: 1, system: system));
    StringAssert.Contains("System.Int32", e.Message);
    e = Assert.Throws<ArgumentException>(() => tpu.replicate_dyn((Func<Tensor[], Tensor[]>)(x => x), maximum_shapes: "x", num_replicas: 1, system: system));
    StringAssert.Contains("maximum_shapes", e.Message);
    e = Assert.Throws<ArgumentException>(() => tpu.rewrite_dyn((Func<Tensor[], Tensor[]>)(x => x), inputs: 3.5, system: system));
    StringAssert.Contains("System.Double", e.Message);
    e = Assert.Throws<ArgumentException>(() => tpu.shard_dyn((Func<Tensor[], Tensor[]>)(x => x), num_shards: "2", system: system));
    StringAssert.Contains("num_shards", e.Message);
    e = Assert.Throws<ArgumentException>(() => tpu.batch_parallel_dyn(new object(), system: system));
    StringAssert.Contains("System.Object", e.Message);
    e = Assert.Throws<ArgumentException>(() => tpu.core_dyn("1"));
    StringAssert.Contains("System.String", e.Message);
    e = Assert.Throws<ArgumentException>(() => tpu.initialize_system_dyn(embedding_config: 7));
    StringAssert.Contains("embedding_config", e.Message);
    e = Assert.Throws<ArgumentException>(() => tpu.shutdown_system_dyn(system: "s"));
    StringAssert.Contains("system", e.Message);
    e = Assert.Throws<ArgumentException>(() => tpu.outside_compilation_dyn(5));
    StringAssert.Contains("computation", e.Message);
  }

  // ---- replicate: every maximum_shapes form, the ctx form, infeed ----------------

  [Test]
  public void ReplicateWithEachMaximumShapesForm() {
    // Replica r has r+1 elements; maximum_shapes pads them to one size.
    var ragged = Enumerable.Range(0, Replicas).Select(r => (IEnumerable<Tensor>)new[] { F(Enumerable.Repeat(1f, r + 1).ToArray()) }).ToList();
    Func<Tensor[], Tensor[]> sum = x => new[] { tpu.cross_replica_sum(x[0]) };
    ReplicaComputation sumCtx = (ctx, x) => new[] { tpu.cross_replica_sum(x[0]) };
    var forms = new List<Tensor[][]> {
      tpu.replicate(sum, ragged, null, null, null, 8, num_outputs: 1, system: system),
      tpu.replicate(computation: sum, inputs: ragged, maximum_shapes: 8, num_outputs: 1, system: system),
      tpu.replicate(computation: sumCtx, inputs: ragged, maximum_shapes: 8, num_outputs: 1, system: system),
      tpu.replicate(computation: sumCtx, inputs: ragged, maximum_shapes: new TensorShape(8), num_outputs: 1, system: system),
      tpu.replicate(computation: sumCtx, inputs: ragged, maximum_shapes: new Dimension(8), num_outputs: 1, system: system),
      tpu.replicate(computation: sumCtx, inputs: ragged, maximum_shapes: new[] { new TensorShape(8) }, num_outputs: 1, system: system),
      tpu.replicate(computation: sum, inputs: ragged, maximum_shapes: new ShapeStructure(8), num_outputs: 1, system: system),
      tpu.replicate(computation: sumCtx, inputs: ragged, maximum_shapes: new ShapeStructure(new object[] { new TensorShape(8) }), num_outputs: 1, system: system),
      (Tensor[][])tpu.replicate_dyn(sum, ragged, maximum_shapes: new ShapeStructure(new Dimension(8)), num_outputs: 1, system: system),
      tpu.replicate(sum, ragged, null, null, null, new TensorShape(8), num_outputs: 1, system: system),
      tpu.replicate(sum, ragged, null, null, null, new Dimension(8), num_outputs: 1, system: system),
      tpu.replicate(sum, ragged, null, null, null, new[] { new TensorShape(8) }, num_outputs: 1, system: system),
      (Tensor[][])tpu.replicate_dyn(sum, ragged, maximum_shapes: 8, num_outputs: 1, system: system),
      (Tensor[][])tpu.replicate_dyn(sum, ragged, maximum_shapes: new Dimension(8), num_outputs: 1, system: system),
      (Tensor[][])tpu.replicate_dyn(sum, ragged, maximum_shapes: new TensorShape(8), num_outputs: 1, system: system),
      (Tensor[][])tpu.replicate_dyn(sum, ragged, maximum_shapes: new List<TensorShape> { new TensorShape(8) }, num_outputs: 1, system: system),
    };
    foreach (Tensor[][] o in forms) {
      float[] got = o[0][0].ToFloatArray();
      Assert.AreEqual(8, got.Length);
      CollectionAssert.AreEqual(new float[] { 8, 7, 6, 5, 4, 3, 2, 1 }, got);
    }
    // No maximum_shapes (or null, TensorFlow's default): ragged inputs are an InvalidArgument.
    Assert.Throws<InvalidArgumentError>(() => tpu.replicate(sum, ragged, num_outputs: 1, system: system));
    Assert.Throws<InvalidArgumentError>(() => tpu.replicate(computation: sum, inputs: ragged, maximum_shapes: null, num_outputs: 1, system: system));
    var e = Assert.Throws<ArgumentException>(() => tpu.replicate(sum, ragged, maximum_shapes: new ShapeStructure("8"), num_outputs: 1, system: system));
    StringAssert.Contains("maximum_shapes[0] cannot be a System.String", e.Message);
  }

  [Test]
  public void ReplicateWithContextAndAliases() {
    Tensor[][] o = tpu.replicate((ctx, x) => new[] { Tensor.Of(new[] { ctx.ReplicaId(), ctx.NumReplicas() }) },
                                 num_outputs: 1, num_replicas: Replicas, system: system);
    for (int r = 0; r < Replicas; ++r) CollectionAssert.AreEqual(new[] { r, Replicas }, o[r][0].ToIntArray());
    o = tpu.Replicate(x => new[] { tpu.cross_replica_sum(x[0]) }, PerReplicaInputs(), num_outputs: 1, system: system);
    AssertAll(o, ExpectedSum);
    o = (Tensor[][])tpu.replicate_dyn((ReplicaComputation)((ctx, x) => new[] { tpu.cross_replica_sum(x[0]) }), PerReplicaInputs(), num_outputs: 1, system: system);
    AssertAll(o, ExpectedSum);
  }

  [Test]
  public void ReplicateWithInfeedQueueAndOutfeed() {
    var shapes = new ShapeVector { Shape.Of(new Int64Vector(new long[] { 2 })) };
    var dtypes = new Int32Vector(new[] { (int)DType.Float32 });
    using (var infeed = new InfeedQueue(system, Replicas, dtypes, shapes, 4))
    using (var outfeed = new OutfeedQueue(system, Replicas, dtypes, shapes, 4)) {
      Assert.AreEqual(1, infeed.NumElements());
      for (int r = 0; r < Replicas; ++r) infeed.Enqueue(r, new TensorVector { F(r, 1) });
      Tensor[][] o = tpu.replicate((ctx, x) => {
        Assert.AreEqual(1, x.Length);
        ctx.OutfeedEnqueue(outfeed, new TensorVector { tpu.cross_replica_sum(x[0]) });
        return new Tensor[0];
      }, null, infeed, num_replicas: Replicas, system: system);
      Assert.AreEqual(Replicas, o.Length);
      for (int r = 0; r < Replicas; ++r) CollectionAssert.AreEqual(new float[] { 28, 8 }, outfeed.Dequeue(r)[0].ToFloatArray());
      // Dequeued inside the computation instead.
      for (int r = 0; r < Replicas; ++r) infeed.Enqueue(r, new TensorVector { F(1, r) });
      o = tpu.replicate((ctx, x) => new[] { ctx.InfeedDequeue(infeed)[0] }, num_outputs: 1, num_replicas: Replicas, system: system);
      CollectionAssert.AreEqual(new float[] { 1, 5 }, o[5][0].ToFloatArray());
      Assert.Throws<InvalidArgumentError>(() => infeed.Enqueue(0, new TensorVector { F(1, 2, 3) }));
      infeed.Close();
      outfeed.Close();
      Assert.Throws<FailedPreconditionError>(() => infeed.Enqueue(0, new TensorVector { F(1, 2) }));
      Assert.Throws<FailedPreconditionError>(() => outfeed.Dequeue(0));
    }
  }

  // ---- rewrite, shard, batch_parallel -------------------------------------------

  [Test]
  public void RewriteRunsOneReplica() {
    Tensor[] o = tpu.rewrite(x => new[] { tpu.cross_replica_sum(x[0]) }, new[] { F(1, 2) }, num_outputs: 1, system: system);
    CollectionAssert.AreEqual(new float[] { 1, 2 }, o[0].ToFloatArray());
    o = tpu.Rewrite(x => x, new[] { F(3) }, 1, system);
    CollectionAssert.AreEqual(new float[] { 3 }, o[0].ToFloatArray());
    o = (Tensor[])tpu.rewrite_dyn((ReplicaComputation)((ctx, x) => new[] { Tensor.Of(new[] { ctx.NumReplicas() }) }), num_outputs: 1, system: system);
    CollectionAssert.AreEqual(new[] { 1 }, o[0].ToIntArray());
  }

  [Test]
  public void ShardAndBatchParallelSplitAndConcatenate() {
    Tensor input = F(0, 1, 2, 3, 4, 5, 6, 7);
    ArgumentException e;
    Func<Tensor[], Tensor[]> twice = x => new[] { Tensor.Of(x[0].ToFloatArray().Select(v => 2 * v).ToArray()) };
    var expected = new float[] { 0, 2, 4, 6, 8, 10, 12, 14 };
    CollectionAssert.AreEqual(expected, tpu.shard(twice, new[] { input }, 8, num_outputs: 1, system: system)[0].ToFloatArray());
    CollectionAssert.AreEqual(expected, tpu.Shard(twice, new[] { input }, 1, 1, system)[0].ToFloatArray());
    CollectionAssert.AreEqual(expected, ((Tensor[])tpu.shard_dyn(twice, new[] { input }, 8, num_outputs: 1, system: system))[0].ToFloatArray());
    // shard_dyn takes tf.tpu.shard's nine parameters.
    Tensor matrix = Tensor.Of(Enumerable.Range(0, 16).Select(v => (float)v).ToArray(), 2, 8);
    Func<Tensor[], Tensor[]> twiceKeepingShape = x => new[] { Tensor.Of(x[0].ToFloatArray().Select(v => 2 * v).ToArray(), x[0].DimsArray) };
    var perShard = (Tensor[])tpu.shard_dyn(computation: twiceKeepingShape, inputs: new[] { matrix }, num_shards: 8, input_shard_axes: new[] { 1 },
                                          outputs_from_all_shards: true, output_shard_axes: new List<int> { 1 }, infeed_queue: null,
                                          device_assignment: null, name: "s", num_outputs: 1, system: system);
    CollectionAssert.AreEqual(new long[] { 2, 8 }, perShard[0].DimsArray);
    CollectionAssert.AreEqual(Enumerable.Range(0, 16).Select(v => 2f * v).ToArray(), perShard[0].ToFloatArray());
    var first = (Tensor[])tpu.shard_dyn(twice, new[] { input }, 8, outputs_from_all_shards: false, num_outputs: 1, system: system);
    CollectionAssert.AreEqual(new float[] { 0 }, first[0].ToFloatArray());
    e = Assert.Throws<ArgumentException>(() => tpu.shard_dyn(twice, new[] { input }, 8, outputs_from_all_shards: "yes", num_outputs: 1, system: system));
    StringAssert.Contains("outputs_from_all_shards", e.Message);
    CollectionAssert.AreEqual(expected, tpu.batch_parallel(twice, new[] { input }, 8, num_outputs: 1, system: system)[0].ToFloatArray());
    CollectionAssert.AreEqual(expected, tpu.BatchParallel(twice, new[] { input }, 8, 1, system)[0].ToFloatArray());
    CollectionAssert.AreEqual(expected, ((Tensor[])tpu.batch_parallel_dyn(twice, new[] { input }, 1, num_outputs: 1, system: system))[0].ToFloatArray());
    // Not divisible: InvalidArgument from the library.
    Assert.Throws<InvalidArgumentError>(() => tpu.batch_parallel(twice, new[] { F(1, 2, 3) }, 8, num_outputs: 1, system: system));
  }

  // ---- outside compilation and bfloat16_scope ---------------------------------------

  static float Scale(float value, float factor = 10) { return value * factor; }

  [Test]
  public void OutsideCompilationWithArgsAndKwargs() {
    int hostCalls = 0;
    Func<float, float, float> scale = Scale;
    Tensor[][] o = Run(x => {
      var a = (float)tpu.outside_compilation(scale, 2f, 3f);
      var b = (float)tpu.outside_compilation(scale, new Dictionary<string, object> { { "factor", 4f } }, 2f);
      var c = (float)tpu.outside_compilation_dyn(scale, 1f, 5f);
      var d = (float)tpu.outside_compilation_dyn(scale, new Dictionary<string, object> { { "value", 3f }, { "factor", 3f } });
      var e = (float)tpu.OutsideCompilation(scale, 1f, 1f);
      tpu.outside_compilation((Action)(() => Interlocked.Increment(ref hostCalls)));
      return new[] { F(a, b, c, d, e) };
    });
    CollectionAssert.AreEqual(new float[] { 6, 8, 5, 9, 1 }, o[2][0].ToFloatArray());
    Assert.AreEqual(Replicas, hostCalls);
    var err = Assert.Throws<ArgumentException>(() => tpu.outside_compilation(scale, new Dictionary<string, object> { { "nope", 1f } }, 1f));
    StringAssert.Contains("nope", err.Message);
    Assert.Throws<FailedPreconditionError>(() => tpu.outside_compilation(scale, 1f, 1f));
  }

  [Test]
  public void HostFunctionThatThrowsFailsItsReplica() {
    Func<int> host = () => { throw new IOException("disk gone"); };
    var e = Assert.Throws<UnknownError>(() => Run(x => { tpu.outside_compilation(host); return new[] { x[0] }; }));
    StringAssert.Contains("disk gone", e.Message);
    Func<int> typed = () => { throw new DataLossError("bad sector"); };
    var d = Assert.Throws<DataLossError>(() => Run(x => { tpu.outside_compilation(typed); return new[] { x[0] }; }));
    StringAssert.Contains("bad sector", d.Message);
    AssertAll(Run(x => new[] { tpu.cross_replica_sum(x[0]) }), ExpectedSum);
  }

  [Test]
  public void Bfloat16ScopeRoundsCollectives() {
    Tensor[][] o = Run(x => {
      using (tpu.bfloat16_scope()) { }
      using (tpu.Bfloat16Scope()) { }
      using ((IDisposable)tpu.bfloat16_scope_dyn()) { }
      return new[] { tpu.cross_replica_sum(x[0]) };
    });
    AssertAll(o, ExpectedSum);
    Assert.Throws<FailedPreconditionError>(() => tpu.bfloat16_scope());
  }

  // ---- errors --------------------------------------------------------------------

  [Test]
  public void ComputationThatThrowsFailsTheStepWithItsMessage() {
    var e = Assert.Throws<UnknownError>(() => Run(x => {
      if (tpu.current_replica.ReplicaId() == 3) throw new KeyNotFoundException("weights missing");
      return new[] { tpu.cross_replica_sum(x[0]) };
    }));
    StringAssert.Contains("weights missing", e.Message);
    StringAssert.Contains("replica 3", e.Message);
    StringAssert.Contains("KeyNotFoundException", e.Message);
    Assert.AreEqual(Status.Unknown, e.Code);
    AssertAll(Run(x => new[] { tpu.cross_replica_sum(x[0]) }), ExpectedSum);
  }

  [Test]
  public void WrongOutputCountIsAnInvalidArgument() {
    var e = Assert.Throws<InvalidArgumentError>(() => Run(x => new Tensor[0]));
    StringAssert.Contains("returned 0 outputs", e.Message);
  }

  [Test]
  public void InvalidArgumentFromBadDims() {
    var e = Assert.Throws<InvalidArgumentError>(() => Tensor.Of(new float[] { 1, 2, 3 }, 2, 2));
    Assert.IsInstanceOf<OpError>(e);
    Assert.AreEqual(Status.InvalidArgument, e.Code);
    Assert.Throws<InvalidArgumentError>(() => F(1, 2).Reshape(new Int64Vector(new long[] { 3 })));
  }

  [Test]
  public void FailedPreconditionFromAClosedSystem() {
    // One system per process: shut the fixture's down, then start a fresh one.
    tpu.shutdown_system(system: system);
    Assert.IsTrue(system.IsClosed());
    var e = Assert.Throws<FailedPreconditionError>(() => tpu.rewrite(x => x, new[] { F(1) }, num_outputs: 1, system: system));
    Assert.AreEqual(Status.FailedPrecondition, e.Code);
    system.Close();
    Assert.Throws<FailedPreconditionError>(() => system.NumCores());
    system.Dispose();
    Assert.AreEqual("TpuSystem", Assert.Throws<ObjectDisposedException>(() => tpu.rewrite(x => x, new[] { F(1) }, num_outputs: 1, system: system)).ObjectName);
    StringAssert.Contains("no TPU system", Assert.Throws<FailedPreconditionError>(() => tpu.rewrite(x => x, num_outputs: 0)).Message);
    using (var options = new SystemOptions { NumCores = 2 })
    using (var s = new TpuSystem(options)) {
      Assert.AreEqual(2, s.NumCores());
      tpu.ShutdownSystem(system: s);
      Assert.IsNull(tpu.shutdown_system_dyn(system: s));
      s.Shutdown(); // idempotent, as tpu_system_shutdown
      Assert.IsTrue(s.IsClosed());
    }
    system = (TpuSystem)tpu.initialize_system_dyn(num_cores: Replicas);
    AssertAll(Run(x => new[] { tpu.cross_replica_sum(x[0]) }), ExpectedSum);
  }

  [Test]
  public void DeadlineExceededFromAShortCollectiveTimeout() {
    var e = Assert.Throws<DeadlineExceededError>(() => tpu.replicate((ctx, x) => {
      // Replica 0 skips the collective and is late; the others give up after 200 ms.
      if (ctx.ReplicaId() == 0) {
        Thread.Sleep(600);
      } else {
        using (var options = new CollectiveOptions { TimeoutMs = 200 })
        using (var groups = new GroupAssignment())
          ctx.CrossReplicaSum(x[0], groups, options);
      }
      return new Tensor[0];
    }, PerReplicaInputs(), system: system));
    Assert.AreEqual(Status.DeadlineExceeded, e.Code);
    AssertAll(Run(x => new[] { tpu.cross_replica_sum(x[0]) }), ExpectedSum);
  }

  // Aborted and Unavailable via ctx.Fail codes; the codes the library never raises
  // through a computation failing with that code.
  [Test]
  public void EveryStatusCodeBecomesItsTypedError() {
    var expected = new Dictionary<Status, Type> {
      { Status.Cancelled, typeof(CancelledError) }, { Status.Unknown, typeof(UnknownError) },
      { Status.InvalidArgument, typeof(InvalidArgumentError) }, { Status.DeadlineExceeded, typeof(DeadlineExceededError) },
      { Status.NotFound, typeof(NotFoundError) }, { Status.AlreadyExists, typeof(AlreadyExistsError) },
      { Status.PermissionDenied, typeof(PermissionDeniedError) }, { Status.ResourceExhausted, typeof(ResourceExhaustedError) },
      { Status.FailedPrecondition, typeof(FailedPreconditionError) }, { Status.Aborted, typeof(AbortedError) },
      { Status.OutOfRange, typeof(OutOfRangeError) }, { Status.Unimplemented, typeof(UnimplementedError) },
      { Status.Internal, typeof(InternalError) }, { Status.Unavailable, typeof(UnavailableError) },
      { Status.DataLoss, typeof(DataLossError) }, { Status.Unauthenticated, typeof(UnauthenticatedError) },
    };
    foreach (KeyValuePair<Status, Type> pair in expected) {
      Status code = pair.Key;
      // Through ctx.Fail in a director of the support layer ...
      using (var director = new FailingReplica(code))
      using (var options = new StepOptions()) {
        var e = (OpError)Assert.Throws(pair.Value, () => system.Replicate(director, Replicas, 0, new TensorVector(), 0, options));
        Assert.AreEqual(code, e.Code);
        StringAssert.Contains("failing with " + code, e.Message);
        StringAssert.Contains("replica 1", e.Message);
      }
      // ... and thrown from a tpu computation (the layer calls ctx.Fail with its code).
      var thrown = (OpError)Assert.Throws(pair.Value, () => tpu.replicate((ctx, x) => {
        if (ctx.ReplicaId() == 1) throw OpError.FromCode(code, "thrown " + code);
        ctx.Barrier(new CollectiveOptions());
        return new Tensor[0];
      }, num_replicas: Replicas, system: system));
      StringAssert.Contains("thrown " + code, thrown.Message);
    }
    // The same classes from a throw of each type inside the computation.
    var unauthenticated = Assert.Throws<UnauthenticatedError>(() => Run(x => { throw new UnauthenticatedError("who"); }));
    StringAssert.Contains("who", unauthenticated.Message);
    Assert.IsInstanceOf<UnknownError>(OpError.FromCode((Status)99, "m"));
  }

  sealed class FailingReplica : NativeComputation {
    readonly Status code;
    internal FailingReplica(Status code) { this.code = code; }
    public override Status Run(ReplicaContext ctx) {
      if (ctx.ReplicaId() == 1) return ctx.Fail(code, "failing with " + code);
      // The others are aborted in the barrier; nothing may escape a director.
      try {
        using (var options = new CollectiveOptions()) ctx.Barrier(options);
        return Status.Ok;
      } catch (OpError e) {
        return ctx.Fail(e.Code, e.Message);
      }
    }
  }

  // ---- lifetime and memory ---------------------------------------------------------

  [Test]
  public void TenThousandEmptyStepsDoNotGrowMemory() {
    Func<Tensor[], Tensor[]> empty = x => x;
    for (int i = 0; i < 200; ++i) tpu.replicate(empty, num_replicas: Replicas, system: system);
    GC.Collect(); GC.WaitForPendingFinalizers(); GC.Collect();
    long managedBefore = GC.GetTotalMemory(true), rssBefore = Rss();
    for (int i = 0; i < 10000; ++i) tpu.replicate(empty, num_replicas: Replicas, system: system);
    GC.Collect(); GC.WaitForPendingFinalizers(); GC.Collect();
    long managedGrowth = GC.GetTotalMemory(true) - managedBefore, rssGrowth = Rss() - rssBefore;
    Console.WriteLine("10000 empty steps: managed +" + managedGrowth + " B, RSS +" + rssGrowth + " B");
    Assert.Less(managedGrowth, 16L << 20);
    Assert.Less(rssGrowth, 64L << 20);
  }
  static long Rss() {
    string[] fields = File.ReadAllText("/proc/self/statm").Split(' ');
    return long.Parse(fields[1]) * Environment.SystemPageSize;
  }

  [Test]
  public void NeverDisposedSystemDoesNotHangExit() {
    StringAssert.Contains("sum 3", LifetimeTests.RunProgram("ExitWithoutDispose.exe"));
  }

  [Test]
  public void LateReplicaFindsItsComputationAliveAfterTheStepFailed() {
    string output = LifetimeTests.RunProgram("LateReplica.exe");
    StringAssert.Contains("late: replica 0", output);
    StringAssert.Contains("returned 1, sum 3", output);
  }
}
