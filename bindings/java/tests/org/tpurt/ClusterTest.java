package org.tpurt;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.Test;

/**
 * The cluster surface: TPUClusterResolver, tpu.initialize_tpu_system, DTensor's accelerator
 * system, the key-value store and barriers. One system per process: each test closes its own
 * (TpurtTest's shared system is closed before this class runs).
 */
public class ClusterTest {
  /**
   * TensorFlow's TPUClusterResolver(tpu, zone, project, job_name, coordinator_name,
   * coordinator_address, credentials, service, discovery_url), positionally; get_master();
   * ClusterResolver.num_accelerators(task_type, task_id); tpu/client/client.py's port 8470 for
   * a grpc:// name without one; master() of a task not in the spec is ClusterSpec's ValueError.
   */
  @Test
  public void tpuClusterResolverInTensorFlowsOrder() {
    try (TPUClusterResolver r = new TPUClusterResolver("grpc://10.240.1.2", "us-central1-b", "my-project",
        "tpu_worker", "coordinator", "10.0.0.9:1234", "default", null, null)) {
      assertEquals("tpu_worker", r.getJobName());
      assertEquals("grpc://10.240.1.2:8470", r.getMaster());
      assertEquals("grpc://10.240.1.2:8470", r.master("", -1, "http"));
      assertEquals("{\"coordinator\":[\"10.0.0.9:1234\"],\"tpu_worker\":[\"10.240.1.2:8470\"]}",
          r.clusterSpec());
      assertThrows(InvalidArgumentError.class, () -> r.master("tpu_worker", 1, ""));
      assertEquals(r.numAccelerators(), r.numAcceleratorsOf("coordinator", 0));
      assertEquals(r.numAccelerators(), r.numAccelerators("tpu_worker", 0));
      assertThrows(InvalidArgumentError.class, () -> r.numAcceleratorsOf("tpu_worker", 3));
    }
    try (TPUClusterResolver r = new TPUClusterResolver("grpc://10.0.0.1", null, null)) {
      assertEquals("worker", r.getJobName()); // connect(tpu, zone, project)'s call
    }
    try (TPUClusterResolver r = new TPUClusterResolver("grpc://10.0.0.1", null, null, "trainer")) {
      assertEquals("trainer", r.getJobName());
    }
    assertThrows(NotFoundError.class, () -> new TPUClusterResolver("my-tpu", "us-central1-b", "my-project"));
  }

  @Test
  public void resolverOfGrpcEndpoints() {
    try (TPUClusterResolver r = new TPUClusterResolver("grpc://10.0.0.1:8470,10.0.0.2")) {
      assertEquals(ResolverSource.Tpu, r.source());
      assertEquals("grpc://10.0.0.1:8470,10.0.0.2", r.tpuName());
      assertEquals(2, r.numTasks());
      assertEquals(2, r.numTasks("worker"));
      assertEquals("grpc://10.0.0.1:8470", r.master());
      assertEquals("grpc://10.0.0.2:8470", r.master("worker", 1, ""));
      assertEquals("{\"worker\":[\"10.0.0.1:8470\",\"10.0.0.2:8470\"]}", r.clusterSpec());
      assertEquals("10.0.0.2:8470", r.taskAddress(1));
      assertEquals("10.0.0.1:8470", r.taskAddress("worker", 0));
      assertEquals("worker", r.getJobName());
      assertEquals("worker", r.jobName());
      assertEquals(0, r.taskId());
      assertEquals("grpc", r.rpcLayer());
      assertEquals("", r.environment());
      assertEquals("10.0.0.1:8470", r.coordinatorAddress());
      assertTrue(r.numAccelerators() > 0);
      assertThrows(NotFoundError.class, () -> r.numTasks("ps"));
      assertThrows(NotFoundError.class, () -> r.taskAddress(2));
    }
  }

  @Test
  public void resolverFromOptions() {
    ClusterResolverOptions o = new ClusterResolverOptions();
    o.setSource(ResolverSource.Tpu);
    o.setTpu("grpc://127.0.0.1:9000");
    o.setJobName("trainer");
    o.setEnvironment("google");
    try (ClusterResolver r = new ClusterResolver(o)) {
      assertEquals("trainer", r.jobName());
      assertEquals("google", r.environment());
      assertEquals(1, r.numTasks("trainer"));
    }
  }

  @Test
  public void localResolverAndCloudName() {
    try (TPUClusterResolver r = new TPUClusterResolver("local")) {
      assertEquals("", r.master());
      assertEquals("{}", r.clusterSpec());
      assertEquals("local", r.tpuName());
    }
    assertThrows(NotFoundError.class, () -> new TPUClusterResolver("my-cloud-tpu"));
  }

  @Test
  public void enterAndExit() {
    TPUClusterResolver r = new TPUClusterResolver("local");
    assertThrows(FailedPreconditionError.class, r::exit);
    r.enter();
    r.exit();
    try (ResolverScope scope = r.scope()) {
      r.enter();
      r.exit();
    }
    assertThrows(FailedPreconditionError.class, r::exit);
    r.close();
    assertThrows(FailedPreconditionError.class, r::enter);
  }

