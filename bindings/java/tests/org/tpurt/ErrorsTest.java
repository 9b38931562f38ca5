package org.tpurt;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;

/** One test per exception type: real library errors where it raises them, else ctx.fail with that code. */
public class ErrorsTest {
  private static TpuSystem system;

  private static TpuSystem newSystem() {
    SystemOptions options = new SystemOptions();
    options.setNumCores(8);
    return new TpuSystem(options);
  }

  @BeforeClass
  public static void start() {
    system = newSystem();
  }

  @AfterClass
  public static void stop() {
    system.close();
  }

  /** A step where replica 2 fails with code; the caller's error names the replica and the message. */
  private static <E extends OpError> E failedStep(Status code, Class<E> type) {
    Computation failing = new Computation() {
      @Override
      public Status run(ReplicaContext ctx) {
        if (ctx.replicaId() == 2) return ctx.fail(code, "injected " + code);
        try {
          ctx.barrier(new CollectiveOptions());
        } catch (OpError e) {
          return ctx.fail(e.status(), e.getMessage());
        }
        return Status.Ok;
      }
    };
    try {
      system.replicate(failing, 8, 0, new TensorVector(), 0, new StepOptions());
    } catch (OpError e) {
      assertTrue("wrong type " + e.getClass(), type.isInstance(e));
      assertEquals(code.swigValue(), e.code());
      assertTrue(e.getMessage(), e.getMessage().contains("replica 2") && e.getMessage().contains("injected " + code));
      okStep();
      return type.cast(e);
    }
    fail("the step did not fail with " + code);
    return null;
  }

  private static void okStep() {
    TensorVector out = system.replicate(new JavaComputation((ctx, in) -> null, 8), 8, 0, new TensorVector(), 0, new StepOptions());
    assertEquals(0, out.size());
  }

  @Test public void cancelled() { failedStep(Status.Cancelled, CancelledError.class); }
  @Test public void unknown() { failedStep(Status.Unknown, UnknownError.class); }
  @Test public void alreadyExists() { failedStep(Status.AlreadyExists, AlreadyExistsError.class); }
  @Test public void permissionDenied() { failedStep(Status.PermissionDenied, PermissionDeniedError.class); }
  @Test public void resourceExhausted() { failedStep(Status.ResourceExhausted, ResourceExhaustedError.class); }
  @Test public void aborted() { failedStep(Status.Aborted, AbortedError.class); }
  @Test public void outOfRange() { failedStep(Status.OutOfRange, OutOfRangeError.class); }
  @Test public void unimplemented() { failedStep(Status.Unimplemented, UnimplementedError.class); }
  @Test public void internal() { failedStep(Status.Internal, InternalError.class); }
  @Test public void unavailable() { failedStep(Status.Unavailable, UnavailableError.class); }
  @Test public void dataLoss() { failedStep(Status.DataLoss, DataLossError.class); }
  @Test public void unauthenticated() { failedStep(Status.Unauthenticated, UnauthenticatedError.class); }

  @Test
  public void invalidArgumentFromBadDims() {
    try {
      Tensor.fromFloat32(new long[] {2, 3}, new float[] {1, 2});
      fail("a 2x3 tensor from 2 floats");
    } catch (InvalidArgumentError e) {
      assertEquals(Status.InvalidArgument.swigValue(), e.code());
      assertTrue(e instanceof OpError && e instanceof RuntimeException);
    }
    failedStep(Status.InvalidArgument, InvalidArgumentError.class);
  }

