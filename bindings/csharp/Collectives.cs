// Collectives with groups given as .NET values and a group mode (XLA's
// CollectiveOpGroupMode, include/tpurt/collectives.h) or a mesh's named axes: the
// ReplicaContext overloads, and TensorFlow's tpu_ops all_to_all and collective_permute.
// Their results belong to the step, as tpu.cross_replica_sum's do.
using System;
using System.Collections;
using System.Collections.Generic;

namespace Tpurt {

// The native groups and options of one collective call.
internal sealed class CollectiveCall : IDisposable {
  internal readonly GroupAssignment Groups;
  internal readonly CollectiveOptions Options = new CollectiveOptions();
  readonly bool ownsGroups = true;

  // groups: null (the mode's one group of everyone), a GroupAssignment, a MeshAxes
  // (mesh["model"]: its groups and mode), int[][], int[,] or any nested IEnumerable<int>.
  // mode: null is cross-replica, or a MeshAxes's mode (naming another is an error).
  internal CollectiveCall(object groups, GroupMode? mode, string what) {
    if (groups is MeshAxes axes) {
      Groups = axes.Groups(out GroupMode meshMode);
      if (mode.HasValue && mode.Value != meshMode) {
        Groups.Dispose();
        throw new ArgumentException("the groups of " + axes + " hold " + meshMode + " ids, but the group mode is " + mode.Value,
                                    what);
      }
      mode = meshMode;
    } else if (groups is GroupAssignment given) {
      Groups = given;
      ownsGroups = false;
    } else {
      Groups = Of(groups, what);
    }
    Options.GroupMode = mode ?? GroupMode.CrossReplica;
  }

  public void Dispose() {
    if (ownsGroups) Groups.Dispose();
    Options.Dispose();
  }

  static GroupAssignment Of(object groups, string what) {
    if (groups == null) return new GroupAssignment();
    var rows = new List<int[]>();
    if (groups is int[,] grid) {
      for (int g = 0; g < grid.GetLength(0); ++g) {
        var row = new int[grid.GetLength(1)];
        for (int i = 0; i < row.Length; ++i) row[i] = grid[g, i];
        rows.Add(row);
      }
    } else if (groups is IEnumerable list && !(groups is string)) {
      foreach (object g in list) {
        if (!(g is IEnumerable<int> ids))
          throw new ArgumentException(what + "[" + rows.Count + "] is a " + (g == null ? "null" : g.GetType().FullName) +
                                      ", not a list of replica ids", what);
        rows.Add(new List<int>(ids).ToArray());
      }
    } else {
      throw new ArgumentException(what + " cannot be a " + groups.GetType().FullName +
                                  "; expected int[][], int[,], a nested IEnumerable<int>, a GroupAssignment or mesh axes", what);
    }
    int size = rows.Count == 0 ? 0 : rows[0].Length;
    bool ragged = false;
    using (var flat = new Int32Vector())
    using (var sizes = new Int32Vector()) {
      for (int g = 0; g < rows.Count; ++g) {
        ragged |= rows[g].Length != size;
        sizes.Add(rows[g].Length);
        foreach (int id in rows[g]) flat.Add(id);
      }
      // Rows of different lengths ({{0, 1, 2}, {3}}): all-reduce and broadcast take them,
      // as XLA does; all-gather, reduce-scatter and all-to-all refuse them (InvalidArgumentError).
      return ragged ? GroupAssignment.Ragged(flat, sizes) : new GroupAssignment(flat, rows.Count, size);
    }
  }

  // (source, target) pairs flattened for the native call.
  internal static Int32Vector Pairs(IEnumerable<(int, int)> pairs, string what) {
    if (pairs == null) throw new ArgumentNullException(what);
    var flat = new Int32Vector();
    foreach (var pair in pairs) {
      flat.Add(pair.Item1);
      flat.Add(pair.Item2);
    }
    return flat;
  }
  internal static Int32Vector Pairs(int[,] pairs, string what) {
    if (pairs == null) throw new ArgumentNullException(what);
    if (pairs.GetLength(1) != 2)
      throw new ArgumentException(what + " has " + pairs.GetLength(1) + " columns; a pair is { source, target }", what);
    var list = new List<(int, int)>();
    for (int i = 0; i < pairs.GetLength(0); ++i) list.Add((pairs[i, 0], pairs[i, 1]));
    return Pairs(list, what);
  }
  internal static Int32Vector Pairs(int[][] pairs, string what) {
    if (pairs == null) throw new ArgumentNullException(what);
    var list = new List<(int, int)>();
    for (int i = 0; i < pairs.Length; ++i) {
      if (pairs[i] == null || pairs[i].Length != 2)
        throw new ArgumentException(what + "[" + i + "] is " + (pairs[i] == null ? "null" : "of " + pairs[i].Length + " ids") +
                                    "; a pair is [source, target]", what);
      list.Add((pairs[i][0], pairs[i][1]));
    }
    return Pairs(list, what);
  }
}

public partial class ReplicaContext {
  static void NotNull(Tensor x) {
    if (x == null) throw new ArgumentNullException(nameof(x));
  }

