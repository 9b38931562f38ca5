package org.tpurt;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.After;
import org.junit.Before;
import org.junit.Test;

/** Whole-system checkpoints from Java (issue 31): round trip onto another sharding, latest, refusals. */
public class CheckpointTest {
  private static String config(String sharding) {
    return "{\"table_descriptor\": [{\"name\": \"video\", \"vocabulary_size\": 7, \"dimension\": 2,"
        + " \"optimization_parameters\": {\"learning_rate\": {\"constant\": 0.5}, \"adagrad\": {\"initial_accumulator\": 0.1}}}],"
        + " \"feature_descriptor\": [{\"name\": \"watched\", \"table_id\": 0, \"input_shape\": [2]}],"
        + " \"sharding_strategy\": \"" + sharding + "\"}";
  }

  private static TpuSystem start(int cores, String sharding) {
    SystemOptions options = new SystemOptions();
    options.setNumCores(cores);
    options.setEmbeddingConfigJson(config(sharding));
    return tpu.initialize_system(options);
  }

  private Path dir;

  @Before
  public void makeDir() throws IOException {
    dir = Files.createTempDirectory("tpurt-java-ckpt");
  }

  @After
  public void removeDir() throws IOException {
    try (Stream<Path> s = Files.walk(dir)) {
      s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }

  @Test
  public void saveThenRestoreOntoAnotherShardingBitForBit() {
    float[] rows = new float[14], acc = new float[14];
    for (int i = 0; i < 14; i++) {
      rows[i] = i * 1.25f - 3;
      acc[i] = 0.5f + i;
    }
    String d = dir.resolve("ckpts").toString();
    TpuSystem s = start(2, "DIV_DEFAULT");
    try {
      s.embeddingLoad("video", "parameters", 0, rows);
      s.embeddingLoad("video", "accumulators", 0, acc);
      assertFalse(Checkpoints.latest(d).isPresent());
      Checkpoints.save(s, d, 12, Map.of("w", Tensor.fromFloat32(new long[] {3}, new float[] {1, -2, 3})));
      assertEquals(12, Checkpoints.latest(d).getAsLong());
      try {
        Checkpoints.save(s, d, 12, null);
        fail("saved step 12 twice");
      } catch (AlreadyExistsError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("ckpt-12"));
      }
    } finally {
      s.close();
    }
    s = start(3, "MOD");
    try {
      try (Checkpoints.Restored r = Checkpoints.restore(s, d, "w")) {
        assertEquals(12, r.step);
        assertArrayEquals(new float[] {1, -2, 3}, r.tensors.get("w").toFloat32Vector(), 0f);
      }
      assertArrayEquals(rows, s.embeddingRetrieve("video", "parameters", 0, 7), 0f);
      assertArrayEquals(acc, s.embeddingRetrieve("video", "accumulators", 0, 7), 0f);
      try {
        Checkpoints.restore(s, d, "bias");
        fail("restored a tensor the checkpoint lacks");
      } catch (NotFoundError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("no tensor named 'bias'"));
      }
      CheckpointOptions options = new CheckpointOptions();
      options.setTimeoutMs(5000);
      options.setKeep(1);
      Checkpoints.save(s, d, 13, null, options);
      assertEquals(13, Checkpoints.latest(d).getAsLong());
      assertFalse(Files.exists(dir.resolve("ckpts").resolve("ckpt-12")));
      // A step given explicitly, through checkpointRestore's full form.
      try (Checkpoints.Restored r = Checkpoints.restore(s, d, 13, options)) {
        assertEquals(13, r.step);
      }
      // The support layer's functions themselves, under Checkpoints.
      tpurt.checkpointSave(s, d, 14, new StringVector(), new TensorVector(), new CheckpointOptions());
      assertEquals(14, tpurt.checkpointLatest(d));
      assertEquals(14, tpurt.checkpointRestore(s, d, -1, new StringVector(), new CheckpointOptions()).getStep());
    } finally {
      s.close();
    }
  }
}
