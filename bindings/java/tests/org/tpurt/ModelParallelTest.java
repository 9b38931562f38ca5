package org.tpurt;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;

/**
 * Model parallelism (ABI 1.3) from Java: several cores per replica, group modes, meshes and
 * partitioned inputs/outputs, each against a naive reference computed here.
 */
public class ModelParallelTest {
  private static final int CORES = 8;
  private static final int R = 4;  // replicas of the k = 2 assignment
  private static final int K = 2;  // cores per replica
  private static TpuSystem system;

  @BeforeClass
  public static void start() {
    SystemOptions options = new SystemOptions();
    options.setNumCores(CORES);
    system = tpu.initialize_system(options);
  }

  @AfterClass
  public static void stop() {
    system.close();
  }

  /** R replicas of K cores each on the system's 8 cores (TensorFlow's computation_shape). */
  private static DeviceAssignment twoCoresPerReplica() {
    try (Topology t = system.topology()) {
      return DeviceAssignment.build(t, new int[] {K, 1, 1, 1}, new int[0], R, DeviceOrderMode.Auto);
    }
  }

  private static Tensor vec(float... v) {
    return Tensor.fromFloat32(new long[] {v.length}, v);
  }

  /** Participant p's contribution: distinct per participant and element. */
  private static float[] contribution(int p) {
    return new float[] {p + 1, 10f * (p + 1) * (p + 1)};
  }

  /** Row-major coordinates of flattened id p in a mesh of this shape. */
  private static int[] coords(long[] shape, int p) {
    int[] c = new int[shape.length];
    for (int a = shape.length - 1; a >= 0; a--) {
      c[a] = (int) (p % shape[a]);
      p /= shape[a];
    }
    return c;
  }

  /** Whether p and q differ only in the named axes. */
  private static boolean sameGroup(long[] shape, List<Integer> axes, int p, int q) {
    int[] cp = coords(shape, p), cq = coords(shape, q);
    for (int a = 0; a < shape.length; a++)
      if (!axes.contains(a) && cp[a] != cq[a]) return false;
    return true;
  }

  /** The naive sum over the named axes for participant p. */
  private static float[] naiveAxisSum(long[] shape, List<Integer> axes, int p) {
    float[] sum = new float[2];
    for (int q = 0; q < CORES; q++)
      if (sameGroup(shape, axes, p, q))
        for (int i = 0; i < 2; i++) sum[i] += contribution(q)[i];
    return sum;
  }

  private static int participant(ReplicaContext ctx) {
    return ctx.replicaId() * ctx.numCoresPerReplica() + ctx.logicalCore();
  }

  // ---- every core of a replica runs --------------------------------------------------------

  @Test
  public void everyReplicaAndLogicalCoreRunsOnItsCore() {
    Map<Integer, int[]> seen = new ConcurrentHashMap<>();
    Map<Integer, String> devices = new ConcurrentHashMap<>();
    AtomicInteger onCoreOne = new AtomicInteger();
    try (DeviceAssignment a = twoCoresPerReplica()) {
      assertEquals(K, a.numCoresPerReplica());
      List<Tensor[]> out = tpu.replicate((ctx, in) -> {
        int p = participant(ctx);
        seen.put(p, new int[] {ctx.replicaId(), ctx.logicalCore(), tpu.logical_core(), ctx.core(), ctx.numCoresPerReplica(),
            ctx.numReplicas()});
        devices.put(p, ctx.deviceName());
        tpu.on_core(1, () -> {
          onCoreOne.incrementAndGet();
        });
        Optional<String> onZero = tpu.onCore(0, () -> "core 0");
        assertEquals(ctx.logicalCore() == 0, onZero.isPresent());
        return new Tensor[] {Tensor.fromInt32(new long[] {2}, new int[] {ctx.replicaId(), ctx.logicalCore()})};
      }, null, null, a);
      assertEquals(CORES, seen.size());
      for (int r = 0; r < R; r++)
        for (int c = 0; c < K; c++) {
          int[] s = seen.get(r * K + c);
          assertArrayEquals("replica " + r + " core " + c,
              new int[] {r, c, c, a.tpuOrdinal(r, c), K, R}, s);
          assertTrue(devices.get(r * K + c), devices.get(r * K + c).endsWith("TPU:" + a.tpuOrdinal(r, c)));
        }
      assertEquals("onCore(1) ran once per replica", R, onCoreOne.get());
      // Each replica's outputs are its logical core 0's.
      assertEquals(R, out.size());
      for (int r = 0; r < R; r++) assertArrayEquals(new int[] {r, 0}, out.get(r)[0].toInt32Vector());
      // tf.tpu.core(n) stays TensorFlow's device name.
      assertEquals("device:TPU_REPLICATED_CORE:1", tpu.core(1));
    }
  }

