package org.tpurt;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;

/**
 * TPU embeddings (ABI 1.4) from Java: a configuration from JSON, the system's tables and
 * features, load/retrieve, and 2-replica steps whose activations and SGD updates are
 * checked against a naive reference computed here.
 */
public class EmbeddingTest {
  private static final float VIDEO_LR = 0.5f;  // constant learning rate of "video"
  private static final float USER_LR = 0.25f;  // "user"'s dynamic learning rate (tag 0), given per step
  private static final String CONFIG = "{"
      + "\"table_descriptor\": ["
      + "  {\"name\": \"video\", \"vocabulary_size\": 5, \"dimension\": 2, \"optimization_parameters\":"
      + "    {\"learning_rate\": {\"constant\": 0.5}, \"stochastic_gradient_descent\": {}}},"
      + "  {\"name\": \"user\", \"vocabulary_size\": 3, \"dimension\": 3, \"optimization_parameters\":"
      + "    {\"learning_rate\": {\"dynamic\": {\"tag\": 0}}, \"stochastic_gradient_descent\": {}}},"
      + "  {\"name\": \"ada\", \"vocabulary_size\": 4, \"dimension\": 1, \"optimization_parameters\":"
      + "    {\"learning_rate\": {\"constant\": 0.1}, \"adagrad\": {}}}],"
      + "\"feature_descriptor\": ["
      + "  {\"name\": \"watched\", \"table_id\": 0, \"input_shape\": [2]},"
      + "  {\"name\": \"liked\", \"table_id\": 0, \"input_shape\": [2]},"
      + "  {\"name\": \"who\", \"table_id\": 1, \"input_shape\": [1]}],"
      + "\"mode\": \"TRAINING\"}";
  private static final float[] VIDEO = {1, 0, 2, -2, 3, -4, 4, -6, 5, -8};  // row r = {r + 1, -2r}
  private static final float[] USER = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  private static byte[] configBytes;
  private static TpuSystem system;

  @BeforeClass
  public static void start() {
    configBytes = tpurt.embeddingConfigFromJson(CONFIG);
    SystemOptions options = new SystemOptions();
    options.setNumCores(2);
    options.setEmbeddingConfigJson(CONFIG);
    system = tpu.initialize_system(options);
  }

  @AfterClass
  public static void stop() {
    if (system != null) system.close();
  }

  private static List<List<Tensor>> twoReplicas() {
    return List.of(List.of(), List.of());
  }

  private static void loadInitialRows() {
    system.embeddingTable("video").load("parameters", VIDEO);
    system.embeddingLoad("user", "parameters", 0, USER);
  }

  // ---- a naive reference -------------------------------------------------------------------

  /** One feature batch of one participant, in COO form. */
  private static final class Batch {
    final long[] ids, sampleOf;
    final float[] weights;
    final EmbeddingCombiner combiner;
    final int samples;

    Batch(int samples, long[] ids, long[] sampleOf, float[] weights, EmbeddingCombiner combiner) {
      this.samples = samples;
      this.ids = ids;
      this.sampleOf = sampleOf;
      this.weights = weights;
      this.combiner = combiner;
    }

    float weight(int k) {
      return weights == null ? 1f : weights[k];
    }

    float denominator(long s) {
      float d = 0;
      for (int k = 0; k < ids.length; k++)
        if (sampleOf[k] == s) d += combiner == EmbeddingCombiner.Sqrtn ? weight(k) * weight(k) : weight(k);
      if (combiner == EmbeddingCombiner.Sum) return 1;
      return combiner == EmbeddingCombiner.Sqrtn ? (float) Math.sqrt(d) : d;
    }

    float[] activations(float[] table, int dim) {
      float[] out = new float[samples * dim];
      for (int k = 0; k < ids.length; k++)
        for (int j = 0; j < dim; j++) out[(int) sampleOf[k] * dim + j] += weight(k) * table[(int) ids[k] * dim + j];
      for (int s = 0; s < samples; s++) {
        float d = denominator(s);
        for (int j = 0; j < dim; j++) out[s * dim + j] = d == 0 ? 0 : out[s * dim + j] / d;
      }
      return out;
    }

