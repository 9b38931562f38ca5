// Whole-system checkpoints for C# (include/tpurt/checkpoint.h): system.SaveCheckpoint,
// system.RestoreCheckpoint (collectives over every task) and Checkpoint.Latest.
using System;
using System.Collections.Generic;
using System.Linq;

namespace Tpurt {

public partial class TpuSystem {
  // Saves the embedding tables and `tensors` (by name; task 0's are written) as dir's
  // checkpoint `step`. Every task calls it; it returns when the checkpoint is complete.
  public void SaveCheckpoint(string dir, long step, IDictionary<string, Tensor> tensors = null,
                             CheckpointOptions options = null) {
    if (dir == null) throw new ArgumentNullException(nameof(dir));
    var pairs = tensors == null ? new List<KeyValuePair<string, Tensor>>() : tensors.ToList();
    using (var names = new StringVector(pairs.Select(p => p.Key).ToArray()))
    using (var values = new TensorVector()) {
      foreach (var p in pairs) values.Add(p.Value ?? throw new ArgumentNullException(nameof(tensors), "tensor '" + p.Key + "' is null"));
      TpurtNative.CheckpointSave(this, dir, step, names, values, options ?? new CheckpointOptions());
    }
  }

  // Restores dir's checkpoint `step` (-1: the newest complete one) into the tables and
  // returns the tensors named (the caller's to dispose); restoredStep gets its step.
  public Dictionary<string, Tensor> RestoreCheckpoint(string dir, out long restoredStep, long step = -1,
                                                      IEnumerable<string> tensorNames = null,
                                                      CheckpointOptions options = null) {
    if (dir == null) throw new ArgumentNullException(nameof(dir));
    string[] wanted = (tensorNames ?? Enumerable.Empty<string>()).ToArray();
    using (var names = new StringVector(wanted))
    using (RestoredCheckpoint r = TpurtNative.CheckpointRestore(this, dir, step, names, options ?? new CheckpointOptions())) {
      restoredStep = r.Step;
      var result = new Dictionary<string, Tensor>();
      using (TensorVector v = r.Tensors)
        for (int i = 0; i < wanted.Length; i++) result[wanted[i]] = v[i];
      return result;
    }
  }
}

public static class Checkpoint {
  // The step of dir's newest complete checkpoint; NotFoundError when it holds none.
  public static long Latest(string dir) {
    if (dir == null) throw new ArgumentNullException(nameof(dir));
    return TpurtNative.CheckpointLatest(dir);
  }
  // Latest without the exception: false when dir holds no complete checkpoint.
  public static bool TryLatest(string dir, out long step) {
    try {
      step = Latest(dir);
      return true;
    } catch (NotFoundError) {
      step = -1;
      return false;
    }
  }
}

}  // namespace Tpurt
