// TPU embeddings for C# (include/tpurt/embedding.h): the configuration from JSON
// (EmbeddingConfig), the system's tables and features (system.Embedding), load and
// retrieve with float[], and one step inside a computation (ctx.Embedding: Enqueue,
// RecvActivations, SendGradients), by feature name or index.
using System;
using System.Collections;
using System.Collections.Generic;

namespace Tpurt {

// TensorFlow's TPUEmbeddingConfiguration, serialized, for tpu.initialize_system's
// embedding_config (or SystemOptions.EmbeddingConfig).
public static class EmbeddingConfig {
  // From proto3 JSON (embedding.h has an example); an InvalidArgumentError names the
  // path of what is wrong.
  public static byte[] FromJson(string json) {
    if (json == null) throw new ArgumentNullException(nameof(json));
    using (ByteVector v = TpurtNative.EmbeddingConfigFromJson(json)) return v.ToArray();
  }
}

public partial class TpuSystem {
  TpuEmbedding embedding;
  // The embedding tables of this system's configuration (none without one).
  public TpuEmbedding Embedding {
    get {
      if (embedding == null) System.Threading.Interlocked.CompareExchange(ref embedding, new TpuEmbedding(this), null);
      return embedding;
    }
  }
}

// Where a row lives: the global core holding its shard (task Core / cores per task) and
// its row in that shard.
public struct EmbeddingRowOwner {
  public int Core { get; }
  public long ShardRow { get; }
  public EmbeddingRowOwner(int core, long shardRow) { Core = core; ShardRow = shardRow; }
  public override string ToString() { return "core " + Core + " row " + ShardRow; }
}

// A system's embedding configuration: tables and features, read once (it is fixed at
// init), and Load/Retrieve by name or index.
public sealed class TpuEmbedding {
  public TpuSystem System { get; }
  EmbeddingTable[] tables;
  EmbeddingFeature[] features;

  internal TpuEmbedding(TpuSystem system) { System = system; }

  public EmbeddingMode Mode { get { return System.EmbeddingMode(); } }

  // Read once under a lock: replicas look features up concurrently, and a feature's
  // Table is the same object as Tables' entry.
  public IReadOnlyList<EmbeddingTable> Tables {
    get {
      lock (this) {
        if (tables == null) {
          var t = new EmbeddingTable[System.EmbeddingNumTables()];
          for (int i = 0; i < t.Length; ++i) t[i] = new EmbeddingTable(System, i);
          tables = t;
        }
        return tables;
      }
    }
  }
  public IReadOnlyList<EmbeddingFeature> Features {
    get {
      lock (this) {
        if (features == null) {
          var f = new EmbeddingFeature[System.EmbeddingNumFeatures()];
          for (int i = 0; i < f.Length; ++i) f[i] = new EmbeddingFeature(System, i, Tables[System.EmbeddingFeatureTable(i)]);
          features = f;
        }
        return features;
      }
    }
  }

  // By name: NotFoundError naming it. By index: OutOfRangeError naming it and the count.
  public EmbeddingTable Table(string name) {
    if (name == null) throw new ArgumentNullException(nameof(name));
    return Tables[System.EmbeddingTableIndex(name)];
  }
  public EmbeddingTable Table(int index) {
    if (index < 0 || index >= Tables.Count) System.EmbeddingTableName(index); // throws OutOfRangeError
    return Tables[index];
  }
  public EmbeddingFeature Feature(string name) {
    if (name == null) throw new ArgumentNullException(nameof(name));
    return Features[System.EmbeddingFeatureIndex(name)];
  }
  public EmbeddingFeature Feature(int index) {
    if (index < 0 || index >= Features.Count) System.EmbeddingFeatureName(index); // throws OutOfRangeError
    return Features[index];
  }

