// Every member of bindings/api_map.txt called through the C# binding (the generated
// proxies) with an assertion on what it returns or raises.
using System;
using System.Collections.Generic;
using System.Linq;
using NUnit.Framework;
using Tpurt;

[TestFixture]
public class ApiMapTests {
  const int Replicas = 8;
  TpuSystem system;

  [TestFixtureSetUp]
  public void StartSystem() {
    using (var options = new SystemOptions { NumCores = Replicas, JobName = "worker" })
      system = TpuSystem.InitializeSystem(options);
  }
  [TestFixtureTearDown]
  public void StopSystem() { system.Dispose(); }

  static Int64Vector Dims(params long[] d) { return new Int64Vector(d); }

  [Test]
  public void FreeFunctions() {
    StringAssert.StartsWith("1.", TpurtNative.Version());
    Assert.AreEqual("INVALID_ARGUMENT", TpurtNative.StatusName(Status.InvalidArgument));
    Assert.AreEqual(4, TpurtNative.DtypeSize(DType.Float32));
    Assert.AreEqual("float32", TpurtNative.DtypeName(DType.Float32));
    Assert.AreEqual("device:TPU_REPLICATED_CORE:1", TpurtNative.Core(1));
    Assert.AreEqual("device:TPU_REPLICATED_CORE:2", tpu.core(2));
    Assert.AreEqual("device:TPU_REPLICATED_CORE:0", tpu.Core(0));
    Assert.AreEqual("device:TPU_REPLICATED_CORE:3", tpu.core_dyn(3));
    StringAssert.Contains("TPU:2", TpurtNative.DeviceName("worker", 0, "TPU", 2));
    Assert.AreEqual(Status.NotFound, TpurtNative.SetLastError(Status.NotFound, "set by the test"));
    Assert.AreEqual("set by the test", TpurtNative.LastError());
    TpurtNative.ClearLastError();
    Assert.AreEqual("", TpurtNative.LastError());
    UInt16Vector b = TpurtNative.FloatToBfloat16(new FloatVector(new[] { 1.5f, -2f }));
    CollectionAssert.AreEqual(new[] { 1.5f, -2f }, TpurtNative.Bfloat16ToFloat(b).ToArray());
    UInt16Vector h = TpurtNative.FloatToHalf(new FloatVector(new[] { 0.25f }));
    CollectionAssert.AreEqual(new[] { 0.25f }, TpurtNative.HalfToFloat(h).ToArray());
    Assert.GreaterOrEqual(TpurtNative.TensorCacheTrim(0), 0);
    Assert.Throws<InvalidArgumentError>(() => TpurtNative.TensorCacheTrim(-1));
    int n = TpurtNative.NumEnvironmentVariables();
    Assert.Greater(n, 0);
    EnvironmentVariable v = TpurtNative.EnvironmentVariableAt(0);
    StringAssert.StartsWith("TPU", v.Name.ToUpperInvariant());
    Assert.Throws<OutOfRangeError>(() => TpurtNative.EnvironmentVariableAt(n));
  }

