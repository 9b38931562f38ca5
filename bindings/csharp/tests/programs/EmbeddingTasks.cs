// One embedding step across tasks (run by EmbeddingTests under `tpurt launch -n 2
// --cores-per-task 1`): a 5 x 2 table, rows 0-2 on task 0 and 3-4 on task 1, looked up
// and updated by both replicas. Prints "task T ok" or what differs (exit 1).
using System;
using System.Collections.Generic;
using System.Linq;
using Tpurt;

static class EmbeddingTasks {
  const string Json = @"{""table_descriptor"": [{""name"": ""video"", ""vocabulary_size"": 5, ""dimension"": 2,
    ""optimization_parameters"": {""learning_rate"": {""constant"": 0.5}, ""stochastic_gradient_descent"": {}}}],
    ""feature_descriptor"": [{""name"": ""watched"", ""table_id"": 0, ""input_shape"": [2]}]}";

  static int failures;
  static void Check(string what, float[] want, float[] got) {
    bool same = want.Length == got.Length && want.Zip(got, (a, b) => a.Equals(b)).All(x => x); // NaN equals NaN
    if (!same) {
      ++failures;
      Console.WriteLine(what + ": want [" + string.Join(", ", want) + "], got [" + string.Join(", ", got) + "]");
    }
  }

  static int Main() {
    using (TpuSystem system = tpu.initialize_tpu_system(num_cores: 1, embedding_config: EmbeddingConfig.FromJson(Json))) {
      int task = system.TaskId();
      TpuEmbedding emb = system.Embedding;
      // Every task loads the whole table; each keeps the rows it holds.
      emb.Load("video", new float[] { 1, 10, 2, 20, 3, 30, 4, 40, 5, 50 });
      Check("owners", new float[] { 0, 0, 0, 1, 1 }, Enumerable.Range(0, 5).Select(r => (float)emb.RowOwner("video", r).Core).ToArray());

      var acts = new Dictionary<int, float[]>();
      tpu.replicate((ctx, x) => {
        int r = ctx.ReplicaId();
        // replica 0: samples {0}, {4}; replica 1: {3, 1}, {} (sum)
        if (r == 0) ctx.Embedding.Enqueue("watched", new long[] { 0, 4 }, rowSplits: new long[] { 0, 1, 2 });
        else ctx.Embedding.Enqueue("watched", new long[] { 3, 1 }, rowSplits: new long[] { 0, 2, 2 });
        lock (acts) acts[r] = ctx.Embedding.RecvActivations()["watched"].ToFloatArray();
        ctx.Embedding.SendGradients(new Dictionary<string, float[]> {
          { "watched", r == 0 ? new float[] { 1, 1, 2, 2 } : new float[] { 1, 2, 5, 5 } } });
        return new Tensor[0];
      }, num_replicas: 2, system: system);
      // This task's replica only.
      Check("replica " + task + " activations", task == 0 ? new float[] { 1, 10, 5, 50 } : new float[] { 6, 60, 0, 0 }, acts[task]);
      // row0 -= 0.5 [1, 1]; row4 -= 0.5 [2, 2]; row3 and row1 -= 0.5 [1, 2]; rows held
      // by the other task stay NaN.
      float n = float.NaN;
      Check("task " + task + " rows", task == 0 ? new float[] { 0.5f, 9.5f, 1.5f, 19, 3, 30, n, n, n, n }
                                                : new float[] { n, n, n, n, n, n, 3.5f, 39, 4, 49 }, emb.Retrieve("video"));
      Console.WriteLine(failures == 0 ? "task " + task + " ok" : "task " + task + " failed");
      return failures == 0 ? 0 : 1;
    }
  }
}
