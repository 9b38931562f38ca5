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

public class TpurtTest {
  private static final int R = 8;
  private static TpuSystem system;

  @BeforeClass
  public static void start() {
    SystemOptions options = new SystemOptions();
    options.setNumCores(R);
    system = tpu.initialize_system(options);
  }

  /** One system per process at a time: closes the shared one around body. */
  private static void withoutSharedSystem(Runnable body) {
    system.close();
    try {
      body.run();
    } finally {
      start();
    }
  }

  @AfterClass
  public static void stop() {
    system.close();
  }

  private static Tensor vec(float... v) {
    return Tensor.fromFloat32(new long[] {v.length}, v);
  }

  private static List<List<Tensor>> perReplica(Function<Integer, Tensor> make) {
    List<List<Tensor>> rows = new ArrayList<>();
    for (int r = 0; r < R; r++) rows.add(Arrays.asList(make.apply(r)));
    return rows;
  }

  // ---- tpu.* ---------------------------------------------------------------------------------

  @Test
  public void replicatedCrossReplicaSumOnEightCores() {
    List<Tensor[]> out = tpu.replicate((ctx, in) -> new Tensor[] {tpu.cross_replica_sum(in[0])},
        perReplica(r -> vec(r, 2f * r, 1f)));
    assertEquals(R, out.size());
    for (int r = 0; r < R; r++) assertArrayEquals(new float[] {28f, 56f, 8f}, out.get(r)[0].toFloat32Vector(), 0f);
    // The Function<Tensor[], Tensor[]> form.
    List<Tensor[]> again = tpu.replicate((Tensor[] in) -> new Tensor[] {tpu.crossReplicaSum(in[0])}, perReplica(r -> vec(1f)));
    assertArrayEquals(new float[] {8f}, again.get(3)[0].toFloat32Vector(), 0f);
  }

