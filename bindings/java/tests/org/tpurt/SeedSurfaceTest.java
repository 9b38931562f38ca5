package org.tpurt;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.util.AbstractMap;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;

/** tf.tpu's typed methods with every parameter of seed 004, name included, in the seed's order. */
public class SeedSurfaceTest {
  private static final int R = 8;
  private static final String NAME = "op";
  private static TpuSystem system;

  @BeforeClass
  public static void start() {
    SystemOptions options = new SystemOptions();
    options.setNumCores(R);
    system = tpu.initialize_system(options);
  }

  @AfterClass
  public static void stop() {
    system.close();
  }

  private static Tensor vec(float... v) {
    return Tensor.fromFloat32(new long[] {v.length}, v);
  }

  private static List<List<Tensor>> ones() {
    List<List<Tensor>> rows = new ArrayList<>();
    for (int r = 0; r < R; r++) rows.add(Arrays.asList(vec(1f)));
    return rows;
  }

  private static float first(Tensor t) {
    return t.toFloat32Vector()[0];
  }

  @Test
  public void replicateWithName() {
    TpuComputation sum = (ctx, in) -> new Tensor[] {tpu.cross_replica_sum(in[0], null, NAME)};
    assertEquals(8f, first(tpu.replicate(sum, ones(), null, null, NAME).get(0)[0]), 0f);
    assertEquals(8f, first(tpu.replicate(sum, ones(), null, null, NAME, 2).get(1)[0]), 0f);
    assertEquals(8f, first(tpu.replicate(sum, ones(), null, null, NAME, new TensorShape(2)).get(2)[0]), 0f);
    assertEquals(8f, first(tpu.replicate(sum, ones(), null, null, NAME, new Dimension(2L)).get(3)[0]), 0f);
    assertEquals(8f, first(tpu.replicate(sum, ones(), null, null, NAME, Arrays.asList(new TensorShape(2))).get(4)[0]), 0f);
  }

  @Test
  public void rewriteAndBatchParallelWithName() {
    TpuComputation twice = (ctx, in) -> new Tensor[] {vec(2 * first(in[0]))};
    assertEquals(6f, first(tpu.rewrite(twice, Arrays.asList(vec(3f)), null, null, NAME)[0]), 0f);
    Tensor x = Tensor.fromFloat32(new long[] {8}, new float[] {0, 1, 2, 3, 4, 5, 6, 7});
    Tensor[] out = tpu.batch_parallel((ctx, in) -> new Tensor[] {in[0]}, Arrays.asList(x), R, null, null, NAME);
    assertArrayEquals(new float[] {0, 1, 2, 3, 4, 5, 6, 7}, out[0].toFloat32Vector(), 0f);
  }

