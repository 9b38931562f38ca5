// Model parallelism from C# (issue 19): several cores per replica, LogicalCore and
// OnCore, group modes, meshes with named axes, partitioned inputs and outputs. Sums
// are checked against a naive reference computed here.
using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using NUnit.Framework;
using Tpurt;

[TestFixture]
public class ModelParallelTests {
  const int Cores = 8, Replicas = 4, K = 2; // 4 replicas x 2 cores on 8 cores
  TpuSystem system;
  DeviceAssignment assignment;

  [TestFixtureSetUp]
  public void StartSystem() {
    using (var options = new SystemOptions { NumCores = Cores })
      system = TpuSystem.InitializeSystem(options);
    using (Topology topology = system.GetTopology())
      assignment = DeviceAssignment.Build(topology, new Int32Vector(new[] { K, 1, 1, 1 }), new Int32Vector(), Replicas, DeviceOrderMode.Auto);
  }
  [TestFixtureTearDown]
  public void StopSystem() {
    assignment.Dispose();
    system.Dispose();
  }

  // x for participant (r, c): [flattened id + 1, 10 * (flattened id + 1)].
  static float[] Value(int r, int c) { int p = r * K + c + 1; return new float[] { p, 10 * p }; }
  // The naive sum of Value over the participants `member` selects.
  static float[] Sum(Func<int, int, bool> member) {
    var s = new float[2];
    for (int r = 0; r < Replicas; ++r)
      for (int c = 0; c < K; ++c)
        if (member(r, c)) { float[] v = Value(r, c); s[0] += v[0]; s[1] += v[1]; }
    return s;
  }
  static Tensor Mine(ReplicaContext ctx) { return Tensor.Of(Value(ctx.ReplicaId(), ctx.LogicalCore)); }

  // Runs `body` on every participant; returns what each recorded, by (replica, core).
  Dictionary<(int, int), float[][]> OnEveryCore(Func<ReplicaContext, Tensor[]> body) {
    var seen = new ConcurrentDictionary<(int, int), float[][]>();
    tpu.replicate((ctx, x) => {
      Tensor[] results = body(ctx);
      if (!seen.TryAdd((ctx.ReplicaId(), ctx.LogicalCore), results.Select(t => t.ToFloatArray()).ToArray()))
        throw new InvalidOperationException("replica " + ctx.ReplicaId() + " core " + ctx.LogicalCore + " ran twice");
      return new Tensor[0];
    }, device_assignment: assignment, system: system);
    return new Dictionary<(int, int), float[][]>(seen);
  }
  static void AssertEveryParticipant(Dictionary<(int, int), float[][]> seen) {
    CollectionAssert.AreEquivalent(Enumerable.Range(0, Replicas).SelectMany(r => Enumerable.Range(0, K).Select(c => (r, c))), seen.Keys);
  }

  [Test]
  public void EachReplicaAndCoreRunsOnTheCoreItsAssignmentNames() {
    var ran = new ConcurrentBag<(int replica, int core, int cores, int device)>();
    Tensor[][] o = tpu.replicate((ctx, x) => {
      ran.Add((ctx.ReplicaId(), ctx.LogicalCore, ctx.NumCoresPerReplica(), ctx.Core()));
      return new[] { Tensor.Of(new[] { ctx.ReplicaId() * 10 + ctx.LogicalCore }) };
    }, device_assignment: assignment, num_outputs: 1, system: system);
    // num_replicas came from the device assignment.
    Assert.AreEqual(Replicas, o.Length);
    Assert.AreEqual(Replicas * K, ran.Count);
    CollectionAssert.AreEquivalent(Enumerable.Range(0, Replicas).SelectMany(r => Enumerable.Range(0, K).Select(c => (r, c))),
                                   ran.Select(p => (p.replica, p.core)));
    foreach (var p in ran) {
      Assert.AreEqual(K, p.cores);
      Assert.AreEqual(assignment.TpuOrdinal(p.replica, p.core), p.device, "replica " + p.replica + " core " + p.core);
    }
    CollectionAssert.AreEquivalent(Enumerable.Range(0, Cores), ran.Select(p => p.device));
    // An output not partitioned is logical core 0's.
    for (int r = 0; r < Replicas; ++r) CollectionAssert.AreEqual(new[] { r * 10 }, o[r][0].ToIntArray());
  }

