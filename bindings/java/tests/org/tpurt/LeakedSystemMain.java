package org.tpurt;

/** Runs one step on a system it never closes; the JVM must still exit (daemon workers). */
public final class LeakedSystemMain {
  public static void main(String[] args) {
    SystemOptions options = new SystemOptions();
    options.setNumCores(4);
    TpuSystem system = tpu.initialize_system(options);
    float[] sum = new float[1];
    tpu.replicate((ctx, in) -> {
      float[] s = tpu.cross_replica_sum(new float[] {1f});
      if (ctx.replicaId() == 0) sum[0] = s[0];
      return null;
    }, Replicas.none(4));
    System.out.println("leaked sum " + sum[0] + " closed=" + system.isClosed());
  }
}
