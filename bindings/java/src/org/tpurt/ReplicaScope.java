package org.tpurt;

/** The replica a worker thread is running, so tpu.cross_replica_sum(x) needs no context argument. */
final class ReplicaScope {
  private static final ThreadLocal<ReplicaContext> CURRENT = new ThreadLocal<>();

  private ReplicaScope() {}

  static ReplicaContext enter(ReplicaContext ctx) {
    ReplicaContext previous = CURRENT.get();
    CURRENT.set(ctx);
    return previous;
  }

  // set, not remove: a thread running a replica every step keeps its entry (remove
  // would clear and reallocate it each time).
  static void exit(ReplicaContext previous) {
    CURRENT.set(previous);
  }

  static ReplicaContext current(String operation) {
    ReplicaContext ctx = CURRENT.get();
    if (ctx == null)
      throw new FailedPreconditionError(operation + " runs only inside a computation passed to tpu.replicate, rewrite, shard or batch_parallel");
    return ctx;
  }
}
