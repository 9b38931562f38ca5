// Many tasks as one system: TensorFlow's TPUClusterResolver, tf.tpu's
// initialize_tpu_system (and tf.tpu.experimental's), DTensor's accelerator system, and
// the coordination service's key-value store and barriers on TpuSystem.
using System;
using System.Text;

namespace Tpurt {

public partial class ClusterResolver {
  // TensorFlow's defaults: the resolver's own task type, task id and rpc layer.
  public string Master() { return Master("", -1, ""); }
  public string GetJobName() { return JobName(); }
  // num_accelerators(task_type, task_id): "" and -1 mean the resolver's own.
  public int NumAccelerators(string task_type, int task_id) { return NumAcceleratorsOf(task_type ?? "", task_id); }
  public int NumTasks() { return NumTasks(""); }
  public string TaskAddress(int taskId) { return TaskAddress("", taskId); }

  // The context manager (`with resolver:`): entered now, exited on Dispose.
  public IDisposable Scope() { return new ResolverScope(this); }
  sealed class ResolverScope : IDisposable {
    ClusterResolver resolver;
    internal ResolverScope(ClusterResolver resolver) {
      resolver.Enter();
      this.resolver = resolver;
    }
    public void Dispose() {
      if (resolver == null) return;
      resolver.Exit();
      resolver = null;
    }
  }

  internal static ClusterResolverOptions Options(ResolverSource source, string tpu, string job_name,
                                                 string coordinator_name, string coordinator_address) {
    return new ClusterResolverOptions {
      Source = source, Tpu = tpu ?? "", JobName = job_name ?? "",
      CoordinatorName = coordinator_name ?? "", CoordinatorAddress = coordinator_address ?? "",
    };
  }
}

// tf.distribute.cluster_resolver.TPUClusterResolver, with TensorFlow's parameters in its
// order, so positional calls from TensorFlow's documentation mean the same: tpu null or ""
// reads KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS or TPU_NAME; "local"; "grpc://host[:port],...".
// A Cloud TPU name is a NotFoundError (tpurt has no Cloud TPU API). zone, project,
// credentials, service and discovery_url are Cloud TPU API parameters: as in TensorFlow
// (its client uses them only for a name that is not grpc://, and 'local' makes no client)
// they change nothing for the names tpurt resolves.
public class TPUClusterResolver : ClusterResolver {
  public TPUClusterResolver(string tpu = null, string zone = null, string project = null,
                            string job_name = "worker", string coordinator_name = null,
                            string coordinator_address = null, string credentials = "default",
                            object service = null, string discovery_url = null)
      : base(Options(ResolverSource.Tpu, tpu, job_name, coordinator_name, coordinator_address)) {}
}

public partial class TpuSystem {
  public void KvSet(string key, byte[] value) {
    if (value == null) throw new ArgumentNullException(nameof(value));
    using (var v = new ByteVector(value)) KvSet(key, v);
  }
  public void KvSet(string key, string value) {
    if (value == null) throw new ArgumentNullException(nameof(value));
    KvSetString(key, value);
  }
  public byte[] KvGetBytes(string key, long timeoutMs) {
    using (ByteVector v = KvGet(key, timeoutMs)) return v.ToArray();
  }
  // The library's TryGet throws NotFoundError for a missing key; this is the .NET
  // Try pattern: false and null instead.
  public bool TryKvGet(string key, out string value) {
    try {
      value = KvTryGetString(key);
      return true;
    } catch (NotFoundError) {
      value = null;
      return false;
    }
  }
  // Every task (no ids) or the listed ones.
  public void WaitAtBarrier(string id, long timeoutMs, params int[] tasks) {
    using (var v = new Int32Vector(tasks ?? new int[0])) WaitAtBarrier(id, timeoutMs, v);
  }
}

public static partial class tpu {
  // tf.tpu.experimental.initialize_tpu_system(cluster_resolver): joins the resolver's
  // cluster (null: resolved from the environment, as under `tpurt launch`; nothing set
  // gives a one-process system). The system becomes the default of the step functions.
  // embedding_config: as initialize_system's (EmbeddingConfig.FromJson), the same on every task.
  public static TpuSystem initialize_tpu_system(ClusterResolver cluster_resolver = null, int num_cores = 0,
                                                string job = null, ClusterOptions cluster_options = null,
                                                byte[] embedding_config = null) {
    if (num_cores < 0) throw new ArgumentOutOfRangeException(nameof(num_cores), num_cores, "must not be negative");
    using (var options = new SystemOptions())
    using (var defaults = new ClusterOptions()) {
      options.NumCores = num_cores;
      if (job != null) options.JobName = job;
      if (embedding_config != null) options.EmbeddingConfig = new ByteVector(embedding_config);
      TpuSystem system = TpuSystem.InitializeTpuSystem(cluster_resolver, options, cluster_options ?? defaults);
      defaultSystem = system;
      return system;
    }
  }
  public static TpuSystem InitializeTpuSystem(ClusterResolver cluster_resolver = null, int num_cores = 0,
                                              string job = null, ClusterOptions cluster_options = null,
                                              byte[] embedding_config = null) {
    return initialize_tpu_system(cluster_resolver, num_cores, job, cluster_options, embedding_config);
  }

  public static class experimental {
    public static TpuSystem initialize_tpu_system(ClusterResolver cluster_resolver = null) {
      return tpu.initialize_tpu_system(cluster_resolver);
    }
  }
}

// DTensor's accelerator system: one per process, kept here as DTensor keeps it in its
// context (and made tpu's default system).
public static class dtensor {
  static TpuSystem system;

  // The system initialize_accelerator_system started, or null.
  public static TpuSystem accelerator_system { get { return system != null && !system.IsDisposed ? system : null; } }

  // Returns the device type chosen ("TPU" or "CPU"); "GPU" is an InvalidArgumentError.
  public static string initialize_accelerator_system(string device_type = null, bool enable_coordination_service = true,
                                                     int num_logical_cpu_devices = 0, bool experimental_reset_context = false) {
    if (experimental_reset_context && accelerator_system != null) system.Dispose();
    TpuSystem s = TpuSystem.InitializeAcceleratorSystem(device_type ?? "", enable_coordination_service,
                                                        num_logical_cpu_devices, experimental_reset_context);
    system = s;
    tpu.UseAsDefault(s);
    return s.DeviceType();
  }
  public static string initialize_multi_client(string device_type = null, bool enable_coordination_service = true,
                                               int num_logical_cpu_devices = 0, bool experimental_reset_context = false) {
    if (experimental_reset_context && accelerator_system != null) system.Dispose();
    TpuSystem s = TpuSystem.InitializeMultiClient(device_type ?? "", enable_coordination_service,
                                                  num_logical_cpu_devices, experimental_reset_context);
    system = s;
    tpu.UseAsDefault(s);
    return s.DeviceType();
  }
  // Shuts the accelerator system down and disposes it (FailedPreconditionError with
  // several clients: every task disposes its system instead).
  public static void shutdown_accelerator_system() {
    TpuSystem s = accelerator_system;
    if (s == null) throw new FailedPreconditionError("Accelerator system is not initialized.");
    s.ShutdownAcceleratorSystem();
    s.Dispose();
    system = null;
  }
  public static string InitializeAcceleratorSystem(string device_type = null, bool enable_coordination_service = true,
                                                   int num_logical_cpu_devices = 0, bool experimental_reset_context = false) {
    return initialize_accelerator_system(device_type, enable_coordination_service, num_logical_cpu_devices, experimental_reset_context);
  }
  public static void ShutdownAcceleratorSystem() { shutdown_accelerator_system(); }
}

}