  [Test]
  public void OnCoreRunsOnlyOnThatLogicalCore() {
    var onOne = new ConcurrentBag<(int, int)>();
    var onDevice = new ConcurrentBag<(int, int)>();
    Tensor[][] o = tpu.replicate((ctx, x) => {
      bool ran = ctx.OnCore(1, () => onOne.Add((ctx.ReplicaId(), ctx.LogicalCore)));
      Assert.AreEqual(ctx.LogicalCore == 1, ran);
      tpu.on_core(tpu.core(0), () => onDevice.Add((ctx.ReplicaId(), ctx.LogicalCore)));
      int value = ctx.OnCore(0, () => 7, otherwise: -1);
      return new[] { Tensor.Of(new[] { value, ctx.OnCore("/" + tpu.core(1), () => 1) }) };
    }, device_assignment: assignment, num_outputs: 1, system: system);
    CollectionAssert.AreEquivalent(Enumerable.Range(0, Replicas).Select(r => (r, 1)), onOne);
    CollectionAssert.AreEquivalent(Enumerable.Range(0, Replicas).Select(r => (r, 0)), onDevice);
    CollectionAssert.AreEqual(new[] { 7, 0 }, o[2][0].ToIntArray()); // core 0's output
    // A core the replica does not have fails the step with the message.
    var e = Assert.Throws<UnknownError>(() => tpu.replicate((ctx, x) => { ctx.OnCore(K, () => {}); return new Tensor[0]; },
                                                            device_assignment: assignment, system: system));
    StringAssert.Contains("logical core 2 is outside [0, 2)", e.Message);
    e = Assert.Throws<UnknownError>(() => tpu.replicate((ctx, x) => { tpu.on_core("/device:CPU:0", () => {}); return new Tensor[0]; },
                                                        device_assignment: assignment, system: system));
    StringAssert.Contains("\"/device:CPU:0\" is not a replicated core's device name", e.Message);
    // A collective only core 1 enters is named at once, not a hang.
    var mismatch = Assert.Throws<InvalidArgumentError>(() => tpu.replicate((ctx, x) => {
      ctx.OnCore(1, () => tpu.cross_replica_sum(new float[] { 1 }));
      return new[] { tpu.cross_replica_sum(new float[] { 1 }, group_mode: GroupMode.CrossPartition) };
    }, device_assignment: assignment, num_outputs: 1, system: system));
    StringAssert.Contains("core 1", mismatch.Message);
  }

  [Test]
  public void CrossPartitionSumsTheCoresOfEachReplica() {
    var seen = OnEveryCore(ctx => new[] {
      tpu.cross_replica_sum(Mine(ctx), group_mode: GroupMode.CrossPartition),
      ctx.CrossReplicaSum(Mine(ctx), new[] { new[] { 0, 1 } }, GroupMode.CrossPartition),
      ctx.AllReduce(Mine(ctx), ReduceOp.Max, null, GroupMode.CrossPartition),
      (Tensor)tpu.cross_replica_sum_dyn(Mine(ctx), null, null, GroupMode.CrossPartition),
    });
    AssertEveryParticipant(seen);
    foreach (var p in seen) {
      int r = p.Key.Item1;
      float[] expected = Sum((rr, c) => rr == r);
      CollectionAssert.AreEqual(expected, p.Value[0], p.Key.ToString());
      CollectionAssert.AreEqual(expected, p.Value[1], p.Key.ToString());
      CollectionAssert.AreEqual(Value(r, K - 1), p.Value[2], p.Key.ToString());
      CollectionAssert.AreEqual(expected, p.Value[3], p.Key.ToString());
    }
  }