  // Load/RetrieveTPUEmbedding*Parameters: a variable of a table ("parameters", the
  // rows, or a slot such as "accumulators"), rows [firstRow, firstRow + numRows)
  // row-major; numRows -1 is every row from firstRow on.
  public void Load(string table, float[] values, string variable = "parameters", long firstRow = 0) {
    EmbeddingTable t = Table(table);
    t.Load(values, t.VariableIndex(variable), firstRow);
  }
  public void Load(int table, int variable, long firstRow, float[] values) { Table(table).Load(values, variable, firstRow); }
  public float[] Retrieve(string table, string variable = "parameters", long firstRow = 0, long numRows = -1) {
    EmbeddingTable t = Table(table);
    return t.Retrieve(t.VariableIndex(variable), firstRow, numRows);
  }
  public float[] Retrieve(int table, int variable, long firstRow, long numRows) {
    return Table(table).Retrieve(variable, firstRow, numRows);
  }
  public EmbeddingRowOwner RowOwner(string table, long row) { return Table(table).RowOwner(row); }
  public EmbeddingRowOwner RowOwner(int table, long row) { return Table(table).RowOwner(row); }
}

// One TableDescriptor: vocabulary_size x dimension rows and its optimizer's slots.
public sealed class EmbeddingTable {
  readonly TpuSystem system;
  public int Index { get; }
  public string Name { get; }
  public long VocabularySize { get; }
  public int Dimension { get; }
  public EmbeddingOptimizer Optimizer { get; }
  // "parameters", then the optimizer's slots by TensorFlow's names.
  public IReadOnlyList<string> Variables { get; }

  internal EmbeddingTable(TpuSystem system, int index) {
    this.system = system;
    Index = index;
    Name = system.EmbeddingTableName(index);
    VocabularySize = system.EmbeddingVocabularySize(index);
    Dimension = system.EmbeddingDimension(index);
    Optimizer = system.EmbeddingTableOptimizer(index);
    var v = new string[system.EmbeddingNumVariables(index)];
    for (int i = 0; i < v.Length; ++i) v[i] = system.EmbeddingVariableName(index, i);
    Variables = v;
  }

  // NotFoundError naming the variable, the table and the variables it has.
  public int VariableIndex(string variable) {
    if (variable == null) throw new ArgumentNullException(nameof(variable));
    for (int i = 0; i < Variables.Count; ++i)
      if (Variables[i] == variable) return i;
    throw new NotFoundError("table \"" + Name + "\" has no variable \"" + variable + "\" (it has " +
                            string.Join(", ", Variables) + ")");
  }

  public EmbeddingRowOwner RowOwner(long row) {
    return new EmbeddingRowOwner(system.EmbeddingRowCore(Index, row), system.EmbeddingShardRow(Index, row));
  }

  // values: whole rows, values.Length / Dimension of them from firstRow (a length that
  // is no multiple of Dimension is the library's InvalidArgumentError).
  public void Load(float[] values, string variable = "parameters", long firstRow = 0) {
    Load(values, VariableIndex(variable), firstRow);
  }
  public void Load(float[] values, int variable, long firstRow = 0) {
    if (values == null) throw new ArgumentNullException(nameof(values));
    system.EmbeddingLoadFloats(Index, variable, firstRow, values.Length / Math.Max(Dimension, 1), values, values.Length);
  }
  // numRows * Dimension floats; numRows -1: every row from firstRow on. In a multi-task
  // system the rows other tasks hold are NaN.
  public float[] Retrieve(string variable = "parameters", long firstRow = 0, long numRows = -1) {
    return Retrieve(VariableIndex(variable), firstRow, numRows);
  }
  public float[] Retrieve(int variable, long firstRow = 0, long numRows = -1) {
    if (numRows == -1) numRows = Math.Max(VocabularySize - firstRow, 0);
    // The size query checks the range before anything is allocated.
    var rows = new float[system.EmbeddingRetrieveFloats(Index, variable, firstRow, numRows, null, 0)];
    for (int i = 0; i < rows.Length; ++i) rows[i] = float.NaN;
    if (rows.Length > 0) system.EmbeddingRetrieveFloats(Index, variable, firstRow, numRows, rows, rows.Length);
    return rows;
  }

  public override string ToString() { return "EmbeddingTable(" + Name + ", " + VocabularySize + " x " + Dimension + ", " + Optimizer + ")"; }
}

// One feature: the table it looks up and the shape of its activation.
public sealed class EmbeddingFeature {
  public int Index { get; }
  public string Name { get; }
  public EmbeddingTable Table { get; }
  // input_shape + [dimension]: the activation's (and its gradient's) shape.
  public long[] Shape { get; }
  // The product of input_shape: samples per participant's batch.
  public long Samples { get; }

