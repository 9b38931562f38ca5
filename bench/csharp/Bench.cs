// Overhead of the C# binding (same method as bench/bindings_c.c): 8 replicas on 8
// cores; (a) an empty step, (b) one cross_replica_sum of a 1 MiB float32 input
// returned as the output; in both replica modes. 20 warm-up steps, then the median of individually timed
// steps in microseconds.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using Tpurt;

static class Bench {
  const int Replicas = 8, Warmup = 200, EmptySteps = 2000, CrsSteps = 200, Floats = 262144;

  static double MedianMicros(int steps, Action step) {
    for (int i = 0; i < Warmup; i++) step();
    var times = new double[steps];
    var watch = new Stopwatch();
    for (int i = 0; i < steps; i++) {
      watch.Restart();
      step();
      times[i] = watch.Elapsed.TotalMilliseconds * 1000.0;
    }
    Array.Sort(times);
    return steps % 2 == 1 ? times[steps / 2] : (times[steps / 2 - 1] + times[steps / 2]) / 2;
  }

  // Prints "<label> empty_step_us X" and "<label> crs_1mib_us X" for the system's mode.
  static void Measure(TpuSystem system, string label) {
    Func<Tensor[], Tensor[]> empty = x => x;
    double emptyUs = MedianMicros(EmptySteps, () => tpu.replicate(empty, num_replicas: Replicas, system: system));

    var data = new float[Floats];
    for (int i = 0; i < Floats; i++) data[i] = i % 7;
    var inputs = Enumerable.Range(0, Replicas).Select(r => (IEnumerable<Tensor>)new[] { Tensor.Of(data) }).ToList();
    Func<Tensor[], Tensor[]> sum = x => new[] { tpu.cross_replica_sum(x[0]) };
    // Outputs are disposed at once, as a training loop would: a tensor left to the GC
    // keeps its 1 MiB out of the library's buffer cache.
    double crsUs = MedianMicros(CrsSteps, () => {
      foreach (Tensor[] outputs in tpu.replicate(sum, inputs, num_outputs: 1, system: system))
        foreach (Tensor t in outputs) t.Dispose();
    });
    foreach (IEnumerable<Tensor> r in inputs)
      foreach (Tensor t in r) t.Dispose();

    Console.WriteLine("{0} empty_step_us {1:F1}", label, emptyUs);
    Console.WriteLine("{0} crs_1mib_us {1:F1}", label, crsUs);
  }

  // The default (replicas on the binding's threads), then the callback mode
  // (replicas as callbacks from tpurt's workers) on the same system.
  static int Main() {
    using (TpuSystem system = tpu.initialize_system(num_cores: Replicas)) {
      Measure(system, "csharp");
      system.UseCallbacks = true;
      Measure(system, "csharp-callback");
    }
    return 0;
  }
}
