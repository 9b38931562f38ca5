/* Java specifics of the one interface (../tpurt.i): typed exceptions, bulk array
 * typemaps, AutoCloseable handles and the native loader. Nothing here declares API. */
%module(directors="1") tpurt
#define TPURT_MODULE_DECLARED

/* Every failing call throws the org.tpurt exception named after its status code. */
%{
#include <string>
static void tpurt_java_throw(JNIEnv* jenv, int code, const char* message) {
  static const char* const names[] = {
      "org/tpurt/UnknownError", "org/tpurt/CancelledError", "org/tpurt/UnknownError",
      "org/tpurt/InvalidArgumentError", "org/tpurt/DeadlineExceededError", "org/tpurt/NotFoundError",
      "org/tpurt/AlreadyExistsError", "org/tpurt/PermissionDeniedError", "org/tpurt/ResourceExhaustedError",
      "org/tpurt/FailedPreconditionError", "org/tpurt/AbortedError", "org/tpurt/OutOfRangeError",
      "org/tpurt/UnimplementedError", "org/tpurt/InternalError", "org/tpurt/UnavailableError",
      "org/tpurt/DataLossError", "org/tpurt/UnauthenticatedError"};
  const char* name = code > 0 && code <= 16 ? names[code] : names[2];
  jclass cls = jenv->FindClass(name);
  if (cls == nullptr) return;  // NoClassDefFoundError is pending instead
  jenv->ThrowNew(cls, message);
  jenv->DeleteLocalRef(cls);
}
%}
#define TPURT_RAISE_DEFINED
#define TPURT_RAISE(code, message) { tpurt_java_throw(jenv, (code), std::string(message).c_str()); return $null; }

/* Bulk copies with Get/Set<Type>ArrayRegion: one JNI call per array, no critical
 * section held across the library's blocking calls. */
%define TPURT_JAVA_ARRAY(CTYPE, JNITYPE, JTYPE, JARRAY, REGION)
%typemap(jni) (const CTYPE* data, size_t count), (CTYPE* out, size_t count) "JARRAY"
%typemap(jtype) (const CTYPE* data, size_t count), (CTYPE* out, size_t count) "JTYPE[]"
%typemap(jstype) (const CTYPE* data, size_t count), (CTYPE* out, size_t count) "JTYPE[]"
%typemap(javain) (const CTYPE* data, size_t count), (CTYPE* out, size_t count) "$javainput"
%typemap(in) (const CTYPE* data, size_t count) (std::vector<CTYPE> copy) {
  if (!$input) { SWIG_JavaThrowException(jenv, SWIG_JavaNullPointerException, "data is null"); return $null; }
  copy.resize(static_cast<size_t>(jenv->GetArrayLength($input)));
  if (!copy.empty()) jenv->Get##REGION##ArrayRegion($input, 0, (jsize)copy.size(), (JNITYPE*)copy.data());
  $1 = copy.data();
  $2 = copy.size();
}
%typemap(in) (CTYPE* out, size_t count) (std::vector<CTYPE> copy) {
  if (!$input) { SWIG_JavaThrowException(jenv, SWIG_JavaNullPointerException, "out is null"); return $null; }
  copy.resize(static_cast<size_t>(jenv->GetArrayLength($input)));
  $1 = copy.data();
  $2 = copy.size();
}
%typemap(argout) (CTYPE* out, size_t count) {
  if (!copy$argnum.empty()) jenv->Set##REGION##ArrayRegion($input, 0, (jsize)copy$argnum.size(), (const JNITYPE*)copy$argnum.data());
}
/* std::vector by value or const reference <-> Java array. */
%typemap(jni) const std::vector<CTYPE>&, std::vector<CTYPE> "JARRAY"
%typemap(jtype) const std::vector<CTYPE>&, std::vector<CTYPE> "JTYPE[]"
%typemap(jstype) const std::vector<CTYPE>&, std::vector<CTYPE> "JTYPE[]"
%typemap(javain) const std::vector<CTYPE>& "$javainput"
%typemap(javaout) const std::vector<CTYPE>&, std::vector<CTYPE> { return $jnicall; }
%typemap(in) const std::vector<CTYPE>& (std::vector<CTYPE> copy) {
  if (!$input) { SWIG_JavaThrowException(jenv, SWIG_JavaNullPointerException, "$1_name is null"); return $null; }
  copy.resize(static_cast<size_t>(jenv->GetArrayLength($input)));
  if (!copy.empty()) jenv->Get##REGION##ArrayRegion($input, 0, (jsize)copy.size(), (JNITYPE*)copy.data());
  $1 = &copy;
}
%typemap(out) std::vector<CTYPE> {
  $result = jenv->New##REGION##Array((jsize)$1.size());
  if ($result && !$1.empty()) jenv->Set##REGION##ArrayRegion($result, 0, (jsize)$1.size(), (const JNITYPE*)$1.data());
}
%typemap(out) const std::vector<CTYPE>& {
  $result = jenv->New##REGION##Array((jsize)$1->size());
  if ($result && !$1->empty()) jenv->Set##REGION##ArrayRegion($result, 0, (jsize)$1->size(), (const JNITYPE*)$1->data());
}
/* The vector class's copy constructor would clash with its own array constructor. */
%ignore std::vector<CTYPE>::vector(const vector&);
%enddef

