// The cluster surface: TPUClusterResolver, tpu.initialize_tpu_system, DTensor's
// accelerator system, the key-value store and barriers. One system per process: each
// test starts and disposes its own (the fixtures run one after another).
using System;
using System.Linq;
using NUnit.Framework;
using Tpurt;

[TestFixture]
public class ClusterTests {
  [Test]
  public void ResolverOfGrpcEndpoints() {
    using (var r = new TPUClusterResolver(tpu: "grpc://10.0.0.1:8470,10.0.0.2")) {
      Assert.AreEqual(ResolverSource.Tpu, r.Source());
      Assert.AreEqual("grpc://10.0.0.1:8470,10.0.0.2", r.TpuName());
      Assert.AreEqual(2, r.NumTasks());
      Assert.AreEqual(2, r.NumTasks("worker"));
      Assert.AreEqual("grpc://10.0.0.1:8470", r.Master());
      Assert.AreEqual("grpc://10.0.0.2:8470", r.Master("worker", 1, ""));
      Assert.AreEqual("{\"worker\":[\"10.0.0.1:8470\",\"10.0.0.2:8470\"]}", r.ClusterSpec());
      Assert.AreEqual("10.0.0.2:8470", r.TaskAddress(1));
      Assert.AreEqual("10.0.0.1:8470", r.TaskAddress("worker", 0));
      Assert.AreEqual("worker", r.GetJobName());
      Assert.AreEqual("worker", r.JobName());
      Assert.AreEqual(0, r.TaskId());
      Assert.AreEqual("grpc", r.RpcLayer());
      Assert.AreEqual("", r.Environment());
      Assert.AreEqual("10.0.0.1:8470", r.CoordinatorAddress());
      Assert.Greater(r.NumAccelerators(), 0);
      Assert.Throws<NotFoundError>(() => r.NumTasks("ps"));
      Assert.Throws<NotFoundError>(() => r.TaskAddress(2));
    }
  }

  // TensorFlow's TPUClusterResolver(tpu, zone, project, job_name, coordinator_name,
  // coordinator_address, credentials, service, discovery_url), positionally; get_master();
  // ClusterResolver.num_accelerators(task_type, task_id); tpu/client/client.py's port 8470
  // for a grpc:// name without one; master() of a task not in the spec is ClusterSpec's
  // ValueError.
  [Test]
  public void TPUClusterResolverInTensorFlowsOrder() {
    using (var r = new TPUClusterResolver("grpc://10.240.1.2", "us-central1-b", "my-project", "tpu_worker",
                                          "coordinator", "10.0.0.9:1234", "default", null, null)) {
      Assert.AreEqual("tpu_worker", r.GetJobName());
      Assert.AreEqual("grpc://10.240.1.2:8470", r.GetMaster());
      Assert.AreEqual("grpc://10.240.1.2:8470", r.Master("", -1, "http"));
      Assert.AreEqual("{\"coordinator\":[\"10.0.0.9:1234\"],\"tpu_worker\":[\"10.240.1.2:8470\"]}", r.ClusterSpec());
      Assert.Throws<InvalidArgumentError>(() => r.Master("tpu_worker", 1, ""));
      Assert.AreEqual(r.NumAccelerators(), r.NumAcceleratorsOf("coordinator", 0));
      Assert.AreEqual(r.NumAccelerators(), r.NumAccelerators("tpu_worker", 0));
      Assert.Throws<InvalidArgumentError>(() => r.NumAcceleratorsOf("tpu_worker", 3));
    }
    using (var r = new TPUClusterResolver("grpc://10.0.0.1", null, null)) // connect(tpu, zone, project)'s call
      Assert.AreEqual("worker", r.GetJobName());
    Assert.Throws<NotFoundError>(() => new TPUClusterResolver("my-tpu", "us-central1-b", "my-project"));
  }

  [Test]
  public void ResolverFromOptions() {
    using (var o = new ClusterResolverOptions { Source = ResolverSource.Tpu, Tpu = "grpc://127.0.0.1:9000",
                                                JobName = "trainer", Environment = "google" })
    using (var r = new ClusterResolver(o)) {
      Assert.AreEqual("trainer", r.JobName());
      Assert.AreEqual("google", r.Environment());
      Assert.AreEqual(1, r.NumTasks("trainer"));
    }
  }