  // Groups of different sizes (issue 29): XLA's verifier allows them for all-reduce only
  // (CheckReplicaGroups' uniform_replica_group_size in xla/service/hlo_verifier.cc);
  // broadcast checks no groups (HandleCollectiveBroadcast), all-gather refuses them.
  [Test]
  public void GroupsOfDifferentSizes() {
    using (GroupAssignment g = GroupAssignment.Ragged(new Int32Vector(new[] { 3, 0, 1, 2 }), new Int32Vector(new[] { 3, 1 }))) {
      g.Validate(4);
      Assert.AreEqual(-1, g.GroupSize());
      Assert.IsTrue(g.IsRagged());
      CollectionAssert.AreEqual(new[] { 3, 1 }, g.GroupSizes());
      CollectionAssert.AreEqual(new[] { 3, 0, 1, 2 }, g.ReplicaIds());
    }
    Assert.Throws<InvalidArgumentError>(() => GroupAssignment.Ragged(new Int32Vector(new[] { 0, 1 }), new Int32Vector(new[] { 1, 0, 1 })));
    int[][] replicas = { new[] { 3, 0, 1 }, new[] { 2 } };
    int[][] flattened = { new[] { 7, 2, 4 }, new[] { 1 }, new[] { 0, 5, 3, 6 } };
    var seen = OnEveryCore(ctx => new[] {
      ctx.AllReduce(Mine(ctx), ReduceOp.Sum, replicas, GroupMode.CrossReplica),
      tpu.cross_replica_sum(Mine(ctx), flattened, group_mode: GroupMode.FlattenedId),
      ctx.Broadcast(Mine(ctx), 0, replicas, GroupMode.CrossReplicaAndPartition),
    });
    AssertEveryParticipant(seen);
    foreach (var p in seen) {
      int r = p.Key.Item1, c = p.Key.Item2, f = r * K + c;
      int[] mine = replicas.First(row => row.Contains(r));
      int[] myFlat = flattened.First(row => row.Contains(f));
      CollectionAssert.AreEqual(Sum((rr, cc) => cc == c && mine.Contains(rr)), p.Value[0], p.Key.ToString());
      CollectionAssert.AreEqual(Sum((rr, cc) => myFlat.Contains(rr * K + cc)), p.Value[1], p.Key.ToString());
      CollectionAssert.AreEqual(Value(mine[0], 0), p.Value[2], p.Key.ToString());
    }
    var e = Assert.Throws<InvalidArgumentError>(() => OnEveryCore(ctx => new[] {
      ctx.AllGather(Mine(ctx), 0, replicas, GroupMode.CrossReplica) }));
    StringAssert.Contains("Replica groups expected to be of uniform size", e.Message);
    StringAssert.Contains("{{3,0,1},{2}}", e.Message);
  }

  [Test]
  public void EveryGroupModeAgainstTheNaiveSum() {
    int[][] replicaPairs = { new[] { 0, 1 }, new[] { 2, 3 } };
    int[][] flattened = { new[] { 0, 3, 4, 7 }, new[] { 1, 2, 5, 6 } };
    var seen = OnEveryCore(ctx => new[] {
      tpu.cross_replica_sum(Mine(ctx)), // cross-replica: one sum per logical core
      tpu.cross_replica_sum(Mine(ctx), replicaPairs, group_mode: GroupMode.CrossReplica),
      tpu.cross_replica_sum(Mine(ctx), replicaPairs, group_mode: GroupMode.CrossReplicaAndPartition),
      tpu.CrossReplicaSum(Mine(ctx), flattened, GroupMode.FlattenedId),
      ctx.AllGather(Tensor.Of(new float[] { ctx.ReplicaId() * K + ctx.LogicalCore }), 0, null, GroupMode.CrossPartition),
      ctx.Broadcast(Mine(ctx), 1, null, GroupMode.CrossPartition),
      tpu.collective_permute(Mine(ctx), new[] { new[] { 0, 1 }, new[] { 1, 0 } }, group_mode: GroupMode.CrossPartition),
      ctx.CollectivePermute(Mine(ctx), new List<(int, int)> { (0, 1), (1, 2), (2, 3), (3, 0) }),
      ctx.ReduceScatter(Tensor.Of(new float[] { 1, 2 }), ReduceOp.Sum, 0, null, GroupMode.CrossPartition),
      tpu.all_to_all(Tensor.Of(new float[] { 10 * ctx.LogicalCore, 10 * ctx.LogicalCore + 1 }), 0, 0, K, group_mode: GroupMode.CrossPartition),
    });
    AssertEveryParticipant(seen);
    Func<int, int, int> id = (r, c) => r * K + c;
    foreach (var p in seen) {
      int r = p.Key.Item1, c = p.Key.Item2;
      string at = "replica " + r + " core " + c;
      CollectionAssert.AreEqual(Sum((rr, cc) => cc == c), p.Value[0], at);
      CollectionAssert.AreEqual(Sum((rr, cc) => cc == c && rr / 2 == r / 2), p.Value[1], at);
      CollectionAssert.AreEqual(Sum((rr, cc) => rr / 2 == r / 2), p.Value[2], at);
      int[] group = flattened.First(g => g.Contains(id(r, c)));
      CollectionAssert.AreEqual(Sum((rr, cc) => group.Contains(id(rr, cc))), p.Value[3], at);
      CollectionAssert.AreEqual(new float[] { id(r, 0), id(r, 1) }, p.Value[4], at);
      CollectionAssert.AreEqual(Value(r, 1), p.Value[5], at);
      CollectionAssert.AreEqual(Value(r, 1 - c), p.Value[6], at);
      CollectionAssert.AreEqual(Value((r + Replicas - 1) % Replicas, c), p.Value[7], at);
      CollectionAssert.AreEqual(new float[] { c == 0 ? 2 : 4 }, p.Value[8], at);
      CollectionAssert.AreEqual(new float[] { c, 10 + c }, p.Value[9], at);
    }
  }