TPURT_JAVA_ARRAY(float, jfloat, float, jfloatArray, Float)
TPURT_JAVA_ARRAY(double, jdouble, double, jdoubleArray, Double)
TPURT_JAVA_ARRAY(int32_t, jint, int, jintArray, Int)
TPURT_JAVA_ARRAY(long long, jlong, long, jlongArray, Long)
TPURT_JAVA_ARRAY(uint8_t, jbyte, byte, jbyteArray, Byte)
TPURT_JAVA_ARRAY(uint16_t, jshort, short, jshortArray, Short)

/* wrapFloat32 borrows a direct FloatBuffer (zero copy); the Java Tensor keeps it referenced. */
%typemap(jni) (float* data, size_t count) "jobject"
%typemap(jtype) (float* data, size_t count) "java.nio.FloatBuffer"
%typemap(jstype) (float* data, size_t count) "java.nio.FloatBuffer"
%typemap(javain) (float* data, size_t count) "$javainput"
%typemap(in) (float* data, size_t count) {
  if (!$input) { SWIG_JavaThrowException(jenv, SWIG_JavaNullPointerException, "data is null"); return $null; }
  $1 = static_cast<float*>(jenv->GetDirectBufferAddress($input));
  if (!$1) { SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException, "data is not a direct FloatBuffer"); return $null; }
  $2 = static_cast<size_t>(jenv->GetDirectBufferCapacity($input));
}
%rename(wrapFloat32Native) tpurt::Tensor::wrapFloat32;
%javamethodmodifiers tpurt::Tensor::wrapFloat32 "private";

/* Struct members as values (arrays), not pointers to vectors. */
%naturalvar;

/* Handles are AutoCloseable for try-with-resources. */
%typemap(javainterfaces) tpurt::TpuSystem, tpurt::Topology, tpurt::DeviceAssignment,
    tpurt::InfeedQueue, tpurt::OutfeedQueue, tpurt::Tensor, tpurt::ClusterResolver, tpurt::Mesh "AutoCloseable"

/* TensorFlow's defaults of ClusterResolver's getters, and the context manager as a
 * try-with-resources scope. */
