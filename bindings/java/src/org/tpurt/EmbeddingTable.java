package org.tpurt;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * A table of the system's embedding configuration (system.embeddingTable(name)): its shape,
 * optimizer and variables ("parameters", then the optimizer's slots), with load and retrieve
 * of row ranges as row-major float[] (Load/RetrieveTPUEmbedding*Parameters). A view: reads
 * through the system, which must stay open.
 */
public final class EmbeddingTable {
  private final TpuSystem system;
  private final int index;

  EmbeddingTable(TpuSystem system, int index) {
    this.system = system;
    this.index = index;
  }

  public int index() {
    return index;
  }

  public String name() {
    return system.embeddingTableName(index);
  }

  public long vocabularySize() {
    return system.embeddingVocabularySize(index);
  }

  public int dimension() {
    return system.embeddingDimension(index);
  }

  public EmbeddingOptimizer optimizer() {
    return system.embeddingTableOptimizer(index);
  }

  /** "parameters" then the optimizer's slot variables, with TensorFlow's names. */
  public List<String> variableNames() {
    int n = system.embeddingNumVariables(index);
    List<String> out = new ArrayList<>(n);
    for (int v = 0; v < n; v++) out.add(system.embeddingVariableName(index, v));
    return Collections.unmodifiableList(out);
  }

  /** The index of the variable called name; NotFoundError naming it and the table's variables. */
  public int variableIndex(String variable) {
    if (variable == null) throw new IllegalArgumentException("variable is null");
    List<String> names = variableNames();
    int v = names.indexOf(variable);
    if (v < 0)
      throw new NotFoundError("embedding table '" + name() + "' has no variable '" + variable + "'; it has " + names);
    return v;
  }

  /** Where row lives: the global core holding its shard and its row there. */
  public EmbeddingRowOwner rowOwner(long row) {
    return new EmbeddingRowOwner(system.embeddingRowCore(index, row), system.embeddingShardRow(index, row));
  }

  /** Writes rows from firstRow on, values.length / dimension of them, row-major. */
  public void load(String variable, long firstRow, float[] values) {
    load(variableIndex(variable), firstRow, values);
  }

  public void load(int variable, long firstRow, float[] values) {
    if (values == null) throw new IllegalArgumentException("values is null");
    int dim = dimension();
    if (values.length % dim != 0)
      throw new InvalidArgumentError("embedding table '" + name() + "': " + values.length
          + " values are not whole rows of dimension " + dim);
    system.embeddingLoad(index, variable, firstRow, values.length / dim, values);
  }

  /** Loads the whole variable: vocabularySize() * dimension() values. */
  public void load(String variable, float[] values) {
    load(variable, 0, values);
  }

  /** Rows [firstRow, firstRow + numRows), row-major (rows other tasks hold are NaN). */
  public float[] retrieve(String variable, long firstRow, long numRows) {
    return retrieve(variableIndex(variable), firstRow, numRows);
  }

  public float[] retrieve(int variable, long firstRow, long numRows) {
    return system.embeddingRetrieve(index, variable, firstRow, numRows);
  }

  /** The whole variable. */
  public float[] retrieve(String variable) {
    return retrieve(variable, 0, vocabularySize());
  }

  @Override
  public String toString() {
    return "EmbeddingTable(" + name() + ", " + vocabularySize() + " x " + dimension() + ", " + optimizer() + ")";
  }
}
