package org.tpurt;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.Function;

/** tpu's arguments: null checks, the _dyn forms' run-time types, inputs as lists. */
final class TpuArgs {
  private TpuArgs() {}

  static TpuComputation adapt(Function<Tensor[], Tensor[]> computation) {
    if (computation == null) throw new IllegalArgumentException("computation is null");
    return (ctx, inputs) -> computation.apply(inputs);
  }

  static void requireComputation(TpuComputation computation) {
    if (computation == null) throw new IllegalArgumentException("computation is null");
  }

  static List<List<Tensor>> rows(Iterable<? extends Iterable<Tensor>> inputs) {
    List<List<Tensor>> rows = new ArrayList<>();
    if (inputs == null) return rows;
    int r = 0;
    for (Iterable<Tensor> row : inputs) {
      if (row == null) throw new IllegalArgumentException("inputs[" + r + "] is null");
      rows.add(tensorList(row, "inputs[" + r + "]"));
      r++;
    }
    return rows;
  }

  static List<Tensor> tensorList(Iterable<Tensor> inputs, String what) {
    List<Tensor> v = new ArrayList<>();
    int i = 0;
    for (Tensor t : inputs) {
      if (t == null) throw new IllegalArgumentException(what + "[" + i + "] is null");
      v.add(t);
      i++;
    }
    return v;
  }

  static TensorVector tensors(Iterable<Tensor> inputs, String what) {
    TensorVector v = new TensorVector();
    if (inputs == null) return v;
    for (Tensor t : tensorList(inputs, what)) v.add(t);
    return v;
  }

  static IllegalArgumentException wrongType(String what, Object value, String expected) {
    return new IllegalArgumentException(what + " cannot be a " + (value == null ? "null" : value.getClass().getName())
        + "; expected " + expected);
  }

  static <T> T asType(Object value, Class<T> type, String what) {
    if (!type.isInstance(value)) throw wrongType(what, value, type.getSimpleName());
    return type.cast(value);
  }

  static <T> T asOptional(Object value, Class<T> type, String what) {
    return value == null ? null : asType(value, type, what);
  }

  static int asInt(Object value, String what) {
    if (value instanceof Integer || value instanceof Short || value instanceof Byte) return ((Number) value).intValue();
    if (value instanceof Long && (long) (Long) value == (int) (long) (Long) value) return (int) (long) (Long) value;
    throw wrongType(what, value, "int");
  }

  @SuppressWarnings("unchecked")
  static TpuComputation asComputation(Object value, String what) {
    if (value instanceof TpuComputation) return (TpuComputation) value;
    if (value instanceof Function) return adapt((Function<Tensor[], Tensor[]>) value);
    throw wrongType(what, value, "TpuComputation or Function<Tensor[], Tensor[]>");
  }

  static List<Tensor> asTensors(Object value, String what) {
    List<Tensor> out = new ArrayList<>();
    if (value == null) return out;
    if (value instanceof Tensor[]) return Arrays.asList((Tensor[]) value);
    if (!(value instanceof Iterable)) throw wrongType(what, value, "Iterable<Tensor> or Tensor[]");
    int i = 0;
    for (Object t : (Iterable<?>) value) out.add(asType(t, Tensor.class, what + "[" + i++ + "]"));
    return out;
  }

  /** null stays null (TensorFlow's inputs=None). */
  static List<List<Tensor>> asRows(Object value) {
    if (value == null) return null;
    List<List<Tensor>> rows = new ArrayList<>();
    if (!(value instanceof Iterable) && !(value instanceof Object[])) throw wrongType("inputs", value, "Iterable of Iterable<Tensor>");
    Iterable<?> it = value instanceof Object[] ? Arrays.asList((Object[]) value) : (Iterable<?>) value;
    int r = 0;
    for (Object row : it) rows.add(asTensors(row, "inputs[" + r++ + "]"));
    return rows;
  }
}