%typemap(javacode) tpurt::ClusterResolver %{
  /** master() for this task (TensorFlow's defaults). */
  public String master() {
    return master("", -1, "");
  }

  /** TensorFlow's get_job_name(). */
  public String getJobName() {
    return jobName();
  }

  /** TensorFlow's num_accelerators(task_type, task_id): "" and -1 mean this task. */
  public int numAccelerators(String taskType, int taskId) {
    return numAcceleratorsOf(taskType == null ? "" : taskType, taskId);
  }

  /** The number of tasks of this resolver's job. */
  public int numTasks() {
    return numTasks("");
  }

  /** host:port of task taskId of this resolver's job. */
  public String taskAddress(int taskId) {
    return taskAddress("", taskId);
  }

  /** The context manager (with resolver:): entered now, exited by close(). */
  public ResolverScope scope() {
    return new ResolverScope(this);
  }
%}

%typemap(javacode) tpurt::Tensor %{
  private java.nio.FloatBuffer borrowed;  // keeps wrapFloat32's memory reachable

  /** A float32 tensor over a direct buffer, without copying; keep the buffer unchanged while tensors use it. */
  public static Tensor wrapFloat32(long[] dims, java.nio.FloatBuffer data) {
    Tensor t = wrapFloat32Native(dims, data);
    t.borrowed = data;
    return t;
  }

  /** Drops this reference (same as dispose()). */
  @Override
  public void close() {
    dispose();
  }
%}

/* Steps run their replicas on the system's Java threads (ReplicaThreads, tpu_step_join)
 * unless the system is in callback mode; there, they keep their computation referenced
 * by the system when they fail: late replicas may still call it after the step
 * returned, until the system is closed. */
%rename(replicateNative) tpurt::TpuSystem::replicate;
%rename(rewriteNative) tpurt::TpuSystem::rewrite;
%rename(shardNative) tpurt::TpuSystem::shard;
%rename(batchParallelNative) tpurt::TpuSystem::batchParallel;
%rename(closeNative) tpurt::TpuSystem::close;
%javamethodmodifiers tpurt::TpuSystem::replicate "private";
%javamethodmodifiers tpurt::TpuSystem::rewrite "private";
%javamethodmodifiers tpurt::TpuSystem::shard "private";
%javamethodmodifiers tpurt::TpuSystem::batchParallel "private";
%javamethodmodifiers tpurt::TpuSystem::close "private";
/* The thread that joined deletes its JoinedStep (stepJoin), and a context is never owned:
 * no finalizers (each costs a registration on a JVM-wide lock) on the per-step objects. */
%typemap(javafinalize) tpurt::JoinedStep, tpurt::ReplicaContext ""
/* delete() (also the finalizer's) ends the Java threads first: they join the native
 * object's cores. */
%typemap(javadestruct, methodname="delete", methodmodifiers="public synchronized", parameters="") tpurt::TpuSystem {
    stopReplicaThreads();
    if (swigCPtr != 0) {
      if (swigCMemOwn) {
        swigCMemOwn = false;
        $jnicall;
      }
      swigCPtr = 0;
    }
  }
