// The bindings' overhead benchmark (bench/bindings_c.c's contract): an 8-core system,
// 8 replicas; (a) an empty step, (b) one cross_replica_sum of a 1 MiB float32 input
// returned as output. Both modes of the binding, alternated in ROUNDS rounds: replicas
// on the binding's Java threads (the default, "java") and as callbacks from the
// library's workers ("java-callback"). Each round warms up (the JIT too), then times
// steps one by one; prints the median over the rounds' steps.
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.tpurt.SystemOptions;
import org.tpurt.Tensor;
import org.tpurt.TpuComputation;
import org.tpurt.TpuSystem;
import org.tpurt.tpu;

public final class Bench {
  static final int REPLICAS = 8, ROUNDS = 3, FLOATS = 262144;
  static final int EMPTY_WARMUP = 2000, EMPTY_STEPS = 1000, CRS_WARMUP = 100, CRS_STEPS = 100;

  /** Appends the times of `steps` steps (after `warmup` untimed ones) to us. */
  static void time(Runnable step, int warmup, int steps, List<Double> us) {
    for (int i = 0; i < warmup; i++) step.run();
    for (int i = 0; i < steps; i++) {
      long t0 = System.nanoTime();
      step.run();
      us.add((System.nanoTime() - t0) / 1e3);
    }
  }

  static double median(List<Double> us) {
    double[] a = us.stream().mapToDouble(Double::doubleValue).toArray();
    Arrays.sort(a);
    int n = a.length;
    return n % 2 == 1 ? a[n / 2] : (a[n / 2 - 1] + a[n / 2]) / 2;
  }

  public static void main(String[] args) {
    SystemOptions options = new SystemOptions();
    options.setNumCores(REPLICAS);
    try (TpuSystem system = tpu.initialize_system(options)) {
      TpuComputation empty = (ctx, in) -> null;
      // REPLICAS replicas with no inputs (inputs null is TensorFlow's [[]]: one replica).
      List<List<Tensor>> none = new ArrayList<>();
      for (int r = 0; r < REPLICAS; r++) none.add(List.of());
      List<List<Tensor>> inputs = new ArrayList<>();
      for (int r = 0; r < REPLICAS; r++) {
        float[] data = new float[FLOATS];
        Arrays.fill(data, r);
        inputs.add(Arrays.asList(Tensor.fromFloat32(new long[] {FLOATS}, data)));
      }
      TpuComputation crs = (ctx, in) -> new Tensor[] {tpu.cross_replica_sum(in[0])};
      // Outputs are closed at once, as a training loop would: a native tensor left to the
      // GC keeps its 1 MiB out of the library's buffer cache.
      Runnable crsStep = () -> {
        for (Tensor[] outputs : tpu.replicate(crs, inputs))
          for (Tensor t : outputs) t.close();
      };
      String[] names = {"java", "java-callback"};
      List<List<Double>> emptyUs = List.of(new ArrayList<>(), new ArrayList<>());
      List<List<Double>> crsUs = List.of(new ArrayList<>(), new ArrayList<>());
      for (int round = 0; round < ROUNDS; round++)
        for (int mode = 0; mode < 2; mode++) {
          system.setCallbackMode(mode == 1);
          time(() -> tpu.replicate(empty, none), EMPTY_WARMUP, EMPTY_STEPS, emptyUs.get(mode));
          time(crsStep, CRS_WARMUP, CRS_STEPS, crsUs.get(mode));
        }
      for (int mode = 0; mode < 2; mode++) {
        System.out.printf("%s empty_step_us %.1f%n", names[mode], median(emptyUs.get(mode)));
        System.out.printf("%s crs_1mib_us %.1f%n", names[mode], median(crsUs.get(mode)));
      }
    }
  }
}