  internal EmbeddingFeature(TpuSystem system, int index, EmbeddingTable table) {
    Index = index;
    Name = system.EmbeddingFeatureName(index);
    Table = table;
    using (Int64Vector s = system.EmbeddingFeatureShape(index)) Shape = s.ToArray();
    long n = 1;
    for (int i = 0; i + 1 < Shape.Length; ++i) n *= Shape[i];
    Samples = n;
  }

  public override string ToString() { return "EmbeddingFeature(" + Name + " -> " + Table.Name + ", [" + string.Join(", ", Shape) + "])"; }
}

// One feature's ids for a step (tpu_embedding_feature_batch): COO (Sparse, TensorFlow's
// EnqueueTPUEmbeddingSparseTensorBatch) or ragged (Ragged, ...RaggedTensorBatch), or
// no ids at all (Empty: every sample's activation is zeros). weights null: every 1.
public sealed class EmbeddingInput {
  // By name (FeatureIndex -1) or by index (FeatureName null).
  public string FeatureName { get; }
  public int FeatureIndex { get; }
  public long[] Ids { get; }
  public long[] SampleIndices { get; }
  public long[] RowSplits { get; }
  public float[] Weights { get; }
  public EmbeddingCombiner Combiner { get; }

  EmbeddingInput(string name, int index, long[] ids, long[] sampleIndices, long[] rowSplits, float[] weights,
                 EmbeddingCombiner combiner) {
    FeatureName = name;
    FeatureIndex = index;
    Ids = ids ?? throw new ArgumentNullException(nameof(ids));
    SampleIndices = sampleIndices;
    RowSplits = rowSplits;
    Weights = weights;
    Combiner = combiner;
  }
  internal static EmbeddingInput Of(int feature, long[] ids, long[] sampleIndices, long[] rowSplits, float[] weights,
                                    EmbeddingCombiner combiner) {
    return new EmbeddingInput(null, feature, ids, sampleIndices, rowSplits, weights, combiner);
  }
  static string Named(string feature) { return feature ?? throw new ArgumentNullException(nameof(feature)); }

  // sampleIndices[i]: the sample of ids[i].
  public static EmbeddingInput Sparse(string feature, long[] ids, long[] sampleIndices, float[] weights = null,
                                      EmbeddingCombiner combiner = EmbeddingCombiner.Sum) {
    return new EmbeddingInput(Named(feature), -1, ids, sampleIndices ?? throw new ArgumentNullException(nameof(sampleIndices)),
                              null, weights, combiner);
  }
  public static EmbeddingInput Sparse(int feature, long[] ids, long[] sampleIndices, float[] weights = null,
                                      EmbeddingCombiner combiner = EmbeddingCombiner.Sum) {
    return new EmbeddingInput(null, feature, ids, sampleIndices ?? throw new ArgumentNullException(nameof(sampleIndices)),
                              null, weights, combiner);
  }
  // Sample b owns ids[rowSplits[b] .. rowSplits[b + 1]).
  public static EmbeddingInput Ragged(string feature, long[] ids, long[] rowSplits, float[] weights = null,
                                      EmbeddingCombiner combiner = EmbeddingCombiner.Sum) {
    return new EmbeddingInput(Named(feature), -1, ids, null, rowSplits ?? throw new ArgumentNullException(nameof(rowSplits)),
                              weights, combiner);
  }
  public static EmbeddingInput Ragged(int feature, long[] ids, long[] rowSplits, float[] weights = null,
                                      EmbeddingCombiner combiner = EmbeddingCombiner.Sum) {
    return new EmbeddingInput(null, feature, ids, null, rowSplits ?? throw new ArgumentNullException(nameof(rowSplits)),
                              weights, combiner);
  }
  public static EmbeddingInput Empty(string feature) { return new EmbeddingInput(Named(feature), -1, new long[0], null, null, null, EmbeddingCombiner.Sum); }
  public static EmbeddingInput Empty(int feature) { return new EmbeddingInput(null, feature, new long[0], null, null, null, EmbeddingCombiner.Sum); }

