// Data-parallel linear regression with tpurt from C# (the same run as tools/tpurt/demo.c):
// 4096 x 8 standardized synthetic samples sharded over the replicas; each SGD step every
// replica sums its gradient and loss with ONE tpu.cross_replica_sum of 10 floats, and
// all apply the same update. Exits 0 when the weights match the normal equations'
// least-squares solution within 1e-3.
//
// The system starts with tpu.initialize_tpu_system(): under `tpurt launch -n N` every
// task runs this program, the replicas are the cores of all tasks, and each task runs
// and reports its own (task 0 holds replica 0, which prints the loss). Alone it is a
// one-process system of 8 cores (or TPURT_NUM_CORES).
using System;
using System.Linq;
using Tpurt;

static class LinearRegression {
  const int Samples = 4096, Features = 8, Params = Features + 1, Sums = Params + 1, Steps = 100, DefaultCores = 8;
  const float LearningRate = 0.1f;
  const double Tolerance = 1e-3;
  static readonly double[] TrueWeights = { 0.5, -1.25, 2.0, 0.75, -0.3, 1.5, -2.2, 0.1 };
  const double TrueBias = 0.7;

  // Knuth's MMIX LCG, uniform in [-1, 1), as the C demo.
  static ulong state = 42;
  static double Uniform() {
    unchecked { state = state * 6364136223846793005UL + 1442695040888963407UL; }
    return (double)(state >> 11) / (double)(1UL << 52) - 1.0;
  }

  static void MakeData(float[] x, float[] y) {
    var raw = new double[Samples, Features];
    for (int i = 0; i < Samples; i++)
      for (int f = 0; f < Features; f++) raw[i, f] = Uniform() * (f + 1) + f;
    for (int f = 0; f < Features; f++) {
      double mean = 0, variance = 0;
      for (int i = 0; i < Samples; i++) mean += raw[i, f];
      mean /= Samples;
      for (int i = 0; i < Samples; i++) variance += (raw[i, f] - mean) * (raw[i, f] - mean);
      double sd = Math.Sqrt(variance / Samples);
      for (int i = 0; i < Samples; i++) x[i * Features + f] = (float)((raw[i, f] - mean) / sd);
    }
    for (int i = 0; i < Samples; i++) {
      double v = TrueBias + 0.01 * Uniform();
      for (int f = 0; f < Features; f++) v += TrueWeights[f] * x[i * Features + f];
      y[i] = (float)v;
    }
  }

  // (A^T A) p = A^T y with A = [X 1], Gaussian elimination with partial pivoting.
  static double[] SolveNormalEquations(float[] x, float[] y) {
    var m = new double[Params, Params + 1];
    var a = new double[Params];
    for (int i = 0; i < Samples; i++) {
      for (int f = 0; f < Features; f++) a[f] = x[i * Features + f];
      a[Features] = 1.0;
      for (int r = 0; r < Params; r++) {
        for (int c = 0; c < Params; c++) m[r, c] += a[r] * a[c];
        m[r, Params] += a[r] * y[i];
      }
    }
    for (int col = 0; col < Params; col++) {
      int pivot = col;
      for (int r = col + 1; r < Params; r++)
        if (Math.Abs(m[r, col]) > Math.Abs(m[pivot, col])) pivot = r;
      for (int c = 0; c <= Params; c++) { double t = m[col, c]; m[col, c] = m[pivot, c]; m[pivot, c] = t; }
      for (int r = col + 1; r < Params; r++) {
        double factor = m[r, col] / m[col, col];
        for (int c = col; c <= Params; c++) m[r, c] -= factor * m[col, c];
      }
    }
    var p = new double[Params];
    for (int r = Params - 1; r >= 0; r--) {
      double v = m[r, Params];
      for (int c = r + 1; c < Params; c++) v -= m[r, c] * p[c];
      p[r] = v / m[r, r];
    }
    return p;
  }

  // One replica's training loop over its rows; its parameters go to trained[replica].
  static void Train(ReplicaContext ctx, Tensor[] inputs, float[][] trained) {
    float[] x = inputs[0].ToFloatArray(), y = inputs[1].ToFloatArray();
    int rows = y.Length;
    var parameters = new float[Params];
    for (int step = 0; step < Steps; step++) {
      var sums = new float[Sums];
      for (int i = 0; i < rows; i++) {
        float err = parameters[Features] - y[i];
        for (int f = 0; f < Features; f++) err += parameters[f] * x[i * Features + f];
        for (int f = 0; f < Features; f++) sums[f] += err * x[i * Features + f];
        sums[Features] += err;
        sums[Params] += err * err;
      }
      float[] global = tpu.cross_replica_sum(sums).ToFloatArray();
      for (int j = 0; j < Params; j++) parameters[j] -= LearningRate * 2.0f * global[j] / Samples;
      if (ctx.ReplicaId() == 0 && step % 10 == 0) Console.WriteLine("step {0,3}  loss {1:F8}", step, global[Params] / Samples);
    }
    trained[ctx.ReplicaId()] = parameters;
  }

  static int Main() {
    var x = new float[Samples * Features];
    var y = new float[Samples];
    MakeData(x, y);
    double[] exact = SolveNormalEquations(x, y);

    // TPURT_NUM_CORES (set by tpurt launch --cores-per-task) wins over the default.
    int cores = Environment.GetEnvironmentVariable("TPURT_NUM_CORES") != null ? 0 : DefaultCores;
    using (TpuSystem system = tpu.initialize_tpu_system(num_cores: cores)) {
      int local = system.NumCores(), task = system.TaskId();
      int replicas = local * system.NumTasks(), first = task * local;
      if (Samples % replicas != 0) {
        Console.Error.WriteLine("{0} replicas do not divide the {1} samples evenly", replicas, Samples);
        return 2;
      }
      int rows = Samples / replicas;
      if (system.NumTasks() > 1)
        Console.WriteLine("task {0} of {1} runs replicas {2} to {3}", task, system.NumTasks(), first, first + local - 1);
      var inputs = Enumerable.Range(0, replicas).Select(r => new[] {
        Tensor.Of(x.Skip(r * rows * Features).Take(rows * Features).ToArray(), rows, Features),
        Tensor.Of(y.Skip(r * rows).Take(rows).ToArray(), rows),
      }).ToList();
      var trained = new float[replicas][];
      tpu.replicate((ctx, inp) => { Train(ctx, inp, trained); return new Tensor[0]; }, inputs, system: system);

      // This task's replicas only: the others ran in the other tasks.
      float[] mine = trained[first];
      bool agree = Enumerable.Range(first, local).All(r => trained[r] != null && trained[r].SequenceEqual(mine));
      double maxDiff = 0;
      Console.WriteLine("\n{0,-8}  {1,12}  {2,12}  {3,10}", "param", "trained", "closed form", "|diff|");
      for (int j = 0; j < Params; j++) {
        double diff = Math.Abs(mine[j] - exact[j]);
        if (!(diff <= maxDiff)) maxDiff = diff;  // NaN sticks
        Console.WriteLine("{0,-8}  {1,12:F6}  {2,12:F6}  {3,10:E2}", j < Features ? "w[" + j + "]" : "b", mine[j], exact[j], diff);
      }
      bool converged = maxDiff <= Tolerance;
      Console.WriteLine("\nreplicas hold identical weights: {0}", agree ? "yes" : "NO");
      Console.WriteLine("max |diff| = {0:E2}: {1} the tolerance {2:E0}", maxDiff, converged ? "within" : "outside", Tolerance);
      return converged && agree ? 0 : 1;
    }
  }
}
