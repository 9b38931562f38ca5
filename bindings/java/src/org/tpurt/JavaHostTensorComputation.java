package org.tpurt;

import java.util.List;
import java.util.Map;

/**
 * The director behind tpu.outside_compilation's path through the C ABI
 * (tpu_outside_compilation_tensors): the Tensor arguments arrive as the call's inputs
 * and replace their places in args; a Tensor or Tensor[] the HostFunction returns goes
 * back as the call's outputs.
 */
final class JavaHostTensorComputation extends HostTensorComputation {
  private final HostFunction body;
  private final Object[] args;
  private final Map<String, Object> kwargs;
  private final List<Integer> tensorAt;
  private volatile Object result;
  // The host thread is the library's too: the function loads classes as the computation that called it.
  private final ClassLoader callerLoader = Thread.currentThread().getContextClassLoader();

  JavaHostTensorComputation(HostFunction body, Object[] args, Map<String, Object> kwargs, List<Integer> tensorAt) {
    this.body = body;
    this.args = args;
    this.kwargs = kwargs;
    this.tensorAt = tensorAt;
  }

  Object result() {
    return result;
  }

  /** Runs fn on the host through the C ABI; returns its result, with its tensors those the call handed back. */
  static Object call(ReplicaContext ctx, HostFunction fn, Object[] args, Map<String, Object> kwargs) {
    TensorVector inputs = new TensorVector();
    List<Integer> at = new java.util.ArrayList<>();
    for (int i = 0; i < args.length; i++) {
      if (!(args[i] instanceof Tensor)) continue;
      at.add(i);
      inputs.add((Tensor) args[i]);
    }
    JavaHostTensorComputation host = new JavaHostTensorComputation(fn, args, kwargs, at);
    try {
      TensorVector outputs = ctx.outsideCompilationTensors(host, inputs);
      Object r = host.result();
      if (!(r instanceof Tensor) && !(r instanceof Tensor[])) return r;
      Tensor[] back = new Tensor[outputs.size()];
      for (int i = 0; i < back.length; i++) back[i] = new Tensor(outputs.get(i));
      outputs.delete();
      return r instanceof Tensor ? back[0] : back;
    } finally {
      inputs.delete();
      host.delete();
    }
  }

  @Override
  public Status run(int replicaId, TensorVector inputs) {
    ClassLoader hostLoader = JavaStep.useLoader(callerLoader);
    try {
      Object[] bound = args.clone();
      for (int k = 0; k < tensorAt.size(); k++) bound[tensorAt.get(k)] = new Tensor(inputs.get(k));
      Object r = body.apply(bound, kwargs);
      result = r;
      Tensor[] returned = r instanceof Tensor ? new Tensor[] {(Tensor) r} : r instanceof Tensor[] ? (Tensor[]) r : null;
      if (returned != null) {
        TensorVector v = new TensorVector();
        for (Tensor t : returned) {
          if (t == null) throw new InvalidArgumentError("the host function returned a null tensor");
          v.add(t);
        }
        setOutputs(v);
        v.delete();
      }
      return Status.Ok;
    } catch (Throwable t) {
      return HostTensorComputation.failHost(JavaStep.statusOf(t), JavaStep.messageOf(t));
    } finally {
      JavaStep.useLoader(hostLoader);
    }
  }
}