  @Test
  public void initializeTpuSystemWithALocalResolver() {
    SystemOptions options = new SystemOptions();
    options.setNumCores(2);
    try (TPUClusterResolver r = new TPUClusterResolver("local");
         TpuSystem system = tpu.initialize_tpu_system(r, options, new ClusterOptions())) {
      assertEquals(1, system.numTasks());
      assertEquals(0, system.taskId());
      try (Topology t = system.topology()) {
        assertEquals(1, t.numTasks());
      }
      List<List<Tensor>> inputs = new ArrayList<>();
      for (int i = 0; i < 2; i++) inputs.add(Arrays.asList(Tensor.fromFloat32(new long[] {2}, new float[] {i, 1})));
      List<Tensor[]> out = tpu.replicate((ctx, in) -> new Tensor[] {tpu.cross_replica_sum(in[0])}, inputs);
      assertArrayEquals(new float[] {1, 2}, out.get(1)[0].toFloat32Vector(), 0f);
    }
    ClusterOptions cluster = new ClusterOptions();
    cluster.setInitTimeoutMs(5000);
    try (TpuSystem system = TpuSystem.initializeTpuSystem(null, options, cluster)) {
      assertEquals(2, system.numCores());
    }
    try (TpuSystem system = tpu.experimental.initialize_tpu_system(null)) {
      assertEquals(1, system.numTasks());
    }
  }

  @Test
  public void transportOfAOneTaskSystem() {
    SystemOptions options = new SystemOptions();
    options.setNumCores(2);
    try (TpuSystem s = TpuSystem.initializeSystem(options)) {
      assertEquals("none", s.transport());
      assertFalse(s.transportReason().isEmpty());
      s.shutdown();
      assertThrows(FailedPreconditionError.class, s::transport);
      assertThrows(FailedPreconditionError.class, s::transportReason);
    }
  }

  @Test
  public void acceleratorSystemInLocalMode() {
    assertEquals("TPU", dtensor.initialize_accelerator_system());
    assertNotNull(dtensor.accelerator_system());
    dtensor.shutdown_accelerator_system();
    assertNull(dtensor.accelerator_system());
    assertThrows(InvalidArgumentError.class, () -> dtensor.initialize_accelerator_system("gpu"));
    assertEquals("CPU", dtensor.initialize_multi_client("cpu", true, 2, false));
    assertEquals(2, dtensor.accelerator_system().numCores());
    dtensor.shutdownAcceleratorSystem();
    try (TpuSystem s = TpuSystem.initializeAcceleratorSystem("", true, 0, false)) {
      assertEquals("TPU", s.deviceType());
      s.shutdownAcceleratorSystem();
      assertTrue(s.isClosed());
      assertThrows(FailedPreconditionError.class, s::shutdownAcceleratorSystem);
    }
    try (TpuSystem s = TpuSystem.initializeMultiClient("tpu", true, 1, false)) {
      assertEquals(1, s.numCores());
    }
    assertThrows(InvalidArgumentError.class, () -> TpuSystem.initializeAcceleratorSystem("GPU", true, 0, false));
  }

  @Test
  public void keyValueStoreAndBarriers() {
    SystemOptions options = new SystemOptions();
    options.setNumCores(1);
    try (TpuSystem system = tpu.initialize_tpu_system(null, options, new ClusterOptions())) {
      system.kvSet("a/b", "one");
      assertEquals("one", system.kvGetString("///a//b/", 1000));
      assertThrows(AlreadyExistsError.class, () -> system.kvSet("a/b", "two"));
      system.kvSet("a/c", new byte[] {0, 1, (byte) 255});
      assertArrayEquals(new byte[] {0, 1, (byte) 255}, system.kvGet("a/c", 1000));
      assertArrayEquals(new byte[] {0, 1, (byte) 255}, system.kvTryGet("a/c"));
      assertEquals("one", system.kvTryGetString("a/b"));
      assertThrows(NotFoundError.class, () -> system.kvTryGet("missing"));
      DeadlineExceededError late = assertThrows(DeadlineExceededError.class, () -> system.kvGet("missing", 50));
      assertTrue(late.getMessage(), late.getMessage().contains("missing"));
      assertThrows(InvalidArgumentError.class, () -> system.kvSet("", "x"));
      system.kvDelete("a");
      assertThrows(NotFoundError.class, () -> system.kvTryGetString("a/b"));
      assertThrows(NotFoundError.class, () -> system.kvTryGet("a/c"));
      system.kvDelete("nothing/here");
      system.waitAtBarrier("all", 1000);
      system.waitAtBarrier("all", 1000);
      system.waitAtBarrier("listed", 1000, new int[] {0});
      assertThrows(InvalidArgumentError.class, () -> system.waitAtBarrier("bad", 1000, new int[] {5}));
    }
  }
}
