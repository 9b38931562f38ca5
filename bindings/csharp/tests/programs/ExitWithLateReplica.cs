// A step fails with replica 0 late (still sleeping after the 11 s collective deadline);
// Main then returns 4. The exit must not wait for the late replica (the system's
// release would, up to the deadline again): it ends 0.5 s later.
using System;
using System.Threading;
using Tpurt;

static class ExitWithLateReplica {
  static int Main() {
    using (var options = new SystemOptions { NumCores = 2, CollectiveTimeoutMs = 11000 }) {
      TpuSystem system = TpuSystem.InitializeSystem(options);
      try {
        tpu.replicate((ctx, x) => {
          if (ctx.ReplicaId() == 0) Thread.Sleep(60000);
          return new Tensor[0];
        }, num_replicas: 2, system: system);
      } catch (DeadlineExceededError e) {
        Console.WriteLine("late: " + e.Message);
      }
      return 4;
    }
  }
}
