package org.tpurt;

import java.util.Arrays;

/**
 * One feature's sparse ids for one participant's step (tpu_embedding_feature_batch):
 * COO (an id's sample index, as EnqueueTPUEmbeddingSparseTensorBatch) or ragged (row
 * splits, as EnqueueTPUEmbeddingRaggedTensorBatch; or one long[] per sample), with optional
 * weights (one per id, default 1) and a combiner (default SUM). The feature is named or
 * indexed in the configuration's order. The library checks ids, indices and splits when
 * enqueued and names the offending value.
 */
public final class EmbeddingBatch {
  private final String featureName;  // null: by index
  private final int feature;
  private final long[] ids;
  private final long[] sampleIndices;  // COO, else null
  private final long[] rowSplits;      // ragged, else null
  private float[] weights;             // null: every weight 1
  private EmbeddingCombiner combiner = EmbeddingCombiner.Sum;

  private EmbeddingBatch(String featureName, int feature, long[] ids, long[] sampleIndices, long[] rowSplits) {
    if (ids == null) throw new IllegalArgumentException("ids is null");
    this.featureName = featureName;
    this.feature = feature;
    this.ids = ids.clone();
    this.sampleIndices = sampleIndices == null ? null : sampleIndices.clone();
    this.rowSplits = rowSplits == null ? null : rowSplits.clone();
  }

  private static String name(String feature) {
    if (feature == null) throw new IllegalArgumentException("feature is null");
    return feature;
  }

  /** COO: sampleIndices[k] is the sample of ids[k], in any order. */
  public static EmbeddingBatch coo(String feature, long[] ids, long[] sampleIndices) {
    if (sampleIndices == null) throw new IllegalArgumentException("sampleIndices is null");
    return new EmbeddingBatch(name(feature), -1, ids, sampleIndices, null);
  }

  public static EmbeddingBatch coo(int feature, long[] ids, long[] sampleIndices) {
    if (sampleIndices == null) throw new IllegalArgumentException("sampleIndices is null");
    return new EmbeddingBatch(null, feature, ids, sampleIndices, null);
  }

  /** Ragged: sample b owns ids[rowSplits[b] .. rowSplits[b + 1]) (samples + 1 offsets from 0). */
  public static EmbeddingBatch ragged(String feature, long[] ids, long[] rowSplits) {
    if (rowSplits == null) throw new IllegalArgumentException("rowSplits is null");
    return new EmbeddingBatch(name(feature), -1, ids, null, rowSplits);
  }

  public static EmbeddingBatch ragged(int feature, long[] ids, long[] rowSplits) {
    if (rowSplits == null) throw new IllegalArgumentException("rowSplits is null");
    return new EmbeddingBatch(null, feature, ids, null, rowSplits);
  }

  /** Ragged, one array per sample: idsPerSample[b] are sample b's ids. */
  public static EmbeddingBatch ragged(String feature, long[][] idsPerSample) {
    name(feature);
    return ragged(feature, flatten(idsPerSample), splits(idsPerSample));
  }

  public static EmbeddingBatch ragged(int feature, long[][] idsPerSample) {
    return ragged(feature, flatten(idsPerSample), splits(idsPerSample));
  }

  /** One weight per id, in the order of the ids (a sample's rows are weighted and combined). */
  public EmbeddingBatch withWeights(float... weights) {
    if (weights == null) throw new IllegalArgumentException("weights is null");
    this.weights = weights.clone();
    return this;
  }

  /** Weights shaped like the ids of a ragged batch: weightsPerSample[b][k] weighs sample b's id k. */
  public EmbeddingBatch withWeights(float[][] weightsPerSample) {
    if (weightsPerSample == null) throw new IllegalArgumentException("weights is null");
    if (rowSplits == null)
      throw new InvalidArgumentError("feature " + label() + ": weights per sample need a ragged batch");
    int samples = rowSplits.length - 1;
    if (weightsPerSample.length != samples)
      throw new InvalidArgumentError("feature " + label() + " has weights for " + weightsPerSample.length
          + " samples; its ids have " + samples);
    float[] flat = new float[ids.length];
    int at = 0;
    for (int b = 0; b < samples; b++) {
      float[] w = weightsPerSample[b];
      long n = rowSplits[b + 1] - rowSplits[b];
      if (w == null || w.length != n)
        throw new InvalidArgumentError("feature " + label() + ": sample " + b + " has "
            + (w == null ? "null" : String.valueOf(w.length)) + " weights for " + n + " ids");
      System.arraycopy(w, 0, flat, at, w.length);
      at += w.length;
    }
    return withWeights(flat);
  }

  /** How a sample's rows combine (SUM, MEAN, SQRTN). */
  public EmbeddingBatch withCombiner(EmbeddingCombiner combiner) {
    if (combiner == null) throw new IllegalArgumentException("combiner is null");
    this.combiner = combiner;
    return this;
  }

  /** The feature's name, or null when given by index. */
  public String featureName() {
    return featureName;
  }

  /** The feature's index, or -1 when given by name. */
  public int featureIndex() {
    return feature;
  }

  public long[] ids() {
    return ids.clone();
  }

  public long[] sampleIndices() {
    return sampleIndices == null ? null : sampleIndices.clone();
  }

  public long[] rowSplits() {
    return rowSplits == null ? null : rowSplits.clone();
  }

  public float[] weights() {
    return weights == null ? null : weights.clone();
  }

  public EmbeddingCombiner combiner() {
    return combiner;
  }

  @Override
  public String toString() {
    return "EmbeddingBatch(" + label() + ", ids=" + Arrays.toString(ids)
        + (sampleIndices != null ? ", sampleIndices=" + Arrays.toString(sampleIndices) : "")
        + (rowSplits != null ? ", rowSplits=" + Arrays.toString(rowSplits) : "")
        + (weights != null ? ", weights=" + Arrays.toString(weights) : "") + ", " + combiner + ")";
  }

  private String label() {
    return featureName != null ? "'" + featureName + "'" : String.valueOf(feature);
  }

  /** The support layer's batch, with the feature index resolved by ctx. */
  EmbeddingFeatureBatch toNative(ReplicaContext ctx) {
    EmbeddingFeatureBatch b = new EmbeddingFeatureBatch();
    b.setFeature(featureName != null ? ctx.embeddingFeatureIndex(featureName) : feature);
    b.setIds(ids);
    b.setSampleIndices(sampleIndices == null ? new long[0] : sampleIndices);
    b.setRowSplits(rowSplits == null ? new long[0] : rowSplits);
    b.setWeights(weights == null ? new float[0] : weights);
    b.setCombiner(combiner);
    return b;
  }

  private static long[] flatten(long[][] idsPerSample) {
    if (idsPerSample == null) throw new IllegalArgumentException("ids is null");
    int n = 0;
    for (int b = 0; b < idsPerSample.length; b++) {
      if (idsPerSample[b] == null) throw new IllegalArgumentException("ids[" + b + "] is null");
      n += idsPerSample[b].length;
    }
    long[] flat = new long[n];
    int at = 0;
    for (long[] sample : idsPerSample) {
      System.arraycopy(sample, 0, flat, at, sample.length);
      at += sample.length;
    }
    return flat;
  }

  private static long[] splits(long[][] idsPerSample) {
    long[] s = new long[idsPerSample.length + 1];
    for (int b = 0; b < idsPerSample.length; b++) s[b + 1] = s[b] + idsPerSample[b].length;
    return s;
  }
}