  [Test]
  public void TensorMembers() {
    float[] data = { 1, 2, 3, 4, 5, 6 };
    using (Tensor t = Tensor.FromFloat32(Dims(2, 3), data, data.Length)) {
      Assert.AreEqual(DType.Float32, t.Dtype());
      Assert.AreEqual(2, t.Rank());
      CollectionAssert.AreEqual(new long[] { 2, 3 }, t.Dims().ToArray());
      Assert.AreEqual(3, t.Dim(1));
      Assert.AreEqual(6, t.NumElements());
      Assert.AreEqual(24, t.ByteSize());
      var out_ = new float[6];
      t.ReadFloat32(out_, out_.Length);
      CollectionAssert.AreEqual(data, out_);
      Tensor r = t.Reshape(Dims(3, 2));
      CollectionAssert.AreEqual(new long[] { 3, 2 }, r.DimsArray);
      CollectionAssert.AreEqual(new[] { 1.0, 2, 3, 4, 5, 6 }, t.Cast(DType.Float64).ToDoubleArray());
      t.WriteFloat32(new float[] { 6, 5, 4, 3, 2, 1 }, 6);
      Assert.AreEqual(6f, t.ToFloatArray()[0]);
      Assert.AreEqual(1f, r.ToFloatArray()[0], "copy-on-write keeps the reshaped view's values");
      Assert.Throws<InvalidArgumentError>(() => t.ReadFloat32(new float[5], 5));
      Assert.Throws<InvalidArgumentError>(() => t.ReadInt32(new int[6], 6));
      // A count beyond the array is refused before any native copy.
      Assert.Throws<ArgumentOutOfRangeException>(() => t.ReadFloat32(new float[2], 6));
      Assert.Throws<ArgumentOutOfRangeException>(() => t.WriteFloat32(new float[2], 6));
      Assert.Throws<ArgumentOutOfRangeException>(() => Tensor.FromFloat32(Dims(6), new float[2], 6));
      Assert.Throws<ArgumentNullException>(() => t.ReadFloat32(null, 6));
      // Borrowed memory the GC never moves.
      var wrapped = new float[] { 7, 8 };
      IntPtr memory = System.Runtime.InteropServices.Marshal.AllocHGlobal(wrapped.Length * sizeof(float));
      try {
        System.Runtime.InteropServices.Marshal.Copy(wrapped, 0, memory, wrapped.Length);
        using (Tensor w = Tensor.WrapFloat32(Dims(2), memory, wrapped.Length))
          CollectionAssert.AreEqual(wrapped, w.ToFloatArray());
      } finally {
        System.Runtime.InteropServices.Marshal.FreeHGlobal(memory);
      }
      r.Release();
      Assert.IsTrue(r.IsNull());
      Assert.Throws<FailedPreconditionError>(() => r.Rank());
      r.Dispose();
      Assert.AreEqual("Tensor", Assert.Throws<ObjectDisposedException>(() => r.Rank()).ObjectName);
    }
    CollectionAssert.AreEqual(new[] { 0, 0 }, Tensor.Zeros(DType.Int32, Dims(2)).ToIntArray());
    CollectionAssert.AreEqual(new[] { 1.5 }, Tensor.FromFloat64(Dims(1), new[] { 1.5 }, 1).ToDoubleArray());
    CollectionAssert.AreEqual(new[] { 9L }, Tensor.FromInt64(Dims(1), new[] { 9L }, 1).ToLongArray());
    CollectionAssert.AreEqual(new[] { 4 }, Tensor.FromInt32Vector(Dims(1), new Int32Vector(new[] { 4 })).ToInt32Vector().ToArray());
  }

  [Test]
  public void SystemMembers() {
    Assert.AreEqual(Replicas, system.NumCores());
    Assert.IsFalse(system.IsClosed());
    Assert.AreEqual("worker", system.JobName());
    Assert.AreEqual("TPU", system.DeviceType());
    Assert.AreEqual(0, system.EmbeddingConfig().Count);
    ByteVector serialized = system.SerializedTopology();
    Assert.Greater(serialized.Count, 0);
    using (Topology parsed = Topology.Parse(serialized))
    using (Topology topology = system.GetTopology()) {
      CollectionAssert.AreEqual(topology.Serialize().ToArray(), parsed.Serialize().ToArray());
      Assert.AreEqual(4, topology.MeshRank());
      Assert.AreEqual(Replicas, topology.MeshShape().Aggregate(1, (a, b) => a * b));
      Assert.AreEqual(1, topology.NumTasks());
      Assert.AreEqual(Replicas, topology.NumDevicesPerTask());
      Int32Vector coords = topology.DeviceCoordinates(0, 3);
      Assert.AreEqual(4, coords.Count);
      Assert.AreEqual(0, topology.TaskOrdinalAtCoordinates(coords));
      Assert.AreEqual(3, topology.DeviceOrdinalAtCoordinates(coords));
      Assert.AreEqual(0, topology.NumMissingDevices());
      Assert.Throws<OutOfRangeError>(() => topology.MissingDevice(0));
      StringAssert.EndsWith("device:TPU:3", topology.TpuDeviceName(coords, "worker"));
      StringAssert.Contains("CPU", topology.CpuDeviceName(coords, ""));
      Assert.AreEqual(2, topology.HardwareFeature().Count);
      Assert.Throws<InvalidArgumentError>(() => Topology.Parse(new ByteVector(new byte[] { 0xff, 0xff, 0xff })));
    }
  }

