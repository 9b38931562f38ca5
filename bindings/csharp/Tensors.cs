// Array-friendly forms of Tensor (the generated methods take Int64Vector dims and an
// explicit count) and the shape types replicate's maximum_shapes accepts.
using System;
using System.Collections;
using System.Collections.Generic;

namespace Tpurt {

public partial class Tensor {
  // The bulk copies: count is checked against the array before the native copy, so a
  // count beyond the array is an exception, not a write past its end.
  static void CheckCount(Array array, long count, string name) {
    if (array == null && count != 0) throw new ArgumentNullException(name, name + " is null but count is " + count);
    if (count < 0 || (array != null && count > array.Length))
      throw new ArgumentOutOfRangeException(nameof(count), count, name + " has " + (array?.Length ?? 0) + " elements");
  }
  public static Tensor FromFloat32(Int64Vector dims, float[] data, long count) { CheckCount(data, count, nameof(data)); return FromFloat32Unchecked(dims, data, count); }
  public static Tensor FromFloat64(Int64Vector dims, double[] data, long count) { CheckCount(data, count, nameof(data)); return FromFloat64Unchecked(dims, data, count); }
  public static Tensor FromInt32(Int64Vector dims, int[] data, long count) { CheckCount(data, count, nameof(data)); return FromInt32Unchecked(dims, data, count); }
  public static Tensor FromInt64(Int64Vector dims, long[] data, long count) { CheckCount(data, count, nameof(data)); return FromInt64Unchecked(dims, data, count); }
  public void ReadFloat32(float[] out_, long count) { CheckCount(out_, count, "out"); ReadFloat32Unchecked(out_, count); }
  public void ReadFloat64(double[] out_, long count) { CheckCount(out_, count, "out"); ReadFloat64Unchecked(out_, count); }
  public void ReadInt32(int[] out_, long count) { CheckCount(out_, count, "out"); ReadInt32Unchecked(out_, count); }
  public void ReadInt64(long[] out_, long count) { CheckCount(out_, count, "out"); ReadInt64Unchecked(out_, count); }
  public void WriteFloat32(float[] data, long count) { CheckCount(data, count, nameof(data)); WriteFloat32Unchecked(data, count); }
  public void WriteFloat64(double[] data, long count) { CheckCount(data, count, nameof(data)); WriteFloat64Unchecked(data, count); }
  public void WriteInt32(int[] data, long count) { CheckCount(data, count, nameof(data)); WriteInt32Unchecked(data, count); }
  public void WriteInt64(long[] data, long count) { CheckCount(data, count, nameof(data)); WriteInt64Unchecked(data, count); }

  internal static Int64Vector Dims(long[] dims) {
    if (dims == null) throw new ArgumentNullException(nameof(dims));
    return new Int64Vector(dims);
  }

  // dims null: a vector of data.Length elements.
  public static Tensor Of(float[] data, params long[] dims) {
    if (data == null) throw new ArgumentNullException(nameof(data));
    return FromFloat32(Dims(dims == null || dims.Length == 0 ? new long[] { data.Length } : dims), data, data.Length);
  }
  public static Tensor Of(double[] data, params long[] dims) {
    if (data == null) throw new ArgumentNullException(nameof(data));
    return FromFloat64(Dims(dims == null || dims.Length == 0 ? new long[] { data.Length } : dims), data, data.Length);
  }
  public static Tensor Of(int[] data, params long[] dims) {
    if (data == null) throw new ArgumentNullException(nameof(data));
    return FromInt32(Dims(dims == null || dims.Length == 0 ? new long[] { data.Length } : dims), data, data.Length);
  }
  public static Tensor Of(long[] data, params long[] dims) {
    if (data == null) throw new ArgumentNullException(nameof(data));
    return FromInt64(Dims(dims == null || dims.Length == 0 ? new long[] { data.Length } : dims), data, data.Length);
  }
  public static Tensor Scalar(float value) {
    return FromFloat32(new Int64Vector(), new[] { value }, 1);
  }

