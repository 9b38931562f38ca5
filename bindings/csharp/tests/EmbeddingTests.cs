// TPU embeddings from C# (issue 20): the configuration from JSON, the tables and
// features, load/retrieve, and a 2-replica step whose activations and updated rows are
// checked against values computed by hand in the comments.
using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using NUnit.Framework;
using Tpurt;

[TestFixture]
public class EmbeddingTests {
  // video: 5 x 2, SGD at 0.5; user: 4 x 1, Adagrad (initial accumulator 9) at the
  // dynamic learning rate of tag 0. Both DIV_DEFAULT over the 2 cores.
  const string Json = @"{
    ""table_descriptor"": [
      {""name"": ""video"", ""vocabulary_size"": 5, ""dimension"": 2,
       ""optimization_parameters"": {""learning_rate"": {""constant"": 0.5}, ""stochastic_gradient_descent"": {}}},
      {""name"": ""user"", ""vocabulary_size"": 4, ""dimension"": 1,
       ""optimization_parameters"": {""learning_rate"": {""dynamic"": {""tag"": 0}}, ""adagrad"": {""initial_accumulator"": 9}}}],
    ""feature_descriptor"": [
      {""name"": ""watched"", ""table_id"": 0, ""input_shape"": [2]},
      {""name"": ""liked"", ""table_id"": 0, ""input_shape"": [1]},
      {""name"": ""who"", ""table_id"": 1, ""input_shape"": [2]}],
    ""mode"": ""TRAINING""}";
  const int Replicas = 2;
  // video row i = [i + 1, 10 (i + 1)]; user rows 0.5, 1, 1.5, 2.
  static readonly float[] Video = { 1, 10, 2, 20, 3, 30, 4, 40, 5, 50 };
  static readonly float[] User = { 0.5f, 1, 1.5f, 2 };

  TpuSystem system;
  TpuEmbedding emb;

  [TestFixtureSetUp]
  public void StartSystem() {
    system = tpu.initialize_system(embedding_config: EmbeddingConfig.FromJson(Json), num_cores: Replicas);
    emb = system.Embedding;
  }
  [TestFixtureTearDown]
  public void StopSystem() { system.Dispose(); }

  [SetUp]
  public void LoadTables() {
    emb.Load("video", Video);
    emb.Load("user", User);
    emb.Load("user", Enumerable.Repeat(9f, 4).ToArray(), "accumulators");
  }

  [Test]
  public void TheConfigurationReadsBackByNameAndIndex() {
    Assert.AreEqual(EmbeddingMode.Training, emb.Mode);
    CollectionAssert.AreEqual(new[] { "video", "user" }, emb.Tables.Select(t => t.Name));
    EmbeddingTable video = emb.Table("video"), user = emb.Table(1);
    Assert.AreEqual(0, video.Index);
    Assert.AreEqual(5, video.VocabularySize);
    Assert.AreEqual(2, video.Dimension);
    Assert.AreEqual(EmbeddingOptimizer.Sgd, video.Optimizer);
    CollectionAssert.AreEqual(new[] { "parameters" }, video.Variables);
    Assert.AreEqual("user", user.Name);
    Assert.AreEqual(EmbeddingOptimizer.Adagrad, user.Optimizer);
    CollectionAssert.AreEqual(new[] { "parameters", "accumulators" }, user.Variables);
    Assert.AreEqual(1, user.VariableIndex("accumulators"));

    CollectionAssert.AreEqual(new[] { "watched", "liked", "who" }, emb.Features.Select(f => f.Name));
    EmbeddingFeature liked = emb.Feature("liked"), who = emb.Feature(2);
    Assert.AreEqual(1, liked.Index);
    Assert.AreSame(video, liked.Table);
    CollectionAssert.AreEqual(new long[] { 1, 2 }, liked.Shape);
    Assert.AreEqual(1, liked.Samples);
    Assert.AreSame(user, who.Table);
    CollectionAssert.AreEqual(new long[] { 2, 1 }, who.Shape);

    // DIV_DEFAULT, 5 rows over 2 shards: rows 0-2 on core 0, rows 3-4 on core 1.
    var owners = Enumerable.Range(0, 5).Select(r => emb.RowOwner("video", r)).ToArray();
    CollectionAssert.AreEqual(new[] { 0, 0, 0, 1, 1 }, owners.Select(o => o.Core));
    CollectionAssert.AreEqual(new long[] { 0, 1, 2, 0, 1 }, owners.Select(o => o.ShardRow));
    Assert.AreEqual(new EmbeddingRowOwner(1, 1), emb.RowOwner(1, 3)); // user: 2 + 2 rows
  }

  [Test]
  public void UnknownNamesAndIndicesAreTypedErrorsNamingThem() {
    StringAssert.Contains("nope", Assert.Throws<NotFoundError>(() => emb.Table("nope")).Message);
    StringAssert.Contains("nope", Assert.Throws<NotFoundError>(() => emb.Feature("nope")).Message);
    StringAssert.Contains("7", Assert.Throws<OutOfRangeError>(() => emb.Table(7)).Message);
    StringAssert.Contains("-1", Assert.Throws<OutOfRangeError>(() => emb.Feature(-1)).Message);
    var e = Assert.Throws<NotFoundError>(() => emb.Retrieve("video", "accumulators"));
    StringAssert.Contains("accumulators", e.Message);
    StringAssert.Contains("video", e.Message);
    StringAssert.Contains("5", Assert.Throws<OutOfRangeError>(() => emb.RowOwner("video", 5)).Message);
    Assert.Throws<OutOfRangeError>(() => emb.Retrieve("video", firstRow: 4, numRows: 2));
    Assert.Throws<InvalidArgumentError>(() => emb.Load("video", new float[] { 1, 2, 3 }));
    Assert.Throws<ArgumentNullException>(() => emb.Load("video", null));
  }

  [Test]
  public void LoadAndRetrieveRoundTripWholeAndByRowRange() {
    CollectionAssert.AreEqual(Video, emb.Retrieve("video"));
    CollectionAssert.AreEqual(User, emb.Table("user").Retrieve());
    CollectionAssert.AreEqual(Enumerable.Repeat(9f, 4), emb.Retrieve("user", "accumulators"));
    // Rows 1..2 of video by index; then a range written back and read by name.
    CollectionAssert.AreEqual(new float[] { 2, 20, 3, 30 }, emb.Retrieve(0, 0, 1, 2));
    emb.Load(0, 0, 3, new float[] { -4, -40, -5, -50 });
    CollectionAssert.AreEqual(new float[] { 1, 10, 2, 20, 3, 30, -4, -40, -5, -50 }, emb.Retrieve("video"));
    CollectionAssert.AreEqual(new float[] { -5, -50 }, emb.Table("video").Retrieve(0, 4, 1));
    emb.Table("user").Load(new float[] { 16 }, "accumulators", 2);
    CollectionAssert.AreEqual(new float[] { 9, 9, 16, 9 }, emb.Retrieve("user", "accumulators"));
  }

  // Replica r's batch and gradients (see the comments for the hand-computed results).
  static void Step(ReplicaContext ctx, ConcurrentDictionary<int, EmbeddingActivations> seen,
                   ConcurrentDictionary<int, Dictionary<string, float[]>> values) {
    int r = ctx.ReplicaId();
    if (r == 0) {
      ctx.Embedding.Enqueue(
          // watched, COO, sum: s0 = 1 row0 + 2 row2 = [7, 70]; s1 = 0.5 row2 = [1.5, 15]
          EmbeddingInput.Sparse("watched", new long[] { 0, 2, 2 }, new long[] { 0, 0, 1 }, new[] { 1f, 2f, 0.5f }),
          // liked, ragged, sqrtn: 2 row1 / sqrt(4) = [2, 20]
          EmbeddingInput.Ragged(1, new long[] { 1 }, new long[] { 0, 1 }, new[] { 2f }, EmbeddingCombiner.Sqrtn),
          // who: s0 has no ids (zeros), s1 = user row 3 = 2
          EmbeddingInput.Sparse("who", new long[] { 3 }, new long[] { 1 }));
    } else {
      ctx.Embedding.Enqueue(
          // watched, ragged, mean: s0 = row4 = [5, 50]; s1 = (row1 + row3) / 2 = [3, 30]
          EmbeddingInput.Ragged("watched", new long[] { 4, 1, 3 }, new long[] { 0, 1, 3 }, combiner: EmbeddingCombiner.Mean),
          // who: s0 = user row 3 = 2, s1 zeros
          EmbeddingInput.Sparse(2, new long[] { 3 }, new long[] { 0 }));
    }
    EmbeddingActivations a = ctx.Embedding.RecvActivations();
    seen[r] = a;
    values[r] = a.ToDictionary().ToDictionary(p => p.Key, p => p.Value.ToFloatArray());
    // Gradients: row0 gets 1 [1, 2]; row2 2 [1, 2] + 0.5 [4, -2] = [4, 3]; row4 [2, 2];
    // row1 0.5 [6, -4] + (sqrtn weight 1) [1, 1] = [4, -1]; row3 0.5 [6, -4] = [3, -2];
    // user row 3: 2 (replica 0's s1) + 2 (replica 1's s0) = 4.
    if (r == 0)
      ctx.Embedding.SendGradients(new Dictionary<string, float[]> {
        { "watched", new float[] { 1, 2, 4, -2 } }, { "liked", new float[] { 1, 1 } }, { "who", new float[] { 5, 2 } } }, 0.25f);
    else
      using (Tensor w = Tensor.Of(new float[] { 2, 2, 6, -4 }, 2, 2), who = Tensor.Of(new float[] { 2, 7 }, 2, 1))
        ctx.Embedding.SendGradients(new[] { w, null, who }, 0.25f);
  }

  [Test]
  public void TwoReplicaStepGivesHandComputedActivationsAndUpdates() {
    var seen = new ConcurrentDictionary<int, EmbeddingActivations>();
    var values = new ConcurrentDictionary<int, Dictionary<string, float[]>>();
    tpu.replicate((ctx, x) => { Step(ctx, seen, values); return new Tensor[0]; }, num_replicas: Replicas, system: system);

    CollectionAssert.AreEquivalent(new[] { "watched", "liked", "who" }, values[0].Keys);
    CollectionAssert.AreEqual(new float[] { 7, 70, 1.5f, 15 }, values[0]["watched"]);
    CollectionAssert.AreEqual(new float[] { 2, 20 }, values[0]["liked"]);
    CollectionAssert.AreEqual(new float[] { 0, 2 }, values[0]["who"]);
    CollectionAssert.AreEquivalent(new[] { "watched", "who" }, values[1].Keys);
    CollectionAssert.AreEqual(new float[] { 5, 50, 3, 30 }, values[1]["watched"]);
    CollectionAssert.AreEqual(new float[] { 2, 0 }, values[1]["who"]);
    // By index, with null for a feature replica 1 did not enqueue.
    Assert.AreEqual(3, seen[1].Count);
    Assert.IsNull(seen[1][1]);
    Assert.IsFalse(seen[1].TryGetValue("liked", out Tensor none));
    Assert.Throws<KeyNotFoundException>(() => { var t = seen[1]["liked"]; });

    // SGD at 0.5: row -= 0.5 g.
    CollectionAssert.AreEqual(new float[] { 0.5f, 9, 0, 20.5f, 1, 28.5f, 2.5f, 41, 4, 49 }, emb.Retrieve("video"));
    // Adagrad at 0.25 on user row 3: a = 9 + 4^2 = 25; w = 2 - 0.25 * 4 / sqrt(25).
    CollectionAssert.AreEqual(new float[] { 9, 9, 9, 25 }, emb.Retrieve("user", "accumulators"));
    float[] user = emb.Retrieve("user");
    CollectionAssert.AreEqual(new float[] { 0.5f, 1, 1.5f }, user.Take(3));
    Assert.AreEqual(2f - 0.25f * 4f / 5f, user[3], 1e-6f);
  }

  [Test]
  public void ABadIdFailsTheStepNamingItAndLeavesTheTablesUnchanged() {
    float[] before = emb.Retrieve("video");
    var e = Assert.Throws<InvalidArgumentError>(() => tpu.replicate((ctx, x) => {
      long id = ctx.ReplicaId() == 1 ? 7 : 1;
      ctx.Embedding.Enqueue("watched", new long[] { id }, new long[] { 0 });
      ctx.Embedding.RecvActivations();
      ctx.Embedding.SendGradients(new Dictionary<string, float[]> { { "watched", new float[] { 1, 1, 1, 1 } } }, 0.25f);
      return new Tensor[0];
    }, num_replicas: Replicas, system: system));
    StringAssert.Contains("7", e.Message);
    StringAssert.Contains("watched", e.Message);
    CollectionAssert.AreEqual(before, emb.Retrieve("video"));
    // The system still runs steps: a good one after it applies.
    tpu.replicate((ctx, x) => {
      ctx.Embedding.Enqueue("watched", new long[] { 0 }, rowSplits: new long[] { 0, 1, 1 });
      ctx.Embedding.RecvActivations();
      ctx.Embedding.SendGradients(new Dictionary<string, float[]> { { "watched", new float[] { 1, 1, 0, 0 } } }, 0.25f);
      return new Tensor[0];
    }, num_replicas: Replicas, system: system);
    CollectionAssert.AreEqual(new float[] { 0, 9 }, emb.Retrieve("video", numRows: 1)); // [1, 10] - 0.5 * 2 [1, 1]
  }

  [Test]
  public void BadInputInsideAStepIsATypedErrorNamingIt() {
    // A feature the configuration does not name.
    var e = Assert.Throws<InvalidArgumentError>(() => tpu.replicate((ctx, x) => {
      ctx.Embedding.Enqueue("nope", new long[] { 0 }, new long[] { 0 });
      return new Tensor[0];
    }, num_replicas: Replicas, system: system));
    StringAssert.Contains("nope", e.Message);
    // Weights that do not match the ids.
    e = Assert.Throws<InvalidArgumentError>(() => tpu.replicate((ctx, x) => {
      ctx.Embedding.Enqueue(0, new long[] { 0, 1 }, new long[] { 0, 1 }, weights: new[] { 1f });
      return new Tensor[0];
    }, num_replicas: Replicas, system: system));
    StringAssert.Contains("1 weights for 2 ids", e.Message);
    // Activations asked for before an enqueue.
    OpError e2 = Assert.Throws<InvalidArgumentError>(() => tpu.replicate((ctx, x) => {
      ctx.Embedding.RecvActivations();
      return new Tensor[0];
    }, num_replicas: Replicas, system: system));
    // Both COO and ragged for one feature.
    e2 = Assert.Throws<InvalidArgumentError>(() => tpu.replicate((ctx, x) => {
      ctx.Embedding.Enqueue("who", new long[] { 0 }, new long[] { 0 }, new long[] { 0, 1, 1 });
      return new Tensor[0];
    }, num_replicas: Replicas, system: system));
    StringAssert.Contains("'who'", e2.Message);
    StringAssert.Contains("both sample_indices and row_splits", e2.Message);
    CollectionAssert.AreEqual(Video, emb.Retrieve("video"));
  }

  [Test]
  public void EmptyFeaturesEnumerableInputsAndTensorGradientsByName() {
    Assert.AreSame(system, emb.System);
    Assert.AreSame(emb, system.Embedding);
    Assert.AreEqual(new EmbeddingRowOwner(0, 2), emb.Table("video").RowOwner(2));
    Assert.AreEqual("core 0 row 2", emb.RowOwner("video", 2).ToString());
    StringAssert.Contains("video", emb.Table(0).ToString());
    StringAssert.Contains("who -> user", emb.Feature("who").ToString());
    EmbeddingInput ragged = EmbeddingInput.Ragged("who", new long[] { 1 }, new long[] { 0, 0, 1 }, new[] { 3f }, EmbeddingCombiner.Mean);
    Assert.AreEqual("who", ragged.FeatureName);
    Assert.AreEqual(-1, ragged.FeatureIndex);
    CollectionAssert.AreEqual(new long[] { 1 }, ragged.Ids);
    Assert.IsNull(ragged.SampleIndices);
    CollectionAssert.AreEqual(new long[] { 0, 0, 1 }, ragged.RowSplits);
    CollectionAssert.AreEqual(new[] { 3f }, ragged.Weights);
    Assert.AreEqual(EmbeddingCombiner.Mean, ragged.Combiner);
    Assert.AreEqual(1, EmbeddingInput.Empty(1).FeatureIndex);

    var seen = new ConcurrentDictionary<int, float[][]>();
    tpu.replicate((ctx, x) => {
      int r = ctx.ReplicaId();
      // watched without ids (zeros, no update) and who (mean: user row 1 for sample 1).
      ctx.Embedding.Enqueue(new List<EmbeddingInput> { r == 0 ? EmbeddingInput.Empty("watched") : EmbeddingInput.Empty(0), ragged });
      EmbeddingActivations a = ctx.Embedding.RecvActivations();
      seen[r] = a.Select(t => t?.ToFloatArray()).ToArray();
      Assert.AreSame(a[2], a["who"]);
      using (Tensor w = Tensor.Of(new float[] { 9, 9, 9, 9 }, 2, 2), who = Tensor.Of(new float[] { 0, 1 }, 2, 1))
        ctx.Embedding.SendGradients(new Dictionary<string, Tensor> { { "watched", w }, { "who", who } }, 1f);
      return new Tensor[0];
    }, num_replicas: Replicas, system: system);
    for (int r = 0; r < Replicas; ++r) {
      CollectionAssert.AreEqual(new float[] { 0, 0, 0, 0 }, seen[r][0]);
      Assert.IsNull(seen[r][1]);
      CollectionAssert.AreEqual(new float[] { 0, 1 }, seen[r][2]); // mean of one id weighted 3: the row
    }
    CollectionAssert.AreEqual(Video, emb.Retrieve("video"));
    // user row 1: g = 2 (1 from each replica, mean weight 3 / 3); a = 9 + 4; w -= 1 * 2 / sqrt(13).
    Assert.AreEqual(1f - 2f / (float)Math.Sqrt(13), emb.Retrieve("user")[1], 1e-6f);
  }

  // Names work in a NativeComputation too (read through the context); its output is
  // replica r's "watched" activation, taken by name.
  sealed class ByName : NativeComputation {
    public override Status Run(ReplicaContext ctx) {
      try {
        ctx.Embedding.Enqueue("watched", new long[] { ctx.ReplicaId() }, new long[] { 1 });
        ctx.SetOutput(0, ctx.Embedding.RecvActivations()["watched"]);
        using (Tensor g = Tensor.Of(new float[] { 0, 0, 1, 1 }, 2, 2))
          ctx.Embedding.SendGradients(new Dictionary<string, Tensor> { { "watched", g } }, 1f);
        return Status.Ok;
      } catch (Exception e) {
        return ctx.Fail(e is OpError ? ((OpError)e).Code : Status.Unknown, e.ToString());
      }
    }
  }

  [Test]
  public void FeatureNamesInANativeComputation() {
    using (var director = new ByName())
    using (var options = new StepOptions())
    using (TensorVector o = system.Replicate(director, Replicas, 0, new TensorVector(), 1, options)) {
      CollectionAssert.AreEqual(new float[] { 0, 0, 1, 10 }, o[0].ToFloatArray());
      CollectionAssert.AreEqual(new float[] { 0, 0, 2, 20 }, o[1].ToFloatArray());
    }
    // Rows 0 and 1 each -= 0.5 [1, 1].
    CollectionAssert.AreEqual(new float[] { 0.5f, 9.5f, 1.5f, 19.5f }, emb.Retrieve("video", numRows: 2));
  }

  // The step across 2 tasks (tests/programs/EmbeddingTasks.cs): ids travel to the task
  // holding their rows; each task retrieves its own rows, NaN for the other's.
  [Test]
  public void AStepAcrossTwoTasksUnderTpurtLaunch() {
    string dir = Environment.GetEnvironmentVariable("TPURT_CS_DIR") ?? ".";
    string tool = Environment.GetEnvironmentVariable("TPURT_TOOL") ?? Path.Combine(dir, "../../bin/tpurt");
    var info = new ProcessStartInfo(tool, "launch -n 2 --cores-per-task 1 --timeout 60 -- mono " +
                                    Path.Combine(dir, "EmbeddingTasks.exe")) {
      UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true,
    };
    using (Process p = Process.Start(info)) {
      System.Threading.Tasks.Task<string> output = p.StandardOutput.ReadToEndAsync();
      System.Threading.Tasks.Task<string> errors = p.StandardError.ReadToEndAsync();
      bool exited = p.WaitForExit(90000);
      if (!exited) p.Kill();
      Assert.IsTrue(exited, "tpurt launch did not exit within 90 s");
      string all = output.Result + errors.Result;
      Assert.AreEqual(0, p.ExitCode, all);
      StringAssert.Contains("[0] task 0 ok", all);
      StringAssert.Contains("[1] task 1 ok", all);
    }
  }

  // The generated members the layer above is built on (bindings/api_map.txt), each
  // checked against what the layer reports.
  [Test]
  public void GeneratedMembersAgreeWithTheLayer() {
    CollectionAssert.AreEqual(EmbeddingConfig.FromJson(Json), TpurtNative.EmbeddingConfigFromJson(Json).ToArray());
    CollectionAssert.AreEqual(EmbeddingConfig.FromJson(Json), system.EmbeddingConfig().ToArray());
    Assert.AreEqual(EmbeddingMode.Training, system.EmbeddingMode());
    Assert.AreEqual(2, system.EmbeddingNumTables());
    Assert.AreEqual(1, system.EmbeddingTableIndex("user"));
    Assert.AreEqual("video", system.EmbeddingTableName(0));
    Assert.AreEqual(4, system.EmbeddingVocabularySize(1));
    Assert.AreEqual(2, system.EmbeddingDimension(0));
    Assert.AreEqual(EmbeddingOptimizer.Adagrad, system.EmbeddingTableOptimizer(1));
    Assert.AreEqual(2, system.EmbeddingNumVariables(1));
    Assert.AreEqual("accumulators", system.EmbeddingVariableName(1, 1));
    Assert.AreEqual(1, system.EmbeddingRowCore(0, 4));
    Assert.AreEqual(1, system.EmbeddingShardRow(0, 4));
    Assert.AreEqual(3, system.EmbeddingNumFeatures());
    Assert.AreEqual(2, system.EmbeddingFeatureIndex("who"));
    Assert.AreEqual("liked", system.EmbeddingFeatureName(1));
    Assert.AreEqual(1, system.EmbeddingFeatureTable(2));
    CollectionAssert.AreEqual(new long[] { 2, 2 }, system.EmbeddingFeatureShape(0).ToArray());
    system.EmbeddingLoad(1, 0, 1, 2, new FloatVector(new[] { 7f, 8f }));
    CollectionAssert.AreEqual(new[] { 0.5f, 7, 8, 2 }, system.EmbeddingRetrieve(1, 0, 0, 4).ToArray());

    var got = new ConcurrentDictionary<int, float[]>();
    tpu.replicate((ctx, x) => {
      Assert.AreEqual(3, ctx.EmbeddingNumFeatures());
      Assert.AreEqual(1, ctx.EmbeddingFeatureIndex("liked"));
      Assert.AreEqual("who", ctx.EmbeddingFeatureName(2));
      var batch = new EmbeddingFeatureBatch { Feature = 2, Ids = new Int64Vector(new long[] { 1, 2 }),
                                              RowSplits = new Int64Vector(new long[] { 0, 2, 2 }) };
      ctx.EmbeddingEnqueue(new EmbeddingFeatureBatchVector(new[] { batch }));
      using (TensorVector acts = ctx.EmbeddingRecvActivations()) {
        Assert.IsTrue(acts[0].IsNull());
        got[ctx.ReplicaId()] = acts[2].ToFloatArray();
      }
      using (Tensor g = Tensor.Of(new float[] { 1, 0 }, 2, 1))
        ctx.EmbeddingSendGradients(new TensorVector(new[] { new Tensor(), new Tensor(), g }), new FloatVector(new[] { 1f }));
      return new Tensor[0];
    }, num_replicas: Replicas, system: system);
    CollectionAssert.AreEqual(new float[] { 15, 0 }, got[0]); // 7 + 8, then an empty sample
    // Rows 1 and 2 each got 1 from both replicas: a = 9 + 4 = 13; w -= 1 * 2 / sqrt(13).
    float[] w = emb.Retrieve("user");
    Assert.AreEqual(7f - 2f / (float)Math.Sqrt(13), w[1], 1e-5f);
    Assert.AreEqual(8f - 2f / (float)Math.Sqrt(13), w[2], 1e-5f);
  }
}
