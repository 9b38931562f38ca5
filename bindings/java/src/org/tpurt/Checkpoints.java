package org.tpurt;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.OptionalLong;

/**
 * Whole-system checkpoints (include/tpurt/checkpoint.h): save and restore are collectives
 * over every task of the system; a checkpoint holds every embedding table's rows and
 * optimizer slots, the named dense tensors (task 0's) and the step.
 */
public final class Checkpoints {
  private Checkpoints() {}

  /** Saves the tables and {@code tensors} (by name; null: none) as dir's checkpoint {@code step}. */
  public static void save(TpuSystem system, String dir, long step, Map<String, Tensor> tensors,
                          CheckpointOptions options) {
    StringVector names = new StringVector();
    TensorVector values = new TensorVector();
    if (tensors != null) {
      for (Map.Entry<String, Tensor> e : tensors.entrySet()) {
        if (e.getValue() == null) throw new NullPointerException("tensor '" + e.getKey() + "' is null");
        names.add(e.getKey());
        values.add(e.getValue());
      }
    }
    tpurt.checkpointSave(system, dir, step, names, values, options != null ? options : new CheckpointOptions());
  }

  public static void save(TpuSystem system, String dir, long step, Map<String, Tensor> tensors) {
    save(system, dir, step, tensors, null);
  }

  /** The step of dir's newest complete checkpoint, or empty when it holds none. */
  public static OptionalLong latest(String dir) {
    try {
      return OptionalLong.of(tpurt.checkpointLatest(dir));
    } catch (NotFoundError e) {
      return OptionalLong.empty();
    }
  }

  /** A restore's step and the tensors asked for, by name (close() releases them). */
  public static final class Restored implements AutoCloseable {
    public final long step;
    public final Map<String, Tensor> tensors;

    Restored(long step, Map<String, Tensor> tensors) {
      this.step = step;
      this.tensors = tensors;
    }

    @Override
    public void close() {
      for (Tensor t : tensors.values()) t.dispose();
    }
  }

  /**
   * Restores dir's checkpoint {@code step} (-1: the newest complete one) into the tables
   * and returns the tensors named; nothing is loaded on any task when it throws.
   */
  public static Restored restore(TpuSystem system, String dir, long step, CheckpointOptions options,
                                 String... tensorNames) {
    StringVector names = new StringVector();
    for (String n : tensorNames) names.add(n);
    RestoredCheckpoint r =
        tpurt.checkpointRestore(system, dir, step, names, options != null ? options : new CheckpointOptions());
    Map<String, Tensor> out = new LinkedHashMap<>();
    TensorVector v = r.getTensors();
    for (int i = 0; i < tensorNames.length; i++) out.put(tensorNames[i], v.get(i));
    return new Restored(r.getStep(), out);
  }

  public static Restored restore(TpuSystem system, String dir, String... tensorNames) {
    return restore(system, dir, -1, null, tensorNames);
  }
}
