// Whole-system checkpoints from C# (issue 31): a round trip of a table and a tensor,
// the newest checkpoint, a restore onto another sharding, and refusals as typed errors.
using System;
using System.IO;
using System.Linq;
using NUnit.Framework;
using Tpurt;

[TestFixture]
public class CheckpointTests {
  static string Json(string sharding) {
    return @"{""table_descriptor"": [{""name"": ""video"", ""vocabulary_size"": 7, ""dimension"": 2,
      ""optimization_parameters"": {""learning_rate"": {""constant"": 0.5}, ""adagrad"": {""initial_accumulator"": 0.1}}}],
      ""feature_descriptor"": [{""name"": ""watched"", ""table_id"": 0, ""input_shape"": [2]}],
      ""sharding_strategy"": """ + sharding + @"""}";
  }
  string dir;

  [SetUp]
  public void MakeDir() { dir = Path.Combine(Path.GetTempPath(), "tpurt-cs-ckpt-" + Guid.NewGuid().ToString("N")); }
  [TearDown]
  public void RemoveDir() { if (Directory.Exists(dir)) Directory.Delete(dir, true); }

  [Test]
  public void SaveThenRestoreOntoAnotherShardingBitForBit() {
    float[] rows = Enumerable.Range(0, 14).Select(i => i * 1.25f - 3).ToArray();
    float[] acc = Enumerable.Range(0, 14).Select(i => 0.5f + i).ToArray();
    using (TpuSystem s = tpu.initialize_system(embedding_config: EmbeddingConfig.FromJson(Json("DIV_DEFAULT")), num_cores: 2))
    using (Tensor w = Tensor.Of(new float[] { 1, -2, 3 }, 3)) {
      s.Embedding.Load("video", rows);
      s.Embedding.Load("video", acc, "accumulators");
      Assert.IsFalse(Checkpoint.TryLatest(dir, out long none));
      s.SaveCheckpoint(dir, 12, new System.Collections.Generic.Dictionary<string, Tensor> { { "w", w } });
      Assert.AreEqual(12, Checkpoint.Latest(dir));
      var again = Assert.Throws<AlreadyExistsError>(() => s.SaveCheckpoint(dir, 12));
      StringAssert.Contains("ckpt-12", again.Message);
    }
    using (TpuSystem s = tpu.initialize_system(embedding_config: EmbeddingConfig.FromJson(Json("MOD")), num_cores: 3)) {
      var tensors = s.RestoreCheckpoint(dir, out long step, tensorNames: new[] { "w" });
      Assert.AreEqual(12, step);
      CollectionAssert.AreEqual(new float[] { 1, -2, 3 }, tensors["w"].ToFloatArray());
      tensors["w"].Dispose();
      CollectionAssert.AreEqual(rows, s.Embedding.Retrieve("video"));
      CollectionAssert.AreEqual(acc, s.Embedding.Retrieve("video", "accumulators"));
      var missing = Assert.Throws<NotFoundError>(() => s.RestoreCheckpoint(dir, out long _, tensorNames: new[] { "bias" }));
      StringAssert.Contains("no tensor named 'bias'", missing.Message);
      var options = new CheckpointOptions { TimeoutMs = 5000, Keep = 1 };
      s.SaveCheckpoint(dir, 13, null, options);
      Assert.AreEqual(13, Checkpoint.Latest(dir));
      Assert.IsFalse(Directory.Exists(Path.Combine(dir, "ckpt-12")));
      // The support layer's functions themselves, under SaveCheckpoint and the others.
      using (var none = new StringVector())
      using (var empty = new TensorVector()) {
        TpurtNative.CheckpointSave(s, dir, 14, none, empty, new CheckpointOptions());
        Assert.AreEqual(14, TpurtNative.CheckpointLatest(dir));
        using (RestoredCheckpoint r = TpurtNative.CheckpointRestore(s, dir, -1, none, new CheckpointOptions()))
          Assert.AreEqual(14, r.Step);
      }
    }
  }
}
