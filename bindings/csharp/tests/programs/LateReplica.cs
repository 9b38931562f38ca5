// A step fails while replica 0 is still running (late): the step returns, the GC runs,
// and the late replica must still find its computation alive when it returns. Then a
// step runs again, and the process exits with the system never disposed.
using System;
using System.Threading;
using Tpurt;

static class LateReplica {
  static int Main() {
    using (var options = new SystemOptions { NumCores = 2, CollectiveTimeoutMs = 200 }) {
      TpuSystem system = TpuSystem.InitializeSystem(options);
      int returned = 0;
      try {
        tpu.replicate((ctx, x) => {
          if (ctx.ReplicaId() == 0) {
            Thread.Sleep(1000);
            Interlocked.Increment(ref returned);
          }
          return new[] { Tensor.Of(new float[] { 1 }) };
        }, num_outputs: 1, num_replicas: 2, system: system);
        Console.WriteLine("the step did not fail");
        return 1;
      } catch (DeadlineExceededError e) {
        Console.WriteLine("late: " + e.Message);
      }
      for (int i = 0; i < 5; i++) {
        GC.Collect();
        GC.WaitForPendingFinalizers();
      }
      for (int i = 0; i < 100 && Volatile.Read(ref returned) == 0; i++) Thread.Sleep(50);
      Thread.Sleep(100);
      Tensor[][] o = tpu.replicate(x => new[] { tpu.cross_replica_sum(x[0]) },
                                   new[] { new[] { Tensor.Of(new float[] { 1 }) }, new[] { Tensor.Of(new float[] { 2 }) } },
                                   num_outputs: 1, system: system);
      Console.WriteLine("returned " + returned + ", sum " + o[1][0].ToFloatArray()[0]);
      return 0;
    }
  }
}
