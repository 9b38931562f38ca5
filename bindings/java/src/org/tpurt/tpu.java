package org.tpurt;

import static org.tpurt.TpuArgs.adapt;
import static org.tpurt.TpuArgs.asComputation;
import static org.tpurt.TpuArgs.asInt;
import static org.tpurt.TpuArgs.asOptional;
import static org.tpurt.TpuArgs.asRows;
import static org.tpurt.TpuArgs.asTensors;
import static org.tpurt.TpuArgs.asType;
import static org.tpurt.TpuArgs.requireComputation;
import static org.tpurt.TpuArgs.tensors;
import static org.tpurt.TpuArgs.wrongType;
import static org.tpurt.TpuCollectives.fusedSum;
import static org.tpurt.TpuSteps.concatenateShards;
import static org.tpurt.TpuSteps.stepOptions;

import java.util.AbstractMap;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * tf.tpu for Java: static methods mirroring TensorFlow's tpu module (snake_case, with
 * camelCase aliases), over the default system that initialize_system starts. Inside a
 * computation, the collectives find the current replica by themselves. The work behind
 * them: TpuSteps (the replicate family's step), TpuCollectives, TpuArgs (arguments and
 * the _dyn forms' types).
 */
public final class tpu {
  private static volatile TpuSystem defaultSystem;

  private tpu() {}

  // ---- system ------------------------------------------------------------------------------

  /** Starts the default system with the library's defaults (TPURT_NUM_CORES or the machine's cores). */
  public static TpuSystem initialize_system() {
    return initialize_system(new SystemOptions());
  }

  /** tf.tpu.initialize_system(embedding_config, job): null means none / the default "localhost". */
  public static TpuSystem initialize_system(byte[] embeddingConfig, String job) {
    SystemOptions options = new SystemOptions();
    if (embeddingConfig != null) options.setEmbeddingConfig(embeddingConfig);
    if (job != null) options.setJobName(job);
    return initialize_system(options);
  }

  /**
   * Starts the default system with these options. TensorFlow's rule: the system lives
   * until tpu.shutdown_system() (or its close(), try-with-resources): the tpu methods keep
   * it as their default system, so dropping the returned reference frees nothing. Its
   * threads (workers, and the Java threads its steps run on) end at either call, or at a
   * system.shutdown(); after shutdown_system, initialize_system starts a new one.
   */
  public static synchronized TpuSystem initialize_system(SystemOptions options) {
    if (options == null) throw new IllegalArgumentException("options is null");
    TpuSystem system = TpuSystem.initializeSystem(options);
    defaultSystem = system;
    return system;
  }

  /**
   * tf.tpu.experimental.initialize_tpu_system(): resolves the cluster from the environment
   * (tpurt launch, Slurm, mpirun, TF_CONFIG, DTENSOR_JOBS); with nothing set it starts a
   * one-process system. The system becomes the default one, and lives until
   * tpu.shutdown_system() (or its close()).
   */
  public static TpuSystem initialize_tpu_system() {
    return initialize_tpu_system(null, new SystemOptions(), new ClusterOptions());
  }

  /** initialize_tpu_system(cluster_resolver); null resolves from the environment. */
  public static TpuSystem initialize_tpu_system(ClusterResolver clusterResolver) {
    return initialize_tpu_system(clusterResolver, new SystemOptions(), new ClusterOptions());
  }

  /**
   * With this task's system options and how the tasks join. As with initialize_system,
   * the system lives until tpu.shutdown_system() (or its close()): the tpu methods keep it
   * as their default system, so dropping the returned reference frees nothing.
   */
  public static synchronized TpuSystem initialize_tpu_system(ClusterResolver clusterResolver, SystemOptions options,
                                                             ClusterOptions clusterOptions) {
    if (options == null) throw new IllegalArgumentException("options is null");
    if (clusterOptions == null) throw new IllegalArgumentException("clusterOptions is null");
    TpuSystem system = TpuSystem.initializeTpuSystem(clusterResolver, options, clusterOptions);
    defaultSystem = system;
    return system;
  }

  public static TpuSystem initializeTpuSystem(ClusterResolver clusterResolver) {
    return initialize_tpu_system(clusterResolver);
  }

  /** tf.tpu.experimental. */
  public static final class experimental {
    private experimental() {}

    public static TpuSystem initialize_tpu_system(ClusterResolver clusterResolver) {
      return tpu.initialize_tpu_system(clusterResolver);
    }
  }

  /** Makes an existing system the one tpu's methods use. */
  public static void use_system(TpuSystem system) {
    if (system == null) throw new IllegalArgumentException("system is null");
    defaultSystem = system;
  }

  /** The system tpu's methods use. */
  public static TpuSystem system() {
    TpuSystem system = defaultSystem;
    if (system == null) throw new FailedPreconditionError("no TPU system: call tpu.initialize_system() first");
    return system;
  }

  /** Shuts down and closes the default system (ends its threads); initialize_system may start another. */
  public static void shutdown_system() {
    shutdown_system(null);
  }

  /** tf.tpu.shutdown_system(job): job must be the system's (null: the default system's). */
  public static synchronized void shutdown_system(String job) {
    TpuSystem system = system();
    // TensorFlow places the shutdown op on /job:{job}/device:TPU_SYSTEM:0: a job the cluster
    // lacks fails placement with InvalidArgumentError, and nothing shuts down.
    if (job != null && !job.equals(system.jobName())) throw new InvalidArgumentError(wrongJob(job, system.jobName()));
    system.shutdown();
    system.close();
    defaultSystem = null;
  }

  static String wrongJob(String job, String own) {
    return "Cannot assign a device for operation ShutdownDistributedTPU: Could not satisfy explicit device specification '/job:"
        + job + "/device:TPU_SYSTEM:0' because no devices matching that specification are registered in this process; "
        + "the TPU system's job is \"" + own + "\"";
  }

  /** tf.tpu.core(num): the device name of logical core num within a replica. */
  public static String core(int num) {
    return tpurt.core(num);
  }

  /** Inside a computation: its logical core within the replica (XLA's partition id, core(n)'s n). */
  public static int logical_core() {
    return ReplicaScope.current("logical_core").logicalCore();
  }

  /**
   * Inside a computation: "this part runs on logical core n", as a tf.device(tpu.core(n)) block.
   * body runs only on that core of each replica; the others get an empty Optional.
   */
  public static <T> Optional<T> on_core(int n, Supplier<T> body) {
    return ReplicaScope.current("on_core").onCore(n, body);
  }

  public static void on_core(int n, Runnable body) {
    ReplicaScope.current("on_core").onCore(n, body);
  }

  // ---- replicate -----------------------------------------------------------------------------

  /** tf.tpu.replicate(computation): inputs None, TensorFlow's [[]]: one replica with no inputs. */
  public static List<Tensor[]> replicate(TpuComputation computation) {
    return TpuSteps.replicate(computation, null, null, null, (List<Shape>) null);
  }

  public static List<Tensor[]> replicate(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs) {
    return TpuSteps.replicate(computation, inputs, null, null, (List<Shape>) null);
  }

  public static List<Tensor[]> replicate(Function<Tensor[], Tensor[]> computation, Iterable<? extends Iterable<Tensor>> inputs) {
    return replicate(adapt(computation), inputs);
  }

  public static List<Tensor[]> replicate(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs,
                                         InfeedQueue infeedQueue, DeviceAssignment deviceAssignment) {
    return TpuSteps.replicate(computation, inputs, infeedQueue, deviceAssignment, (List<Shape>) null);
  }

  /** name: tf.tpu's (deprecated) op name; it does nothing, as in TensorFlow. So in every form below. */
  public static List<Tensor[]> replicate(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs,
                                         InfeedQueue infeedQueue, DeviceAssignment deviceAssignment, String name) {
    return TpuSteps.replicate(computation, inputs, infeedQueue, deviceAssignment, (List<Shape>) null);
  }

  /** maximum_shapes as an int: every input padded to the rank-1 shape [maximumShapes]. */
  public static List<Tensor[]> replicate(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs,
                                         InfeedQueue infeedQueue, DeviceAssignment deviceAssignment, int maximumShapes) {
    return TpuSteps.replicateEach(computation, inputs, infeedQueue, deviceAssignment, new TensorShape(maximumShapes));
  }

  public static List<Tensor[]> replicate(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs,
                                         InfeedQueue infeedQueue, DeviceAssignment deviceAssignment, String name,
                                         int maximumShapes) {
    return replicate(computation, inputs, infeedQueue, deviceAssignment, maximumShapes);
  }

  public static List<Tensor[]> replicate(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs,
                                         InfeedQueue infeedQueue, DeviceAssignment deviceAssignment, String name,
                                         TensorShape maximumShapes) {
    return replicate(computation, inputs, infeedQueue, deviceAssignment, maximumShapes);
  }

  public static List<Tensor[]> replicate(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs,
                                         InfeedQueue infeedQueue, DeviceAssignment deviceAssignment, String name,
                                         Dimension maximumShapes) {
    return replicate(computation, inputs, infeedQueue, deviceAssignment, maximumShapes);
  }

  public static List<Tensor[]> replicate(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs,
                                         InfeedQueue infeedQueue, DeviceAssignment deviceAssignment, String name,
                                         Iterable<TensorShape> maximumShapes) {
    return replicate(computation, inputs, infeedQueue, deviceAssignment, maximumShapes);
  }

  /** maximum_shapes as one TensorShape for every input. */
  public static List<Tensor[]> replicate(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs,
                                         InfeedQueue infeedQueue, DeviceAssignment deviceAssignment, TensorShape maximumShapes) {
    if (maximumShapes == null) throw new IllegalArgumentException("maximumShapes is null");
    return TpuSteps.replicateEach(computation, inputs, infeedQueue, deviceAssignment, maximumShapes);
  }

  /** maximum_shapes as one Dimension: every input padded to the rank-1 shape [dimension]. */
  public static List<Tensor[]> replicate(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs,
                                         InfeedQueue infeedQueue, DeviceAssignment deviceAssignment, Dimension maximumShapes) {
    if (maximumShapes == null) throw new IllegalArgumentException("maximumShapes is null");
    return TpuSteps.replicateEach(computation, inputs, infeedQueue, deviceAssignment, new TensorShape(maximumShapes));
  }

  /** maximum_shapes per input, in input order. */
  public static List<Tensor[]> replicate(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs,
                                         InfeedQueue infeedQueue, DeviceAssignment deviceAssignment,
                                         Iterable<TensorShape> maximumShapes) {
    if (maximumShapes == null) throw new IllegalArgumentException("maximumShapes is null");
    List<Shape> shapes = new ArrayList<>();
    int i = 0;
    for (TensorShape s : maximumShapes) {
      if (s == null) throw new IllegalArgumentException("maximumShapes[" + i + "] is null");
      shapes.add(s.toShape());
      i++;
    }
    return TpuSteps.replicate(computation, inputs, infeedQueue, deviceAssignment, shapes);
  }

  /**
   * Several cores per replica: the computation runs once per (replica, logical core) of
   * deviceAssignment. inputPartitionDims[i] splits input i over a replica's cores as
   * TPUPartitionedInputV2's partition_dims (null or empty entry: the whole input to every core);
   * outputPartitionDims[o] joins output o from the cores' tiles (empty entry: logical core 0's
   * output). A null array: none partitioned, and each replica returns logical core 0's outputs.
   */
  public static List<Tensor[]> replicate(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs,
                                         DeviceAssignment deviceAssignment, int[][] inputPartitionDims,
                                         int[][] outputPartitionDims) {
    if (deviceAssignment == null) throw new IllegalArgumentException("deviceAssignment is null");
    return TpuSteps.replicate(computation, inputs, null, deviceAssignment, null, inputPartitionDims, outputPartitionDims);
  }

  /** Over a mesh's device assignment (DTensor's mesh as the step's placement). */
  public static List<Tensor[]> replicate(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs, Mesh mesh) {
    return replicate(computation, inputs, mesh, null, null);
  }

  public static List<Tensor[]> replicate(TpuComputation computation, Iterable<? extends Iterable<Tensor>> inputs, Mesh mesh,
                                         int[][] inputPartitionDims, int[][] outputPartitionDims) {
    if (mesh == null) throw new IllegalArgumentException("mesh is null");
    try (DeviceAssignment a = mesh.deviceAssignment()) {
      return replicate(computation, inputs, a, inputPartitionDims, outputPartitionDims);
    }
  }

  public static Object replicate_dyn(Object computation, Object inputs, Object infeedQueue, Object deviceAssignment,
                                     Object name, Object maximumShapes) {
    TpuComputation c = asComputation(computation, "computation");
    Iterable<? extends Iterable<Tensor>> rows = asRows(inputs);
    InfeedQueue q = asOptional(infeedQueue, InfeedQueue.class, "infeedQueue");
    DeviceAssignment a = asOptional(deviceAssignment, DeviceAssignment.class, "deviceAssignment");
    asOptional(name, String.class, "name");
    if (maximumShapes == null) return replicate(c, rows, q, a);
    if (maximumShapes instanceof Integer) return replicate(c, rows, q, a, (int) (Integer) maximumShapes);
    if (maximumShapes instanceof TensorShape) return replicate(c, rows, q, a, (TensorShape) maximumShapes);
    if (maximumShapes instanceof Dimension) return replicate(c, rows, q, a, (Dimension) maximumShapes);
    if (maximumShapes instanceof Iterable) {
      List<TensorShape> shapes = new ArrayList<>();
      for (Object s : (Iterable<?>) maximumShapes) shapes.add(asType(s, TensorShape.class, "maximumShapes element"));
      return replicate(c, rows, q, a, shapes);
    }
    throw wrongType("maximumShapes", maximumShapes, "int, TensorShape, Dimension or Iterable<TensorShape>");
  }

  // ---- rewrite, shard, batch_parallel ----------------------------------------------------------

  /** tf.tpu.rewrite: one replica on one core; returns its outputs. */
  public static Tensor[] rewrite(TpuComputation computation, Iterable<Tensor> inputs) {
    return rewrite(computation, inputs, null, null);
  }

  public static Tensor[] rewrite(Function<Tensor[], Tensor[]> computation, Iterable<Tensor> inputs) {
    return rewrite(adapt(computation), inputs);
  }

  public static Tensor[] rewrite(TpuComputation computation, Iterable<Tensor> inputs, InfeedQueue infeedQueue,
                                 DeviceAssignment deviceAssignment) {
    requireComputation(computation);
    JavaStep step = new JavaStep(computation, 1);
    system().rewrite(step, tensors(inputs, "inputs"), 0, stepOptions(infeedQueue, deviceAssignment));
    return step.outputs(0);
  }

  public static Tensor[] rewrite(TpuComputation computation, Iterable<Tensor> inputs, InfeedQueue infeedQueue,
                                 DeviceAssignment deviceAssignment, String name) {
    return rewrite(computation, inputs, infeedQueue, deviceAssignment);
  }

  public static Object rewrite_dyn(Object computation, Object inputs, Object infeedQueue, Object deviceAssignment, Object name) {
    asOptional(name, String.class, "name");
    return rewrite(asComputation(computation, "computation"), asTensors(inputs, "inputs"),
        asOptional(infeedQueue, InfeedQueue.class, "infeedQueue"),
        asOptional(deviceAssignment, DeviceAssignment.class, "deviceAssignment"));
  }

  /** tf.tpu.shard with every input split along axis 0 and every output concatenated along axis 0. */
  public static Tensor[] shard(TpuComputation computation, Iterable<Tensor> inputs, int numShards) {
    return shard(computation, inputs, numShards, null, null, null);
  }

  public static Tensor[] shard(Function<Tensor[], Tensor[]> computation, Iterable<Tensor> inputs, int numShards) {
    return shard(adapt(computation), inputs, numShards);
  }

  /** inputShardAxes: the axis each input is split along (null: all 0); outputs are concatenated along axis 0. */
  public static Tensor[] shard(TpuComputation computation, Iterable<Tensor> inputs, int numShards, int[] inputShardAxes,
                               InfeedQueue infeedQueue, DeviceAssignment deviceAssignment) {
    requireComputation(computation);
    if (numShards <= 0) throw new InvalidArgumentError("numShards " + numShards + " must be positive");
    JavaStep step = new JavaStep(computation, numShards);
    system().shard(step, tensors(inputs, "inputs"), numShards, inputShardAxes == null ? new int[0] : inputShardAxes,
        new int[0], new int[0], 0, stepOptions(infeedQueue, deviceAssignment));
    return concatenateShards(step, numShards);
  }

  /**
   * tf.tpu.shard with all nine parameters. outputsFromAllShards[o] (null: all true) says whether
   * output o joins every shard's output along outputShardAxes[o] (null: all 0; scalars are
   * stacked) or is shard 0's; given either, it has one entry per output the computation returns.
   */
  public static Tensor[] shard(TpuComputation computation, Iterable<Tensor> inputs, int numShards, int[] inputShardAxes,
                               boolean[] outputsFromAllShards, int[] outputShardAxes, InfeedQueue infeedQueue,
                               DeviceAssignment deviceAssignment, String name) {
    if (outputsFromAllShards == null && outputShardAxes == null)
      return shard(computation, inputs, numShards, inputShardAxes, infeedQueue, deviceAssignment);
    requireComputation(computation);
    if (numShards <= 0) throw new InvalidArgumentError("numShards " + numShards + " must be positive");
    if (outputsFromAllShards != null && outputShardAxes != null && outputsFromAllShards.length != outputShardAxes.length)
      throw new InvalidArgumentError("outputsFromAllShards has " + outputsFromAllShards.length
          + " entries but outputShardAxes has " + outputShardAxes.length + "; both have one per output");
    int numOutputs = outputsFromAllShards != null ? outputsFromAllShards.length : outputShardAxes.length;
    int[] fromAll = new int[0];
    if (outputsFromAllShards != null) {
      fromAll = new int[numOutputs];
      for (int o = 0; o < numOutputs; o++) fromAll[o] = outputsFromAllShards[o] ? 1 : 0;
    }
    // The library joins the shards' outputs, so the step is told how many there are.
    TensorVector out = system().shard(new JavaStep(computation, numShards), tensors(inputs, "inputs"), numShards,
        inputShardAxes == null ? new int[0] : inputShardAxes, fromAll,
        outputShardAxes == null ? new int[0] : outputShardAxes, numOutputs, stepOptions(infeedQueue, deviceAssignment));
    return out.toArray(new Tensor[0]);
  }

  public static Tensor[] shard(Function<Tensor[], Tensor[]> computation, Iterable<Tensor> inputs, int numShards,
                               int[] inputShardAxes, boolean[] outputsFromAllShards, int[] outputShardAxes,
                               InfeedQueue infeedQueue, DeviceAssignment deviceAssignment, String name) {
    return shard(adapt(computation), inputs, numShards, inputShardAxes, outputsFromAllShards, outputShardAxes,
        infeedQueue, deviceAssignment, name);
  }

  public static Object shard_dyn(Object computation, Object inputs, Object numShards, Object inputShardAxes,
                                 Object outputsFromAllShards, Object outputShardAxes, Object infeedQueue,
                                 Object deviceAssignment, Object name) {
    asOptional(name, String.class, "name");
    return shard(asComputation(computation, "computation"), asTensors(inputs, "inputs"), asInt(numShards, "numShards"),
        asOptional(inputShardAxes, int[].class, "inputShardAxes"),
        asOptional(outputsFromAllShards, boolean[].class, "outputsFromAllShards"),
        asOptional(outputShardAxes, int[].class, "outputShardAxes"), asOptional(infeedQueue, InfeedQueue.class, "infeedQueue"),
        asOptional(deviceAssignment, DeviceAssignment.class, "deviceAssignment"), (String) name);
  }

  public static Object shard_dyn(Object computation, Object inputs, Object numShards, Object inputShardAxes,
                                 Object infeedQueue, Object deviceAssignment) {
    return shard(asComputation(computation, "computation"), asTensors(inputs, "inputs"), asInt(numShards, "numShards"),
        asOptional(inputShardAxes, int[].class, "inputShardAxes"), asOptional(infeedQueue, InfeedQueue.class, "infeedQueue"),
        asOptional(deviceAssignment, DeviceAssignment.class, "deviceAssignment"));
  }

  /** tf.tpu.batch_parallel: shard along axis 0, outputs concatenated. */
  public static Tensor[] batch_parallel(TpuComputation computation, Iterable<Tensor> inputs, int numShards) {
    return batch_parallel(computation, inputs, numShards, null, null);
  }

  public static Tensor[] batch_parallel(Function<Tensor[], Tensor[]> computation, Iterable<Tensor> inputs, int numShards) {
    return batch_parallel(adapt(computation), inputs, numShards);
  }

  public static Tensor[] batch_parallel(TpuComputation computation, Iterable<Tensor> inputs, int numShards,
                                        InfeedQueue infeedQueue, DeviceAssignment deviceAssignment) {
    requireComputation(computation);
    if (numShards <= 0) throw new InvalidArgumentError("numShards " + numShards + " must be positive");
    JavaStep step = new JavaStep(computation, numShards);
    system().batchParallel(step, tensors(inputs, "inputs"), numShards, 0, stepOptions(infeedQueue, deviceAssignment));
    return concatenateShards(step, numShards);
  }

  public static Tensor[] batch_parallel(TpuComputation computation, Iterable<Tensor> inputs, int numShards,
                                        InfeedQueue infeedQueue, DeviceAssignment deviceAssignment, String name) {
    return batch_parallel(computation, inputs, numShards, infeedQueue, deviceAssignment);
  }

  public static Object batch_parallel_dyn(Object computation, Object inputs, Object numShards, Object infeedQueue,
                                          Object deviceAssignment, Object name) {
    asOptional(name, String.class, "name");
    return batch_parallel(asComputation(computation, "computation"), asTensors(inputs, "inputs"),
        asInt(numShards, "numShards"), asOptional(infeedQueue, InfeedQueue.class, "infeedQueue"),
        asOptional(deviceAssignment, DeviceAssignment.class, "deviceAssignment"));
  }

  // ---- inside a computation ------------------------------------------------------------------

  /** tf.tpu.bfloat16_scope: use with try-with-resources inside a computation. */
  public static Bfloat16Scope bfloat16_scope() {
    return new Bfloat16Scope(ReplicaScope.current("bfloat16_scope"));
  }

  public static Object bfloat16_scope_dyn() {
    return bfloat16_scope();
  }

  /**
   * Runs fn on the host (serialised across replicas) and returns its result. Tensor
   * arguments reach it through the C ABI, and a Tensor or Tensor[] it returns comes back so.
   */
  public static Object outside_compilation(HostFunction computation, Object... args) {
    return outside_compilation(computation, Collections.emptyMap(), args);
  }

  public static Object outside_compilation(HostFunction computation, Map<String, Object> kwargs, Object... args) {
    if (computation == null) throw new IllegalArgumentException("computation is null");
    if (kwargs == null) throw new IllegalArgumentException("kwargs is null");
    ReplicaContext ctx = ReplicaScope.current("outside_compilation");
    return JavaHostTensorComputation.call(ctx, computation, args == null ? new Object[0] : args.clone(),
        Collections.unmodifiableMap(new LinkedHashMap<>(kwargs)));
  }

  public static Object outside_compilation_dyn(Object computation, Object... args) {
    return outside_compilation(asType(computation, HostFunction.class, "computation"), args);
  }

  @SuppressWarnings("unchecked")
  public static Object outside_compilation_dyn(Object computation, Map<String, Object> kwargs, Object... args) {
    return outside_compilation(asType(computation, HostFunction.class, "computation"), kwargs, args);
  }

  public static Tensor cross_replica_sum(Tensor x) {
    return cross_replica_sum(x, null);
  }

  /** groupAssignment[group] = replica ids; null: all replicas in one group. */
  public static Tensor cross_replica_sum(Tensor x, int[][] groupAssignment) {
    if (x == null) throw new IllegalArgumentException("x is null");
    return ReplicaScope.current("cross_replica_sum").crossReplicaSum(x, GroupAssignment.of(groupAssignment), new CollectiveOptions());
  }

  /** groupAssignment[group] = ids of the kind groupMode names: replica ids, logical cores or flattened ids. */
  public static Tensor cross_replica_sum(Tensor x, int[][] groupAssignment, GroupMode groupMode) {
    if (x == null) throw new IllegalArgumentException("x is null");
    return ReplicaScope.current("cross_replica_sum").crossReplicaSum(x, groupAssignment, groupMode);
  }

  /** Sums over the named axes of mesh: among the participants that differ only in those axes. */
  public static Tensor cross_replica_sum(Tensor x, Mesh mesh, String... axes) {
    if (x == null) throw new IllegalArgumentException("x is null");
    return ReplicaScope.current("cross_replica_sum").crossReplicaSum(x, mesh, axes);
  }

  public static float[] cross_replica_sum(float[] x, Mesh mesh, String... axes) {
    if (x == null) throw new IllegalArgumentException("x is null");
    return cross_replica_sum(Tensor.fromFloat32(new long[] {x.length}, x), mesh, axes).toFloat32Vector();
  }

  public static Tensor cross_replica_sum(PerReplica x) {
    return cross_replica_sum(x, null);
  }

  public static Tensor cross_replica_sum(PerReplica x, int[][] groupAssignment) {
    if (x == null) throw new IllegalArgumentException("x is null");
    return cross_replica_sum(x.get(ReplicaScope.current("cross_replica_sum").replicaId()), groupAssignment);
  }

  public static float[] cross_replica_sum(float[] x) {
    return cross_replica_sum(x, null);
  }

  public static float[] cross_replica_sum(float[] x, int[][] groupAssignment) {
    if (x == null) throw new IllegalArgumentException("x is null");
    return cross_replica_sum(Tensor.fromFloat32(new long[] {x.length}, x), groupAssignment).toFloat32Vector();
  }

  public static double[] cross_replica_sum(double[] x) {
    return cross_replica_sum(x, null);
  }

  public static double[] cross_replica_sum(double[] x, int[][] groupAssignment) {
    if (x == null) throw new IllegalArgumentException("x is null");
    return cross_replica_sum(Tensor.fromFloat64(new long[] {x.length}, x), groupAssignment).toFloat64Vector();
  }

  public static int[] cross_replica_sum(int[] x) {
    return cross_replica_sum(x, null);
  }

  public static int[] cross_replica_sum(int[] x, int[][] groupAssignment) {
    if (x == null) throw new IllegalArgumentException("x is null");
    return cross_replica_sum(Tensor.fromInt32(new long[] {x.length}, x), groupAssignment).toInt32Vector();
  }

  public static long[] cross_replica_sum(long[] x) {
    return cross_replica_sum(x, null);
  }

  public static long[] cross_replica_sum(long[] x, int[][] groupAssignment) {
    if (x == null) throw new IllegalArgumentException("x is null");
    return cross_replica_sum(Tensor.fromInt64(new long[] {x.length}, x), groupAssignment).toInt64Vector();
  }

  /** A pair, summed in one collective. */
  public static Map.Entry<Tensor, Tensor> cross_replica_sum(Map.Entry<Tensor, Tensor> x) {
    return cross_replica_sum(x, null);
  }

  public static Map.Entry<Tensor, Tensor> cross_replica_sum(Map.Entry<Tensor, Tensor> x, int[][] groupAssignment) {
    if (x == null) throw new IllegalArgumentException("x is null");
    List<Tensor> sums = fusedSum(Arrays.asList(x.getKey(), x.getValue()), groupAssignment);
    return new AbstractMap.SimpleImmutableEntry<>(sums.get(0), sums.get(1));
  }

  /** Many tensors, summed in one collective per dtype. */
  public static List<Tensor> cross_replica_sum(Iterable<Tensor> x) {
    return cross_replica_sum(x, null);
  }

  public static List<Tensor> cross_replica_sum(Iterable<Tensor> x, int[][] groupAssignment) {
    return fusedSum(tensors(x, "x"), groupAssignment);
  }

  /** Named tensors (keys sorted so every replica concatenates alike), one collective per dtype. */
  public static Map<String, Tensor> cross_replica_sum(Map<String, Tensor> x) {
    return cross_replica_sum(x, null);
  }

  public static Map<String, Tensor> cross_replica_sum(Map<String, Tensor> x, int[][] groupAssignment) {
    if (x == null) throw new IllegalArgumentException("x is null");
    TreeMap<String, Tensor> sorted = new TreeMap<>(x);
    List<Tensor> sums = fusedSum(new ArrayList<>(sorted.values()), groupAssignment);
    Map<String, Tensor> out = new LinkedHashMap<>();
    int i = 0;
    for (String key : sorted.keySet()) out.put(key, sums.get(i++));
    return out;
  }

  // tf.tpu.cross_replica_sum(x, group_assignment, name): name (an op name) does nothing here.
  public static Tensor cross_replica_sum(Tensor x, int[][] groupAssignment, String name) {
    return cross_replica_sum(x, groupAssignment);
  }

  public static Tensor cross_replica_sum(PerReplica x, int[][] groupAssignment, String name) {
    return cross_replica_sum(x, groupAssignment);
  }

  public static float[] cross_replica_sum(float[] x, int[][] groupAssignment, String name) {
    return cross_replica_sum(x, groupAssignment);
  }

  public static double[] cross_replica_sum(double[] x, int[][] groupAssignment, String name) {
    return cross_replica_sum(x, groupAssignment);
  }

  public static int[] cross_replica_sum(int[] x, int[][] groupAssignment, String name) {
    return cross_replica_sum(x, groupAssignment);
  }

  public static long[] cross_replica_sum(long[] x, int[][] groupAssignment, String name) {
    return cross_replica_sum(x, groupAssignment);
  }

  public static Map.Entry<Tensor, Tensor> cross_replica_sum(Map.Entry<Tensor, Tensor> x, int[][] groupAssignment, String name) {
    return cross_replica_sum(x, groupAssignment);
  }

  public static List<Tensor> cross_replica_sum(Iterable<Tensor> x, int[][] groupAssignment, String name) {
    return cross_replica_sum(x, groupAssignment);
  }

  public static Map<String, Tensor> cross_replica_sum(Map<String, Tensor> x, int[][] groupAssignment, String name) {
    return cross_replica_sum(x, groupAssignment);
  }

  public static Object cross_replica_sum_dyn(Object x) {
    return cross_replica_sum_dyn(x, null);
  }

  public static Object cross_replica_sum_dyn(Object x, Object groupAssignment, Object name) {
    asOptional(name, String.class, "name");
    return cross_replica_sum_dyn(x, groupAssignment);
  }

  @SuppressWarnings("unchecked")
  public static Object cross_replica_sum_dyn(Object x, Object groupAssignment) {
    int[][] g = asOptional(groupAssignment, int[][].class, "groupAssignment");
    if (x instanceof Tensor) return cross_replica_sum((Tensor) x, g);
    if (x instanceof PerReplica) return cross_replica_sum((PerReplica) x, g);
    if (x instanceof float[]) return cross_replica_sum((float[]) x, g);
    if (x instanceof double[]) return cross_replica_sum((double[]) x, g);
    if (x instanceof int[]) return cross_replica_sum((int[]) x, g);
    if (x instanceof long[]) return cross_replica_sum((long[]) x, g);
    if (x instanceof Map.Entry) {
      Map.Entry<?, ?> e = (Map.Entry<?, ?>) x;
      return cross_replica_sum(new AbstractMap.SimpleImmutableEntry<>(asType(e.getKey(), Tensor.class, "x.key"),
          asType(e.getValue(), Tensor.class, "x.value")), g);
    }
    if (x instanceof Map) {
      Map<String, Tensor> m = new LinkedHashMap<>();
      for (Map.Entry<?, ?> e : ((Map<?, ?>) x).entrySet())
        m.put(asType(e.getKey(), String.class, "x key"), asType(e.getValue(), Tensor.class, "x[" + e.getKey() + "]"));
      return cross_replica_sum(m, g);
    }
    if (x instanceof Iterable) return cross_replica_sum(asTensors(x, "x"), g);
    throw wrongType("x", x, "Tensor, PerReplica, float[], double[], int[], long[], Map.Entry, Iterable<Tensor> or Map<String, Tensor>");
  }

  public static Object core_dyn(Object num) {
    return core(asInt(num, "num"));
  }

  public static Object initialize_system_dyn(Object embeddingConfig, Object job) {
    return initialize_system(asOptional(embeddingConfig, byte[].class, "embeddingConfig"), asOptional(job, String.class, "job"));
  }

  public static Object shutdown_system_dyn(Object job) {
    shutdown_system(asOptional(job, String.class, "job"));
    return null;
  }

  // ---- camelCase aliases --------------------------------------------------------------------

  public static TpuSystem initializeSystem() { return initialize_system(); }
  public static TpuSystem initializeSystem(SystemOptions options) { return initialize_system(options); }
  public static void shutdownSystem() { shutdown_system(); }
  public static int logicalCore() { return logical_core(); }
  public static <T> Optional<T> onCore(int n, Supplier<T> body) { return on_core(n, body); }
  public static void onCore(int n, Runnable body) { on_core(n, body); }
  public static Tensor crossReplicaSum(Tensor x) { return cross_replica_sum(x); }
  public static Tensor crossReplicaSum(Tensor x, int[][] groupAssignment) { return cross_replica_sum(x, groupAssignment); }
  public static Tensor crossReplicaSum(Tensor x, int[][] groupAssignment, GroupMode groupMode) {
    return cross_replica_sum(x, groupAssignment, groupMode);
  }
  public static Tensor crossReplicaSum(Tensor x, Mesh mesh, String... axes) { return cross_replica_sum(x, mesh, axes); }
  public static float[] crossReplicaSum(float[] x, Mesh mesh, String... axes) { return cross_replica_sum(x, mesh, axes); }
  public static Tensor crossReplicaSum(PerReplica x) { return cross_replica_sum(x); }
  public static float[] crossReplicaSum(float[] x) { return cross_replica_sum(x); }
  public static double[] crossReplicaSum(double[] x) { return cross_replica_sum(x); }
  public static int[] crossReplicaSum(int[] x) { return cross_replica_sum(x); }
  public static long[] crossReplicaSum(long[] x) { return cross_replica_sum(x); }
  public static Map.Entry<Tensor, Tensor> crossReplicaSum(Map.Entry<Tensor, Tensor> x) { return cross_replica_sum(x); }
  public static List<Tensor> crossReplicaSum(Iterable<Tensor> x) { return cross_replica_sum(x); }
  public static Map<String, Tensor> crossReplicaSum(Map<String, Tensor> x) { return cross_replica_sum(x); }
  public static Tensor[] batchParallel(TpuComputation computation, Iterable<Tensor> inputs, int numShards) {
    return batch_parallel(computation, inputs, numShards);
  }
  public static Bfloat16Scope bfloat16Scope() { return bfloat16_scope(); }
  public static Object outsideCompilation(HostFunction computation, Object... args) {
    return outside_compilation(computation, args);
  }


}