  [Test]
  public void TopologyCreateAndDeviceAssignment() {
    // A 2x2 mesh of one task with four devices.
    var coordinates = new Int32Vector(new[] { 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0 });
    using (Topology topology = Topology.Create(new Int32Vector(new[] { 2, 2, 1, 1 }), coordinates, 1, 4))
    using (DeviceAssignment built = DeviceAssignment.Build(topology, new Int32Vector(), new Int32Vector(), 4, DeviceOrderMode.Auto)) {
      Assert.AreEqual(4, topology.NumDevicesPerTask());
      Assert.AreEqual(4, built.NumReplicas());
      Assert.AreEqual(1, built.NumCoresPerReplica());
      Assert.AreEqual(16, built.CoreAssignment().Count);
      Assert.AreEqual(4, built.Coordinates(1, 0).Count);
      Assert.AreEqual(0, built.Task(1, 0));
      Assert.That(built.TpuOrdinal(1, 0), Is.InRange(0, 3));
      StringAssert.Contains("/job:w/", built.TpuDevice(1, 0, "w"));
      StringAssert.Contains("CPU", built.HostDevice(1, 0, ""));
      CollectionAssert.AreEqual(new[] { 0, 1, 2, 3 }, built.LookupReplicas(0, 0).ToArray());
      Assert.Throws<NotFoundError>(() => built.LookupReplicas(5, 0));
      using (Topology own = built.GetTopology()) Assert.AreEqual(4, own.NumDevicesPerTask());
      using (DeviceAssignment created = DeviceAssignment.Create(topology, built.CoreAssignment(), 4, 1))
        CollectionAssert.AreEqual(built.CoreAssignment().ToArray(), created.CoreAssignment().ToArray());
      Assert.Throws<InvalidArgumentError>(() => DeviceAssignment.Create(topology, new Int32Vector(new[] { 9, 9, 9, 9 }), 1, 1));
      built.Close();
      Assert.Throws<FailedPreconditionError>(() => built.NumReplicas());
    }
    Assert.Throws<InvalidArgumentError>(() => Topology.Create(new Int32Vector(new[] { 2, 2, 1, 1 }), new Int32Vector(new[] { 5, 5, 5, 5 }), 1, 1));
  }

  [Test]
  public void ReplicateOnADeviceAssignmentOfFourReplicas() {
    using (DeviceAssignment all = system.DefaultDeviceAssignment(Replicas))
      Assert.AreEqual(Replicas, all.NumReplicas());
    Assert.Throws<InvalidArgumentError>(() => system.DefaultDeviceAssignment(3));
    using (Topology topology = system.GetTopology())
    using (DeviceAssignment assignment = DeviceAssignment.Build(topology, new Int32Vector(), new Int32Vector(), 4, DeviceOrderMode.Auto)) {
      Assert.AreEqual(4, assignment.NumReplicas());
      Tensor[][] o = tpu.replicate((ctx, x) => new[] { Tensor.Of(new[] { ctx.Core(), ctx.NumCoresPerReplica() }), Tensor.Of(new[] { ctx.NumReplicas() }) },
                                   null, null, assignment, num_outputs: 2, num_replicas: 4, system: system);
      Assert.AreEqual(4, o.Length);
      Assert.AreEqual(1, o[2][0].ToIntArray()[1]);
      Assert.AreEqual(4, o[2][1].ToIntArray()[0]);
    }
  }

  [Test]
  public void GroupAssignmentValidate() {
    using (var g = new GroupAssignment(new Int32Vector(new[] { 0, 1, 2, 3 }), 2, 2)) {
      g.Validate(4);
      Assert.AreEqual(2, g.NumGroups());
      Assert.Throws<InvalidArgumentError>(() => g.Validate(2));
    }
    Assert.Throws<InvalidArgumentError>(() => new GroupAssignment(new Int32Vector(new[] { 0, 1, 2 }), 2, 2));
  }