%typemap(javacode) tpurt::TpuSystem %{
  // Keyed by the native object, not held in a field: a system collected without close()
  // must not let its finalizer race the late replicas' directors, so those then stay.
  private static final java.util.Map<Long, java.util.List<Object>> FAILED_STEP_COMPUTATIONS =
      new java.util.concurrent.ConcurrentHashMap<>();

  private final Object replicaThreadsLock = new Object();
  private volatile ReplicaThreads replicaThreads;  // started by the first step that needs them
  private volatile boolean callbackMode = ReplicaThreads.CALLBACK_MODE_DEFAULT;

  /**
   * false (the default): steps run their replicas on this system's own Java threads
   * (daemons named "tpurt-java-core-C", one per core, each joining its core and leaving
   * it); true: as callbacks from the library's worker threads, as before 1.4. Switch
   * between steps: turning callback mode on cancels the Java threads' joins and returns
   * once they have left their cores, after which raw stepJoin calls may join them.
   */
  public void setCallbackMode(boolean callbacks) {
    synchronized (replicaThreadsLock) {
      callbackMode = callbacks;
      if (callbacks && replicaThreads != null) {
        replicaThreads.stop();
        replicaThreads = null;
      }
    }
  }

  public boolean callbackMode() {
    return callbackMode;
  }

  /** Shuts the system down and ends its Java threads (none is left inside a join) before the handle goes. */
  private void stopReplicaThreads() {
    ReplicaThreads threads;
    synchronized (replicaThreadsLock) {
      threads = replicaThreads;
      replicaThreads = null;
    }
    if (threads == null) return;
    try {
      shutdown();
    } catch (RuntimeException e) {
      // Closed already, or called from inside a computation: the release that follows decides.
    }
    threads.stop();
  }

  private ReplicaThreads replicaThreads() {
    ReplicaThreads threads = replicaThreads;
    if (threads != null) return threads;
    synchronized (replicaThreadsLock) {
      if (replicaThreads == null) replicaThreads = new ReplicaThreads(this, numCores());
      return replicaThreads;
    }
  }

  /** A step whose participants the Java threads run: body is findable by its key while the call lasts. */
  private TensorVector onReplicaThreads(ReplicaThreads.Body body, java.util.function.LongFunction<TensorVector> step) {
    ReplicaThreads threads = replicaThreads();
    threads.throwIfAThreadEnded();
    long key = threads.register(body);
    try {
      return step.apply(key);
    } finally {
      threads.unregister(key);
    }
  }

  private <T> T retainOnFailure(Computation computation, java.util.function.Supplier<T> step) {
    try {
      return step.get();
    } catch (RuntimeException e) {
      FAILED_STEP_COMPUTATIONS.computeIfAbsent(swigCPtr,
          k -> java.util.Collections.synchronizedList(new java.util.ArrayList<>())).add(computation);
      throw e;
    }
  }

  /** A raw step of a Computation: on the Java threads (its run() called there), or as callbacks. */
  private TensorVector step(Computation computation, java.util.function.Supplier<TensorVector> withCallbacks,
                            java.util.function.LongFunction<TensorVector> onJoinedThreads) {
    if (computation == null || callbackMode) return retainOnFailure(computation, withCallbacks);
    return onReplicaThreads(computation::run, onJoinedThreads);
  }

  /** tpu's steps: no director unless in callback mode, where one wraps the JavaStep. */
  private TensorVector step(JavaStep body, java.util.function.Function<Computation, TensorVector> withCallbacks,
                            java.util.function.LongFunction<TensorVector> onJoinedThreads) {
    if (!callbackMode) return onReplicaThreads(body, onJoinedThreads);
    JavaComputation director = new JavaComputation(body);
    TensorVector out = retainOnFailure(director, () -> withCallbacks.apply(director));
    director.delete();  // the step succeeded: no replica calls it any more
    return out;
  }

  public TensorVector replicate(Computation computation, int numReplicas, int numInputs, TensorVector inputs,
                                int numOutputs, StepOptions options) {
    return step(computation, () -> replicateNative(computation, numReplicas, numInputs, inputs, numOutputs, options),
        key -> replicateOnJoinedThreads(key, numReplicas, numInputs, inputs, numOutputs, options));
  }

  TensorVector replicate(JavaStep body, int numReplicas, int numInputs, TensorVector inputs, int numOutputs,
                         StepOptions options) {
    return step(body, c -> replicateNative(c, numReplicas, numInputs, inputs, numOutputs, options),
        key -> replicateOnJoinedThreads(key, numReplicas, numInputs, inputs, numOutputs, options));
  }

  public TensorVector rewrite(Computation computation, TensorVector inputs, int numOutputs, StepOptions options) {
    return step(computation, () -> rewriteNative(computation, inputs, numOutputs, options),
        key -> rewriteOnJoinedThreads(key, inputs, numOutputs, options));
  }

  TensorVector rewrite(JavaStep body, TensorVector inputs, int numOutputs, StepOptions options) {
    return step(body, c -> rewriteNative(c, inputs, numOutputs, options),
        key -> rewriteOnJoinedThreads(key, inputs, numOutputs, options));
  }

  public TensorVector shard(Computation computation, TensorVector inputs, int numShards, int[] inputShardAxes,
                            int[] outputsFromAllShards, int[] outputShardAxes, int numOutputs, StepOptions options) {
    return step(computation, () -> shardNative(computation, inputs, numShards, inputShardAxes, outputsFromAllShards,
                                               outputShardAxes, numOutputs, options),
        key -> shardOnJoinedThreads(key, inputs, numShards, inputShardAxes, outputsFromAllShards, outputShardAxes,
                                    numOutputs, options));
  }

  TensorVector shard(JavaStep body, TensorVector inputs, int numShards, int[] inputShardAxes,
                     int[] outputsFromAllShards, int[] outputShardAxes, int numOutputs, StepOptions options) {
    return step(body, c -> shardNative(c, inputs, numShards, inputShardAxes, outputsFromAllShards, outputShardAxes,
                                       numOutputs, options),
        key -> shardOnJoinedThreads(key, inputs, numShards, inputShardAxes, outputsFromAllShards, outputShardAxes,
                                    numOutputs, options));
  }

  public TensorVector batchParallel(Computation computation, TensorVector inputs, int numShards, int numOutputs,
                                    StepOptions options) {
    return step(computation, () -> batchParallelNative(computation, inputs, numShards, numOutputs, options),
        key -> batchParallelOnJoinedThreads(key, inputs, numShards, numOutputs, options));
  }

  TensorVector batchParallel(JavaStep body, TensorVector inputs, int numShards, int numOutputs, StepOptions options) {
    return step(body, c -> batchParallelNative(c, inputs, numShards, numOutputs, options),
        key -> batchParallelOnJoinedThreads(key, inputs, numShards, numOutputs, options));
  }

  /** kvSet of a string value (UTF-8 bytes). */
  public void kvSet(String key, String value) {
    kvSetString(key, value);
  }

  /** Waits until every task reaches barrier id. */
  public void waitAtBarrier(String id, long timeoutMs) {
    waitAtBarrier(id, timeoutMs, new int[0]);
  }

  // ---- Embeddings (1.4): tables and features as views, load/retrieve by names ----

  /** The embedding configuration's tables, in order (none without a configuration). */
  public java.util.List<EmbeddingTable> embeddingTables() {
    java.util.List<EmbeddingTable> out = new java.util.ArrayList<>();
    for (int t = 0; t < embeddingNumTables(); t++) out.add(new EmbeddingTable(this, t));
    return out;
  }

  /** The table called name; NotFoundError naming it. */
  public EmbeddingTable embeddingTable(String name) {
    if (name == null) throw new IllegalArgumentException("table name is null");
    return new EmbeddingTable(this, embeddingTableIndex(name));
  }

  /** Table index; OutOfRangeError naming it and the count. */
  public EmbeddingTable embeddingTable(int index) {
    embeddingTableName(index);
    return new EmbeddingTable(this, index);
  }

  /** The configuration's features, in order. */
  public java.util.List<EmbeddingFeature> embeddingFeatures() {
    java.util.List<EmbeddingFeature> out = new java.util.ArrayList<>();
    for (int f = 0; f < embeddingNumFeatures(); f++) out.add(new EmbeddingFeature(this, f));
    return out;
  }

  /** The feature called name; NotFoundError naming it. */
  public EmbeddingFeature embeddingFeature(String name) {
    if (name == null) throw new IllegalArgumentException("feature name is null");
    return new EmbeddingFeature(this, embeddingFeatureIndex(name));
  }

  public EmbeddingFeature embeddingFeature(int index) {
    embeddingFeatureName(index);
    return new EmbeddingFeature(this, index);
  }

  /** Where row of table lives (tpu_embedding_row_owner). */
  public EmbeddingRowOwner embeddingRowOwner(int table, long row) {
    return embeddingTable(table).rowOwner(row);
  }

  /** The index of a table's variable by name ("parameters", "accumulators", ...). */
  public int embeddingVariableIndex(int table, String variable) {
    return embeddingTable(table).variableIndex(variable);
  }

  /** Loads rows from firstRow on (values.length / dimension of them, row-major) into a variable. */
  public void embeddingLoad(String table, String variable, long firstRow, float[] values) {
    embeddingTable(table).load(variable, firstRow, values);
  }

  public void embeddingLoad(int table, int variable, long firstRow, float[] values) {
    embeddingTable(table).load(variable, firstRow, values);
  }

  /** Rows [firstRow, firstRow + numRows) of a variable, row-major. */
  public float[] embeddingRetrieve(String table, String variable, long firstRow, long numRows) {
    return embeddingTable(table).retrieve(variable, firstRow, numRows);
  }

  /** Shuts the system down (ends its Java and worker threads) and releases what failed steps kept alive. */
  @Override
  public void close() {
    long key = swigCPtr;
    stopReplicaThreads();
    closeNative();  // waits for late computations
    FAILED_STEP_COMPUTATIONS.remove(key);
  }
%}