  // groups and groupMode as CollectiveCall takes them; e.g. AllReduce(x, ReduceOp.Max,
  // mesh["model"]) or CrossReplicaSum(x, new[] { new[] { 0, 1 } }, GroupMode.CrossPartition).
  public Tensor CrossReplicaSum(Tensor x, object groups = null, GroupMode? groupMode = null) {
    NotNull(x);
    using (var c = new CollectiveCall(groups, groupMode, nameof(groups)))
      return DelegateComputation.Own(CrossReplicaSum(x, c.Groups, c.Options));
  }
  public Tensor AllReduce(Tensor x, ReduceOp op = ReduceOp.Sum, object groups = null, GroupMode? groupMode = null) {
    NotNull(x);
    using (var c = new CollectiveCall(groups, groupMode, nameof(groups)))
      return DelegateComputation.Own(AllReduce(x, op, c.Groups, c.Options));
  }
  public Tensor AllGather(Tensor x, int axis = 0, object groups = null, GroupMode? groupMode = null) {
    NotNull(x);
    using (var c = new CollectiveCall(groups, groupMode, nameof(groups)))
      return DelegateComputation.Own(AllGather(x, axis, c.Groups, c.Options));
  }
  public Tensor ReduceScatter(Tensor x, ReduceOp op, int scatterAxis, object groups = null, GroupMode? groupMode = null) {
    NotNull(x);
    using (var c = new CollectiveCall(groups, groupMode, nameof(groups)))
      return DelegateComputation.Own(ReduceScatter(x, op, scatterAxis, c.Groups, c.Options));
  }
  public Tensor AllToAll(Tensor x, int concatDimension, int splitDimension, int splitCount, object groups = null,
                         GroupMode? groupMode = null) {
    NotNull(x);
    using (var c = new CollectiveCall(groups, groupMode, nameof(groups)))
      return DelegateComputation.Own(AllToAll(x, concatDimension, splitDimension, splitCount, c.Groups, c.Options));
  }
  public Tensor Broadcast(Tensor x, int root, object groups = null, GroupMode? groupMode = null) {
    NotNull(x);
    using (var c = new CollectiveCall(groups, groupMode, nameof(groups)))
      return DelegateComputation.Own(Broadcast(x, root, c.Groups, c.Options));
  }
  // Pairs of replica ids (cross-replica), logical-core ids (cross-partition) or
  // flattened ids (flattened-id). mcs cannot pass a tuple array to another assembly
  // (CS1503): give a List<(int, int)>, int[][] or int[,].
  public Tensor CollectivePermute(Tensor x, IEnumerable<(int source, int target)> sourceTargetPairs, GroupMode? groupMode = null) {
    using (Int32Vector pairs = CollectiveCall.Pairs(sourceTargetPairs, nameof(sourceTargetPairs)))
      return Permute(x, pairs, groupMode);
  }
  public Tensor CollectivePermute(Tensor x, int[][] sourceTargetPairs, GroupMode? groupMode = null) {
    using (Int32Vector pairs = CollectiveCall.Pairs(sourceTargetPairs, nameof(sourceTargetPairs)))
      return Permute(x, pairs, groupMode);
  }
  // { { source, target }, ... }
  public Tensor CollectivePermute(Tensor x, int[,] sourceTargetPairs, GroupMode? groupMode = null) {
    using (Int32Vector pairs = CollectiveCall.Pairs(sourceTargetPairs, nameof(sourceTargetPairs)))
      return Permute(x, pairs, groupMode);
  }
  Tensor Permute(Tensor x, Int32Vector pairs, GroupMode? groupMode) {
    NotNull(x);
    using (var c = new CollectiveCall(null, groupMode, "groups"))
      return DelegateComputation.Own(CollectivePermute(x, pairs, c.Options));
  }
}

public static partial class tpu {
  // TensorFlow's tpu_ops.all_to_all, in the current replica (and group mode).
  public static Tensor all_to_all(Tensor x, int concat_dimension, int split_dimension, int split_count,
                                  object group_assignment = null, string name = null, GroupMode? group_mode = null) {
    if (x == null) throw new ArgumentNullException(nameof(x));
    return current_replica.AllToAll(x, concat_dimension, split_dimension, split_count, group_assignment, group_mode);
  }
  // TensorFlow's tpu_ops.collective_permute: source_target_pairs [[source, target], ...].
  public static Tensor collective_permute(Tensor x, int[][] source_target_pairs, string name = null, GroupMode? group_mode = null) {
    if (x == null) throw new ArgumentNullException(nameof(x));
    return current_replica.CollectivePermute(x, source_target_pairs, group_mode);
  }
  public static Tensor AllToAll(Tensor x, int concat_dimension, int split_dimension, int split_count,
                                object group_assignment = null, GroupMode? group_mode = null) {
    return all_to_all(x, concat_dimension, split_dimension, split_count, group_assignment, null, group_mode);
  }
  public static Tensor CollectivePermute(Tensor x, int[][] source_target_pairs, GroupMode? group_mode = null) {
    return collective_permute(x, source_target_pairs, null, group_mode);
  }
}

}