  @Test
  public void shardWithEveryParameter() {
    // x is [8, 2]; 2 shards of [4, 2] rows. Output 0 joins along axis 1; output 1 is shard 0's.
    float[] values = new float[16];
    for (int i = 0; i < 16; i++) values[i] = i;
    Tensor x = Tensor.fromFloat32(new long[] {8, 2}, values);
    DeviceAssignment two;
    try (Topology t = system.topology()) {
      two = DeviceAssignment.build(t, new int[0], new int[0], 2, DeviceOrderMode.Auto);
    }
    TpuComputation body = (ctx, in) -> new Tensor[] {in[0], Tensor.fromInt32(new long[] {1}, new int[] {ctx.replicaId() + 10})};
    Tensor[] out = tpu.shard(body, Arrays.asList(x), 2, new int[] {0}, new boolean[] {true, false}, new int[] {1, 0},
        null, two, NAME);
    assertEquals(2, out.length);
    assertArrayEquals(new long[] {4, 4}, out[0].dims());
    assertArrayEquals(new float[] {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15}, out[0].toFloat32Vector(), 0f);
    assertArrayEquals(new int[] {10}, out[1].toInt32Vector());
    // Axes alone (every output from all shards); scalars are stacked.
    Tensor[] stacked = tpu.shard((Tensor[] in) -> new Tensor[] {Tensor.fromFloat32(new long[0], new float[] {in[0].dim(0)})},
        Arrays.asList(x), 2, null, null, new int[] {0}, null, two, NAME);
    assertArrayEquals(new float[] {4, 4}, stacked[0].toFloat32Vector(), 0f);
    // Neither: TensorFlow's defaults.
    Tensor[] joined = tpu.shard(body, Arrays.asList(x), 2, null, null, null, null, two, NAME);
    assertArrayEquals(values, joined[0].toFloat32Vector(), 0f);
    Object dyn = tpu.shard_dyn(body, Arrays.asList(x), 2, new int[] {0}, new boolean[] {false, true}, null, null, two, NAME);
    assertArrayEquals(new int[] {10, 11}, ((Tensor[]) dyn)[1].toInt32Vector());
    try {
      tpu.shard(body, Arrays.asList(x), 2, null, new boolean[] {true}, new int[] {0, 0}, null, two, NAME);
      fail("one flag for two axes");
    } catch (InvalidArgumentError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("outputsFromAllShards has 1 entries but outputShardAxes has 2"));
    }
    try {
      tpu.shard(body, Arrays.asList(x), 2, null, new boolean[] {true}, null, null, two, NAME);
      fail("two outputs where the flags say one");
    } catch (InvalidArgumentError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("returned 2 outputs; the step expects 1"));
    }
    try {
      tpu.shard_dyn(body, Arrays.asList(x), 2, null, "yes", null, null, two, NAME);
      fail("outputsFromAllShards as a String");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("outputsFromAllShards"));
    }
  }

  @Test
  public void crossReplicaSumWithName() {
    int[][] halves = {{0, 1, 2, 3}, {4, 5, 6, 7}};
    Tensor[] values = new Tensor[R];
    for (int r = 0; r < R; r++) values[r] = vec(r);
    PerReplica pr = new PerReplica(values);
    List<String> problems = Collections.synchronizedList(new ArrayList<>());
    tpu.replicate((ctx, in) -> {
      int r = ctx.replicaId();
      expect(problems, "Tensor", first(tpu.cross_replica_sum(vec(1f), halves, NAME)) == 4f);
      expect(problems, "PerReplica", first(tpu.cross_replica_sum(pr, null, NAME)) == 28f);
      expect(problems, "float[]", tpu.cross_replica_sum(new float[] {1f}, null, NAME)[0] == 8f);
      expect(problems, "double[]", tpu.cross_replica_sum(new double[] {1.0}, halves, NAME)[0] == 4.0);
      expect(problems, "int[]", tpu.cross_replica_sum(new int[] {r}, null, NAME)[0] == 28);
      expect(problems, "long[]", tpu.cross_replica_sum(new long[] {1}, null, NAME)[0] == 8);
      Map.Entry<Tensor, Tensor> pair = tpu.cross_replica_sum(new AbstractMap.SimpleImmutableEntry<>(vec(1f), vec(2f)), null, NAME);
      expect(problems, "pair", first(pair.getValue()) == 16f);
      expect(problems, "list", first(tpu.cross_replica_sum(Arrays.asList(vec(1f)), halves, NAME).get(0)) == 4f);
      expect(problems, "map", first(tpu.cross_replica_sum(Collections.singletonMap("w", vec(1f)), null, NAME).get("w")) == 8f);
      expect(problems, "dyn", first((Tensor) tpu.cross_replica_sum_dyn(vec(1f), halves, NAME)) == 4f);
      try {
        tpu.cross_replica_sum_dyn(vec(1f), null, 7);
        problems.add("dyn took an Integer name");
      } catch (IllegalArgumentException e) {
        expect(problems, "dyn name message", e.getMessage().contains("name"));
      }
      return null;
    }, Replicas.none(R));
    assertTrue(problems.toString(), problems.isEmpty());
  }

  /** inputs=None is TensorFlow's [[]]: one replica with no inputs; [] is zero replicas. */
  @Test
  public void inputsNullIsOneReplicaWithNoInputs() {
    AtomicInteger calls = new AtomicInteger();
    List<Tensor[]> out = tpu.replicate((ctx, in) -> {
      calls.incrementAndGet();
      return new Tensor[] {vec(in.length), vec(ctx.numReplicas())};
    });
    assertEquals(1, calls.get());
    assertEquals(1, out.size());
    assertEquals(0f, first(out.get(0)[0]), 0f);
    assertEquals(1f, first(out.get(0)[1]), 0f);
    assertEquals(1, tpu.replicate((ctx, in) -> in, null).size());
    assertEquals(1, ((List<?>) tpu.replicate_dyn((Function<Tensor[], Tensor[]>) in -> in, null, null, null, null, null)).size());
    assertEquals(1, tpu.replicate((ctx, in) -> in, null, null, null, NAME, 4).size());
    assertEquals(0, tpu.replicate((ctx, in) -> in, new ArrayList<List<Tensor>>()).size());
  }

  /** TensorFlow's shard stacks scalar outputs into a [num_shards] vector. */
  @Test
  public void shardStacksScalarOutputs() {
    DeviceAssignment two;
    try (Topology t = system.topology()) {
      two = DeviceAssignment.build(t, new int[0], new int[0], 2, DeviceOrderMode.Auto);
    }
    Tensor x = vec(1f, 2f, 3f, 4f);
    Tensor[] out = tpu.shard((ctx, in) -> new Tensor[] {Tensor.fromFloat32(new long[0], new float[] {in[0].dim(0) + ctx.replicaId()})},
        Arrays.asList(x), 2, null, null, two);
    assertArrayEquals(new long[] {2}, out[0].dims());
    assertArrayEquals(new float[] {2f, 3f}, out[0].toFloat32Vector(), 0f);
  }

  /**
   * TensorFlow's shard (tpu.py split_compile_and_shard) stacks scalar outputs with
   * array_ops.stack and concatenates the others with array_ops.concat along axis 0, which
   * needs every other dimension equal: shards whose outputs differ there are refused,
   * naming the shard and both shapes, as in C# and Go.
   */
  @Test
  public void shardRefusesOutputsThatCannotBeConcatenated() {
    DeviceAssignment two;
    try (Topology t = system.topology()) {
      two = DeviceAssignment.build(t, new int[0], new int[0], 2, DeviceOrderMode.Auto);
    }
    Tensor x = vec(1f, 2f, 3f, 4f);
    try {
      tpu.shard((ctx, in) -> new Tensor[] {Tensor.fromFloat32(new long[] {1, 2 + ctx.replicaId()}, new float[2 + ctx.replicaId()])},
          Arrays.asList(x), 2, null, null, two);
      fail("[1,2] and [1,3] concatenated along axis 0");
    } catch (InvalidArgumentError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("shard 1's output 0") && e.getMessage().contains("[1, 3]")
                                     && e.getMessage().contains("[1, 2]"));
    }
  }

  private static void expect(List<String> problems, String what, boolean ok) {
    if (!ok) problems.add(what);
  }
}