  internal EmbeddingFeatureBatch ToBatch(int feature) {
    var b = new EmbeddingFeatureBatch { Feature = feature, Combiner = Combiner };
    b.AssignIds(Ids, Ids.Length);
    if (SampleIndices != null) b.AssignSampleIndices(SampleIndices, SampleIndices.Length);
    if (RowSplits != null) b.AssignRowSplits(RowSplits, RowSplits.Length);
    if (Weights != null) b.AssignWeights(Weights, Weights.Length);
    return b;
  }
}

public partial class ReplicaContext {
  // The step's system, set by the binding's own computations (tpu.replicate, ...):
  // float[] gradients take their features' shapes from it.
  internal TpuSystem StepSystem;
  // This participant's embedding step.
  public ReplicaEmbedding Embedding { get { return new ReplicaEmbedding(this); } }
}

// One step's embedding ops for one participant (replica, logical core): Enqueue once,
// then RecvActivations and SendGradients (collectives: every participant calls them).
public sealed class ReplicaEmbedding {
  readonly ReplicaContext ctx;
  internal ReplicaEmbedding(ReplicaContext ctx) { this.ctx = ctx; }

  TpuEmbedding Config {
    get {
      if (ctx.StepSystem == null)
        throw new InvalidOperationException("float[] gradients need a step the binding started (tpu.replicate, ...) for " +
                                            "their shapes; a NativeComputation passes Tensors");
      return ctx.StepSystem.Embedding;
    }
  }
  // A name the configuration lacks is an InvalidArgumentError (as the enqueue's own check).
  int FeatureIndex(string name) {
    try {
      return ctx.EmbeddingFeatureIndex(name);
    } catch (NotFoundError e) {
      throw new InvalidArgumentError(e.Message);
    }
  }

  // The participant's ids for this step, any subset of the features, each at most
  // once; one Enqueue per step.
  public void Enqueue(params EmbeddingInput[] features) { Enqueue((IEnumerable<EmbeddingInput>)features); }
  public void Enqueue(IEnumerable<EmbeddingInput> features) {
    if (features == null) throw new ArgumentNullException(nameof(features));
    var batches = new List<EmbeddingFeatureBatch>();
    try {
      int i = 0;
      foreach (EmbeddingInput f in features) {
        if (f == null) throw new ArgumentNullException(nameof(features), "features[" + i + "] is null");
        batches.Add(f.ToBatch(f.FeatureName != null ? FeatureIndex(f.FeatureName) : f.FeatureIndex));
        ++i;
      }
      using (var v = new EmbeddingFeatureBatchVector(batches)) ctx.EmbeddingEnqueue(v);
    } finally {
      foreach (EmbeddingFeatureBatch b in batches) b.Dispose();
    }
  }
  // One feature's ids (the step's only enqueue): COO with sampleIndices, ragged with
  // rowSplits (pass it by name), neither for a feature without ids.
  public void Enqueue(string feature, long[] ids, long[] sampleIndices = null, long[] rowSplits = null, float[] weights = null,
                      EmbeddingCombiner combiner = EmbeddingCombiner.Sum) {
    if (feature == null) throw new ArgumentNullException(nameof(feature));
    Enqueue(FeatureIndex(feature), ids, sampleIndices, rowSplits, weights, combiner);
  }
  public void Enqueue(int feature, long[] ids, long[] sampleIndices = null, long[] rowSplits = null, float[] weights = null,
                      EmbeddingCombiner combiner = EmbeddingCombiner.Sum) {
    if (ids == null) throw new ArgumentNullException(nameof(ids));
    // Both, or neither with ids: the library's InvalidArgumentError names the feature.
    Enqueue(EmbeddingInput.Of(feature, ids, sampleIndices, rowSplits, weights, combiner));
  }

  // One [samples..., dimension] tensor per enqueued feature, by index or name; they
  // belong to the step (released when the computation returns).
  public EmbeddingActivations RecvActivations() {
    var tensors = new Tensor[ctx.EmbeddingNumFeatures()];
    var names = new string[tensors.Length];
    using (TensorVector v = ctx.EmbeddingRecvActivations()) {
      for (int f = 0; f < tensors.Length && f < v.Count; ++f) {
        Tensor t = v[f];
        if (t.IsNull()) {
          t.Dispose();
        } else {
          tensors[f] = DelegateComputation.Own(t);
          names[f] = ctx.EmbeddingFeatureName(f); // the context is gone after the step: read now
        }
      }
    }
    return new EmbeddingActivations(tensors, names);
  }