    /** SGD: table[row] -= lr * weight / denominator * gradient[sample], for every id. */
    void applySgd(float[] table, int dim, float[] gradient, float lr) {
      for (int k = 0; k < ids.length; k++) {
        float scale = weight(k) / denominator(sampleOf[k]);
        for (int j = 0; j < dim; j++) table[(int) ids[k] * dim + j] -= lr * scale * gradient[(int) sampleOf[k] * dim + j];
      }
    }
  }

  private static final Batch[] WATCHED = {
      // replica 0: COO, MEAN
      new Batch(2, new long[] {0, 2, 2, 4}, new long[] {0, 0, 1, 1}, new float[] {1, 3, 2, 2}, EmbeddingCombiner.Mean),
      // replica 1: ragged {{3, 3}, {1}}, SQRTN
      new Batch(2, new long[] {3, 3, 1}, new long[] {0, 0, 1}, new float[] {1, 2, 0.5f}, EmbeddingCombiner.Sqrtn)};
  // replica 0 only: ragged {{1}, {}}, SUM, weights 1
  private static final Batch LIKED = new Batch(2, new long[] {1}, new long[] {0}, null, EmbeddingCombiner.Sum);
  // replica 1 only
  private static final Batch WHO = new Batch(1, new long[] {2}, new long[] {0}, null, EmbeddingCombiner.Sum);

  /** A gradient distinct per replica, feature, sample and element. */
  private static float[] gradient(int replica, int feature, int samples, int dim) {
    float[] g = new float[samples * dim];
    for (int i = 0; i < g.length; i++) g[i] = (replica + 1) * 0.5f + feature - 0.25f * i;
    return g;
  }

  private static Tensor tensor(long[] dims, float[] v) {
    return Tensor.fromFloat32(dims, v);
  }

  // ---- the configuration as the system holds it ---------------------------------------------

  @Test
  public void systemDescribesTheConfiguration() {
    assertTrue(configBytes.length > 0);
    assertArrayEquals(configBytes, system.embeddingConfig());
    assertEquals(EmbeddingMode.Training, system.embeddingMode());
    assertEquals(3, system.embeddingNumTables());
    assertEquals(3, system.embeddingNumFeatures());

    List<EmbeddingTable> tables = system.embeddingTables();
    assertEquals(3, tables.size());
    EmbeddingTable video = system.embeddingTable("video");
    assertEquals(0, video.index());
    assertEquals("video", tables.get(0).name());
    assertEquals(5, video.vocabularySize());
    assertEquals(2, video.dimension());
    assertEquals(EmbeddingOptimizer.Sgd, video.optimizer());
    assertEquals(List.of("parameters"), video.variableNames());
    EmbeddingTable ada = system.embeddingTable(2);
    assertEquals("ada", ada.name());
    assertEquals(EmbeddingOptimizer.Adagrad, ada.optimizer());
    assertEquals(List.of("parameters", "accumulators"), ada.variableNames());
    assertEquals(1, system.embeddingVariableIndex(2, "accumulators"));

    // The raw members agree.
    assertEquals(1, system.embeddingTableIndex("user"));
    assertEquals("user", system.embeddingTableName(1));
    assertEquals(3, system.embeddingVocabularySize(1));
    assertEquals(3, system.embeddingDimension(1));
    assertEquals(EmbeddingOptimizer.Adagrad, system.embeddingTableOptimizer(2));
    assertEquals(2, system.embeddingNumVariables(2));
    assertEquals("accumulators", system.embeddingVariableName(2, 1));

    List<EmbeddingFeature> features = system.embeddingFeatures();
    assertEquals(Arrays.asList("watched", "liked", "who"), Arrays.asList(features.get(0).name(), features.get(1).name(),
        features.get(2).name()));
    EmbeddingFeature who = system.embeddingFeature("who");
    assertEquals(2, who.index());
    assertEquals("user", who.table().name());
    assertArrayEquals(new long[] {1, 3}, who.shape());
    assertEquals(1, who.samples());
    assertArrayEquals(new long[] {2, 2}, system.embeddingFeature(1).shape());
    assertEquals(1, system.embeddingFeatureIndex("liked"));
    assertEquals("liked", system.embeddingFeatureName(1));
    assertEquals(0, system.embeddingFeatureTable(1));
    assertArrayEquals(new long[] {2, 2}, system.embeddingFeatureShape(0));

    // DIV sharding over 2 cores: rows 0-2 on core 0, rows 3-4 on core 1.
    assertEquals(new EmbeddingRowOwner(0, 2), system.embeddingRowOwner(0, 2));
    assertEquals(new EmbeddingRowOwner(1, 1), video.rowOwner(4));
    assertEquals(1, system.embeddingRowCore(0, 3));
    assertEquals(0, system.embeddingShardRow(0, 3));
  }

