// Data-parallel linear regression with tpurt from Java: the same model, data and
// method as `tpurt demo` (tools/tpurt/demo.c). Each replica holds its share of the rows
// (8 replicas: 512); every SGD step one tpu.cross_replica_sum adds the replicas'
// gradient and loss sums. Exits 0 if the weights are within 1e-3 of the least-squares
// solution. The system starts with tpu.initialize_tpu_system(): under `tpurt launch`
// the replicas are the cores of all tasks and each task runs and reports its own.
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.tpurt.ClusterOptions;
import org.tpurt.SystemOptions;
import org.tpurt.Tensor;
import org.tpurt.TpuSystem;
import org.tpurt.tpu;

public final class LinearRegression {
  static final int SAMPLES = 4096, FEATURES = 8, PARAMS = FEATURES + 1, SUMS = PARAMS + 1;
  static final int DEFAULT_CORES = 8, STEPS = 100;
  static final float LEARNING_RATE = 0.1f;
  static final double TOLERANCE = 1e-3;
  static final double[] TRUE_WEIGHTS = {0.5, -1.25, 2.0, 0.75, -0.3, 1.5, -2.2, 0.1};
  static final double TRUE_BIAS = 0.7;

  static long state = 42;

  /** The demo's LCG (Knuth's MMIX constants): uniform in [-1, 1). */
  static double uniform() {
    state = state * 6364136223846793005L + 1442695040888963407L;
    return (double) (state >>> 11) / (double) (1L << 52) - 1.0;
  }

  public static void main(String[] args) {
    float[] x = new float[SAMPLES * FEATURES];
    float[] y = new float[SAMPLES];
    makeData(x, y);
    double[] exact = solveNormalEquations(x, y);

    SystemOptions options = new SystemOptions();
    // TPURT_NUM_CORES (tpurt launch --cores-per-task) wins over the default.
    options.setNumCores(System.getenv("TPURT_NUM_CORES") != null ? 0 : DEFAULT_CORES);
    try (TpuSystem system = tpu.initialize_tpu_system(null, options, new ClusterOptions())) {
      int local = system.numCores(), task = system.taskId(), tasks = system.numTasks();
      int replicas = local * tasks, first = task * local;
      if (SAMPLES % replicas != 0) {
        System.err.printf("%d replicas do not divide the %d samples evenly%n", replicas, SAMPLES);
        System.exit(2);
      }
      if (tasks > 1) System.out.printf("task %d of %d runs replicas %d to %d%n", task, tasks, first, first + local - 1);
      int rows = SAMPLES / replicas;
      List<List<Tensor>> inputs = new ArrayList<>();
      for (int r = 0; r < replicas; r++)
        inputs.add(Arrays.asList(
            Tensor.fromFloat32(new long[] {rows, FEATURES}, Arrays.copyOfRange(x, r * rows * FEATURES, (r + 1) * rows * FEATURES)),
            Tensor.fromFloat32(new long[] {rows}, Arrays.copyOfRange(y, r * rows, (r + 1) * rows))));
      float[] losses = new float[STEPS];
      List<Tensor[]> outputs = tpu.replicate((ctx, in) -> {
        float[] xs = in[0].toFloat32Vector(), ys = in[1].toFloat32Vector();
        int n = (int) in[0].dim(0);
        float[] params = new float[PARAMS];
        for (int step = 0; step < STEPS; step++) {
          float[] sums = new float[SUMS];
          for (int i = 0; i < n; i++) {
            float err = params[FEATURES] - ys[i];
            for (int f = 0; f < FEATURES; f++) err += params[f] * xs[i * FEATURES + f];
            for (int f = 0; f < FEATURES; f++) sums[f] += err * xs[i * FEATURES + f];
            sums[FEATURES] += err;
            sums[PARAMS] += err * err;
          }
          sums = tpu.cross_replica_sum(sums);
          // d/dp of mean((Ap - y)^2) = 2/N * sum(err * a) over the global batch.
          for (int j = 0; j < PARAMS; j++) params[j] -= LEARNING_RATE * 2.0f * sums[j] / SAMPLES;
          if (ctx.replicaId() == 0) losses[step] = sums[PARAMS] / SAMPLES;
        }
        return new Tensor[] {Tensor.fromFloat32(new long[] {PARAMS}, params)};
      }, inputs);

      // Replica 0, which records the loss, is task 0's; each task checks its own replicas.
      if (task == 0) for (int s = 0; s < STEPS; s += 10) System.out.printf("step %3d  loss %.8f%n", s, losses[s]);
      float[] trained = outputs.get(first)[0].toFloat32Vector();
      boolean agree = true;
      for (int r = first; r < first + local; r++) agree &= Arrays.equals(outputs.get(r)[0].toFloat32Vector(), trained);
      double maxDiff = 0;
      System.out.printf("%-6s  %12s  %12s  %10s%n", "param", "trained", "closed form", "|diff|");
      for (int j = 0; j < PARAMS; j++) {
        double diff = Math.abs(trained[j] - exact[j]);
        if (!(diff <= maxDiff)) maxDiff = diff;  // NaN sticks
        System.out.printf("%-6s  %12.6f  %12.6f  %10.2e%n", j < FEATURES ? "w[" + j + "]" : "b", trained[j], exact[j], diff);
      }
      boolean ok = agree && maxDiff <= TOLERANCE;
      System.out.printf("replicas agree: %s; max |diff| = %.2e (tolerance %.0e): %s%n",
          agree ? "yes" : "NO", maxDiff, TOLERANCE, ok ? "OK" : "FAILED");
      if (!ok) System.exit(1);
    }
  }

