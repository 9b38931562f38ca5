package org.tpurt;

/** A maximum shape for tpu.replicate's padding; -1 (or Dimension.unknown()) is an unknown size. */
public final class TensorShape {
  private final long[] dims;

  public TensorShape(long... dims) {
    if (dims == null) throw new IllegalArgumentException("dims is null");
    for (long d : dims)
      if (d < -1) throw new IllegalArgumentException("dimension " + d + " is below -1 (unknown)");
    this.dims = dims.clone();
  }

  public TensorShape(Dimension... dims) {
    this(sizes(dims));
  }

  private static long[] sizes(Dimension[] dims) {
    if (dims == null) throw new IllegalArgumentException("dims is null");
    long[] out = new long[dims.length];
    for (int i = 0; i < dims.length; i++) {
      if (dims[i] == null) throw new IllegalArgumentException("dimension " + i + " is null");
      out[i] = dims[i].size();
    }
    return out;
  }

  public long[] dims() {
    return dims.clone();
  }

  Shape toShape() {
    return Shape.of(dims);
  }
}