  @Test
  public void namesAndIndicesOutsideTheConfigurationAreTypedErrors() {
    try {
      system.embeddingTable("nope");
      fail("an unknown table");
    } catch (NotFoundError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("nope"));
    }
    try {
      system.embeddingFeature("nope2");
      fail("an unknown feature");
    } catch (NotFoundError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("nope2"));
    }
    try {
      system.embeddingTable("ada").variableIndex("momenta");
      fail("an unknown variable");
    } catch (NotFoundError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("momenta") && e.getMessage().contains("accumulators"));
    }
    try {
      system.embeddingTable(3);
      fail("table 3 of 3");
    } catch (OutOfRangeError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("3"));
    }
    try {
      system.embeddingRowOwner(0, 5);
      fail("row 5 of 5");
    } catch (OutOfRangeError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("5"));
    }
    try {
      system.embeddingTable("video").load("parameters", 0, new float[] {1, 2, 3});
      fail("3 values of dimension 2");
    } catch (InvalidArgumentError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("3 values") && e.getMessage().contains("video"));
    }
    try {
      system.embeddingLoad(0, 0, 0, 2, new float[] {1, 2});
      fail("2 values for 2 rows of 2");
    } catch (InvalidArgumentError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("2"));
    }
    try {
      system.embeddingRetrieve("video", "parameters", 4, 2);
      fail("rows 4-5 of 5");
    } catch (OutOfRangeError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("5"));
    }
    try {
      tpurt.embeddingConfigFromJson("{\"table_descriptor\": [{\"name\": \"t\", \"dimension\": \"wide\"}]}");
      fail("a string dimension");
    } catch (InvalidArgumentError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("table_descriptor[0].dimension"));
    }
  }

  // ---- load and retrieve -------------------------------------------------------------------

  @Test
  public void loadAndRetrieveRoundTrip() {
    loadInitialRows();
    EmbeddingTable video = system.embeddingTable("video");
    assertArrayEquals(VIDEO, video.retrieve("parameters"), 0f);
    assertArrayEquals(USER, system.embeddingRetrieve(1, 0, 0, 3), 0f);
    // Rows 2-3 span both shards; the others stay.
    video.load("parameters", 2, new float[] {30, 31, 40, 41});
    assertArrayEquals(new float[] {2, -2, 30, 31, 40, 41, 5, -8}, system.embeddingRetrieve("video", "parameters", 1, 4), 0f);
    system.embeddingLoad(0, 0, 2, new float[] {3, -4, 4, -6});
    assertArrayEquals(VIDEO, video.retrieve(0, 0, 5), 0f);
    // A slot variable by name.
    EmbeddingTable ada = system.embeddingTable("ada");
    ada.load("accumulators", new float[] {0.5f, 1.5f, 2.5f, 3.5f});
    assertArrayEquals(new float[] {1.5f, 2.5f}, ada.retrieve("accumulators", 1, 2), 0f);
    assertArrayEquals(new float[] {0.5f, 1.5f, 2.5f, 3.5f}, system.embeddingRetrieve(2, 1, 0, 4), 0f);
  }

  // ---- one step ----------------------------------------------------------------------------

  @Test
  public void twoReplicaStepActivationsAndSgdMatchTheReference() {
    loadInitialRows();
    Map<Integer, Map<String, float[]>> activations = new ConcurrentHashMap<>();
    Map<Integer, Tensor[]> arrays = new ConcurrentHashMap<>();
    tpu.replicate((ctx, in) -> {
      int r = ctx.replicaId();
      EmbeddingStep e = ctx.embedding();
      if (r == 0) {
        e.enqueue(EmbeddingBatch.coo("watched", new long[] {0, 2, 2, 4}, new long[] {0, 0, 1, 1})
                .withWeights(1, 3, 2, 2).withCombiner(EmbeddingCombiner.Mean),
            EmbeddingBatch.ragged("liked", new long[][] {{1}, {}}));
      } else {
        e.enqueue(EmbeddingBatch.ragged(0, new long[][] {{3, 3}, {1}}).withWeights(new float[][] {{1, 2}, {0.5f}})
                .withCombiner(EmbeddingCombiner.Sqrtn),
            EmbeddingBatch.coo(e.featureIndex("who"), new long[] {2}, new long[] {0}));
      }
      Map<String, Tensor> act = e.recvActivations();
      Map<String, float[]> values = new LinkedHashMap<>();
      for (Map.Entry<String, Tensor> a : act.entrySet()) values.put(a.getKey(), a.getValue().toFloat32Vector());
      activations.put(r, values);
      Map<String, Tensor> grads = new HashMap<>();
      for (Map.Entry<String, Tensor> a : act.entrySet()) {
        int f = e.featureIndex(a.getKey());
        long[] dims = a.getValue().dims();
        grads.put(a.getKey(), tensor(dims, gradient(r, f, (int) dims[0], (int) dims[dims.length - 1])));
      }
      e.sendGradients(grads, USER_LR);
      return new Tensor[0];
    }, twoReplicas());

    // Hand-computed: replica 0's "watched" sample 0 = (1 * row0 + 3 * row2) / 4, sample 1 = (2 * row2 + 2 * row4) / 4.
    assertArrayEquals(new float[] {2.5f, -3f, 4f, -6f}, activations.get(0).get("watched"), 1e-6f);
    assertArrayEquals(new float[] {2f, -2f, 0f, 0f}, activations.get(0).get("liked"), 0f);
    // Replica 1: (1 + 2) * row3 / sqrt(5), then 0.5 * row1 / 0.5.
    float s5 = (float) Math.sqrt(5);
    assertArrayEquals(new float[] {12 / s5, -18 / s5, 2f, -2f}, activations.get(1).get("watched"), 1e-5f);
    assertArrayEquals(new float[] {7, 8, 9}, activations.get(1).get("who"), 0f);
    assertEquals(List.of("watched", "liked"), new ArrayList<>(activations.get(0).keySet()));  // configuration order
    assertEquals(2, activations.get(1).size());
    // Against the reference too.
    assertArrayEquals(WATCHED[0].activations(VIDEO, 2), activations.get(0).get("watched"), 1e-6f);
    assertArrayEquals(WATCHED[1].activations(VIDEO, 2), activations.get(1).get("watched"), 1e-6f);

    // SGD: every participant's gradients summed per row, applied once at step end.
    float[] video = VIDEO.clone();
    WATCHED[0].applySgd(video, 2, gradient(0, 0, 2, 2), VIDEO_LR);
    LIKED.applySgd(video, 2, gradient(0, 1, 2, 2), VIDEO_LR);
    WATCHED[1].applySgd(video, 2, gradient(1, 0, 2, 2), VIDEO_LR);
    float[] user = USER.clone();
    WHO.applySgd(user, 3, gradient(1, 2, 1, 3), USER_LR);
    assertArrayEquals(video, system.embeddingTable("video").retrieve("parameters"), 1e-5f);
    assertArrayEquals(user, system.embeddingTable("user").retrieve("parameters"), 1e-6f);
    // By hand, row 2 of video: replica 0's watched ids 2 (sample 0, weight 3/4; sample 1, weight 2/4),
    // gradients {0.5, 0.25} and {0, -0.25}: 3 - 0.5 * (0.75 * 0.5 + 0.5 * 0) = 2.8125; -4 - 0.5 * (0.75 * 0.25 + 0.5 * -0.25).
    float[] row2 = system.embeddingRetrieve("video", "parameters", 2, 1);
    assertArrayEquals(new float[] {2.8125f, -4.03125f}, row2, 1e-6f);
  }

  @Test
  public void arraysAndCooOverloadsTakeTheSameStep() {
    loadInitialRows();
    Map<Integer, float[]> watched = new ConcurrentHashMap<>();
    Map<Integer, Boolean> likedAbsent = new ConcurrentHashMap<>();
    tpu.replicate((ctx, in) -> {
      int r = ctx.replicaId();
      EmbeddingStep e = ctx.embedding();
      assertEquals(3, e.numFeatures());
      assertEquals("who", e.featureName(2));
      if (r == 0) e.enqueue("watched", new long[] {0, 2, 2, 4}, new long[] {0, 0, 1, 1}, new float[] {1, 3, 2, 2},
          EmbeddingCombiner.Mean);
      else e.enqueue("watched", new long[][] {{3, 3}, {1}}, new float[][] {{1, 2}, {0.5f}}, EmbeddingCombiner.Sqrtn);
      Tensor[] act = e.recvActivationArray();
      assertEquals(3, act.length);
      likedAbsent.put(r, act[1] == null && act[2] == null);
      watched.put(r, act[0].toFloat32Vector());
      e.sendGradients(new Tensor[] {tensor(new long[] {2, 2}, gradient(r, 0, 2, 2)), null, null}, USER_LR);
      return new Tensor[0];
    }, twoReplicas());
    assertArrayEquals(WATCHED[0].activations(VIDEO, 2), watched.get(0), 1e-6f);
    assertArrayEquals(WATCHED[1].activations(VIDEO, 2), watched.get(1), 1e-6f);
    assertEquals(Map.of(0, true, 1, true), likedAbsent);
    float[] video = VIDEO.clone();
    WATCHED[0].applySgd(video, 2, gradient(0, 0, 2, 2), VIDEO_LR);
    WATCHED[1].applySgd(video, 2, gradient(1, 0, 2, 2), VIDEO_LR);
    assertArrayEquals(video, system.embeddingTable("video").retrieve("parameters"), 1e-5f);
    assertArrayEquals(USER, system.embeddingTable("user").retrieve("parameters"), 0f);
  }

  /** The support layer's members, as the idiomatic layer calls them. */
  @Test
  public void rawMembersTakeAStep() {
    loadInitialRows();
    Map<Integer, float[]> liked = new ConcurrentHashMap<>();
    tpu.replicate((ctx, in) -> {
      int r = ctx.replicaId();
      EmbeddingFeatureBatch b = new EmbeddingFeatureBatch();
      b.setFeature(ctx.embeddingFeatureIndex("liked"));
      b.setIds(new long[] {r, 4});
      b.setRowSplits(new long[] {0, 1, 2});
      b.setCombiner(EmbeddingCombiner.Sum);
      EmbeddingFeatureBatchVector v = new EmbeddingFeatureBatchVector();
      v.add(b);
      ctx.embeddingEnqueue(v);
      TensorVector act = ctx.embeddingRecvActivations();
      assertEquals(ctx.embeddingNumFeatures(), act.size());
      assertTrue(act.get(0).isNull());
      liked.put(r, act.get(1).toFloat32Vector());
      TensorVector grads = new TensorVector();
      grads.add(new Tensor());
      grads.add(tensor(new long[] {2, 2}, new float[] {1, 1, 1, 1}));
      grads.add(new Tensor());
      ctx.embeddingSendGradients(grads, new float[] {USER_LR});
      return new Tensor[0];
    }, twoReplicas());
    assertArrayEquals(new float[] {1, 0, 5, -8}, liked.get(0), 0f);
    assertArrayEquals(new float[] {2, -2, 5, -8}, liked.get(1), 0f);
    // Row 4 got gradient 1 twice, rows 0 and 1 once: lr 0.5.
    assertArrayEquals(new float[] {0.5f, -0.5f, 1.5f, -2.5f, 3, -4, 4, -6, 4, -9},
        system.embeddingTable("video").retrieve("parameters"), 0f);
  }

  // ---- failures change no row ----------------------------------------------------------------

  @Test
  public void aBadIdFailsTheStepNamingItAndLeavesTheTableUnchanged() {
    loadInitialRows();
    try {
      tpu.replicate((ctx, in) -> {
        EmbeddingStep e = ctx.embedding();
        long bad = ctx.replicaId() == 0 ? 7 : 1;
        e.enqueue("watched", new long[] {0, bad}, new long[] {0, 1});
        Map<String, Tensor> act = e.recvActivations();
        e.sendGradients(Map.of("watched", tensor(new long[] {2, 2}, new float[] {1, 1, 1, 1})), USER_LR);
        return new Tensor[0];
      }, twoReplicas());
      fail("id 7 of a 5-row table");
    } catch (InvalidArgumentError e) {
      String m = e.getMessage();
      assertTrue(m, m.contains("replica 0") && m.contains("7") && m.contains("watched") && m.contains("video"));
    }
    assertArrayEquals(VIDEO, system.embeddingTable("video").retrieve("parameters"), 0f);
  }

  @Test
  public void aStepFailingAfterItsGradientsChangesNoRow() {
    loadInitialRows();
    try {
      tpu.replicate((ctx, in) -> {
        EmbeddingStep e = ctx.embedding();
        e.enqueue("watched", new long[][] {{0}, {4}});
        e.recvActivations();
        e.sendGradients(Map.of("watched", tensor(new long[] {2, 2}, new float[] {1, 1, 1, 1})), USER_LR);
        if (ctx.replicaId() == 1) throw new IllegalStateException("late failure");
        return new Tensor[0];
      }, twoReplicas());
      fail("replica 1 threw");
    } catch (UnknownError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("late failure"));
    }
    assertArrayEquals(VIDEO, system.embeddingTable("video").retrieve("parameters"), 0f);
    assertArrayEquals(USER, system.embeddingTable("user").retrieve("parameters"), 0f);
  }

  @Test
  public void enqueueArgumentsAreChecked() {
    try {
      EmbeddingBatch.ragged("watched", new long[] {1}, new long[] {0, 1}).withWeights(new float[][] {{1}, {2}});
      fail("weights for 2 samples of 1");
    } catch (InvalidArgumentError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("watched") && e.getMessage().contains("2 samples"));
    }
    try {
      EmbeddingBatch.coo("watched", null, new long[0]);
      fail("null ids");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("ids"));
    }
    EmbeddingBatch b = EmbeddingBatch.coo(1, new long[] {3}, new long[] {0}).withWeights(2f);
    assertEquals(1, b.featureIndex());
    assertNull(b.featureName());
    assertArrayEquals(new float[] {2f}, b.weights(), 0f);
    assertEquals(EmbeddingCombiner.Sum, b.combiner());
  }
}
