package org.tpurt;

/** One dimension of a TensorShape; unknown (null) pads to the largest size over the replicas. */
public final class Dimension {
  private final Long value;

  public Dimension(Long value) {
    if (value != null && value < 0) throw new IllegalArgumentException("dimension " + value + " is negative");
    this.value = value;
  }

  public static Dimension unknown() {
    return new Dimension(null);
  }

  /** The size, or -1 when unknown (tpu_shape's convention). */
  public long size() {
    return value == null ? -1 : value;
  }
}
