package org.tpurt;

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