  // The gradients of this participant's activations, one per feature index (null for
  // a feature not enqueued; a shorter list is padded with nulls); learningRates: the
  // dynamic learning rates by tag, the same on every participant.
  public void SendGradients(IReadOnlyList<Tensor> gradients, params float[] learningRates) {
    if (gradients == null) throw new ArgumentNullException(nameof(gradients));
    int n = Math.Max(ctx.EmbeddingNumFeatures(), gradients.Count);
    var owned = new List<Tensor>();
    try {
      using (var v = new TensorVector()) {
        for (int f = 0; f < n; ++f) {
          Tensor g = f < gradients.Count ? gradients[f] : null;
          if (g == null) owned.Add(g = new Tensor());
          v.Add(g);
        }
        using (var rates = new FloatVector(learningRates ?? new float[0])) ctx.EmbeddingSendGradients(v, rates);
      }
    } finally {
      foreach (Tensor t in owned) t.Dispose();
    }
  }
  public void SendGradients(IDictionary<string, Tensor> gradients, params float[] learningRates) {
    if (gradients == null) throw new ArgumentNullException(nameof(gradients));
    var byIndex = new Tensor[ctx.EmbeddingNumFeatures()];
    foreach (KeyValuePair<string, Tensor> g in gradients) {
      if (g.Value == null) throw new ArgumentNullException(nameof(gradients), "the gradient of \"" + g.Key + "\" is null");
      byIndex[FeatureIndex(g.Key)] = g.Value;
    }
    SendGradients(byIndex, learningRates);
  }
  // float[] gradients in the feature's activation shape, row-major.
  public void SendGradients(IDictionary<string, float[]> gradients, params float[] learningRates) {
    if (gradients == null) throw new ArgumentNullException(nameof(gradients));
    var byIndex = new Tensor[ctx.EmbeddingNumFeatures()];
    try {
      foreach (KeyValuePair<string, float[]> g in gradients) {
        if (g.Value == null) throw new ArgumentNullException(nameof(gradients), "the gradient of \"" + g.Key + "\" is null");
        EmbeddingFeature f = Config.Features[FeatureIndex(g.Key)];
        using (Int64Vector dims = Tensor.Dims(f.Shape)) byIndex[f.Index] = Tensor.FromFloat32(dims, g.Value, g.Value.Length);
      }
      SendGradients(byIndex, learningRates);
    } finally {
      foreach (Tensor t in byIndex) t?.Dispose();
    }
  }
}

// A participant's activations: entry f is feature f's tensor, null if it was not enqueued;
// by name, the enqueued features'.
public sealed class EmbeddingActivations : IReadOnlyList<Tensor> {
  readonly Tensor[] tensors;
  readonly string[] names; // of the enqueued features
  internal EmbeddingActivations(Tensor[] tensors, string[] names) { this.tensors = tensors; this.names = names; }

  public int Count { get { return tensors.Length; } }
  public Tensor this[int feature] {
    get {
      if (feature < 0 || feature >= tensors.Length)
        throw new ArgumentOutOfRangeException(nameof(feature), feature, "the configuration has " + tensors.Length + " features");
      return tensors[feature];
    }
  }
  // KeyNotFoundException for a feature not enqueued in this step (or not configured).
  public Tensor this[string feature] {
    get {
      if (!TryGetValue(feature, out Tensor t))
        throw new KeyNotFoundException("feature \"" + feature + "\" was not enqueued in this step");
      return t;
    }
  }
  public bool TryGetValue(string feature, out Tensor activation) {
    if (feature == null) throw new ArgumentNullException(nameof(feature));
    int f = Array.IndexOf(names, feature);
    activation = f < 0 ? null : tensors[f];
    return activation != null;
  }
  // The enqueued features' activations by name.
  public Dictionary<string, Tensor> ToDictionary() {
    var d = new Dictionary<string, Tensor>();
    for (int f = 0; f < tensors.Length; ++f)
      if (tensors[f] != null) d[names[f]] = tensors[f];
    return d;
  }

  public IEnumerator<Tensor> GetEnumerator() { return ((IEnumerable<Tensor>)tensors).GetEnumerator(); }
  IEnumerator IEnumerable.GetEnumerator() { return GetEnumerator(); }
}

}
