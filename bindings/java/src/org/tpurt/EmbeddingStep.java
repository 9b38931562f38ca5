package org.tpurt;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * One participant's embedding step, from inside a computation (ctx.embedding()): enqueue
 * its sparse ids once, receive the activations, send their gradients. recvActivations and
 * sendGradients are collectives: every participant of the step calls them. Failures throw
 * the binding's typed errors (InvalidArgumentError naming the feature, table and value).
 */
public final class EmbeddingStep {
  private final ReplicaContext ctx;

  EmbeddingStep(ReplicaContext ctx) {
    this.ctx = ctx;
  }

  /** The participant's ids for this step, each feature at most once (tpu_embedding_enqueue). */
  public void enqueue(EmbeddingBatch... batches) {
    if (batches == null) throw new IllegalArgumentException("batches is null");
    enqueue(Arrays.asList(batches));
  }

  public void enqueue(Collection<EmbeddingBatch> batches) {
    if (batches == null) throw new IllegalArgumentException("batches is null");
    EmbeddingFeatureBatchVector v = new EmbeddingFeatureBatchVector();
    try {
      int i = 0;
      for (EmbeddingBatch b : batches) {
        if (b == null) throw new IllegalArgumentException("batches[" + i + "] is null");
        EmbeddingFeatureBatch n = b.toNative(ctx);
        v.add(n);
        n.delete();
        i++;
      }
      ctx.embeddingEnqueue(v);
    } finally {
      v.delete();
    }
  }

  /** One feature in COO form, every weight 1, combined by SUM. */
  public void enqueue(String feature, long[] ids, long[] sampleIndices) {
    enqueue(EmbeddingBatch.coo(feature, ids, sampleIndices));
  }

  public void enqueue(String feature, long[] ids, long[] sampleIndices, float[] weights, EmbeddingCombiner combiner) {
    enqueue(EmbeddingBatch.coo(feature, ids, sampleIndices).withWeights(weights).withCombiner(combiner));
  }

  /** One feature, ragged: ids[b] are sample b's ids; every weight 1, combined by SUM. */
  public void enqueue(String feature, long[][] ids) {
    enqueue(EmbeddingBatch.ragged(feature, ids));
  }

  public void enqueue(String feature, long[][] ids, float[][] weights, EmbeddingCombiner combiner) {
    enqueue(EmbeddingBatch.ragged(feature, ids).withWeights(weights).withCombiner(combiner));
  }

  /** The activations of the enqueued features by name, in the configuration's order. */
  public Map<String, Tensor> recvActivations() {
    Tensor[] all = recvActivationArray();
    Map<String, Tensor> out = new LinkedHashMap<>();
    for (int f = 0; f < all.length; f++)
      if (all[f] != null) out.put(ctx.embeddingFeatureName(f), all[f]);
    return out;
  }

  /** One entry per configured feature: [input_shape..., dimension] float32, null if not enqueued. */
  public Tensor[] recvActivationArray() {
    TensorVector v = ctx.embeddingRecvActivations();
    try {
      Tensor[] out = new Tensor[v.size()];
      for (int f = 0; f < out.length; f++) {
        Tensor t = v.get(f);
        out[f] = t.isNull() ? null : new Tensor(t);
      }
      return out;
    } finally {
      v.delete();
    }
  }

  /**
   * The gradients of this participant's activations by feature name (every enqueued
   * feature, no other); learningRates: one per dynamic learning-rate tag, none otherwise.
   */
  public void sendGradients(Map<String, Tensor> gradients, float... learningRates) {
    if (gradients == null) throw new IllegalArgumentException("gradients is null");
    Tensor[] byIndex = new Tensor[numFeatures()];
    for (Map.Entry<String, Tensor> e : gradients.entrySet()) {
      if (e.getKey() == null) throw new IllegalArgumentException("gradients has a null feature name");
      if (e.getValue() == null) throw new IllegalArgumentException("the gradient of '" + e.getKey() + "' is null");
      byIndex[ctx.embeddingFeatureIndex(e.getKey())] = e.getValue();
    }
    sendGradients(byIndex, learningRates);
  }

  /** gradients[f]: feature f's gradient, null for a feature not enqueued. */
  public void sendGradients(Tensor[] gradients, float... learningRates) {
    if (gradients == null) throw new IllegalArgumentException("gradients is null");
    if (learningRates == null) throw new IllegalArgumentException("learningRates is null");
    TensorVector v = new TensorVector();
    List<Tensor> empties = new ArrayList<>();
    try {
      for (Tensor g : gradients) {
        Tensor t = g != null ? g : new Tensor();
        if (g == null) empties.add(t);
        v.add(t);
      }
      ctx.embeddingSendGradients(v, learningRates);
    } finally {
      v.delete();
      for (Tensor t : empties) t.delete();
    }
  }

  /** The configuration's feature count. */
  public int numFeatures() {
    return ctx.embeddingNumFeatures();
  }

  public int featureIndex(String name) {
    if (name == null) throw new IllegalArgumentException("feature name is null");
    return ctx.embeddingFeatureIndex(name);
  }

  public String featureName(int feature) {
    return ctx.embeddingFeatureName(feature);
  }
}
