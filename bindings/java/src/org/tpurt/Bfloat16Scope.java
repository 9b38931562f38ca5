package org.tpurt;

/** tf.tpu.bfloat16_scope for try-with-resources: entered on creation, exited on close. */
public final class Bfloat16Scope implements AutoCloseable {
  private final ReplicaContext ctx;
  private boolean open = true;

  Bfloat16Scope(ReplicaContext ctx) {
    this.ctx = ctx;
    ctx.bfloat16ScopeEnter();
  }

  @Override
  public void close() {
    if (!open) return;
    open = false;
    ctx.bfloat16ScopeExit();
  }
}
