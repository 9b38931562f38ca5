// Main returns (with exit code 3) while a background thread's step runs: replica 0
// sleeps 60 s, the other waits for it in a barrier. The process must exit at once
// (within bindings/csharp/README.md's bound), not when the step ends.
using System;
using System.Threading;
using Tpurt;

static class ExitDuringStep {
  static int Main() {
    TpuSystem system = tpu.initialize_system(num_cores: 2);
    var started = new ManualResetEventSlim();
    var stepThread = new Thread(() => tpu.replicate((ctx, x) => {
      started.Set();
      if (ctx.ReplicaId() == 0) Thread.Sleep(60000);
      else using (var options = new CollectiveOptions()) ctx.Barrier(options);
      return new Tensor[0];
    }, num_replicas: 2, system: system)) { IsBackground = true };
    stepThread.Start();
    started.Wait();
    Console.WriteLine("main returns");
    return 3;
  }
}
