package org.tpurt;

/**
 * A feature of the system's embedding configuration (system.embeddingFeature(name)): the
 * table it looks up and its activation's shape, input_shape + [dimension]. A view: reads
 * through the system, which must stay open.
 */
public final class EmbeddingFeature {
  private final TpuSystem system;
  private final int index;

  EmbeddingFeature(TpuSystem system, int index) {
    this.system = system;
    this.index = index;
  }

  public int index() {
    return index;
  }

  public String name() {
    return system.embeddingFeatureName(index);
  }

  public EmbeddingTable table() {
    return new EmbeddingTable(system, system.embeddingFeatureTable(index));
  }

  /** The activation's shape: input_shape + [dimension]. */
  public long[] shape() {
    return system.embeddingFeatureShape(index);
  }

  /** The sample count: the product of all of shape() but the last. */
  public long samples() {
    long[] s = shape();
    long n = 1;
    for (int i = 0; i + 1 < s.length; i++) n *= s[i];
    return n;
  }

  @Override
  public String toString() {
    return "EmbeddingFeature(" + name() + ", table " + system.embeddingTableName(system.embeddingFeatureTable(index))
        + ", shape " + java.util.Arrays.toString(shape()) + ")";
  }
}
