// DTensor's Mesh for C#: named axes over a device assignment's participants
// (replica r, logical core c), laid out row-major (include/tpurt/mesh.h). mesh["model"]
// is a collective's groups over that axis: tpu.cross_replica_sum(x, mesh["model"]),
// tpu.cross_replica_sum(x, mesh, "model") or ctx.AllReduce(x, ReduceOp.Max, mesh["model"]).
using System;
using System.Collections.Generic;

namespace Tpurt {

public partial class Mesh {
  // DTensor's Mesh(dim_names, ...) over `deviceAssignment`: shape[i] participants along
  // dimNames[i]; the product is num_replicas * num_cores_per_replica. The mesh keeps its
  // own reference to the assignment.
  public Mesh(string[] dimNames, long[] shape, DeviceAssignment deviceAssignment)
      : this(Adopt(dimNames, shape, deviceAssignment ?? throw new ArgumentNullException(nameof(deviceAssignment)),
                   (a, n, s) => Create(a, n, s)), true) {}
  // Over every core of `topology`, one replica per core (DTensor's mesh of all devices).
  public Mesh(string[] dimNames, long[] shape, Topology topology)
      : this(Adopt(dimNames, shape, topology ?? throw new ArgumentNullException(nameof(topology)),
                   (t, n, s) => CreateFromTopology(t, n, s)), true) {}

  // The native mesh `create` makes, taken from its proxy to be this one's.
  static IntPtr Adopt<T>(string[] dimNames, long[] shape, T over, Func<T, StringVector, Int64Vector, Mesh> create) {
    if (dimNames == null) throw new ArgumentNullException(nameof(dimNames));
    if (shape == null) throw new ArgumentNullException(nameof(shape));
    for (int i = 0; i < dimNames.Length; ++i)
      if (dimNames[i] == null) throw new ArgumentNullException(nameof(dimNames), "dimNames[" + i + "] is null");
    using (var names = new StringVector(dimNames))
    using (var sizes = new Int64Vector(shape))
      return swigRelease(create(over, names, sizes)).Handle;
  }

  // DTensor's dim_names and shape(), in axis order.
  public string[] DimNames {
    get {
      var names = new string[NumAxes()];
      for (int i = 0; i < names.Length; ++i) names[i] = AxisName(i);
      return names;
    }
  }
  public long[] Shape {
    get {
      var sizes = new long[NumAxes()];
      for (int i = 0; i < sizes.Length; ++i) sizes[i] = AxisSize(i);
      return sizes;
    }
  }
  // DTensor's dim_size(name); NotFoundError names an axis the mesh lacks.
  public long DimSize(string name) {
    if (name == null) throw new ArgumentNullException(nameof(name));
    return AxisSize(AxisIndex(name));
  }

  // The groups of a collective over these axes (participants that differ only in them):
  // pass it as a collective's group_assignment. The names are checked now.
  public MeshAxes this[params string[] axes] {
    get { return new MeshAxes(this, axes); }
  }

  public override string ToString() {
    if (swigCPtr.Handle == IntPtr.Zero) return "Mesh(disposed)";
    string[] names = DimNames;
    long[] sizes = Shape;
    var dims = new string[names.Length];
    for (int i = 0; i < names.Length; ++i) dims[i] = names[i] + "=" + sizes[i];
    return "Mesh(" + string.Join(", ", dims) + ")";
  }
}

// Some named axes of a mesh: the group assignment and group mode of a collective over
// them (tpu_mesh_axis_groups). Holds the mesh, which must outlive its use.
public sealed class MeshAxes {
  public Mesh Mesh { get; }
  public IReadOnlyList<string> Names { get; }

  public MeshAxes(Mesh mesh, params string[] axes) {
    Mesh = mesh ?? throw new ArgumentNullException(nameof(mesh));
    if (axes == null || axes.Length == 0) throw new ArgumentException("name at least one axis of " + mesh, nameof(axes));
    for (int i = 0; i < axes.Length; ++i) {
      if (axes[i] == null) throw new ArgumentNullException(nameof(axes), "axes[" + i + "] is null");
      mesh.AxisIndex(axes[i]); // NotFoundError naming it (ObjectDisposedException for a disposed mesh)
    }
    Names = (string[])axes.Clone();
  }

  // A new GroupAssignment (the caller's) and the mode to pass with it.
  internal GroupAssignment Groups(out GroupMode mode) {
    using (var names = new StringVector(Names)) {
      mode = Mesh.AxisGroupMode(names);
      return Mesh.AxisGroups(names);
    }
  }

  public override string ToString() { return Mesh + "[" + string.Join(", ", Names) + "]"; }
}

}