  @Test
  public void onCoreOutsideTheReplicasCoresIsNamed() {
    try (DeviceAssignment a = twoCoresPerReplica()) {
      tpu.replicate((ctx, in) -> tpu.onCore(K, () -> new Tensor[0]).orElse(null), null, null, a);
      fail("onCore(2) with 2 cores per replica");
    } catch (InvalidArgumentError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("logical core 2 is outside [0, 2)"));
    }
  }

  // ---- group modes ----------------------------------------------------------------------------

  @Test
  public void crossPartitionSumAndEveryGroupModeAgainstNaive() {
    Map<Integer, float[][]> got = new ConcurrentHashMap<>();
    try (DeviceAssignment a = twoCoresPerReplica()) {
      List<Tensor[]> out = tpu.replicate((ctx, in) -> {
        int p = participant(ctx);
        Tensor x = vec(contribution(p));
        float[][] r = new float[4][];
        r[0] = tpu.cross_replica_sum(x, new int[][] {{0, 1}}, GroupMode.CrossPartition).toFloat32Vector();
        r[1] = tpu.crossReplicaSum(x, null, GroupMode.CrossReplica).toFloat32Vector();
        r[2] = ctx.crossReplicaSum(x, new int[][] {{0, 1}, {2, 3}}, GroupMode.CrossReplicaAndPartition).toFloat32Vector();
        r[3] = ctx.crossReplicaSum(x, new int[][] {{0, 2, 4, 6}, {1, 3, 5, 7}}, GroupMode.FlattenedId).toFloat32Vector();
        got.put(p, r);
        return new Tensor[] {tpu.cross_replica_sum(x, new int[][] {{0, 1}}, GroupMode.CrossPartition)};
      }, null, null, a);
      for (int p = 0; p < CORES; p++) {
        int r = p / K, c = p % K;
        float[] crossPartition = new float[2], crossReplica = new float[2], both = new float[2], flattened = new float[2];
        for (int q = 0; q < CORES; q++) {
          float[] x = contribution(q);
          for (int i = 0; i < 2; i++) {
            if (q / K == r) crossPartition[i] += x[i];       // the cores of my replica
            if (q % K == c) crossReplica[i] += x[i];         // my core in every replica
            if ((q / K) / 2 == r / 2) both[i] += x[i];       // every core of replicas {0,1} or {2,3}
            if (q % 2 == p % 2) flattened[i] += x[i];        // flattened ids of my parity
          }
        }
        float[][] g = got.get(p);
        assertArrayEquals("cross-partition, participant " + p, crossPartition, g[0], 0f);
        assertArrayEquals("cross-replica, participant " + p, crossReplica, g[1], 0f);
        assertArrayEquals("cross-replica-and-partition, participant " + p, both, g[2], 0f);
        assertArrayEquals("flattened id, participant " + p, flattened, g[3], 0f);
        if (c == 0) assertArrayEquals(crossPartition, out.get(r)[0].toFloat32Vector(), 0f);
      }
    }
  }

  /**
   * Groups of different sizes (issue 29): XLA's verifier allows them for all-reduce only
   * (CheckReplicaGroups' uniform_replica_group_size in xla/service/hlo_verifier.cc); broadcast
   * checks no groups (HandleCollectiveBroadcast); all-gather refuses them.
   */
  @Test
  public void groupsOfDifferentSizes() {
    GroupAssignment g = GroupAssignment.ragged(new int[] {3, 0, 1, 2}, new int[] {3, 1});
    g.validate(4);
    assertEquals(-1, g.groupSize());
    assertTrue(g.isRagged());
    assertArrayEquals(new int[] {3, 1}, g.groupSizes());
    assertArrayEquals(new int[] {3, 0, 1, 2}, g.replicaIds());
    g.delete();
    try {
      GroupAssignment.ragged(new int[] {0, 1}, new int[] {1, 0, 1});
      fail("a group of 0 ids");
    } catch (InvalidArgumentError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("group_sizes[1] is 0"));
    }
    int[][] replicas = {{3, 0, 1}, {2}};
    int[][] flattened = {{7, 2, 4}, {1}, {0, 5, 3, 6}};
    Map<Integer, float[][]> got = new ConcurrentHashMap<>();
    try (DeviceAssignment a = twoCoresPerReplica()) {
      tpu.replicate((ctx, in) -> {
        int p = participant(ctx);
        Tensor x = vec(contribution(p));
        float[][] r = new float[3][];
        r[0] = ctx.allReduce(x, ReduceOp.Sum, replicas, GroupMode.CrossReplica).toFloat32Vector();
        r[1] = ctx.crossReplicaSum(x, flattened, GroupMode.FlattenedId).toFloat32Vector();
        r[2] = ctx.broadcast(x, 0, replicas, GroupMode.CrossReplicaAndPartition).toFloat32Vector();
        got.put(p, r);
        return null;
      }, null, null, a);
      for (int pp = 0; pp < CORES; pp++) {
        final int p = pp, r = p / K, c = p % K;
        int[] mine = Arrays.stream(replicas).filter(row -> Arrays.stream(row).anyMatch(v -> v == r)).findFirst().get();
        int[] myFlat = Arrays.stream(flattened).filter(row -> Arrays.stream(row).anyMatch(v -> v == p)).findFirst().get();
        float[] sum = new float[2], flat = new float[2];
        for (int q = 0; q < CORES; q++) {
          final int qr = q / K, qq = q;
          for (int i = 0; i < 2; i++) {
            if (q % K == c && Arrays.stream(mine).anyMatch(v -> v == qr)) sum[i] += contribution(q)[i];
            if (Arrays.stream(myFlat).anyMatch(v -> v == qq)) flat[i] += contribution(q)[i];
          }
        }
        float[][] g2 = got.get(p);
        assertArrayEquals("all-reduce, participant " + p, sum, g2[0], 0f);
        assertArrayEquals("flattened id, participant " + p, flat, g2[1], 0f);
        assertArrayEquals("broadcast, participant " + p, contribution(mine[0] * K), g2[2], 0f);
      }
      try {
        tpu.replicate((ctx, in) -> {
          ctx.allGather(vec(1f), 0, replicas, GroupMode.CrossReplica);
          return null;
        }, null, null, a);
        fail("all-gather over groups of different sizes");
      } catch (InvalidArgumentError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("Replica groups expected to be of uniform size"));
        assertTrue(e.getMessage(), e.getMessage().contains("{{3,0,1},{2}}"));
      }
    }
  }

  @Test
  public void everyCollectiveAcrossTheCoresOfAReplica() {
    int[][] cores = {{0, 1}};
    Map<Integer, float[][]> got = new ConcurrentHashMap<>();
    try (DeviceAssignment a = twoCoresPerReplica()) {
      tpu.replicate((ctx, in) -> {
        int p = participant(ctx);
        Tensor x = vec(contribution(p));
        CollectiveOptions partition = CollectiveOptions.of(GroupMode.CrossPartition);
        float[][] r = new float[6][];
        r[0] = ctx.allReduce(x, ReduceOp.Max, cores, GroupMode.CrossPartition).toFloat32Vector();
        r[1] = ctx.allGather(x, 0, cores, GroupMode.CrossPartition).toFloat32Vector();
        r[2] = ctx.reduceScatter(x, ReduceOp.Sum, 0, cores, GroupMode.CrossPartition).toFloat32Vector();
        r[3] = ctx.allToAll(x, 0, 0, 2, GroupAssignment.of(cores), partition).toFloat32Vector();
        r[4] = ctx.broadcast(x, 1, cores, GroupMode.CrossPartition).toFloat32Vector();
        r[5] = ctx.collectivePermute(x, new int[][] {{0, 1}, {1, 0}}, GroupMode.CrossPartition).toFloat32Vector();
        got.put(p, r);
        return null;
      }, null, null, a);
    }
    for (int p = 0; p < CORES; p++) {
      int c = p % K, first = p - c;
      float[] x0 = contribution(first), x1 = contribution(first + 1), other = contribution(first + 1 - c);
      float[][] g = got.get(p);
      assertArrayEquals("allReduce max " + p, new float[] {Math.max(x0[0], x1[0]), Math.max(x0[1], x1[1])}, g[0], 0f);
      assertArrayEquals("allGather " + p, new float[] {x0[0], x0[1], x1[0], x1[1]}, g[1], 0f);
      assertArrayEquals("reduceScatter " + p, new float[] {x0[c] + x1[c]}, g[2], 0f);
      assertArrayEquals("allToAll " + p, new float[] {x0[c], x1[c]}, g[3], 0f);
      assertArrayEquals("broadcast " + p, x1, g[4], 0f);
      assertArrayEquals("collectivePermute " + p, other, g[5], 0f);
    }
  }

  @Test
  public void aGroupOfTheWrongKindRaisesInvalidArgument() {
    try (DeviceAssignment a = twoCoresPerReplica()) {
      try {
        // Logical cores 0 and 2, with two cores per replica.
        tpu.replicate((ctx, in) -> new Tensor[] {tpu.cross_replica_sum(vec(1), new int[][] {{0, 2}}, GroupMode.CrossPartition)},
            null, null, a);
        fail("a cross-partition group naming core 2");
      } catch (InvalidArgumentError e) {
        assertEquals(Status.InvalidArgument.swigValue(), e.code());
        assertTrue(e.getMessage(), e.getMessage().contains("logical core 2 in group 0 is outside [0, 2)"));
        assertTrue(e.getMessage(), e.getMessage().contains("CROSS_PARTITION"));
      }
      try {
        tpu.replicate((ctx, in) -> new Tensor[] {
            ctx.collectivePermute(vec(1), new int[][] {{0, 1}}, GroupMode.CrossReplicaAndPartition)}, null, null, a);
        fail("collective_permute with CROSS_REPLICA_AND_PARTITION");
      } catch (InvalidArgumentError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("collective_permute has no group mode CROSS_REPLICA_AND_PARTITION"));
      }
      // The system still runs steps.
      assertEquals(R, tpu.replicate((ctx, in) -> null, null, null, a).size());
    }
    // Rows of different lengths are groups of different sizes (issue 29), not an error.
    GroupAssignment ragged = GroupAssignment.of(new int[][] {{0, 1}, {2}});
    assertTrue(ragged.isRagged());
    assertArrayEquals(new int[] {2, 1}, ragged.groupSizes());
    ragged.delete();
    try {
      CollectiveOptions.of(null);
      fail("a null group mode");
    } catch (IllegalArgumentException e) {
      assertEquals("groupMode is null", e.getMessage());
    }
  }

  // ---- meshes -------------------------------------------------------------------------------

  @Test
  public void meshAxesCoordinatesAndGroups() {
    try (DeviceAssignment a = twoCoresPerReplica();
         Mesh mesh = Mesh.create(a, new String[] {"batch", "model"}, new long[] {R, K})) {
      assertEquals(2, mesh.numAxes());
      assertEquals(CORES, mesh.size());
      assertEquals("model", mesh.axisName(1));
      assertEquals(K, mesh.axisSize(1));
      assertEquals(1, mesh.axisIndex("model"));
      assertEquals(Arrays.asList("batch", "model"), mesh.axisNames());
      assertArrayEquals(new long[] {R, K}, mesh.shape());
      assertEquals(R, mesh.dimSize("batch"));
      assertEquals("Mesh(batch=4, model=2)", mesh.toString());
      for (int r = 0; r < R; r++)
        for (int c = 0; c < K; c++) assertArrayEquals(new long[] {r, c}, mesh.coordinates(r, c));
      try (DeviceAssignment back = mesh.deviceAssignment()) {
        assertEquals(R, back.numReplicas());
        assertEquals(K, back.numCoresPerReplica());
        assertEquals(a.tpuOrdinal(3, 1), back.tpuOrdinal(3, 1));
      }
      GroupAssignment model = mesh.axisGroups("model");
      assertEquals(R, model.numGroups());
      assertArrayEquals(new int[] {0, 1, 2, 3, 4, 5, 6, 7}, model.replicaIds());
      GroupAssignment batch = mesh.axisGroups(new StringVector(new String[] {"batch"}));
      assertArrayEquals(new int[] {0, 2, 4, 6, 1, 3, 5, 7}, batch.replicaIds());
      assertEquals(GroupMode.FlattenedId, mesh.axisGroupMode("model"));
      assertEquals(GroupMode.FlattenedId, mesh.axisGroupMode(new StringVector(new String[] {"batch", "model"})));
      assertEquals(GroupMode.FlattenedId, mesh.collectiveOptions("batch").getGroupMode());
    }
    try (Topology t = system.topology(); Mesh flat = Mesh.createFromTopology(t, new StringVector(new String[] {"x", "y"}), new long[] {2, 4})) {
      try (DeviceAssignment a = flat.deviceAssignment()) {
        assertEquals(CORES, a.numReplicas());
        assertEquals(1, a.numCoresPerReplica());
      }
      assertArrayEquals(new long[] {1, 2}, flat.coordinates(6, 0));
    }
    try (Mesh dt = dtensor.create_mesh(Map.entry("batch", 2), Map.entry("model", 4))) {
      assertEquals(Arrays.asList("batch", "model"), dt.axisNames());
      assertEquals(CORES, dt.size());
    }
  }

  @Test
  public void badMeshesAreNamed() {
    try (DeviceAssignment a = twoCoresPerReplica()) {
      expectInvalid(() -> Mesh.create(a, new String[] {"x", "x"}, new long[] {R, K}), "x");
      expectInvalid(() -> Mesh.create(a, new String[] {"batch", "model"}, new long[] {3, K}), "3");
      expectInvalid(() -> Mesh.create(a, new String[] {"unsharded"}, new long[] {CORES}), "unsharded");
      expectInvalid(() -> Mesh.create(a, new String[] {"batch"}, new long[] {R, K}), "names");
      try (Mesh mesh = Mesh.create(a, new String[] {"batch", "model"}, new long[] {R, K})) {
        try {
          mesh.axisIndex("data");
          fail("axis data");
        } catch (NotFoundError e) {
          assertTrue(e.getMessage(), e.getMessage().contains("data"));
        }
        try {
          mesh.axisName(2);
          fail("axis 2 of 2");
        } catch (OutOfRangeError e) {
          assertTrue(e.getMessage(), e.getMessage().contains("2"));
        }
        expectInvalid(() -> mesh.axisGroups("model", "model"), "model");
        try {
          mesh.axisGroups((String[]) null);
          fail("null axes");
        } catch (IllegalArgumentException e) {
          assertEquals("axes is null", e.getMessage());
        }
        mesh.close();
        mesh.close();  // closing twice is harmless
        try {
          mesh.numAxes();
          fail("a closed mesh");
        } catch (OpError e) {
          assertTrue(e.getMessage(), e.getMessage().contains("mesh"));
        }
      }
    }
  }

  private static void expectInvalid(Runnable body, String named) {
    try {
      body.run();
      fail("no InvalidArgumentError naming " + named);
    } catch (InvalidArgumentError e) {
      assertTrue(e.getMessage(), e.getMessage().contains(named));
    }
  }

  @Test
  public void meshAxisSumsAgainstNaive() {
    // (batch 4, model 2): model runs over the cores of a replica. (a 2, b 4): b spans two replicas.
    String[][] names = {{"batch", "model"}, {"a", "b"}};
    long[][] shapes = {{R, K}, {2, 4}};
    for (int m = 0; m < names.length; m++) {
      long[] shape = shapes[m];
      String[] axes = names[m];
      Map<Integer, float[][]> got = new ConcurrentHashMap<>();
      try (DeviceAssignment a = twoCoresPerReplica(); Mesh mesh = Mesh.create(a, axes, shape)) {
        List<Tensor[]> out = tpu.replicate((ctx, in) -> {
          int p = participant(ctx);
          Tensor x = vec(contribution(p));
          float[][] r = new float[5][];
          r[0] = tpu.crossReplicaSum(x, mesh, axes[1]).toFloat32Vector();
          r[1] = tpu.cross_replica_sum(contribution(p), mesh, axes[0]);
          r[2] = tpu.cross_replica_sum(x, mesh, axes[0], axes[1]).toFloat32Vector();
          r[3] = ctx.allReduce(x, ReduceOp.Sum, mesh, axes[1]).toFloat32Vector();
          r[4] = ctx.allGather(x, 0, mesh, axes[1]).toFloat32Vector();
          got.put(p, r);
          return new Tensor[] {x};
        }, null, mesh);
        assertEquals(R, out.size());
        for (int p = 0; p < CORES; p++) {
          float[][] g = got.get(p);
          String where = Arrays.toString(axes) + " participant " + p;
          assertArrayEquals(where, naiveAxisSum(shape, List.of(1), p), g[0], 0f);
          assertArrayEquals(where, naiveAxisSum(shape, List.of(0), p), g[1], 0f);
          assertArrayEquals(where, naiveAxisSum(shape, List.of(0, 1), p), g[2], 0f);
          assertArrayEquals(where, naiveAxisSum(shape, List.of(1), p), g[3], 0f);
          // allGather over the second axis: the group's members in order of that coordinate.
          List<Float> gathered = new ArrayList<>();
          for (int q = 0; q < CORES; q++)
            if (sameGroup(shape, List.of(1), p, q)) for (float v : contribution(q)) gathered.add(v);
          float[] want = new float[gathered.size()];
          for (int i = 0; i < want.length; i++) want[i] = gathered.get(i);
          assertArrayEquals(where, want, g[4], 0f);
        }
      }
    }
  }

  @Test
  public void meshStepsReduceScatterAllToAllAndBroadcastOverAnAxis() {
    Map<Integer, float[][]> got = new ConcurrentHashMap<>();
    try (DeviceAssignment a = twoCoresPerReplica();
         Mesh mesh = Mesh.create(a, new String[] {"batch", "model"}, new long[] {R, K})) {
      tpu.replicate((ctx, in) -> {
        int p = participant(ctx);
        Tensor x = vec(contribution(p));
        got.put(p, new float[][] {
            ctx.reduceScatter(x, ReduceOp.Sum, 0, mesh, "model").toFloat32Vector(),
            ctx.allToAll(x, 0, 0, 2, mesh, "model").toFloat32Vector(),
            ctx.broadcast(x, 0, mesh, "model").toFloat32Vector()});
        return null;
      }, null, mesh);
    }
    for (int p = 0; p < CORES; p++) {
      int c = p % K;
      float[] x0 = contribution(p - c), x1 = contribution(p - c + 1);
      assertArrayEquals(new float[] {x0[c] + x1[c]}, got.get(p)[0], 0f);
      assertArrayEquals(new float[] {x0[c], x1[c]}, got.get(p)[1], 0f);
      assertArrayEquals(x0, got.get(p)[2], 0f);
    }
  }

  // ---- partitioned inputs and outputs -----------------------------------------------------------

  private static float[] iota(int n, float base) {
    float[] v = new float[n];
    for (int i = 0; i < n; i++) v[i] = base + i;
    return v;
  }

  @Test
  public void partitionedInputsAndOutputsRoundTrip() {
    // A [4,3] split by rows, B [5] split 3 + 2 (TPUEstimator's rule), C [2] whole, D [2,4] split by columns.
    List<List<Tensor>> inputs = new ArrayList<>();
    for (int r = 0; r < R; r++)
      inputs.add(Arrays.asList(Tensor.fromFloat32(new long[] {4, 3}, iota(12, 100 * r)),
          Tensor.fromFloat32(new long[] {5}, iota(5, 100 * r + 50)), vec(r, -r),
          Tensor.fromFloat32(new long[] {2, 4}, iota(8, 100 * r + 70))));
    int[][] inParts = {{2, 1}, {2}, null, {1, 2}};
    int[][] outParts = {{2, 1}, {2}, {}, {1, 2}};
    Map<Integer, Tensor[]> tiles = new ConcurrentHashMap<>();
    try (DeviceAssignment a = twoCoresPerReplica()) {
      List<Tensor[]> out = tpu.replicate((ctx, in) -> {
        tiles.put(participant(ctx), in);
        Tensor who = Tensor.fromInt32(new long[] {2}, new int[] {ctx.replicaId(), ctx.logicalCore()});
        return new Tensor[] {in[0], in[1], who, in[3]};
      }, inputs, a, inParts, outParts);
      assertEquals(R, out.size());
      for (int r = 0; r < R; r++) {
        Tensor[] o = out.get(r);
        assertEquals(4, o.length);
        assertArrayEquals(new long[] {4, 3}, o[0].dims());
        assertArrayEquals(iota(12, 100 * r), o[0].toFloat32Vector(), 0f);
        assertArrayEquals(iota(5, 100 * r + 50), o[1].toFloat32Vector(), 0f);
        assertArrayEquals("an unpartitioned output is logical core 0's", new int[] {r, 0}, o[2].toInt32Vector());
        assertArrayEquals(new long[] {2, 4}, o[3].dims());
        assertArrayEquals(iota(8, 100 * r + 70), o[3].toFloat32Vector(), 0f);
        for (int c = 0; c < K; c++) {
          Tensor[] t = tiles.get(r * K + c);
          float[] a0 = iota(12, 100 * r);
          assertArrayEquals(new long[] {2, 3}, t[0].dims());
          assertArrayEquals(Arrays.copyOfRange(a0, 6 * c, 6 * c + 6), t[0].toFloat32Vector(), 0f);
          float[] b = iota(5, 100 * r + 50);
          assertArrayEquals(c == 0 ? Arrays.copyOfRange(b, 0, 3) : Arrays.copyOfRange(b, 3, 5), t[1].toFloat32Vector(), 0f);
          assertArrayEquals("C goes whole to every core", new float[] {r, -r}, t[2].toFloat32Vector(), 0f);
          float[] d = iota(8, 100 * r + 70);
          assertArrayEquals(new long[] {2, 2}, t[3].dims());
          assertArrayEquals(new float[] {d[2 * c], d[2 * c + 1], d[4 + 2 * c], d[5 + 2 * c]}, t[3].toFloat32Vector(), 0f);
        }
      }
      // Over a mesh of that assignment: the same step.
      try (Mesh mesh = Mesh.create(a, new String[] {"batch", "model"}, new long[] {R, K})) {
        List<Tensor[]> again = tpu.replicate((ctx, in) -> new Tensor[] {in[0], in[1], in[2], in[3]}, inputs, mesh, inParts,
            outParts);
        for (int r = 0; r < R; r++) assertArrayEquals(iota(12, 100 * r), again.get(r)[0].toFloat32Vector(), 0f);
      }
      // The same through StepOptions on the raw system, and a count that does not match the cores.
      StepOptions options = new StepOptions();
      options.setDeviceAssignment(a);
      options.setInputPartitions(new int[][] {{3, 1}});
      TensorVector flat = new TensorVector();
      for (int r = 0; r < R; r++) flat.add(inputs.get(r).get(0));
      try {
        system.replicate(new JavaComputation((ctx, in) -> null, R), R, 1, flat, 0, options);
        fail("partition_dims {3, 1} over 2 cores");
      } catch (InvalidArgumentError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("3"));
      }
    }
  }
  /**
   * An infeed queue with replicas of K cores: each core gets its piece of every tuple
   * element, cut along the element's shard dimension, or the whole element for -1
   * (TensorFlow's InfeedQueue.set_shard_dimensions, tpu_sharding.py get_sharded_shape).
   */
  @Test
  public void infeedShardDimensionsOverTheCoresOfAReplica() {
    ShapeVector shapes = new ShapeVector();
    shapes.add(Shape.of(new long[] {4}));
    shapes.add(Shape.of(new long[] {2}));
    int[] dtypes = {DType.Float32.swigValue(), DType.Float32.swigValue()};
    try (DeviceAssignment a = twoCoresPerReplica(); InfeedQueue in = new InfeedQueue(system, R, dtypes, shapes, 2)) {
      try {
        in.setShardDimensions(new int[] {0});
        fail("one shard dimension for two elements");
      } catch (InvalidArgumentError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("one per tuple element (2)"));
      }
      in.setShardDimensions(new int[] {0, -1});
      for (int r = 0; r < R; r++) {
        float f = 10f * r;
        TensorVector tuple = new TensorVector();
        tuple.add(vec(f, f + 1, f + 2, f + 3));
        tuple.add(vec(f, 7));
        in.enqueue(r, tuple);
      }
      Map<Integer, float[]> seen = new ConcurrentHashMap<>();
      tpu.replicate((ctx, x) -> {
        float[] piece = x[0].toFloat32Vector(), whole = x[1].toFloat32Vector();
        seen.put(ctx.replicaId() * K + ctx.logicalCore(), new float[] {piece.length, piece[0], piece[1], whole[0], whole[1]});
        return null;
      }, Replicas.none(R), in, a);
      for (int r = 0; r < R; r++)
        for (int c = 0; c < K; c++)
          assertArrayEquals("replica " + r + " core " + c, new float[] {2, 10f * r + 2 * c, 10f * r + 2 * c + 1, 10f * r, 7},
                            seen.get(r * K + c), 0f);
    }
  }
}
