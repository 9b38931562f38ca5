// The bindings' overhead benchmark (bench/bindings_c.c's contract): an 8-core system,
// 8 replicas; (a) an empty step, (b) one cross_replica_sum of a 1 MiB float32 input
// returned as output. 20 warm-up steps, then the median of individually timed steps.
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.tpurt.SystemOptions;
import org.tpurt.Tensor;
import org.tpurt.TpuComputation;
import org.tpurt.TpuSystem;
import org.tpurt.tpu;

public final class Bench {
  static final int REPLICAS = 8, WARMUP = 200, EMPTY_STEPS = 2000, CRS_STEPS = 200, FLOATS = 262144;

  static double medianMicros(Runnable step, int steps) {
    for (int i = 0; i < WARMUP; i++) step.run();
    double[] us = new double[steps];
    for (int i = 0; i < steps; i++) {
      long t0 = System.nanoTime();
      step.run();
      us[i] = (System.nanoTime() - t0) / 1e3;
    }
    Arrays.sort(us);
    return steps % 2 == 1 ? us[steps / 2] : (us[steps / 2 - 1] + us[steps / 2]) / 2;
  }

  public static void main(String[] args) {
    SystemOptions options = new SystemOptions();
    options.setNumCores(REPLICAS);
    try (TpuSystem system = tpu.initialize_system(options)) {
      TpuComputation empty = (ctx, in) -> null;
      double emptyUs = medianMicros(() -> tpu.replicate(empty), EMPTY_STEPS);

      List<List<Tensor>> inputs = new ArrayList<>();
      for (int r = 0; r < REPLICAS; r++) {
        float[] data = new float[FLOATS];
        Arrays.fill(data, r);
        inputs.add(Arrays.asList(Tensor.fromFloat32(new long[] {FLOATS}, data)));
      }
      TpuComputation crs = (ctx, in) -> new Tensor[] {tpu.cross_replica_sum(in[0])};
      // Outputs are closed at once, as a training loop would: a native tensor left to the
      // GC keeps its 1 MiB out of the library's buffer cache.
      double crsUs = medianMicros(() -> {
        for (Tensor[] outputs : tpu.replicate(crs, inputs))
          for (Tensor t : outputs) t.close();
      }, CRS_STEPS);

      System.out.printf("java empty_step_us %.1f%n", emptyUs);
      System.out.printf("java crs_1mib_us %.1f%n", crsUs);
    }
  }
}
