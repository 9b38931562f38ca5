// Eight replicas each force a full GC and wait for finalizers, then meet in a
// collective, ten steps in a row: it must finish (it used to hang for good).
using System;
using System.Linq;
using Tpurt;

static class GcInComputation {
  static int Main() {
    const int replicas = 8;
    using (TpuSystem system = tpu.initialize_system(num_cores: replicas)) {
      float sum = 0;
      for (int step = 0; step < 10; step++) {
        var inputs = Enumerable.Range(0, replicas).Select(r => new[] { Tensor.Of(new float[] { r }) }).ToList();
        Tensor[][] outputs = tpu.replicate(x => {
          GC.Collect();
          GC.WaitForPendingFinalizers();
          return new[] { tpu.cross_replica_sum(x[0]) };
        }, inputs, num_outputs: 1, system: system);
        sum = outputs[0][0].ToFloatArray()[0];
      }
      Console.WriteLine("10 steps, sum " + sum);
      return 0;
    }
  }
}