  [Test]
  public void MeshAxisSumAgainstTheNaiveSum() {
    using (var mesh = new Mesh(new[] { "batch", "model" }, new long[] { Replicas, K }, assignment)) {
      var seen = OnEveryCore(ctx => new[] {
        tpu.cross_replica_sum(Mine(ctx), mesh, "model"),
        tpu.cross_replica_sum(Mine(ctx), mesh["batch"]),
        ctx.AllReduce(Mine(ctx), ReduceOp.Sum, mesh["batch", "model"]),
        ctx.CrossReplicaSum(Mine(ctx), mesh["model"], GroupMode.FlattenedId),
        tpu.CrossReplicaSum(Mine(ctx), mesh, "batch"),
        Tensor.Of(mesh.Coordinates(ctx.ReplicaId(), ctx.LogicalCore).ToArray()).Cast(DType.Float32),
        tpu.cross_replica_sum(Mine(ctx), mesh, "model", "batch"),
      });
      AssertEveryParticipant(seen);
      // Row-major over (batch, model): participant (r, c) sits at batch r, model c.
      foreach (var p in seen) {
        int r = p.Key.Item1, c = p.Key.Item2;
        string at = "replica " + r + " core " + c;
        CollectionAssert.AreEqual(Sum((rr, cc) => rr == r), p.Value[0], at);
        CollectionAssert.AreEqual(Sum((rr, cc) => cc == c), p.Value[1], at);
        CollectionAssert.AreEqual(Sum((rr, cc) => true), p.Value[2], at);
        CollectionAssert.AreEqual(Sum((rr, cc) => rr == r), p.Value[3], at);
        CollectionAssert.AreEqual(Sum((rr, cc) => cc == c), p.Value[4], at);
        CollectionAssert.AreEqual(new float[] { r, c }, p.Value[5], at);
        CollectionAssert.AreEqual(Sum((rr, cc) => true), p.Value[6], at);
      }
      // Naming a mode other than the axes' is refused before the collective.
      var e = Assert.Throws<UnknownError>(() => OnEveryCore(ctx => new[] { tpu.cross_replica_sum(Mine(ctx), mesh["model"], group_mode: GroupMode.CrossPartition) }));
      StringAssert.Contains("hold FlattenedId ids, but the group mode is CrossPartition", e.Message);
    }
  }

  // Compile-only: every form of x takes (mesh, axis, ...) and still takes the seed's
  // positional (x, null, name) without ambiguity.
  static void MeshFormsCompile(Mesh mesh, Tensor t, PerReplica p, object o) {
    tpu.cross_replica_sum(t, mesh, "model");
    tpu.cross_replica_sum(p, mesh, "model");
    tpu.cross_replica_sum(new float[] { 1 }, mesh, "model", "batch");
    tpu.cross_replica_sum(new double[] { 1 }, mesh, "model");
    tpu.cross_replica_sum(new[] { 1 }, mesh, "model");
    tpu.cross_replica_sum(new long[] { 1 }, mesh, "model");
    tpu.cross_replica_sum((t, t), mesh, "model");
    tpu.cross_replica_sum(new List<object> { t }, mesh, "model");
    tpu.cross_replica_sum(new Dictionary<object, object> { { "k", t } }, mesh, "model");
    tpu.cross_replica_sum(o, mesh, "model");
    tpu.cross_replica_sum(t, null, "name");
    tpu.cross_replica_sum(new float[] { 1 }, null, "name");
    tpu.cross_replica_sum(o, mesh["model"], "name", GroupMode.FlattenedId);
    tpu.CrossReplicaSum(t, mesh, "model");
    tpu.CrossReplicaSum(new float[] { 1 }, mesh["model"]);
  }

