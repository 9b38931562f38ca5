// tf.convert_to_tensor for the values cross_replica_sum takes as object: a tensor,
// a number, an array, or a structure (tuple, list, dictionary) of those, packed into
// one tensor by stacking its leaves along a new first axis.
using System;
using System.Collections;
using System.Collections.Generic;
using System.Reflection;

namespace Tpurt {

internal static class TensorConversion {
  // A new tensor the caller owns (x itself if it is a Tensor).
  internal static Tensor ToTensor(object x, string what) {
    if (x == null) throw new ArgumentNullException(what, what + " is null");
    if (x is Tensor t) return t;
    if (x is float f) return Tensor.FromFloat32(new Int64Vector(), new[] { f }, 1);
    if (x is double d) return Tensor.FromFloat64(new Int64Vector(), new[] { d }, 1);
    if (x is int i) return Tensor.FromInt32(new Int64Vector(), new[] { i }, 1);
    if (x is long l) return Tensor.FromInt64(new Int64Vector(), new[] { l }, 1);
    if (x is float[] fa) return Tensor.Of(fa);
    if (x is double[] da) return Tensor.Of(da);
    if (x is int[] ia) return Tensor.Of(ia);
    if (x is long[] la) return Tensor.Of(la);
    if (x is IDictionary<object, object> map) return Stack(Sorted(map.Keys, k => map[k]), what);
    if (x is IDictionary dict) return Stack(Sorted(List(dict.Keys), k => dict[k]), what);
    if (x is IEnumerable items && !(x is string)) return Stack(List(items), what);
    Type type = x.GetType();
    if (type.IsGenericType && type.GetGenericTypeDefinition() == typeof(ValueTuple<,>))
      return Stack(new List<object> { type.GetField("Item1").GetValue(x), type.GetField("Item2").GetValue(x) }, what);
    throw Unconvertible(x, what);
  }

  static ArgumentException Unconvertible(object x, string what) {
    return new ArgumentException(what + " cannot be a " + x.GetType().FullName +
                                 "; expected a Tensor, a number, an array, or a tuple, list or dictionary of them", what);
  }
  static List<object> List(IEnumerable items) {
    var list = new List<object>();
    foreach (object o in items) list.Add(o);
    return list;
  }
  static List<object> Sorted(IEnumerable<object> keys, Func<object, object> value) {
    var sorted = new List<object>(keys);
    sorted.Sort(Comparer<object>.Default);
    return sorted.ConvertAll(k => value(k));
  }

  // The leaves stacked: dims [count, leaf dims...]; every leaf of one dtype and shape.
  static Tensor Stack(List<object> items, string what) {
    if (items.Count == 0) throw new ArgumentException(what + " is an empty structure: it has no dtype or shape", what);
    var leaves = new Tensor[items.Count];
    try {
      for (int i = 0; i < items.Count; ++i) leaves[i] = ToTensor(items[i], what + "[" + i + "]");
      DType dtype = leaves[0].Dtype();
      long[] dims = leaves[0].DimsArray;
      var bytes = new List<byte>();
      for (int i = 0; i < leaves.Length; ++i) {
        if (leaves[i].Dtype() != dtype || !SameDims(leaves[i].DimsArray, dims))
          throw new ArgumentException(what + "[" + i + "] is " + Describe(leaves[i]) + ", " + what + "[0] is " +
                                      Describe(leaves[0]) + ": a structure packs into one tensor only if they match", what);
        bytes.AddRange(leaves[i].ToBytes());
      }
      var stacked = new long[dims.Length + 1];
      stacked[0] = leaves.Length;
      dims.CopyTo(stacked, 1);
      using (var d = new Int64Vector(stacked))
      using (var b = new ByteVector(bytes))
        return Tensor.FromBytes(dtype, d, b);
    } finally {
      for (int i = 0; i < leaves.Length; ++i)
        if (leaves[i] != null && !ReferenceEquals(leaves[i], items[i])) leaves[i].Dispose();
    }
  }
  static bool SameDims(long[] a, long[] b) {
    if (a.Length != b.Length) return false;
    for (int i = 0; i < a.Length; ++i) if (a[i] != b[i]) return false;
    return true;
  }
  static string Describe(Tensor t) {
    return TpurtNative.DtypeName(t.Dtype()) + "[" + string.Join(", ", t.DimsArray) + "]";
  }
}

}
