package org.tpurt;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;
import java.io.File;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.AbstractMap;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;
import static org.tpurt.TpurtTest.*;

/** The support layer, member by member (bindings/api_map.txt): every C function through its Java member. */
public class SupportLayerTest {
  @BeforeClass
  public static void startShared() {
    TpurtTest.start();
  }

  @AfterClass
  public static void stopShared() {
    TpurtTest.stop();
  }

  // ---- the support layer, member by member (bindings/api_map.txt) ----------------------------

  @Test
  public void replicaContextAndCollectives() {
    Computation collectives = new Computation() {
      @Override
      public Status run(ReplicaContext ctx) {
        int r = ctx.replicaId();
        GroupAssignment all = new GroupAssignment();
        CollectiveOptions o = new CollectiveOptions();
        Tensor x = ctx.input(0);
        float[] sum = ctx.crossReplicaSum(x, all, o).toFloat32Vector();
        float[] max = ctx.allReduce(x, ReduceOp.Max, all, o).toFloat32Vector();
        Tensor gathered = ctx.allGather(x, 0, all, o);
        Tensor scattered = ctx.reduceScatter(Tensor.fromFloat32(new long[] {8}, new float[] {1, 1, 1, 1, 1, 1, 1, 1}), ReduceOp.Sum, 0, all, o);
        Tensor a2a = ctx.allToAll(Tensor.fromFloat32(new long[] {8}, new float[] {r, r, r, r, r, r, r, r}), 0, 0, 8, all, o);
        int[] ring = new int[16];
        for (int i = 0; i < 8; i++) {
          ring[2 * i] = i;
          ring[2 * i + 1] = (i + 1) % 8;
        }
        Tensor permuted = ctx.collectivePermute(x, ring, o);
        Tensor bcast = ctx.broadcast(x, 3, all, o);
        ctx.barrier(o);
        ctx.bfloat16ScopeEnter();
        ctx.bfloat16ScopeExit();
        boolean ok = sum[0] == 28f && max[0] == 7f && gathered.dim(0) == 8 && gathered.toFloat32Vector()[5] == 5f
            && scattered.numElements() == 1 && scattered.toFloat32Vector()[0] == 8f
            && a2a.toFloat32Vector()[4] == 4f && permuted.toFloat32Vector()[0] == (r + 7) % 8
            && bcast.toFloat32Vector()[0] == 3f && ctx.numReplicas() == 8 && ctx.numCoresPerReplica() == 1
            && ctx.core() == r && ctx.deviceName().contains("TPU") && ctx.numInputs() == 1 && ctx.numOutputs() == 1;
        if (!ok) return ctx.fail(Status.Internal, "replica " + r + " saw wrong collective results");
        ctx.setOutput(0, Tensor.fromInt32(new long[] {1}, new int[] {r}));
        return Status.Ok;
      }
    };
    TensorVector inputs = new TensorVector();
    for (int r = 0; r < R; r++) inputs.add(vec(r));
    TensorVector out = system.replicate(collectives, R, 1, inputs, 1, new StepOptions());
    for (int r = 0; r < R; r++) assertEquals(r, out.get(r).toInt32Vector()[0]);
    // Raw rewrite, shard and batchParallel with C-side outputs.
    Computation twice = new Computation() {
      @Override
      public Status run(ReplicaContext ctx) {
        ctx.setOutput(0, doubled(ctx.input(0)));
        return Status.Ok;
      }
    };
    TensorVector one = new TensorVector();
    one.add(Tensor.fromFloat32(new long[] {8}, new float[] {1, 2, 3, 4, 5, 6, 7, 8}));
    float[] expected = {2, 4, 6, 8, 10, 12, 14, 16};
    assertArrayEquals(expected, system.rewrite(twice, one, 1, new StepOptions()).get(0).toFloat32Vector(), 0f);
    assertArrayEquals(expected, system.batchParallel(twice, one, 8, 1, new StepOptions()).get(0).toFloat32Vector(), 0f);
    assertArrayEquals(expected, system.shard(twice, one, 8, new int[] {0}, new int[] {1}, new int[] {0}, 1, new StepOptions()).get(0).toFloat32Vector(), 0f);
  }