  @Test
  public void crossReplicaSumEveryOverloadAndDyn() {
    Tensor[] perReplicaValues = new Tensor[R];
    for (int r = 0; r < R; r++) perReplicaValues[r] = vec(r);
    PerReplica pr = new PerReplica(perReplicaValues);
    int[][] halves = {{0, 1, 2, 3}, {4, 5, 6, 7}};
    List<String> problems = java.util.Collections.synchronizedList(new ArrayList<>());
    tpu.replicate((ctx, in) -> {
      int r = ctx.replicaId();
      check(problems, "Tensor", tpu.cross_replica_sum(vec(1f)).toFloat32Vector()[0] == 8f);
      check(problems, "Tensor groups", tpu.cross_replica_sum(vec(1f), halves).toFloat32Vector()[0] == 4f);
      check(problems, "PerReplica", tpu.cross_replica_sum(pr).toFloat32Vector()[0] == 28f);
      check(problems, "PerReplica groups", tpu.cross_replica_sum(pr, halves).toFloat32Vector()[0] == (r < 4 ? 6f : 22f));
      check(problems, "float[]", tpu.cross_replica_sum(new float[] {1f, 2f})[1] == 16f);
      check(problems, "double[]", tpu.cross_replica_sum(new double[] {0.5})[0] == 4.0);
      check(problems, "int[]", tpu.cross_replica_sum(new int[] {r})[0] == 28);
      check(problems, "long[]", tpu.cross_replica_sum(new long[] {1L << 40})[0] == 8L << 40);
      Map.Entry<Tensor, Tensor> pair = tpu.cross_replica_sum(new AbstractMap.SimpleImmutableEntry<>(vec(1f), Tensor.fromInt32(new long[] {1}, new int[] {2})));
      check(problems, "pair", pair.getKey().toFloat32Vector()[0] == 8f && pair.getValue().toInt32Vector()[0] == 16);
      List<Tensor> list = tpu.cross_replica_sum(Arrays.asList(vec(1f, 1f), Tensor.fromFloat32(new long[] {1, 1}, new float[] {2f}), Tensor.fromInt64(new long[] {1}, new long[] {3})));
      check(problems, "list", list.get(0).toFloat32Vector()[1] == 8f && list.get(1).toFloat32Vector()[0] == 16f
          && list.get(1).rank() == 2 && list.get(2).toInt64Vector()[0] == 24);
      Map<String, Tensor> named = new HashMap<>();
      named.put("w", vec(1f, 2f));
      named.put("b", vec(3f));
      Map<String, Tensor> sums = tpu.cross_replica_sum(named);
      check(problems, "map", sums.get("w").toFloat32Vector()[1] == 16f && sums.get("b").toFloat32Vector()[0] == 24f);
      // Every collection form with a group assignment: halves of 4 replicas.
      check(problems, "float[] groups", tpu.cross_replica_sum(new float[] {1f}, halves)[0] == 4f);
      check(problems, "double[] groups", tpu.cross_replica_sum(new double[] {1.0}, halves)[0] == 4.0);
      check(problems, "int[] groups", tpu.cross_replica_sum(new int[] {1}, halves)[0] == 4);
      check(problems, "long[] groups", tpu.cross_replica_sum(new long[] {1}, halves)[0] == 4);
      check(problems, "pair groups", tpu.cross_replica_sum(new AbstractMap.SimpleImmutableEntry<>(vec(1f), vec(2f)), halves).getValue().toFloat32Vector()[0] == 8f);
      check(problems, "list groups", tpu.cross_replica_sum(Arrays.asList(vec(1f)), halves).get(0).toFloat32Vector()[0] == 4f);
      check(problems, "map groups", tpu.cross_replica_sum(named, halves).get("b").toFloat32Vector()[0] == 12f);
      // camelCase aliases.
      check(problems, "alias Tensor groups", tpu.crossReplicaSum(vec(1f), halves).toFloat32Vector()[0] == 4f);
      check(problems, "alias PerReplica", tpu.crossReplicaSum(pr).toFloat32Vector()[0] == 28f);
      check(problems, "alias float[]", tpu.crossReplicaSum(new float[] {1f})[0] == 8f);
      check(problems, "alias double[]", tpu.crossReplicaSum(new double[] {1.0})[0] == 8.0);
      check(problems, "alias int[]", tpu.crossReplicaSum(new int[] {1})[0] == 8);
      check(problems, "alias long[]", tpu.crossReplicaSum(new long[] {1})[0] == 8);
      check(problems, "alias pair", tpu.crossReplicaSum(new AbstractMap.SimpleImmutableEntry<>(vec(1f), vec(1f))).getKey().toFloat32Vector()[0] == 8f);
      check(problems, "alias list", tpu.crossReplicaSum(Arrays.asList(vec(1f))).get(0).toFloat32Vector()[0] == 8f);
      check(problems, "alias map", tpu.crossReplicaSum(named).get("w").toFloat32Vector()[0] == 8f);
      // Groups of different sizes: XLA's all-reduce takes them (issue 29).
      check(problems, "ragged groups",
          tpu.cross_replica_sum(vec(1f), new int[][] {{0, 1}, {2, 3, 4, 5, 6, 7}}).toFloat32Vector()[0] == (r < 2 ? 2f : 6f));
      // _dyn twins pick the same overloads at run time.
      check(problems, "dyn Tensor", ((Tensor) tpu.cross_replica_sum_dyn(vec(1f))).toFloat32Vector()[0] == 8f);
      check(problems, "dyn groups", ((Tensor) tpu.cross_replica_sum_dyn(vec(1f), halves)).toFloat32Vector()[0] == 4f);
      check(problems, "dyn PerReplica", ((Tensor) tpu.cross_replica_sum_dyn(pr)).toFloat32Vector()[0] == 28f);
      check(problems, "dyn float[]", ((float[]) tpu.cross_replica_sum_dyn(new float[] {1f}))[0] == 8f);
      check(problems, "dyn double[]", ((double[]) tpu.cross_replica_sum_dyn(new double[] {1.0}))[0] == 8.0);
      check(problems, "dyn int[]", ((int[]) tpu.cross_replica_sum_dyn(new int[] {1}))[0] == 8);
      check(problems, "dyn long[]", ((long[]) tpu.cross_replica_sum_dyn(new long[] {1}))[0] == 8);
      @SuppressWarnings("unchecked")
      Map.Entry<Tensor, Tensor> dynPair = (Map.Entry<Tensor, Tensor>) tpu.cross_replica_sum_dyn(new AbstractMap.SimpleImmutableEntry<>(vec(1f), vec(2f)));
      check(problems, "dyn pair", dynPair.getValue().toFloat32Vector()[0] == 16f);
      @SuppressWarnings("unchecked")
      List<Tensor> dynList = (List<Tensor>) tpu.cross_replica_sum_dyn(Arrays.asList(vec(1f)));
      check(problems, "dyn list", dynList.get(0).toFloat32Vector()[0] == 8f);
      @SuppressWarnings("unchecked")
      Map<String, Tensor> dynMap = (Map<String, Tensor>) tpu.cross_replica_sum_dyn(named);
      check(problems, "dyn map", dynMap.get("b").toFloat32Vector()[0] == 24f);
      try {
        tpu.cross_replica_sum_dyn("not a tensor");
        problems.add("dyn took a String");
      } catch (IllegalArgumentException e) {
        check(problems, "dyn message " + e.getMessage(), e.getMessage().contains("java.lang.String"));
      }
      return null;
    }, Replicas.none(R));
    assertTrue(problems.toString(), problems.isEmpty());
    try {
      tpu.cross_replica_sum(vec(1f));
      fail("cross_replica_sum outside a computation");
    } catch (FailedPreconditionError e) {
      assertTrue(e.getMessage().contains("inside a computation"));
    }
  }

