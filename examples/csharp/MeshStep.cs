// A step over a 2 x 2 mesh from C#: 2 replicas ("batch") of 2 cores each ("model") on a
// system of 4 cores. Each replica's [4] vector is split over its 2 cores; each core sums
// its half, and one cross_replica_sum over the mesh's "model" axis gives both cores their
// replica's total. Exits 0 when every core's total is the replica's sum.
using System;
using System.Linq;
using Tpurt;

static class MeshStep {
  const int Replicas = 2, CoresPerReplica = 2;

  static int Main() {
    using (TpuSystem system = tpu.initialize_system(num_cores: Replicas * CoresPerReplica))
    using (Topology topology = system.GetTopology())
    using (DeviceAssignment assignment = DeviceAssignment.Build(topology, new Int32Vector(new[] { CoresPerReplica, 1, 1, 1 }),
                                                                new Int32Vector(), Replicas, DeviceOrderMode.Auto))
    using (var mesh = new Mesh(new[] { "batch", "model" }, new long[] { Replicas, CoresPerReplica }, assignment)) {
      // Replica r's input: [10r + 1, 10r + 2, 10r + 3, 10r + 4].
      float[][] vectors = Enumerable.Range(0, Replicas)
                            .Select(r => Enumerable.Range(1, 4).Select(i => 10f * r + i).ToArray()).ToArray();
      var inputs = vectors.Select(v => new[] { Tensor.Of(v) }).ToList();

      // Runs once per (replica, logical core); half is this core's 2 elements.
      Tensor[][] outputs = tpu.replicate((ctx, x) => {
        float[] half = x[0].ToFloatArray();
        return new[] { tpu.cross_replica_sum(new[] { half.Sum() }, mesh, "model") };
      }, inputs, device_assignment: assignment, num_outputs: 1,
         input_partition_dims: new[] { new[] { CoresPerReplica } },    // cut in 2 along dimension 0
         output_partition_dims: new[] { new[] { CoresPerReplica } });  // [core 0's total, core 1's total]

      bool ok = true;
      for (int r = 0; r < Replicas; r++) {
        float[] totals = outputs[r][0].ToFloatArray();
        float want = vectors[r].Sum();
        Console.WriteLine("replica {0}: cores 0 and 1 got {1} and {2} (want {3})", r, totals[0], totals[1], want);
        ok &= totals.Length == CoresPerReplica && totals.All(t => t == want);
      }
      return ok ? 0 : 1;
    }
  }
}