  [Test]
  public void MeshMembers() {
    using (var mesh = new Mesh(new[] { "batch", "model" }, new long[] { Replicas, K }, assignment)) {
      Assert.AreEqual(2, mesh.NumAxes());
      Assert.AreEqual(Replicas * K, mesh.Size());
      CollectionAssert.AreEqual(new[] { "batch", "model" }, mesh.DimNames);
      CollectionAssert.AreEqual(new long[] { Replicas, K }, mesh.Shape);
      Assert.AreEqual("model", mesh.AxisName(1));
      Assert.AreEqual(K, mesh.AxisSize(1));
      Assert.AreEqual(1, mesh.AxisIndex("model"));
      Assert.AreEqual(Replicas, mesh.DimSize("batch"));
      CollectionAssert.AreEqual(new long[] { 3, 1 }, mesh.Coordinates(3, 1).ToArray());
      Assert.AreEqual("Mesh(batch=4, model=2)", mesh.ToString());
      using (var axes = new StringVector(new[] { "model" }))
      using (GroupAssignment groups = mesh.AxisGroups(axes)) {
        Assert.AreEqual(Replicas, groups.NumGroups());
        Assert.AreEqual(K, groups.GroupSize());
        CollectionAssert.AreEqual(new[] { 0, 1, 2, 3, 4, 5, 6, 7 }, groups.ReplicaIds().ToArray());
        Assert.AreEqual(GroupMode.FlattenedId, mesh.AxisGroupMode(axes));
      }
      using (var axes = new StringVector(new[] { "batch" }))
      using (GroupAssignment groups = mesh.AxisGroups(axes))
        CollectionAssert.AreEqual(new[] { 0, 2, 4, 6, 1, 3, 5, 7 }, groups.ReplicaIds().ToArray());
      using (DeviceAssignment own = mesh.GetDeviceAssignment()) {
        Assert.AreEqual(Replicas, own.NumReplicas());
        Assert.AreEqual(K, own.NumCoresPerReplica());
        CollectionAssert.AreEqual(assignment.CoreAssignment().ToArray(), own.CoreAssignment().ToArray());
      }
      Assert.AreEqual(Status.NotFound, Assert.Throws<NotFoundError>(() => { var unused = mesh["data"]; }).Code);
      StringAssert.Contains("data", Assert.Throws<NotFoundError>(() => mesh.AxisIndex("data")).Message);
      Assert.Throws<OutOfRangeError>(() => mesh.AxisName(2));
      Assert.Throws<OutOfRangeError>(() => mesh.Coordinates(Replicas, 0));
      Assert.Throws<ArgumentException>(() => new MeshAxes(mesh));
    }
    // The generated factories, and the mesh of every core of a topology.
    using (Topology topology = system.GetTopology()) {
      using (Mesh all = new Mesh(new[] { "x", "y" }, new long[] { 2, 4 }, topology)) {
        Assert.AreEqual(Cores, all.Size());
        using (DeviceAssignment a = all.GetDeviceAssignment()) Assert.AreEqual(Cores, a.NumReplicas());
      }
      using (Mesh m = Mesh.CreateFromTopology(topology, new StringVector(new[] { "x" }), new Int64Vector(new long[] { Cores })))
        Assert.AreEqual(1, m.NumAxes());
    }
    using (Mesh m = Mesh.Create(assignment, new StringVector(new[] { "all" }), new Int64Vector(new long[] { Replicas * K })))
      Assert.AreEqual(Replicas * K, m.AxisSize(0));
  }

  [Test]
  public void BadMeshesNameTheValue() {
    StringAssert.Contains("model", Assert.Throws<InvalidArgumentError>(
      () => new Mesh(new[] { "model", "model" }, new long[] { Replicas, K }, assignment)).Message);
    StringAssert.Contains("3", Assert.Throws<InvalidArgumentError>(
      () => new Mesh(new[] { "batch", "model" }, new long[] { 3, K }, assignment)).Message);
    Assert.Throws<InvalidArgumentError>(() => new Mesh(new[] { "batch" }, new long[] { Replicas, K }, assignment));
    Assert.Throws<InvalidArgumentError>(() => new Mesh(new string[0], new long[0], assignment));
    Assert.AreEqual("deviceAssignment", Assert.Throws<ArgumentNullException>(() => new Mesh(new[] { "x" }, new long[] { 8 }, (DeviceAssignment)null)).ParamName);
    Assert.AreEqual("dimNames", Assert.Throws<ArgumentNullException>(() => new Mesh(null, new long[] { 8 }, assignment)).ParamName);
    Assert.AreEqual("dimNames", Assert.Throws<ArgumentNullException>(() => new Mesh(new string[] { null }, new long[] { 8 }, assignment)).ParamName);
  }