  [Test]
  public void LocalResolver() {
    using (var r = new TPUClusterResolver("local")) {
      Assert.AreEqual("", r.Master());
      Assert.AreEqual("{}", r.ClusterSpec());
      Assert.AreEqual("local", r.TpuName());
      Assert.AreEqual("", r.CoordinatorAddress());
    }
  }

  [Test]
  public void CloudTpuNameIsNotFound() {
    Assert.Throws<NotFoundError>(() => new TPUClusterResolver("my-cloud-tpu"));
  }

  [Test]
  public void EnterAndExit() {
    using (var r = new TPUClusterResolver("local")) {
      StringAssert.Contains("", Assert.Throws<FailedPreconditionError>(() => r.Exit()).Message);
      r.Enter();
      r.Enter();
      r.Exit();
      r.Exit();
      using (r.Scope()) {}
      Assert.Throws<FailedPreconditionError>(() => r.Exit());
      r.Close();
      Assert.Throws<FailedPreconditionError>(() => r.Enter());
    }
  }

  [Test]
  public void InitializeTpuSystemWithALocalResolver() {
    using (var r = new TPUClusterResolver("local"))
    using (TpuSystem system = tpu.initialize_tpu_system(r, num_cores: 2)) {
      Assert.AreEqual(1, system.NumTasks());
      Assert.AreEqual(0, system.TaskId());
      using (Topology topology = system.GetTopology()) Assert.AreEqual(1, topology.NumTasks());
      Tensor[][] o = tpu.replicate(x => new[] { tpu.cross_replica_sum(x[0]) },
                                   Enumerable.Range(0, 2).Select(i => new[] { Tensor.Of(new float[] { i, 1 }) }).ToList(),
                                   num_outputs: 1);
      CollectionAssert.AreEqual(new float[] { 1, 2 }, o[1][0].ToFloatArray());
    }
    // The support layer directly, with no resolver (the environment's: one process here).
    using (var options = new SystemOptions { NumCores = 2 })
    using (var cluster = new ClusterOptions { InitTimeoutMs = 5000 })
    using (TpuSystem system = TpuSystem.InitializeTpuSystem(null, options, cluster))
      Assert.AreEqual(2, system.NumCores());
    using (TpuSystem system = tpu.experimental.initialize_tpu_system())
      Assert.AreEqual(1, system.NumTasks());
    using (var cluster = new ClusterOptions())
    using (var options = new SystemOptions { NumCores = -1 })
      Assert.Throws<InvalidArgumentError>(() => TpuSystem.InitializeTpuSystem(null, options, cluster).Dispose());
  }

  [Test]
  public void TracePathWritesATraceOfEveryStep() {
    string path = System.IO.Path.Combine(System.IO.Path.GetTempPath(), "tpurt-cs-trace-" + Guid.NewGuid() + ".json");
    try {
      using (var options = new SystemOptions { NumCores = 2, TracePath = path })
      using (TpuSystem system = new TpuSystem(options)) {
        Assert.AreEqual(path, options.TracePath);
        tpu.replicate(x => new[] { tpu.cross_replica_sum(x[0]) },
                      Enumerable.Range(0, 2).Select(i => new[] { Tensor.Of(new float[] { i }) }).ToList(),
                      num_outputs: 1, system: system);
        system.Shutdown(); // the file is complete
      }
      string trace = System.IO.File.ReadAllText(path);
      StringAssert.StartsWith("[", trace);
      StringAssert.Contains("\"name\":\"all_reduce\"", trace);
      StringAssert.Contains("\"name\":\"replica 1\"", trace);
      StringAssert.Contains("\"verdict\":\"OK\"", trace);
    } finally {
      System.IO.File.Delete(path);
    }
    using (var options = new SystemOptions { NumCores = 2, TracePath = "/nonexistent-dir/t.json" })
      StringAssert.Contains("/nonexistent-dir/t.json",
                            Assert.Throws<InvalidArgumentError>(() => new TpuSystem(options).Dispose()).Message);
  }

