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
  static final int R = 8;
  static TpuSystem system;

  @BeforeClass
  public static void start() {
    SystemOptions options = new SystemOptions();
    options.setNumCores(R);
    system = tpu.initialize_system(options);
  }

  /** One system per process at a time: closes the shared one around body. */
  static void withoutSharedSystem(Runnable body) {
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

  static Tensor vec(float... v) {
    return Tensor.fromFloat32(new long[] {v.length}, v);
  }

  static List<List<Tensor>> perReplica(Function<Integer, Tensor> make) {
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

  static void check(List<String> problems, String what, boolean ok) {
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
  static List<Tensor[]> cast(Object o) {
    return (List<Tensor[]>) o;
  }

  /** A device assignment for fewer replicas than cores (the default needs 1 or all). */
  static DeviceAssignment assignment(int numReplicas) {
    try (Topology t = system.topology()) {
      return DeviceAssignment.build(t, new int[0], new int[0], numReplicas, DeviceOrderMode.Auto);
    }
  }

  static Tensor doubled(Tensor t) {
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
