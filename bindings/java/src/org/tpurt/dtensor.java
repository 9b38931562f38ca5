package org.tpurt;

import java.util.Map;

/**
 * DTensor's accelerator system for Java: one per process, kept here as DTensor keeps it in
 * its context, and made tpu's default system. Local without DTENSOR_JOBS.
 */
public final class dtensor {
  private static TpuSystem system;

  private dtensor() {}

  /** The preferred device type ("TPU") with DTensor's defaults. */
  public static String initialize_accelerator_system() {
    return initialize_accelerator_system(null, true, 0, false);
  }

  public static String initialize_accelerator_system(String deviceType) {
    return initialize_accelerator_system(deviceType, true, 0, false);
  }

  /** Returns the device type chosen ("TPU" or "CPU"); "GPU" throws InvalidArgumentError. */
  public static synchronized String initialize_accelerator_system(String deviceType, boolean enableCoordinationService,
                                                                  int numLogicalCpuDevices, boolean experimentalResetContext) {
    if (experimentalResetContext) closeCurrent();
    return started(TpuSystem.initializeAcceleratorSystem(deviceType == null ? "" : deviceType,
        enableCoordinationService, numLogicalCpuDevices, experimentalResetContext));
  }

  /** DTensor's alias of initialize_accelerator_system. */
  public static synchronized String initialize_multi_client(String deviceType, boolean enableCoordinationService,
                                                            int numLogicalCpuDevices, boolean experimentalResetContext) {
    if (experimentalResetContext) closeCurrent();
    return started(TpuSystem.initializeMultiClient(deviceType == null ? "" : deviceType,
        enableCoordinationService, numLogicalCpuDevices, experimentalResetContext));
  }

  /** Shuts the accelerator system down and closes it (FailedPreconditionError with several clients). */
  public static synchronized void shutdown_accelerator_system() {
    if (system == null) throw new FailedPreconditionError("Accelerator system is not initialized.");
    system.shutdownAcceleratorSystem();
    closeCurrent();
  }

  /** The system initialize_accelerator_system started, or null. */
  public static synchronized TpuSystem accelerator_system() {
    return system;
  }

  /**
   * DTensor's create_mesh(mesh_dims): a mesh over every core of the current system, one
   * replica per core, with the axes in order, e.g. create_mesh(Map.entry("batch", 4), Map.entry("model", 2)).
   */
  @SafeVarargs
  public static Mesh create_mesh(Map.Entry<String, Integer>... meshDims) {
    if (meshDims == null) throw new IllegalArgumentException("meshDims is null");
    String[] names = new String[meshDims.length];
    long[] sizes = new long[meshDims.length];
    for (int i = 0; i < meshDims.length; i++) {
      if (meshDims[i] == null || meshDims[i].getValue() == null)
        throw new IllegalArgumentException("meshDims[" + i + "] is null or has no size");
      names[i] = meshDims[i].getKey();
      sizes[i] = meshDims[i].getValue();
    }
    try (Topology topology = tpu.system().topology()) {
      return Mesh.createFromTopology(topology, names, sizes);
    }
  }

  @SafeVarargs
  public static Mesh createMesh(Map.Entry<String, Integer>... meshDims) {
    return create_mesh(meshDims);
  }

  public static String initializeAcceleratorSystem(String deviceType) {
    return initialize_accelerator_system(deviceType);
  }

  public static String initializeMultiClient(String deviceType) {
    return initialize_multi_client(deviceType, true, 0, false);
  }

  public static void shutdownAcceleratorSystem() {
    shutdown_accelerator_system();
  }

  private static String started(TpuSystem s) {
    system = s;
    tpu.use_system(s);
    return s.deviceType();
  }

  private static void closeCurrent() {
    if (system != null) system.close();
    system = null;
  }
}