  [Test]
  public void TransportOfAOneTaskSystem() {
    using (TpuSystem system = tpu.initialize_tpu_system(num_cores: 2)) {
      Assert.AreEqual("none", system.Transport());
      Assert.IsNotEmpty(system.TransportReason());
      system.Shutdown();
      Assert.Throws<FailedPreconditionError>(() => system.Transport());
      Assert.Throws<FailedPreconditionError>(() => system.TransportReason());
    }
  }

  [Test]
  public void AcceleratorSystemInLocalMode() {
    Assert.AreEqual("TPU", dtensor.initialize_accelerator_system());
    Assert.IsNotNull(dtensor.accelerator_system);
    dtensor.shutdown_accelerator_system();
    Assert.IsNull(dtensor.accelerator_system);
    Assert.Throws<InvalidArgumentError>(() => dtensor.initialize_accelerator_system("gpu"));
    Assert.AreEqual("CPU", dtensor.initialize_multi_client("cpu", num_logical_cpu_devices: 2));
    Assert.AreEqual(2, dtensor.accelerator_system.NumCores());
    dtensor.ShutdownAcceleratorSystem();
    // The generated surface.
    using (TpuSystem s = TpuSystem.InitializeAcceleratorSystem("", true, 0, false)) {
      Assert.AreEqual("TPU", s.DeviceType());
      s.ShutdownAcceleratorSystem();
      Assert.IsTrue(s.IsClosed());
      Assert.Throws<FailedPreconditionError>(() => s.ShutdownAcceleratorSystem());
    }
    using (TpuSystem s = TpuSystem.InitializeMultiClient("tpu", true, 1, false))
      Assert.AreEqual(1, s.NumCores());
    Assert.Throws<InvalidArgumentError>(() => TpuSystem.InitializeAcceleratorSystem("GPU", true, 0, false));
  }

  [Test]
  public void KeyValueStoreAndBarriers() {
    using (TpuSystem system = tpu.initialize_tpu_system(num_cores: 1)) {
      system.KvSet("a/b", "one");
      Assert.AreEqual("one", system.KvGetString("///a//b/", 1000));
      Assert.Throws<AlreadyExistsError>(() => system.KvSet("a/b", "two"));
      system.KvSet("a/c", new byte[] { 0, 1, 255 });
      CollectionAssert.AreEqual(new byte[] { 0, 1, 255 }, system.KvGetBytes("a/c", 1000));
      CollectionAssert.AreEqual(new byte[] { 0, 1, 255 }, system.KvTryGet("a/c").ToArray());
      Assert.AreEqual("one", system.KvTryGetString("a/b"));
      Assert.Throws<NotFoundError>(() => system.KvTryGet("missing"));
      Assert.IsFalse(system.TryKvGet("missing", out string none));
      Assert.IsNull(none);
      Assert.IsTrue(system.TryKvGet("a/b", out string one));
      Assert.AreEqual("one", one);
      StringAssert.Contains("missing", Assert.Throws<DeadlineExceededError>(() => system.KvGet("missing", 50)).Message);
      Assert.Throws<InvalidArgumentError>(() => system.KvSet("", "x"));
      system.KvSet("big", new string('x', 1000));
      Assert.AreEqual(1000, system.KvGetString("big", 1000).Length);
      system.KvDelete("a");
      Assert.Throws<NotFoundError>(() => system.KvTryGetString("a/b"));
      Assert.Throws<NotFoundError>(() => system.KvTryGetString("a/c"));
      system.KvDelete("nothing/here");
      system.WaitAtBarrier("all", 1000);
      system.WaitAtBarrier("all", 1000); // an id may be reused
      system.WaitAtBarrier("listed", 1000, 0);
      system.WaitAtBarrier("vector", 1000, new Int32Vector());
      Assert.Throws<InvalidArgumentError>(() => system.WaitAtBarrier("bad", 1000, 5));
    }
  }
}
