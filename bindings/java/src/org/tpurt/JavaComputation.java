package org.tpurt;

/**
 * A TpuComputation as a director, for steps whose replicas are callbacks from the
 * library's worker threads (TpuSystem.setCallbackMode(true), or a raw TpuSystem step in
 * that mode). The body and its outputs are a JavaStep's, the same the binding's own
 * threads run.
 */
public final class JavaComputation extends Computation {
  private final JavaStep step;

  public JavaComputation(TpuComputation body, int numReplicas) {
    this(new JavaStep(body, numReplicas));
  }

  JavaComputation(JavaStep step) {
    this.step = step;
  }

  /** Replica r's outputs, from its logical core 0 (empty if it returned null). */
  public Tensor[] outputs(int replica) {
    return step.outputs(replica);
  }

  @Override
  public Status run(ReplicaContext ctx) {
    return step.run(ctx);
  }
}