  [Test]
  public void DisposedMeshIsObjectDisposed() {
    var mesh = new Mesh(new[] { "batch", "model" }, new long[] { Replicas, K }, assignment);
    MeshAxes model = mesh["model"];
    mesh.Dispose();
    mesh.Dispose(); // idempotent
    Assert.AreEqual("Mesh", Assert.Throws<ObjectDisposedException>(() => mesh.NumAxes()).ObjectName);
    Assert.AreEqual("Mesh", Assert.Throws<ObjectDisposedException>(() => { var unused = mesh.DimNames; }).ObjectName);
    Assert.AreEqual("Mesh", Assert.Throws<ObjectDisposedException>(() => { var unused = mesh["model"]; }).ObjectName);
    Assert.AreEqual("Mesh(disposed)", mesh.ToString());
    // In a computation: the step fails naming the type.
    var e = Assert.Throws<UnknownError>(() => OnEveryCore(ctx => new[] { tpu.cross_replica_sum(Mine(ctx), model) }));
    StringAssert.Contains("ObjectDisposedException", e.Message);
    StringAssert.Contains("Mesh", e.Message);
    // Close releases the native mesh; the proxy then reports it as closed.
    var closed = new Mesh(new[] { "all" }, new long[] { Replicas * K }, assignment);
    closed.Close();
    Assert.Throws<FailedPreconditionError>(() => closed.NumAxes());
    closed.Dispose();
  }

  [Test]
  public void PartitionedInputsAndOutputsRoundTrip() {
    // Replica r's input 0: a [4, 3] matrix cut in 2 along dimension 0; input 1 whole.
    Func<int, float[]> matrix = r => Enumerable.Range(0, 12).Select(i => (float)(100 * r + i)).ToArray();
    var inputs = Enumerable.Range(0, Replicas)
                   .Select(r => new[] { Tensor.Of(matrix(r), 4, 3), Tensor.Of(new float[] { r }) }).ToList();
    var shapes = new ConcurrentDictionary<(int, int), long[]>();
    Tensor[][] o = tpu.replicate((ctx, x) => {
      shapes[(ctx.ReplicaId(), ctx.LogicalCore)] = x[0].DimsArray;
      Assert.AreEqual(new float[] { ctx.ReplicaId() }, x[1].ToFloatArray()); // whole on every core
      return new[] { x[0], Tensor.Of(new float[] { ctx.LogicalCore, ctx.ReplicaId() }, 1, 2), x[1] };
    }, inputs, device_assignment: assignment, num_outputs: 3, system: system,
       input_partition_dims: new[] { new[] { K, 1 }, null }, output_partition_dims: new[] { new[] { K, 1 }, new[] { K, 1 }, null });
    foreach (var s in shapes) CollectionAssert.AreEqual(new long[] { 2, 3 }, s.Value, s.Key.ToString());
    Assert.AreEqual(Replicas * K, shapes.Count);
    for (int r = 0; r < Replicas; ++r) {
      CollectionAssert.AreEqual(new long[] { 4, 3 }, o[r][0].DimsArray);
      CollectionAssert.AreEqual(matrix(r), o[r][0].ToFloatArray(), "replica " + r);
      CollectionAssert.AreEqual(new long[] { 2, 2 }, o[r][1].DimsArray);
      CollectionAssert.AreEqual(new float[] { 0, r, 1, r }, o[r][1].ToFloatArray());
      CollectionAssert.AreEqual(new float[] { r }, o[r][2].ToFloatArray());
    }
  }

  [Test]
  public void UnevenPartitionsSplitAsTensorFlowDoes() {
    // 5 columns cut 2 ways: 3 then 2 (tpu_feed.py's rule), assembled back whole.
    var inputs = Enumerable.Range(0, Replicas).Select(r => new[] { Tensor.Of(new float[] { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 }, 2, 5) }).ToList();
    var widths = new ConcurrentDictionary<(int, int), long>();
    Tensor[][] o = (Tensor[][])tpu.replicate_dyn((ReplicaComputation)((ctx, x) => {
      widths[(ctx.ReplicaId(), ctx.LogicalCore)] = x[0].Dim(1);
      return new[] { x[0] };
    }), inputs, null, assignment, num_outputs: 1, system: system,
       input_partition_dims: new List<List<int>> { new List<int> { 1, K } }, output_partition_dims: new[] { new[] { 1, K } });
    for (int r = 0; r < Replicas; ++r) {
      Assert.AreEqual(3, widths[(r, 0)]);
      Assert.AreEqual(2, widths[(r, 1)]);
      CollectionAssert.AreEqual(new float[] { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 }, o[r][0].ToFloatArray());
    }
  }