  // Every collective of ReplicaContext through a director of the support layer.
  sealed class AllCollectives : NativeComputation {
    public override Status Run(ReplicaContext ctx) {
      try {
        int r = ctx.ReplicaId();
        Tensor x = ctx.Input(0);
        using (var all = new GroupAssignment())
        using (var options = new CollectiveOptions()) {
          ctx.SetOutput(0, ctx.CrossReplicaSum(x, all, options));
          ctx.SetOutput(1, ctx.AllReduce(x, ReduceOp.Max, all, options));
          ctx.SetOutput(2, ctx.AllGather(Tensor.Of(new float[] { r }), 0, all, options));
          ctx.SetOutput(3, ctx.ReduceScatter(Tensor.Of(Enumerable.Repeat(1f, Replicas).ToArray()), ReduceOp.Sum, 0, all, options));
          ctx.SetOutput(4, ctx.AllToAll(Tensor.Of(Enumerable.Range(0, Replicas).Select(i => (float)(r * 10 + i)).ToArray()), 0, 0, Replicas, all, options));
          var ring = new Int32Vector(Enumerable.Range(0, Replicas).SelectMany(i => new[] { i, (i + 1) % Replicas }).ToArray());
          ctx.SetOutput(5, ctx.CollectivePermute(Tensor.Of(new float[] { r }), ring, options));
          ctx.SetOutput(6, ctx.Broadcast(Tensor.Of(new float[] { r }), 2, all, options));
          ctx.Barrier(options);
          ctx.Bfloat16ScopeEnter();
          ctx.Bfloat16ScopeExit();
          StringAssert.Contains("TPU", ctx.DeviceName());
          Assert.AreEqual(1, ctx.NumInputs());
          Assert.AreEqual(7, ctx.NumOutputs());
        }
        return Status.Ok;
      } catch (Exception e) {
        return ctx.Fail(e is OpError ? ((OpError)e).Code : Status.Unknown, e.ToString());
      }
    }
  }

  [Test]
  public void ReplicaContextCollectives() {
    var inputs = new TensorVector(Enumerable.Range(0, Replicas).Select(r => Tensor.Of(new float[] { r, 1 })));
    using (var director = new AllCollectives())
    using (var options = new StepOptions { CollectiveTimeoutMs = 20000 }) {
      TensorVector o = system.Replicate(director, Replicas, 1, inputs, 7, options);
      Assert.AreEqual(Replicas * 7, o.Count);
      int r = 3;
      Func<int, float[]> at = j => o[r * 7 + j].ToFloatArray();
      CollectionAssert.AreEqual(new float[] { 28, 8 }, at(0));
      CollectionAssert.AreEqual(new float[] { 7, 1 }, at(1));
      CollectionAssert.AreEqual(Enumerable.Range(0, Replicas).Select(i => (float)i).ToArray(), at(2));
      CollectionAssert.AreEqual(new float[] { Replicas }, at(3));
      CollectionAssert.AreEqual(Enumerable.Range(0, Replicas).Select(i => (float)(i * 10 + r)).ToArray(), at(4));
      CollectionAssert.AreEqual(new float[] { r - 1 }, at(5));
      CollectionAssert.AreEqual(new float[] { 2 }, at(6));
    }
  }

  // outsideCompilation, failHost, rewrite, shard and batchParallel of TpuSystem.
  sealed class Host : NativeHostComputation {
    internal int calls;
    public override Status Run(int replicaId) {
      if (replicaId < 0) return FailHost(Status.InvalidArgument, "negative replica");
      System.Threading.Interlocked.Increment(ref calls);
      return Status.Ok;
    }
  }
  sealed class WithHost : NativeComputation {
    readonly Host host;
    internal WithHost(Host host) { this.host = host; }
    public override Status Run(ReplicaContext ctx) {
      try {
        ctx.OutsideCompilation(host);
        if (ctx.NumOutputs() > 0) ctx.SetOutput(0, ctx.Input(0));
        return Status.Ok;
      } catch (OpError e) {
        return ctx.Fail(e.Code, e.Message);
      }
    }
  }

  [Test]
  public void SystemStepsWithDirectors() {
    var host = new Host();
    using (var director = new WithHost(host))
    using (var options = new StepOptions()) {
      TensorVector one = system.Rewrite(director, new TensorVector { Tensor.Of(new float[] { 5 }) }, 1, options);
      CollectionAssert.AreEqual(new float[] { 5 }, one[0].ToFloatArray());
      Tensor batch = Tensor.Of(Enumerable.Range(0, 8).Select(i => (float)i).ToArray());
      TensorVector sharded = system.Shard(director, new TensorVector { batch }, Replicas, new Int32Vector(), new Int32Vector(), new Int32Vector(), 1, options);
      CollectionAssert.AreEqual(batch.ToFloatArray(), sharded[0].ToFloatArray());
      TensorVector parallel = system.BatchParallel(director, new TensorVector { batch }, Replicas, 1, options);
      CollectionAssert.AreEqual(batch.ToFloatArray(), parallel[0].ToFloatArray());
      Assert.AreEqual(1 + 2 * Replicas, host.calls);
    }
    Assert.AreEqual(Status.InvalidArgument, NativeHostComputation.FailHost(Status.InvalidArgument, "x"));
    host.Dispose();
  }
}
