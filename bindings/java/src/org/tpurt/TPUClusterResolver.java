package org.tpurt;

/**
 * tf.distribute.cluster_resolver.TPUClusterResolver, with TensorFlow's parameters in its
 * order (tpu, zone, project, job_name, coordinator_name, coordinator_address, credentials,
 * service, discovery_url), so positional calls from TensorFlow's documentation mean the
 * same; the shorter constructors leave the rest at TensorFlow's defaults. tpu null or ""
 * reads KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS or TPU_NAME; "local"; "grpc://host[:port],...". A
 * Cloud TPU name throws NotFoundError (tpurt has no Cloud TPU API). zone, project,
 * credentials, service and discoveryUrl are Cloud TPU API parameters: as in TensorFlow (its
 * client uses them only for a name that is not grpc://, and 'local' makes no client) they
 * change nothing for the names tpurt resolves.
 */
public class TPUClusterResolver extends ClusterResolver {
  public TPUClusterResolver() {
    this(null);
  }

  public TPUClusterResolver(String tpu) {
    this(tpu, null, null);
  }

  public TPUClusterResolver(String tpu, String zone, String project) {
    this(tpu, zone, project, "worker");
  }

  public TPUClusterResolver(String tpu, String zone, String project, String jobName) {
    this(tpu, zone, project, jobName, null, null);
  }

  public TPUClusterResolver(String tpu, String zone, String project, String jobName,
                            String coordinatorName, String coordinatorAddress) {
    this(tpu, zone, project, jobName, coordinatorName, coordinatorAddress, "default", null, null);
  }

  /** Null arguments mean TensorFlow's defaults. */
  public TPUClusterResolver(String tpu, String zone, String project, String jobName,
                            String coordinatorName, String coordinatorAddress, String credentials,
                            Object service, String discoveryUrl) {
    super(options(tpu, jobName, coordinatorName, coordinatorAddress));
  }

  private static ClusterResolverOptions options(String tpu, String jobName, String coordinatorName,
                                                String coordinatorAddress) {
    ClusterResolverOptions o = new ClusterResolverOptions();
    o.setSource(ResolverSource.Tpu);
    if (tpu != null) o.setTpu(tpu);
    if (jobName != null) o.setJobName(jobName);
    if (coordinatorName != null) o.setCoordinatorName(coordinatorName);
    if (coordinatorAddress != null) o.setCoordinatorAddress(coordinatorAddress);
    return o;
  }
}