  private static void check(List<String> problems, String what, boolean ok) {
    if (!ok) problems.add(what);
  }

  @Test
  public void replicateEveryMaximumShapesForm() {
    List<List<Tensor>> ragged = perReplica(r -> Tensor.zeros(DType.Float32, new long[] {r + 1}));
    TpuComputation seesPadding = (ctx, in) -> {
      if (in.length != 2 || in[0].dim(0) != 8)
        throw new IllegalStateException("replica " + ctx.replicaId() + " got " + in.length + " inputs, dim " + in[0].dim(0));
      return new Tensor[] {in[1]};
    };
    List<List<Tensor[]>> results = new ArrayList<>();
    results.add(tpu.replicate(seesPadding, ragged, null, null, 8));
    results.add(tpu.replicate(seesPadding, ragged, null, null, new TensorShape(8)));
    results.add(tpu.replicate(seesPadding, ragged, null, null, Dimension.unknown()));
    results.add(tpu.replicate(seesPadding, ragged, null, null, Arrays.asList(new TensorShape(new Dimension(8L)))));
    results.add((List<Tensor[]>) cast(tpu.replicate_dyn(seesPadding, ragged, null, null, null, 8)));
    results.add((List<Tensor[]>) cast(tpu.replicate_dyn(seesPadding, ragged, null, null, null, new TensorShape(-1))));
    results.add((List<Tensor[]>) cast(tpu.replicate_dyn(seesPadding, ragged, null, null, null, new Dimension(8L))));
    results.add((List<Tensor[]>) cast(tpu.replicate_dyn(seesPadding, ragged, null, null, null, Arrays.asList(new TensorShape(8)))));
    for (List<Tensor[]> out : results)
      for (int r = 0; r < R; r++) assertEquals(r + 1, out.get(r)[0].toInt32Vector()[0]);
    // No maximum_shapes: inputs as given.
    List<Tensor[]> plain = (List<Tensor[]>) cast(tpu.replicate_dyn((Function<Tensor[], Tensor[]>) in -> in, perReplica(r -> vec(r)), null, null, null, null));
    assertArrayEquals(new float[] {5f}, plain.get(5)[0].toFloat32Vector(), 0f);
    assertEquals(R, tpu.replicate((ctx, in) -> null, Replicas.none(R)).size());
    try {
      tpu.replicate_dyn(seesPadding, ragged, null, null, null, "eight");
      fail("maximum_shapes as a String");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("maximumShapes") && e.getMessage().contains("java.lang.String"));
    }
    try {
      tpu.replicate_dyn(42, null, null, null, null, null);
      fail("a computation that is an Integer");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("java.lang.Integer"));
    }
  }

  @SuppressWarnings("unchecked")
  private static List<Tensor[]> cast(Object o) {
    return (List<Tensor[]>) o;
  }

  /** A device assignment for fewer replicas than cores (the default needs 1 or all). */
  private static DeviceAssignment assignment(int numReplicas) {
    try (Topology t = system.topology()) {
      return DeviceAssignment.build(t, new int[0], new int[0], numReplicas, DeviceOrderMode.Auto);
    }
  }

  private static Tensor doubled(Tensor t) {
    float[] v = t.toFloat32Vector();
    for (int i = 0; i < v.length; i++) v[i] *= 2;
    return Tensor.fromFloat32(t.dims(), v);
  }

  @Test
  public void rewriteShardAndBatchParallel() {
    Tensor x = Tensor.fromFloat32(new long[] {8, 2}, new float[] {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
    float[] twice = new float[16];
    for (int i = 0; i < 16; i++) twice[i] = 2 * i;
    Tensor[] rw = tpu.rewrite((ctx, in) -> new Tensor[] {doubled(in[0])}, Arrays.asList(x));
    assertArrayEquals(twice, rw[0].toFloat32Vector(), 0f);
    assertArrayEquals(twice, tpu.rewrite((Tensor[] in) -> new Tensor[] {doubled(in[0])}, Arrays.asList(x))[0].toFloat32Vector(), 0f);
    assertArrayEquals(twice, ((Tensor[]) tpu.rewrite_dyn((TpuComputation) (ctx, in) -> new Tensor[] {doubled(in[0])}, Arrays.asList(x), null, null, null))[0].toFloat32Vector(), 0f);

    Tensor[] bp = tpu.batch_parallel((ctx, in) -> {
      if (in[0].dim(0) != 2) throw new IllegalStateException("shard has " + in[0].dim(0) + " rows");
      return new Tensor[] {doubled(in[0])};
    }, Arrays.asList(x), 4, null, assignment(4));
    assertArrayEquals(new long[] {8, 2}, bp[0].dims());
    assertArrayEquals(twice, bp[0].toFloat32Vector(), 0f);
    assertArrayEquals(twice, tpu.batchParallel((ctx, in) -> new Tensor[] {doubled(in[0])}, Arrays.asList(x), 8)[0].toFloat32Vector(), 0f);
    assertArrayEquals(twice, tpu.batch_parallel((Tensor[] in) -> new Tensor[] {doubled(in[0])}, Arrays.asList(x), 8)[0].toFloat32Vector(), 0f);
    assertArrayEquals(twice, ((Tensor[]) tpu.batch_parallel_dyn((TpuComputation) (ctx, in) -> new Tensor[] {doubled(in[0])}, Arrays.asList(x), 8, null, null, null))[0].toFloat32Vector(), 0f);

    Tensor[] sh = tpu.shard((ctx, in) -> new Tensor[] {doubled(in[0])}, Arrays.asList(x), 8);
    assertArrayEquals(twice, sh[0].toFloat32Vector(), 0f);
    assertArrayEquals(twice, tpu.shard((Tensor[] in) -> new Tensor[] {doubled(in[0])}, Arrays.asList(x), 1)[0].toFloat32Vector(), 0f);
    // Split along axis 1 over 2 replicas (a device assignment): each shard gets an [8, 1] column.
    Tensor[] cols = tpu.shard((ctx, in) -> {
      if (in[0].dim(1) != 1) throw new IllegalStateException("column shard has dim1 " + in[0].dim(1));
      return new Tensor[] {in[0].reshape(new long[] {8})};
    }, Arrays.asList(x), 2, new int[] {1}, null, assignment(2));
    assertArrayEquals(new float[] {0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15}, cols[0].toFloat32Vector(), 0f);
    assertArrayEquals(twice, ((Tensor[]) tpu.shard_dyn((TpuComputation) (ctx, in) -> new Tensor[] {doubled(in[0])}, Arrays.asList(x), 8, null, null, null))[0].toFloat32Vector(), 0f);
    try {
      tpu.shard_dyn((TpuComputation) (ctx, in) -> null, Arrays.asList(x), "two", null, null, null);
      fail("numShards as a String");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("numShards"));
    }
    try {
      tpu.batch_parallel_dyn((TpuComputation) (ctx, in) -> null, 3.5, 2, null, null, null);
      fail("inputs as a Double");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("java.lang.Double"));
    }
    try {
      tpu.rewrite_dyn((TpuComputation) (ctx, in) -> null, null, "queue", null, null);
      fail("infeed queue as a String");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("infeedQueue"));
    }
  }

  @Test
  public void outsideCompilationArgsKwargsAndFailure() {
    List<String> problems = java.util.Collections.synchronizedList(new ArrayList<>());
    Map<String, Object> kwargs = new HashMap<>();
    kwargs.put("scale", 10);
    tpu.replicate((ctx, in) -> {
      int r = ctx.replicaId();
      Object sum = tpu.outside_compilation((args, kw) -> (Integer) args[0] + (Integer) args[1], r, 1);
      check(problems, "args", sum.equals(r + 1));
      Object scaled = tpu.outside_compilation((args, kw) -> (Integer) args[0] * (Integer) kw.get("scale"), kwargs, r);
      check(problems, "kwargs", scaled.equals(10 * r));
      check(problems, "alias", tpu.outsideCompilation((args, kw) -> "host", r).equals("host"));
      check(problems, "dyn", tpu.outside_compilation_dyn((HostFunction) (args, kw) -> args.length, 1, 2, 3).equals(3));
      check(problems, "dyn kwargs", tpu.outside_compilation_dyn((HostFunction) (args, kw) -> kw.size(), kwargs).equals(1));
      try {
        tpu.outside_compilation_dyn("not a function");
        problems.add("dyn took a String");
      } catch (IllegalArgumentException e) {
        check(problems, "dyn message", e.getMessage().contains("java.lang.String"));
      }
      // The raw director, with failHost.
      HostComputation raw = new HostComputation() {
        @Override
        public Status run(int replicaId) {
          return replicaId >= 0 ? Status.Ok : HostComputation.failHost(Status.Internal, "negative replica");
        }
      };
      ctx.outsideCompilation(raw);
      return null;
    }, Replicas.none(R));
    assertTrue(problems.toString(), problems.isEmpty());
    try {
      tpu.replicate((ctx, in) -> {
        tpu.outside_compilation((args, kw) -> {
          if ((Integer) args[0] == 6) throw new PermissionDeniedError("host says no");
          return null;
        }, ctx.replicaId());
        return null;
      }, Replicas.none(R));
      fail("a failing host function did not fail the step");
    } catch (PermissionDeniedError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("host says no") && e.getMessage().contains("replica 6"));
    }
    assertEquals(R, tpu.replicate((ctx, in) -> null, Replicas.none(R)).size());
  }

  @Test
  public void bfloat16ScopeAndCore() {
    List<String> problems = java.util.Collections.synchronizedList(new ArrayList<>());
    tpu.replicate((ctx, in) -> {
      try (Bfloat16Scope scope = tpu.bfloat16_scope()) {
        check(problems, "scope", scope != null);
      }
      try (Bfloat16Scope scope = tpu.bfloat16Scope()) {
        check(problems, "alias", scope != null);
      }
      ((Bfloat16Scope) tpu.bfloat16_scope_dyn()).close();
      return null;
    }, Replicas.none(R));
    assertTrue(problems.toString(), problems.isEmpty());
    assertTrue(tpu.core(1), tpu.core(1).endsWith("TPU_REPLICATED_CORE:1"));
    assertEquals(tpu.core(2), tpu.core_dyn(2));
    try {
      tpu.core_dyn("2");
      fail("core_dyn took a String");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage().contains("java.lang.String"));
    }
  }

  @Test
  public void initializeAndShutdownSystem() {
    withoutSharedSystem(TpurtTest::initializeAndShutdownSystemBody);
  }

  private static void initializeAndShutdownSystemBody() {
    TpuSystem s = tpu.initialize_system(null, "trainer");
    assertEquals("trainer", s.jobName());
    tpu.shutdown_system("trainer");
    TpuSystem d = (TpuSystem) tpu.initialize_system_dyn(null, null);
    assertTrue(d.numCores() > 0);
    tpu.shutdown_system_dyn(null);
    TpuSystem e = tpu.initializeSystem();
    tpu.shutdownSystem();
    e.close();
    SystemOptions four = new SystemOptions();
    four.setNumCores(4);
    TpuSystem g = tpu.initializeSystem(four);
    assertEquals(4, g.numCores());
    try {
      tpu.shutdown_system_dyn(5);
      fail("job as an Integer");
    } catch (IllegalArgumentException ex) {
      assertTrue(ex.getMessage().contains("java.lang.Integer"));
    }
    tpu.shutdown_system_dyn("localhost");
    g.close();
    try {
      tpu.initialize_system_dyn(7, null);
      fail("embedding config as an Integer");
    } catch (IllegalArgumentException ex) {
      assertTrue(ex.getMessage().contains("java.lang.Integer"));
    }
    TpuSystem f = tpu.initialize_system();
    tpu.shutdown_system();
    try {
      tpu.shutdown_system();
      fail("shutdown without a system");
    } catch (FailedPreconditionError ex) {
      assertTrue(ex.getMessage().contains("initialize_system"));
    }
    f.close();
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
    withoutSharedSystem(TpurtTest::systemMembersBody);
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
    withoutSharedSystem(TpurtTest::stepOptionsAndSystemOptionsBody);
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

  // ---- lifetime --------------------------------------------------------------------------

  private static long rssBytes() throws Exception {
    String[] statm = new String(Files.readAllBytes(Paths.get("/proc/self/statm"))).trim().split("\\s+");
    return Long.parseLong(statm[1]) * 4096L;
  }

  private static long heapBytes() {
    System.gc();
    Runtime rt = Runtime.getRuntime();
    return rt.totalMemory() - rt.freeMemory();
  }

  @Test
  public void tenThousandEmptyStepsDoNotGrowMemory() throws Exception {
    TpuComputation empty = (ctx, in) -> null;
    for (int i = 0; i < 500; i++) tpu.replicate(empty, Replicas.none(R));
    long heap0 = heapBytes();
    long rss0 = rssBytes();
    for (int i = 0; i < 10000; i++) tpu.replicate(empty, Replicas.none(R));
    long heapGrowth = heapBytes() - heap0;
    long rssGrowth = rssBytes() - rss0;
    assertTrue("heap grew by " + heapGrowth, heapGrowth < 64L << 20);
    assertTrue("RSS grew by " + rssGrowth, rssGrowth < 64L << 20);
  }

  private static String runJava(boolean fromJar) throws Exception {
    String java = Paths.get(System.getProperty("java.home"), "bin", "java").toString();
    List<String> cmd = new ArrayList<>(Arrays.asList(java, "-cp", System.getProperty("java.class.path")));
    cmd.add(fromJar ? "-Dtpurt.java.forceJar=true" : "-Djava.library.path=" + System.getProperty("java.library.path"));
    cmd.add(LeakedSystemMain.class.getName());
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
    boolean exited = p.waitFor(60, TimeUnit.SECONDS);
    if (!exited) {
      p.destroyForcibly();
      fail("a JVM with an unclosed system did not exit within 60 s");
    }
    String output = new String(p.getInputStream().readAllBytes());
    assertEquals(output, 0, p.exitValue());
    return output;
  }

  @Test
  public void jvmWithUnclosedSystemExits() throws Exception {
    assertTrue(runJava(false).contains("leaked sum 4.0 closed=false"));
  }

  @Test
  public void libraryLoadsFromTheJar() throws Exception {
    assertTrue(new File(System.getProperty("java.class.path").split(File.pathSeparator)[0]).getName().endsWith(".jar"));
    assertTrue(runJava(true).contains("leaked sum 4.0"));
  }

  @Test
  public void failedStepKeepsComputationUntilClose() {
    StepOptions shortDeadline = new StepOptions();
    shortDeadline.setCollectiveTimeoutMs(200);
    java.util.concurrent.atomic.AtomicBoolean lateReturned = new java.util.concurrent.atomic.AtomicBoolean();
    // The others fail only once replica 1 runs: a step that fails first ends at once, and
    // replica 1 then never starts (tpu_step_join's "never started ... before the step failed").
    java.util.concurrent.CountDownLatch lateStarted = new java.util.concurrent.CountDownLatch(1);
    try {
      // Replica 1 is late: it returns after the step failed, through a director only the system still references.
      system.replicate(new JavaComputation((ctx, in) -> {
        if (ctx.replicaId() != 1) {
          lateStarted.await(10, TimeUnit.SECONDS);
          throw new AbortedError("replica " + ctx.replicaId() + " gives up");
        }
        lateStarted.countDown();
        Thread.sleep(600);
        lateReturned.set(true);
        return null;
      }, R), R, 0, new TensorVector(), 0, shortDeadline);
      fail("the step did not fail");
    } catch (OpError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("gives up"));
    }
    System.gc();
    // The next step waits for the late replica's core, then runs.
    assertEquals(R, tpu.replicate((ctx, in) -> null, Replicas.none(R)).size());
    assertTrue(lateReturned.get());
  }
}
