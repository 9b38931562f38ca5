package org.tpurt;

/** A ClusterResolver's context manager for try-with-resources: entered on creation, exited on close. */
public final class ResolverScope implements AutoCloseable {
  private final ClusterResolver resolver;
  private boolean open = true;

  ResolverScope(ClusterResolver resolver) {
    this.resolver = resolver;
    resolver.enter();
  }

  @Override
  public void close() {
    if (!open) return;
    open = false;
    resolver.exit();
  }
}
