// Runs one step on a system it never disposes: the binding must dispose it at
// ProcessExit, or Mono waits forever for the library's worker threads.
using System;
using Tpurt;

static class ExitWithoutDispose {
  static int Main() {
    TpuSystem system = tpu.initialize_system(num_cores: 2);
    Tensor[][] outputs = tpu.replicate(inputs => new[] { tpu.cross_replica_sum(inputs[0]) },
                                       new[] { new[] { Tensor.Of(new float[] { 1 }) }, new[] { Tensor.Of(new float[] { 2 }) } },
                                       num_outputs: 1, system: system);
    Console.WriteLine("sum " + outputs[0][0].ToFloatArray()[0]);
    return 0;
  }
}