  @Test
  public void tensorMembers() {
    Tensor t = Tensor.fromFloat32(new long[] {2, 3}, new float[] {1, 2, 3, 4, 5, 6});
    assertEquals(DType.Float32, t.dtype());
    assertEquals(2, t.rank());
    assertArrayEquals(new long[] {2, 3}, t.dims());
    assertEquals(3, t.dim(1));
    assertEquals(6, t.numElements());
    assertEquals(24, t.byteSize());
    float[] read = new float[6];
    t.readFloat32(read);
    assertArrayEquals(new float[] {1, 2, 3, 4, 5, 6}, read, 0f);
    Tensor shared = new Tensor(t);
    t.writeFloat32(new float[] {6, 5, 4, 3, 2, 1});
    assertArrayEquals(new float[] {6, 5, 4, 3, 2, 1}, t.toFloat32Vector(), 0f);
    assertEquals(6, t.reshape(new long[] {6}).dim(0));
    assertArrayEquals(new int[] {6, 5, 4, 3, 2, 1}, t.cast(DType.Int32).toInt32Vector());
    double[] d = new double[2];
    Tensor.fromFloat64(new long[] {2}, new double[] {1.5, 2.5}).readFloat64(d);
    assertArrayEquals(new double[] {1.5, 2.5}, d, 0);
    Tensor i32 = Tensor.fromInt32(new long[] {2}, new int[] {7, 8});
    i32.writeInt32(new int[] {9, 10});
    int[] ri = new int[2];
    i32.readInt32(ri);
    assertArrayEquals(new int[] {9, 10}, ri);
    Tensor i64 = Tensor.fromInt64(new long[] {1}, new long[] {1L << 50});
    i64.writeInt64(new long[] {1L << 51});
    long[] rl = new long[1];
    i64.readInt64(rl);
    assertEquals(1L << 51, rl[0]);
    Tensor f64 = Tensor.fromFloat64(new long[] {1}, new double[] {1});
    f64.writeFloat64(new double[] {2});
    assertEquals(2.0, f64.toFloat64Vector()[0], 0);
    FloatBuffer direct = ByteBuffer.allocateDirect(4 * 4).order(ByteOrder.nativeOrder()).asFloatBuffer();
    direct.put(new float[] {1, 2, 3, 4});
    Tensor wrapped = Tensor.wrapFloat32(new long[] {4}, direct);
    assertArrayEquals(new float[] {1, 2, 3, 4}, wrapped.toFloat32Vector(), 0f);
    try {
      Tensor.wrapFloat32(new long[] {1}, FloatBuffer.allocate(1));
      fail("wrapFloat32 took a heap buffer");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage().contains("direct"));
    }
    assertEquals(3, Tensor.fromBytes(DType.UInt8, new long[] {3}, new byte[] {1, 2, 3}).toBytes().length);
    assertEquals(4, Tensor.zeros(DType.Int32, new long[] {4}).numElements());
    assertArrayEquals(new float[] {1}, Tensor.fromFloat32Vector(new long[] {1}, new float[] {1}).toFloat32Vector(), 0f);
    assertEquals(1, Tensor.fromFloat64Vector(new long[] {1}, new double[] {1}).numElements());
    assertEquals(1, Tensor.fromInt32Vector(new long[] {1}, new int[] {1}).numElements());
    assertEquals(1, Tensor.fromInt64Vector(new long[] {1}, new long[] {1}).numElements());
    try {
      t.readFloat32(new float[5]);
      fail("read into a short array");
    } catch (InvalidArgumentError e) {
      assertTrue(e.getMessage().contains("elements"));
    }
    shared.dispose();
    assertTrue(shared.isNull());
    try (Tensor scoped = vec(1f)) {
      assertEquals(1, scoped.numElements());
    }
  }

  @Test
  public void freeFunctions() {
    assertTrue(tpurt.version().matches("\\d+\\.\\d+\\.\\d+.*"));
    assertEquals("INVALID_ARGUMENT", tpurt.statusName(Status.InvalidArgument));
    assertEquals(Status.NotFound, tpurt.setLastError(Status.NotFound, "nothing here"));
    assertEquals("nothing here", tpurt.lastError());
    tpurt.clearLastError();
    assertFalse(tpurt.lastError().equals("nothing here"));
    assertEquals("float32", tpurt.dtypeName(DType.Float32));
    assertEquals(8, tpurt.dtypeSize(DType.Int64));
    assertTrue(tpurt.numEnvironmentVariables() > 0);
    assertFalse(tpurt.environmentVariable(0).getName().isEmpty());
    short[] bf = tpurt.floatToBfloat16(new float[] {1.5f, -2f});
    assertArrayEquals(new float[] {1.5f, -2f}, tpurt.bfloat16ToFloat(bf), 0f);
    short[] half = tpurt.floatToHalf(new float[] {0.25f});
    assertArrayEquals(new float[] {0.25f}, tpurt.halfToFloat(half), 0f);
    assertTrue(tpurt.tensorCacheTrim(0) >= 0);
    assertTrue(tpurt.core(0).contains("TPU_REPLICATED_CORE:0"));
    assertTrue(tpurt.deviceName("worker", 1, "TPU", 2).contains("/job:worker"));
    GroupAssignment g = new GroupAssignment(new int[] {0, 1, 2, 3, 4, 5, 6, 7}, 2, 4);
    g.validate(8);
    try {
      new GroupAssignment(new int[] {0, 0}, 1, 2).validate(8);
      fail("a repeated replica id validated");
    } catch (InvalidArgumentError e) {
      assertNotNull(e.getMessage());
    }
    CollectiveOptions co = new CollectiveOptions();
    co.setTimeoutMs(5);
    assertEquals(5, co.getTimeoutMs());
  }

  @Test
  public void systemMembers() {
    withoutSharedSystem(SupportLayerTest::systemMembersBody);
  }

  private static void systemMembersBody() {
    SystemOptions options = new SystemOptions();
    options.setNumCores(4);
    options.setJobName("worker");
    options.setEmbeddingConfig(new byte[0]);
    try (TpuSystem s = TpuSystem.initializeSystem(options)) {
      assertEquals(4, s.numCores());
      assertFalse(s.isClosed());
      assertEquals("worker", s.jobName());
      assertEquals("TPU", s.deviceType());
      assertEquals(0, s.embeddingConfig().length);
      byte[] proto = s.serializedTopology();
      assertTrue(proto.length > 0);
      try (Topology t = Topology.parse(proto)) {
        assertEquals(4, t.numDevicesPerTask() * t.numTasks());
      }
      s.shutdown();
      assertTrue(s.isClosed());
    }
  }

  @Test
  public void topologyAndDeviceAssignment() {
    try (Topology t = system.topology()) {
      assertEquals(4, t.meshRank());
      assertEquals(8, t.meshShape()[0]);
      assertEquals(1, t.numTasks());
      assertEquals(8, t.numDevicesPerTask());
      int[] c3 = t.deviceCoordinates(0, 3);
      assertEquals(3, t.deviceOrdinalAtCoordinates(c3));
      assertEquals(0, t.taskOrdinalAtCoordinates(c3));
      assertEquals(0, t.numMissingDevices());
      try {
        t.missingDevice(0);
        fail("a missing device in a full mesh");
      } catch (OpError e) {
        assertNotNull(e.getMessage());
      }
      assertTrue(t.tpuDeviceName(c3, "").contains("TPU:3"));
      assertTrue(t.cpuDeviceName(c3, "w").contains("/job:w"));
      assertEquals(2, t.hardwareFeature().length);
      try (Topology copy = Topology.parse(t.serialize())) {
        assertArrayEquals(t.meshShape(), copy.meshShape());
      }
      try (Topology small = Topology.create(new int[] {2, 1, 1, 1}, new int[] {0, 0, 0, 0, 1, 0, 0, 0}, 1, 2)) {
        assertEquals(2, small.numDevicesPerTask());
      }
      try (DeviceAssignment a = DeviceAssignment.build(t, new int[0], new int[0], R, DeviceOrderMode.Auto)) {
        assertEquals(R, a.numReplicas());
        assertEquals(1, a.numCoresPerReplica());
        int[] cores = a.coreAssignment();
        assertEquals(R * 4, cores.length);
        assertEquals(4, a.coordinates(2, 0).length);
        assertEquals(0, a.task(2, 0));
        assertTrue(a.tpuOrdinal(2, 0) >= 0);
        assertTrue(a.tpuDevice(2, 0, "").contains("TPU"));
        assertTrue(a.hostDevice(2, 0, "").contains("CPU"));
        assertEquals(R, a.lookupReplicas(0, 0).length);
        try (Topology back = a.topology()) {
          assertEquals(8, back.numDevicesPerTask());
        }
        int[] reversed = new int[cores.length];
        for (int r = 0; r < R; r++) System.arraycopy(cores, (R - 1 - r) * 4, reversed, r * 4, 4);
        try (DeviceAssignment rev = DeviceAssignment.create(t, reversed, R, 1)) {
          List<Tensor[]> out = tpu.replicate((ctx, in) -> new Tensor[] {Tensor.fromInt32(new long[] {1}, new int[] {ctx.core()})},
              null, null, rev);
          assertEquals(R, out.size());
          assertEquals(rev.tpuOrdinal(0, 0), out.get(0)[0].toInt32Vector()[0]);
        }
        assertEquals(R, tpu.replicate((ctx, in) -> null, null, null, a).size());
      }
      try (DeviceAssignment d = system.defaultDeviceAssignment(R)) {
        assertEquals(R, d.numReplicas());
      }
    }
  }

  @Test
  public void infeedAndOutfeed() {
    ShapeVector shapes = new ShapeVector();
    shapes.add(Shape.of(new long[] {2}));
    int[] dtypes = {DType.Float32.swigValue()};
    try (InfeedQueue in = new InfeedQueue(system, R, dtypes, shapes, 4);
         OutfeedQueue out = new OutfeedQueue(system, R, dtypes, shapes, 4)) {
      assertEquals(1, in.numElements());
      for (int r = 0; r < R; r++) {
        TensorVector tuple = new TensorVector();
        tuple.add(vec(r, 1));
        in.enqueue(r, tuple);
      }
      // The step's infeed_queue appends the dequeued tuple to the inputs.
      List<Tensor[]> sums = tpu.replicate((ctx, x) -> new Tensor[] {tpu.cross_replica_sum(x[0])}, Replicas.none(R), in, null);
      assertArrayEquals(new float[] {28f, 8f}, sums.get(0)[0].toFloat32Vector(), 0f);
      for (int r = 0; r < R; r++) {
        TensorVector tuple = new TensorVector();
        tuple.add(vec(r, r));
        in.enqueue(r, tuple);
      }
      tpu.replicate((ctx, x) -> {
        TensorVector got = ctx.infeedDequeue(in);
        TensorVector tuple = new TensorVector();
        tuple.add(doubled(got.get(0)));
        ctx.outfeedEnqueue(out, tuple);
        return null;
      }, Replicas.none(R));
      for (int r = 0; r < R; r++) assertArrayEquals(new float[] {2f * r, 2f * r}, out.dequeue(r).get(0).toFloat32Vector(), 0f);
    }
  }

  @Test
  public void stepOptionsAndSystemOptions() {
    withoutSharedSystem(SupportLayerTest::stepOptionsAndSystemOptionsBody);
  }

  @Test
  public void tracePathWritesATraceOfEveryStep() throws Exception {
    withoutSharedSystem(SupportLayerTest::tracePathBody);
  }

  private static void tracePathBody() {
    java.nio.file.Path path = null;
    try {
      path = java.nio.file.Files.createTempFile("tpurt-java-trace", ".json");
      SystemOptions o = new SystemOptions();
      o.setNumCores(2);
      o.setTracePath(path.toString());
      assertEquals(path.toString(), o.getTracePath());
      try (TpuSystem s2 = new TpuSystem(o)) {
        s2.shutdown(); // a system without steps: its trace holds the task and its steps row
      }
      String trace = new String(java.nio.file.Files.readAllBytes(path), java.nio.charset.StandardCharsets.UTF_8);
      assertTrue(trace, trace.startsWith("["));
      assertTrue(trace, trace.contains("\"name\":\"process_name\""));
      assertTrue(trace, trace.trim().endsWith("]"));
      SystemOptions bad = new SystemOptions();
      bad.setNumCores(2);
      bad.setTracePath("/nonexistent-dir/t.json");
      try {
        new TpuSystem(bad).close();
        fail("an unwritable trace path was accepted");
      } catch (InvalidArgumentError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("/nonexistent-dir/t.json"));
      }
    } catch (java.io.IOException e) {
      throw new AssertionError(e);
    } finally {
      if (path != null) path.toFile().delete();
    }
  }

  private static void stepOptionsAndSystemOptionsBody() {
    StepOptions s = new StepOptions();
    s.setPaddingSpec(PaddingSpec.PowerOfTwo);
    s.setCollectiveTimeoutMs(1234);
    assertEquals(PaddingSpec.PowerOfTwo, s.getPaddingSpec());
    assertEquals(1234, s.getCollectiveTimeoutMs());
    SystemOptions o = new SystemOptions();
    o.setNumCores(4);
    o.setMeshShape(new int[] {2, 2, 1, 1});
    o.setPinThreads(ThreadPinning.Never);
    o.setCollectiveTimeoutMs(5000);
    o.setCloseOnFailure(false);
    o.setPrivateCollectiveResults(true);
    try (TpuSystem s4 = new TpuSystem(o)) {
      assertEquals(4, s4.numCores());
      assertArrayEquals(new int[] {2, 2, 1, 1}, s4.topology().meshShape());
    }
  }
}