/* (1.3) Model parallelism in Java's terms: int[][] groups with a GroupMode, a mesh's
 * named axes as varargs, and the logical-core idiom. All of it calls the members above. */
%typemap(javacode) tpurt::GroupAssignment %{
  /** groups[g] = the ids of group g (what they are is the collective's group mode); null: one group of all. */
  public static GroupAssignment of(int[][] groups) {
    if (groups == null) return new GroupAssignment();
    for (int g = 0; g < groups.length; g++)
      if (groups[g] == null) throw new IllegalArgumentException("groupAssignment[" + g + "] is null");
    int size = groups.length == 0 ? 0 : groups[0].length, total = 0;
    boolean ragged = false;
    int[] sizes = new int[groups.length];
    for (int g = 0; g < groups.length; g++) {
      ragged |= groups[g].length != size;
      sizes[g] = groups[g].length;
      total += groups[g].length;
    }
    int[] ids = new int[total];
    for (int g = 0, at = 0; g < groups.length; at += groups[g].length, g++)
      System.arraycopy(groups[g], 0, ids, at, groups[g].length);
    // Rows of different lengths ({{0, 1, 2}, {3}}): all-reduce and broadcast take them, as
    // XLA does; all-gather, reduce-scatter and all-to-all refuse them (InvalidArgumentError).
    return ragged ? ragged(ids, sizes) : new GroupAssignment(ids, groups.length, size);
  }
%}

