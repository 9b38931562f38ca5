package org.tpurt;

import static org.tpurt.TpuArgs.requireComputation;
import static org.tpurt.TpuArgs.rows;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;

/**
 * tpu's steps (the replicate family): the one replicate every public form ends in, the
 * options a step passes, and the shards' outputs joined as TensorFlow's shard does.
 */
final class TpuSteps {
  private TpuSteps() {}

  static List<Tensor[]> replicateEach(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs,
                                              InfeedQueue infeedQueue, DeviceAssignment deviceAssignment, TensorShape shape) {
    List<List<Tensor>> rows = rows(inputs);
    int numInputs = rows.isEmpty() ? 0 : rows.get(0).size();
    return replicate(computation, inputs == null ? null : rows, infeedQueue, deviceAssignment,
        Collections.nCopies(numInputs, shape.toShape()));
  }

  static List<Tensor[]> replicate(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs,
                                          InfeedQueue infeedQueue, DeviceAssignment deviceAssignment, List<Shape> maximumShapes) {
    return replicate(computation, inputs, infeedQueue, deviceAssignment, maximumShapes, null, null);
  }

  static List<Tensor[]> replicate(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs,
                                          InfeedQueue infeedQueue, DeviceAssignment deviceAssignment, List<Shape> maximumShapes,
                                          int[][] inputPartitionDims, int[][] outputPartitionDims) {
    requireComputation(computation);
    TpuSystem system = tpu.system();
    List<List<Tensor>> rows = rows(inputs);
    // inputs null is TensorFlow's [[]]: one replica with no inputs (or the device
    // assignment's replicas, each with none); [] is zero replicas, which run nothing.
    int numReplicas = !rows.isEmpty() ? rows.size()
        : deviceAssignment != null ? deviceAssignment.numReplicas() : inputs == null ? 1 : 0;
    if (numReplicas == 0) return new ArrayList<>();
    int numInputs = rows.isEmpty() ? 0 : rows.get(0).size();
    for (int r = 0; r < rows.size(); r++)
      if (rows.get(r).size() != numInputs)
        throw new InvalidArgumentError("replica " + r + " has " + rows.get(r).size() + " inputs, replica 0 has " + numInputs);
    boolean plain = maximumShapes == null && inputPartitionDims == null && outputPartitionDims == null;
    StepOptions options = plain ? stepOptions(infeedQueue, deviceAssignment) : newStepOptions(infeedQueue, deviceAssignment);
    if (maximumShapes != null) {
      ShapeVector shapes = new ShapeVector();
      shapes.addAll(maximumShapes);
      options.setMaximumShapes(shapes);
    }
    if (inputPartitionDims != null) options.setInputPartitions(inputPartitionDims);
    // Partitioned outputs are joined by the library, so the step is told how many there are.
    int numOutputs = outputPartitionDims == null ? 0 : outputPartitionDims.length;
    if (outputPartitionDims != null) options.setOutputPartitions(outputPartitionDims);
    JavaStep step = new JavaStep(computation, numReplicas);
    TensorVector flat = STEP_INPUTS.get();
    TensorVector joined;
    try {
      for (List<Tensor> row : rows) flat.addAll(row);
      joined = system.replicate(step, numReplicas, numInputs, flat, numOutputs, options);
    } finally {
      flat.clear();  // the step holds what it still needs
    }
    List<Tensor[]> out = new ArrayList<>(numReplicas);
    for (int r = 0; r < numReplicas; r++)
      out.add(numOutputs == 0 ? step.outputs(r)
          : joined.subList(r * numOutputs, (r + 1) * numOutputs).toArray(new Tensor[0]));
    return out;
  }

  // Per calling thread, reused step after step: a new proxy of these costs about a
  // microsecond of finalizer work (register, collect, finalize), much of a step's
  // budget. The options are never changed; the inputs are emptied after each step.
  static final ThreadLocal<StepOptions> DEFAULT_STEP_OPTIONS = ThreadLocal.withInitial(StepOptions::new);
  static final ThreadLocal<TensorVector> STEP_INPUTS = ThreadLocal.withInitial(TensorVector::new);

  /** Options the caller does not change afterwards. */
  static StepOptions stepOptions(InfeedQueue infeedQueue, DeviceAssignment deviceAssignment) {
    if (infeedQueue == null && deviceAssignment == null) return DEFAULT_STEP_OPTIONS.get();
    return newStepOptions(infeedQueue, deviceAssignment);
  }

  static StepOptions newStepOptions(InfeedQueue infeedQueue, DeviceAssignment deviceAssignment) {
    StepOptions options = new StepOptions();
    if (infeedQueue != null) options.setInfeedQueue(infeedQueue);
    if (deviceAssignment != null) options.setDeviceAssignment(deviceAssignment);
    return options;
  }

  /**
   * Each shard's outputs joined as TensorFlow's shard does by default: output j of every
   * shard concatenated along axis 0 in shard order, scalar outputs stacked into a
   * [numShards] vector.
   */
  static Tensor[] concatenateShards(JavaStep step, int numShards) {
    int numOutputs = step.outputs(0).length;
    for (int s = 1; s < numShards; s++)
      if (step.outputs(s).length != numOutputs)
        throw new InvalidArgumentError("shard " + s + " returned " + step.outputs(s).length + " outputs, shard 0 returned " + numOutputs);
    Tensor[] out = new Tensor[numOutputs];
    for (int j = 0; j < numOutputs; j++) {
      long rows = 0;
      long bytes = 0;
      Tensor first = step.outputs(0)[j];
      for (int s = 0; s < numShards; s++) {
        Tensor t = step.outputs(s)[j];
        if (t == null)
          throw new InvalidArgumentError("shard " + s + "'s output " + j + " is null; a concatenated output cannot be");
        // Concatenation along axis 0 (as C#'s and Go's joins): one dtype and rank, and
        // every other dimension equal; scalars are stacked.
        boolean same = t.rank() == first.rank() && t.dtype() == first.dtype();
        for (int a = 1; same && a < t.rank(); a++) same = t.dim(a) == first.dim(a);
        if (!same)
          throw new InvalidArgumentError("shard " + s + "'s output " + j + " (" + t.dtype() + " " + Arrays.toString(t.dims())
                                         + ") cannot be concatenated with shard 0's (" + first.dtype() + " "
                                         + Arrays.toString(first.dims()) + ")");
        rows += t.rank() == 0 ? 1 : t.dim(0);
        bytes += t.byteSize();
      }
      byte[] joined = new byte[Math.toIntExact(bytes)];
      int at = 0;
      for (int s = 0; s < numShards; s++) {
        byte[] b = step.outputs(s)[j].toBytes();
        System.arraycopy(b, 0, joined, at, b.length);
        at += b.length;
      }
      long[] dims = first.rank() == 0 ? new long[1] : first.dims();
      dims[0] = rows;
      out[j] = Tensor.fromBytes(first.dtype(), dims, joined);
    }
    return out;
  }
}
