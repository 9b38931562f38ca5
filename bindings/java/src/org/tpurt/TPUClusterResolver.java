package org.tpurt;

/**
 * tf.distribute.cluster_resolver.TPUClusterResolver: tpu null reads
 * KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS or TPU_NAME; "local"; "grpc://host[:port],...". A Cloud
 * TPU name throws NotFoundError (tpurt has no Cloud TPU API).
 */
public class TPUClusterResolver extends ClusterResolver {
  public TPUClusterResolver() {
    this(null, null, null, null);
  }

  public TPUClusterResolver(String tpu) {
    this(tpu, null, null, null);
  }

  /** Null arguments mean TensorFlow's defaults. */
  public TPUClusterResolver(String tpu, String jobName, String coordinatorName, String coordinatorAddress) {
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