  /** Standardized features (mean 0, variance 1 per column) and y = X w* + b* + noise. */
  static void makeData(float[] x, float[] y) {
    double[][] raw = new double[SAMPLES][FEATURES];
    for (int i = 0; i < SAMPLES; i++)
      for (int f = 0; f < FEATURES; f++) raw[i][f] = uniform() * (f + 1) + f;
    for (int f = 0; f < FEATURES; f++) {
      double mean = 0, var = 0;
      for (int i = 0; i < SAMPLES; i++) mean += raw[i][f];
      mean /= SAMPLES;
      for (int i = 0; i < SAMPLES; i++) var += (raw[i][f] - mean) * (raw[i][f] - mean);
      double sd = Math.sqrt(var / SAMPLES);
      for (int i = 0; i < SAMPLES; i++) x[i * FEATURES + f] = (float) ((raw[i][f] - mean) / sd);
    }
    for (int i = 0; i < SAMPLES; i++) {
      double v = TRUE_BIAS + 0.01 * uniform();
      for (int f = 0; f < FEATURES; f++) v += TRUE_WEIGHTS[f] * x[i * FEATURES + f];
      y[i] = (float) v;
    }
  }

  /** Least squares: (A^T A) p = A^T y with A = [X 1], Gaussian elimination with partial pivoting. */
  static double[] solveNormalEquations(float[] x, float[] y) {
    double[][] m = new double[PARAMS][PARAMS + 1];
    for (int i = 0; i < SAMPLES; i++) {
      double[] a = new double[PARAMS];
      for (int f = 0; f < FEATURES; f++) a[f] = x[i * FEATURES + f];
      a[FEATURES] = 1.0;
      for (int r = 0; r < PARAMS; r++) {
        for (int c = 0; c < PARAMS; c++) m[r][c] += a[r] * a[c];
        m[r][PARAMS] += a[r] * y[i];
      }
    }
    for (int col = 0; col < PARAMS; col++) {
      int pivot = col;
      for (int r = col + 1; r < PARAMS; r++) if (Math.abs(m[r][col]) > Math.abs(m[pivot][col])) pivot = r;
      double[] t = m[col];
      m[col] = m[pivot];
      m[pivot] = t;
      for (int r = col + 1; r < PARAMS; r++) {
        double factor = m[r][col] / m[col][col];
        for (int c = col; c <= PARAMS; c++) m[r][c] -= factor * m[col][c];
      }
    }
    double[] p = new double[PARAMS];
    for (int r = PARAMS - 1; r >= 0; r--) {
      double v = m[r][PARAMS];
      for (int c = r + 1; c < PARAMS; c++) v -= m[r][c] * p[c];
      p[r] = v / m[r][r];
    }
    return p;
  }
}