  @Test
  public void failedPreconditionFromClosedSystem() {
    TpuSystem s = system;
    s.close();
    system = newSystem();
    try {
      s.numCores();
      fail("numCores on a closed system");
    } catch (FailedPreconditionError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("closed"));
    }
    failedStep(Status.FailedPrecondition, FailedPreconditionError.class);
  }

  @Test
  public void deadlineExceededFromShortTimeoutWithSkippingReplica() {
    CollectiveOptions shortTimeout = new CollectiveOptions();
    shortTimeout.setTimeoutMs(100);
    StepOptions options = new StepOptions();
    options.setCollectiveTimeoutMs(2000);
    JavaComputation c = new JavaComputation((ctx, in) -> {
      if (ctx.replicaId() == 0) {  // skips the collective, and returns within the step's deadline
        Thread.sleep(500);
        return null;
      }
      ctx.crossReplicaSum(Tensor.fromFloat32(new long[] {1}, new float[] {1}), new GroupAssignment(), shortTimeout);
      return null;
    }, 8);
    try {
      system.replicate(c, 8, 0, new TensorVector(), 0, options);
      fail("the collective did not time out");
    } catch (DeadlineExceededError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("replica"));
    }
    okStep();
  }

  @Test
  public void invalidArgumentFromWrongJob() {
    // TensorFlow's placement error for /job:no_such_job/device:TPU_SYSTEM:0, as C# and Go.
    tpu.use_system(system);
    try {
      tpu.shutdown_system("no_such_job");
      fail("shutdown of a job that does not exist");
    } catch (InvalidArgumentError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("'/job:no_such_job/device:TPU_SYSTEM:0'"));
    }
    try {
      tpu.shutdown_system_dyn("no_such_job");
      fail("shutdown_system_dyn of a job that does not exist");
    } catch (InvalidArgumentError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("no_such_job"));
    }
    assertFalse(system.isClosed());
    okStep();
  }

  @Test
  public void notFoundFromAStep() {
    failedStep(Status.NotFound, NotFoundError.class);
  }

  @Test
  public void exceptionInComputationFailsStepWithItsMessage() {
    for (int attempt = 0; attempt < 3; attempt++) {
      JavaComputation c = new JavaComputation((ctx, in) -> {
        if (ctx.replicaId() == 5) throw new IllegalStateException("weights went NaN");
        ctx.crossReplicaSum(Tensor.fromFloat32(new long[] {1}, new float[] {1}), new GroupAssignment(), new CollectiveOptions());
        return null;
      }, 8);
      try {
        system.replicate(c, 8, 0, new TensorVector(), 0, new StepOptions());
        fail("a throwing computation did not fail the step");
      } catch (UnknownError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("replica 5"));
        assertTrue(e.getMessage(), e.getMessage().contains("weights went NaN"));
        assertTrue(e.getMessage(), e.getMessage().contains("IllegalStateException"));
      }
      okStep();
    }
  }

  @Test
  public void opErrorInComputationKeepsItsType() {
    JavaComputation c = new JavaComputation((ctx, in) -> {
      if (ctx.replicaId() == 1) throw new ResourceExhaustedError("out of HBM");
      return null;
    }, 8);
    try {
      system.replicate(c, 8, 0, new TensorVector(), 0, new StepOptions());
      fail("no error");
    } catch (ResourceExhaustedError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("replica 1") && e.getMessage().contains("out of HBM"));
    }
    okStep();
  }

  @Test
  public void exceptionEscapingRawDirectorFailsOnlyThatStep() {
    Computation raw = new Computation() {
      @Override
      public Status run(ReplicaContext ctx) {
        if (ctx.replicaId() == 4) throw new IllegalStateException("raw director threw");
        return Status.Ok;
      }
    };
    try {
      system.replicate(raw, 8, 0, new TensorVector(), 0, new StepOptions());
      fail("no error");
    } catch (OpError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("replica 4") && e.getMessage().contains("raw director threw"));
    }
    okStep();
  }

  @Test
  public void hostFunctionFailureViaFailHost() {
    HostComputation host = new HostComputation() {
      @Override
      public Status run(int replicaId) {
        return replicaId == 3 ? HostComputation.failHost(Status.DataLoss, "host lost rows") : Status.Ok;
      }
    };
    JavaComputation c = new JavaComputation((ctx, in) -> {
      ctx.outsideCompilation(host);
      return null;
    }, 8);
    try {
      system.replicate(c, 8, 0, new TensorVector(), 0, new StepOptions());
      fail("no error");
    } catch (DataLossError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("replica 3") && e.getMessage().contains("host lost rows"));
    }
    okStep();
  }

  @Test
  public void typedErrorFactory() {
    for (int code = 1; code <= 16; code++) {
      OpError e = OpError.of(code, "m");
      assertEquals(code, e.code());
      assertEquals(code, e.status().swigValue());
      assertTrue(e.getClass().getSimpleName().endsWith("Error"));
    }
  }
}