  [Test]
  public void BadGroupModesAndPartitionsRaiseTypedErrors() {
    // An unknown group mode: InvalidArgumentError naming it (k = 1 and k = 2).
    var e = Assert.Throws<InvalidArgumentError>(() => tpu.replicate((ctx, x) => new[] { tpu.cross_replica_sum(x[0], group_mode: (GroupMode)7) },
                                                                    Enumerable.Range(0, Cores).Select(r => new[] { Tensor.Of(new float[] { r }) }).ToList(),
                                                                    num_outputs: 1, system: system));
    StringAssert.Contains("group_mode is 7", e.Message);
    e = Assert.Throws<InvalidArgumentError>(() => OnEveryCore(ctx => new[] { ctx.AllReduce(Mine(ctx), ReduceOp.Sum, null, (GroupMode)(-1)) }));
    StringAssert.Contains("group_mode is -1", e.Message);
    // A cross-partition group naming core 2 of a replica with 2 cores.
    e = Assert.Throws<InvalidArgumentError>(() => OnEveryCore(ctx => new[] {
      tpu.cross_replica_sum(Mine(ctx), new[] { new[] { 0, 2 } }, group_mode: GroupMode.CrossPartition) }));
    StringAssert.Contains("logical core 2 in group 0 is outside [0, 2)", e.Message);
    StringAssert.Contains("(group mode CROSS_PARTITION)", e.Message);
    // A permute has no cross-replica-and-partition meaning (as in XLA).
    e = Assert.Throws<InvalidArgumentError>(() => OnEveryCore(ctx => new[] {
      ctx.CollectivePermute(Mine(ctx), new[,] { { 0, 1 }, { 1, 0 } }, GroupMode.CrossReplicaAndPartition) }));
    StringAssert.Contains("CROSS_REPLICA_AND_PARTITION", e.Message);
    var u = Assert.Throws<UnknownError>(() => OnEveryCore(ctx => new[] { ctx.CollectivePermute(Mine(ctx), new[] { new[] { 0, 1, 2 } }) }));
    StringAssert.Contains("sourceTargetPairs[0] is of 3 ids", u.Message);
    Assert.Throws<ArgumentException>(() => tpu.cross_replica_sum_dyn(Tensor.Of(new float[] { 1 }), null, null, "CrossPartition"));
  }

  [Test]
  public void BadPartitionsRaiseTypedErrors() {
    // Partition counts whose product is not the cores per replica.
    var inputs = Enumerable.Range(0, Replicas).Select(r => new[] { Tensor.Of(new float[] { 1, 2, 3, 4 }) }).ToList();
    var e = Assert.Throws<InvalidArgumentError>(() => tpu.replicate(x => x, inputs, device_assignment: assignment, num_outputs: 1, system: system,
                                                                    input_partition_dims: new[] { new[] { 4 } }));
    StringAssert.Contains("4", e.Message);
    Assert.Throws<InvalidArgumentError>(() => tpu.replicate(x => x, inputs, device_assignment: assignment, num_outputs: 1, system: system,
                                                            input_partition_dims: new[] { new[] { K }, new[] { K } }));
    // Bad arguments of the .NET forms.
    Assert.Throws<ArgumentException>(() => tpu.replicate_dyn((Func<Tensor[], Tensor[]>)(x => x), inputs, null, assignment, num_outputs: 1,
                                                             system: system, input_partition_dims: "2"));
  }

  [Test]
  public void OneCorePerReplicaKeepsTodaysMeaning() {
    // k = 1: LogicalCore is 0, a cross-partition sum is each replica's own value, and
    // the seed's positional (x, null, name) still means one group of every replica.
    Tensor[][] o = tpu.replicate((ctx, x) => new[] {
      Tensor.Of(new[] { ctx.LogicalCore, ctx.NumCoresPerReplica() }),
      tpu.cross_replica_sum(x[0], group_mode: GroupMode.CrossPartition),
      tpu.cross_replica_sum(x[0], null, "name"),
      tpu.cross_replica_sum(x[0], (Mesh)null, "name"),
    }, Enumerable.Range(0, Cores).Select(r => new[] { Tensor.Of(new float[] { r }) }).ToList(), num_outputs: 4, system: system);
    for (int r = 0; r < Cores; ++r) {
      CollectionAssert.AreEqual(new[] { 0, 1 }, o[r][0].ToIntArray());
      CollectionAssert.AreEqual(new float[] { r }, o[r][1].ToFloatArray());
      CollectionAssert.AreEqual(new float[] { 28 }, o[r][2].ToFloatArray());
      CollectionAssert.AreEqual(new float[] { 28 }, o[r][3].ToFloatArray());
    }
  }