%typemap(javacode) tpurt::CollectiveOptions %{
  /** Options for groups that hold ids of this kind (XLA's CollectiveOpGroupMode). */
  public static CollectiveOptions of(GroupMode groupMode) {
    if (groupMode == null) throw new IllegalArgumentException("groupMode is null");
    CollectiveOptions options = new CollectiveOptions();
    options.setGroupMode(groupMode);
    return options;
  }
%}

%typemap(javacode) tpurt::SystemOptions %{
  /** The embedding configuration from its proto3 JSON (tpurt.embeddingConfigFromJson). */
  public void setEmbeddingConfigJson(String json) {
    if (json == null) throw new IllegalArgumentException("json is null");
    setEmbeddingConfig(tpurt.embeddingConfigFromJson(json));
  }
%}

%typemap(javacode) tpurt::StepOptions %{
  /** One int[] per input: its partition_dims over a replica's cores (null or empty: whole to every core). */
  public void setInputPartitions(int[][] partitionDims) {
    setInputPartitions(partitions(partitionDims, "inputPartitions"));
  }

  /** One int[] per output: how the cores' tiles join (null or empty: logical core 0's output). */
  public void setOutputPartitions(int[][] partitionDims) {
    setOutputPartitions(partitions(partitionDims, "outputPartitions"));
  }

  private static Int32VectorVector partitions(int[][] partitionDims, String what) {
    if (partitionDims == null) throw new IllegalArgumentException(what + " is null");
    Int32VectorVector v = new Int32VectorVector();
    for (int[] dims : partitionDims) v.add(dims == null ? new int[0] : dims);
    return v;
  }
%}