  public float[] ToFloatArray() {
    var a = new float[NumElements()];
    ReadFloat32(a, a.Length);
    return a;
  }
  public double[] ToDoubleArray() {
    var a = new double[NumElements()];
    ReadFloat64(a, a.Length);
    return a;
  }
  public int[] ToIntArray() {
    var a = new int[NumElements()];
    ReadInt32(a, a.Length);
    return a;
  }
  public long[] ToLongArray() {
    var a = new long[NumElements()];
    ReadInt64(a, a.Length);
    return a;
  }
  public long[] DimsArray {
    get {
      Int64Vector d = Dims();
      var a = new long[d.Count];
      d.CopyTo(a);
      return a;
    }
  }
}

// TensorFlow's TensorShape: dims with -1 (or null) for an unknown size; null dims is
// an unknown rank (also default(TensorShape)). A struct, so that a null
// maximum_shapes means only IEnumerable<TensorShape> (none) to the compiler.
public struct TensorShape {
  public long?[] Dims { get; }
  public TensorShape(params long?[] dims) { Dims = dims; }
  public TensorShape(IEnumerable<long> dims) {
    if (dims == null) throw new ArgumentNullException(nameof(dims));
    var list = new List<long?>();
    foreach (long d in dims) list.Add(d);
    Dims = list.ToArray();
  }
  internal Shape ToShape() {
    if (Dims == null) return Tpurt.Shape.Unknown();
    var v = new Int64Vector();
    foreach (long? d in Dims) v.Add(d ?? -1);
    return Tpurt.Shape.Of(v);
  }
  public override string ToString() {
    return Dims == null ? "<unknown>" : "(" + string.Join(", ", Array.ConvertAll(Dims, d => d?.ToString() ?? "?")) + ")";
  }
}

// The seed's PythonClassContainer for maximum_shapes: a nested structure of shapes,
// one per input of a replica, flattened in order. A leaf is a TensorShape, a Dimension
// or an int/long (a rank-1 size, -1 unknown); a branch is a ShapeStructure or any
// IEnumerable of leaves and branches.
public struct ShapeStructure {
  readonly object[] items;
  public ShapeStructure(params object[] items) { this.items = items; }

  internal List<TensorShape> Flatten() {
    var shapes = new List<TensorShape>();
    Flatten(items ?? new object[0], "maximum_shapes", shapes);
    return shapes;
  }
  static void Flatten(IEnumerable items, string path, List<TensorShape> shapes) {
    int i = 0;
    foreach (object item in items) {
      string at = path + "[" + i++ + "]";
      if (item is TensorShape s) shapes.Add(s);
      else if (item is Dimension d) shapes.Add(new TensorShape(d.Value));
      else if (item is int n) shapes.Add(new TensorShape((long)n));
      else if (item is long l) shapes.Add(new TensorShape(l));
      else if (item is ShapeStructure nested) Flatten(nested.items ?? new object[0], at, shapes);
      else if (item is IEnumerable branch && !(item is string)) Flatten(branch, at, shapes);
      else throw new ArgumentException(at + " cannot be a " + (item == null ? "null" : item.GetType().FullName) +
                                       "; expected a TensorShape, Dimension, int, long or a nested structure of them", "maximum_shapes");
    }
  }
}

// TensorFlow's Dimension: one size, null when unknown.
public struct Dimension {
  public long? Value { get; }
  public Dimension(long? value) { Value = value; }
}

// One value per replica (TensorFlow's PerReplica); inside a computation the current
// replica's value is used.
public sealed class PerReplica {
  public IReadOnlyList<Tensor> Values { get; }
  public PerReplica(IEnumerable<Tensor> values) {
    if (values == null) throw new ArgumentNullException(nameof(values));
    Values = new List<Tensor>(values);
  }
}

}
