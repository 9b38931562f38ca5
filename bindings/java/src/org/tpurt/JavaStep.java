package org.tpurt;

import java.util.concurrent.atomic.AtomicReferenceArray;

/**
 * What tpu.replicate and friends run for each participant: a TpuComputation with the
 * replica's (and core's) context in ReplicaScope, each replica's outputs kept on the Java
 * side, and any Throwable (and a null output) turned into ctx.fail(code, message), so
 * nothing Java unwinds through the library's frames. It runs on the binding's threads
 * (ReplicaThreads) or, in callback mode, inside a JavaComputation director.
 */
final class JavaStep implements ReplicaThreads.Body {
  private final TpuComputation body;
  private final AtomicReferenceArray<Tensor[]> outputs;
  // A computation loads classes (ServiceLoader) with the context class loader of the
  // thread that made it, the one starting the step, whichever thread runs it.
  private final ClassLoader callerLoader = Thread.currentThread().getContextClassLoader();

  JavaStep(TpuComputation body, int numReplicas) {
    if (body == null) throw new IllegalArgumentException("computation is null");
    if (numReplicas < 0) throw new IllegalArgumentException("numReplicas " + numReplicas + " is negative");
    this.body = body;
    this.outputs = new AtomicReferenceArray<>(numReplicas);
  }

  /** Replica r's outputs, from its logical core 0 (empty if it returned null). */
  public Tensor[] outputs(int replica) {
    Tensor[] out = outputs.get(replica);
    return out == null ? new Tensor[0] : out;
  }

  @Override
  public Status run(ReplicaContext ctx) {
    ClassLoader workerLoader = useLoader(callerLoader);
    ReplicaContext previous = ReplicaScope.enter(ctx);
    try {
      Tensor[] inputs = new Tensor[ctx.numInputs()];
      for (int i = 0; i < inputs.length; i++) inputs[i] = ctx.input(i);
      Tensor[] result = body.apply(ctx, inputs);
      int returned = result == null ? 0 : result.length;
      if (ctx.numOutputs() > 0 && returned != ctx.numOutputs())
        return ctx.fail(Status.InvalidArgument,
            "the computation returned " + returned + " outputs; the step expects " + ctx.numOutputs());
      if (result != null) {
        for (int j = 0; j < result.length; j++)
          if (result[j] == null) return ctx.fail(Status.InvalidArgument, "output " + j + " is null");
        // Outputs the C step expects (raw TpuSystem use) go through setOutput as well.
        for (int j = 0; j < ctx.numOutputs() && j < result.length; j++) ctx.setOutput(j, result[j]);
        // With several cores per replica, the replica's outputs are logical core 0's.
        int replica = ctx.replicaId();
        if (replica < outputs.length() && ctx.logicalCore() == 0) outputs.set(replica, result);
      }
      return Status.Ok;
    } catch (Throwable t) {
      return ctx.fail(statusOf(t), messageOf(t));
    } finally {
      ReplicaScope.exit(previous);
      useLoader(workerLoader);
    }
  }

  /** Makes loader the current thread's context class loader; returns the one it had. */
  static ClassLoader useLoader(ClassLoader loader) {
    Thread thread = Thread.currentThread();
    ClassLoader had = thread.getContextClassLoader();
    thread.setContextClassLoader(loader);
    return had;
  }

  static Status statusOf(Throwable t) {
    return t instanceof OpError ? ((OpError) t).status() : Status.Unknown;
  }

  static String messageOf(Throwable t) {
    if (t instanceof OpError) return t.getMessage();
    return t.getClass().getName() + (t.getMessage() == null ? "" : ": " + t.getMessage());
  }
}