  // The support layer's own surface: StepOptions' partitions, CollectiveOptions'
  // GroupMode and ReplicaContext.LogicalCore from a NativeComputation.
  sealed class CrossPartitionDirector : NativeComputation {
    public override Status Run(ReplicaContext ctx) {
      try {
        using (var all = new GroupAssignment())
        using (var options = new CollectiveOptions { GroupMode = GroupMode.CrossPartition }) {
          Tensor sum = ctx.CrossReplicaSum(ctx.Input(0), all, options);
          ctx.SetOutput(0, sum);
          ctx.SetOutput(1, Tensor.Of(new[] { ctx.LogicalCore }));
        }
        return Status.Ok;
      } catch (Exception e) {
        return ctx.Fail(e is OpError ? ((OpError)e).Code : Status.Unknown, e.ToString());
      }
    }
  }

  [Test]
  public void StepOptionsPartitionsAndCollectiveGroupMode() {
    using (var options = new CollectiveOptions()) {
      Assert.AreEqual(GroupMode.CrossReplica, options.GroupMode);
      options.GroupMode = GroupMode.FlattenedId;
      Assert.AreEqual(GroupMode.FlattenedId, options.GroupMode);
    }
    // Replica r's input [r, r, r+1, r+1] cut in 2: core c holds [r + c, r + c].
    var inputs = new TensorVector(Enumerable.Range(0, Replicas).Select(r => Tensor.Of(new float[] { r, r, r + 1, r + 1 })));
    using (var director = new CrossPartitionDirector())
    using (var options = new StepOptions { DeviceAssignment = assignment }) {
      options.InputPartitions = new Int32VectorVector { new Int32Vector(new[] { K }) };
      options.OutputPartitions = new Int32VectorVector { new Int32Vector(new[] { K }), new Int32Vector(new[] { K }) };
      Assert.AreEqual(1, options.InputPartitions.Count);
      CollectionAssert.AreEqual(new[] { K }, options.InputPartitions[0].ToArray());
      TensorVector o = system.Replicate(director, Replicas, 1, inputs, 2, options);
      for (int r = 0; r < Replicas; ++r) {
        float s = 2 * r + 1; // (r) + (r + 1), on both cores
        CollectionAssert.AreEqual(new[] { s, s, s, s }, o[r * 2].ToFloatArray(), "replica " + r);
        CollectionAssert.AreEqual(new[] { 0, 1 }, o[r * 2 + 1].ToIntArray(), "replica " + r);
      }
    }
  }
  // An infeed queue with replicas of K cores: each core gets its piece of every tuple
  // element, cut along the element's shard dimension, or the whole element for -1
  // (TensorFlow's InfeedQueue.set_shard_dimensions, tpu_sharding.py get_sharded_shape).
  [Test]
  public void InfeedShardDimensionsOverTheCoresOfAReplica() {
    var shapes = new ShapeVector { Shape.Of(new Int64Vector(new long[] { 4 })), Shape.Of(new Int64Vector(new long[] { 2 })) };
    var dtypes = new Int32Vector(new[] { (int)DType.Float32, (int)DType.Float32 });
    using (var queue = new InfeedQueue(system, Replicas, dtypes, shapes, 2)) {
      var e = Assert.Throws<InvalidArgumentError>(() => queue.SetShardDimensions(new Int32Vector(new[] { 0 })));
      StringAssert.Contains("one per tuple element (2)", e.Message);
      queue.SetShardDimensions(new Int32Vector(new[] { 0, -1 }));
      for (int r = 0; r < Replicas; ++r) {
        float f = 10 * r;
        queue.Enqueue(r, new TensorVector { Tensor.Of(new[] { f, f + 1, f + 2, f + 3 }), Tensor.Of(new[] { f, 7f }) });
      }
      var seen = new ConcurrentDictionary<(int, int), float[]>();
      tpu.replicate((ctx, x) => {
        seen[(ctx.ReplicaId(), ctx.LogicalCore)] = x[0].ToFloatArray().Concat(x[1].ToFloatArray()).ToArray();
        return new Tensor[0];
      }, infeed_queue: queue, device_assignment: assignment, system: system);
      for (int r = 0; r < Replicas; ++r)
        for (int c = 0; c < K; ++c)
          CollectionAssert.AreEqual(new float[] { 10 * r + 2 * c, 10 * r + 2 * c + 1, 10 * r, 7 }, seen[(r, c)], $"replica {r} core {c}");
    }
  }
}