%typemap(javacode) tpurt::Mesh %{
  /** DTensor's Mesh over assignment's participants: axisNames[i] has axisSizes[i] entries (row-major). */
  public static Mesh create(DeviceAssignment assignment, String[] axisNames, long[] axisSizes) {
    return create(assignment, names(axisNames, "axisNames"), axisSizes);
  }

  /** A mesh over every core of topology, one replica per core. */
  public static Mesh createFromTopology(Topology topology, String[] axisNames, long[] axisSizes) {
    return createFromTopology(topology, names(axisNames, "axisNames"), axisSizes);
  }

  /** The groups of a collective over the named axes (pass collectiveOptions(axes) with them). */
  public GroupAssignment axisGroups(String... axes) {
    return axisGroups(names(axes, "axes"));
  }

  public GroupMode axisGroupMode(String... axes) {
    return axisGroupMode(names(axes, "axes"));
  }

  /** Options carrying the group mode of axisGroups(axes). */
  public CollectiveOptions collectiveOptions(String... axes) {
    return CollectiveOptions.of(axisGroupMode(axes));
  }

  /** The axis names in order (DTensor's dim_names). */
  public java.util.List<String> axisNames() {
    java.util.List<String> out = new java.util.ArrayList<>();
    for (int i = 0; i < numAxes(); i++) out.add(axisName(i));
    return out;
  }

  /** The axis sizes in order (DTensor's shape()). */
  public long[] shape() {
    long[] out = new long[numAxes()];
    for (int i = 0; i < out.length; i++) out[i] = axisSize(i);
    return out;
  }

  /** The size of the axis called name (DTensor's dim_size). */
  public long dimSize(String name) {
    return axisSize(axisIndex(name));
  }

  @Override
  public String toString() {
    StringBuilder b = new StringBuilder("Mesh(");
    for (int i = 0; i < numAxes(); i++) b.append(i == 0 ? "" : ", ").append(axisName(i)).append('=').append(axisSize(i));
    return b.append(')').toString();
  }

  private static StringVector names(String[] names, String what) {
    if (names == null) throw new IllegalArgumentException(what + " is null");
    for (int i = 0; i < names.length; i++)
      if (names[i] == null) throw new IllegalArgumentException(what + "[" + i + "] is null");
    return new StringVector(names);
  }
%}

