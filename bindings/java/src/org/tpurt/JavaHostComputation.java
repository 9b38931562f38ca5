package org.tpurt;

import java.util.Map;

/** The director behind tpu.outside_compilation: runs a HostFunction on the host thread and keeps its result. */
final class JavaHostComputation extends HostComputation {
  private final HostFunction body;
  private final Object[] args;
  private final Map<String, Object> kwargs;
  private volatile Object result;
  // The host thread is the library's too: the function loads classes as the computation that called it.
  private final ClassLoader callerLoader = Thread.currentThread().getContextClassLoader();

  JavaHostComputation(HostFunction body, Object[] args, Map<String, Object> kwargs) {
    this.body = body;
    this.args = args;
    this.kwargs = kwargs;
  }

  Object result() {
    return result;
  }

  @Override
  public Status run(int replicaId) {
    ClassLoader hostLoader = JavaComputation.useLoader(callerLoader);
    try {
      result = body.apply(args, kwargs);
      return Status.Ok;
    } catch (Throwable t) {
      return HostComputation.failHost(JavaComputation.statusOf(t), JavaComputation.messageOf(t));
    } finally {
      JavaComputation.useLoader(hostLoader);
    }
  }
}