%typemap(javacode) tpurt::ReplicaContext %{
  /** This participant's embedding step: enqueue, recvActivations, sendGradients. */
  public EmbeddingStep embedding() {
    return new EmbeddingStep(this);
  }

  /** Runs body only on logical core n of the replica (the part tf.tpu.core(n) places); empty elsewhere. */
  public <T> java.util.Optional<T> onCore(int n, java.util.function.Supplier<T> body) {
    if (body == null) throw new IllegalArgumentException("body is null");
    return isCore(n) ? java.util.Optional.ofNullable(body.get()) : java.util.Optional.empty();
  }

  public void onCore(int n, Runnable body) {
    if (body == null) throw new IllegalArgumentException("body is null");
    if (isCore(n)) body.run();
  }

  private boolean isCore(int n) {
    int k = numCoresPerReplica();
    if (n < 0 || n >= k) throw new InvalidArgumentError("logical core " + n + " is outside [0, " + k + "): the replica's cores");
    return logicalCore() == n;
  }

  // Groups of ids of the kind groupMode names (replica ids, logical cores, flattened ids).
  public Tensor crossReplicaSum(Tensor x, int[][] groups, GroupMode groupMode) {
    return crossReplicaSum(x, GroupAssignment.of(groups), CollectiveOptions.of(groupMode));
  }

  public Tensor allReduce(Tensor x, ReduceOp op, int[][] groups, GroupMode groupMode) {
    return allReduce(x, op, GroupAssignment.of(groups), CollectiveOptions.of(groupMode));
  }

  public Tensor allGather(Tensor x, int axis, int[][] groups, GroupMode groupMode) {
    return allGather(x, axis, GroupAssignment.of(groups), CollectiveOptions.of(groupMode));
  }

  public Tensor reduceScatter(Tensor x, ReduceOp op, int scatterAxis, int[][] groups, GroupMode groupMode) {
    return reduceScatter(x, op, scatterAxis, GroupAssignment.of(groups), CollectiveOptions.of(groupMode));
  }

  public Tensor allToAll(Tensor x, int concatDimension, int splitDimension, int splitCount, int[][] groups,
                         GroupMode groupMode) {
    return allToAll(x, concatDimension, splitDimension, splitCount, GroupAssignment.of(groups),
        CollectiveOptions.of(groupMode));
  }

  public Tensor broadcast(Tensor x, int root, int[][] groups, GroupMode groupMode) {
    return broadcast(x, root, GroupAssignment.of(groups), CollectiveOptions.of(groupMode));
  }

  /** pairs[i] = {source, target}: replica ids, logical cores or flattened ids, as groupMode says. */
  public Tensor collectivePermute(Tensor x, int[][] sourceTargetPairs, GroupMode groupMode) {
    if (sourceTargetPairs == null) throw new IllegalArgumentException("sourceTargetPairs is null");
    int[] flat = new int[sourceTargetPairs.length * 2];
    for (int i = 0; i < sourceTargetPairs.length; i++) {
      if (sourceTargetPairs[i] == null || sourceTargetPairs[i].length != 2)
        throw new InvalidArgumentError("sourceTargetPairs[" + i + "] is not a {source, target} pair");
      flat[2 * i] = sourceTargetPairs[i][0];
      flat[2 * i + 1] = sourceTargetPairs[i][1];
    }
    return collectivePermute(x, flat, CollectiveOptions.of(groupMode));
  }

  // Over the named axes of a mesh: the participants that differ only in those axes.
  public Tensor crossReplicaSum(Tensor x, Mesh mesh, String... axes) {
    return crossReplicaSum(x, meshOf(mesh).axisGroups(axes), mesh.collectiveOptions(axes));
  }

  public Tensor allReduce(Tensor x, ReduceOp op, Mesh mesh, String... axes) {
    return allReduce(x, op, meshOf(mesh).axisGroups(axes), mesh.collectiveOptions(axes));
  }

  public Tensor allGather(Tensor x, int axis, Mesh mesh, String... axes) {
    return allGather(x, axis, meshOf(mesh).axisGroups(axes), mesh.collectiveOptions(axes));
  }

  public Tensor reduceScatter(Tensor x, ReduceOp op, int scatterAxis, Mesh mesh, String... axes) {
    return reduceScatter(x, op, scatterAxis, meshOf(mesh).axisGroups(axes), mesh.collectiveOptions(axes));
  }

  public Tensor allToAll(Tensor x, int concatDimension, int splitDimension, int splitCount, Mesh mesh, String... axes) {
    return allToAll(x, concatDimension, splitDimension, splitCount, meshOf(mesh).axisGroups(axes),
        mesh.collectiveOptions(axes));
  }

  public Tensor broadcast(Tensor x, int root, Mesh mesh, String... axes) {
    return broadcast(x, root, meshOf(mesh).axisGroups(axes), mesh.collectiveOptions(axes));
  }

  private static Mesh meshOf(Mesh mesh) {
    if (mesh == null) throw new IllegalArgumentException("mesh is null");
    return mesh;
  }
%}

/* The library loads before any native method runs: java.library.path, else the
 * copy packed in the jar (NativeLoader). */
%pragma(java) jniclasscode=%{
  static {
    NativeLoader.load();
  }
%}

%include "tpurt.i"

%include "java/pool_java.i"
