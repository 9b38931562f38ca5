package org.tpurt;

import org.junit.runner.JUnitCore;
import org.junit.runner.Result;
import org.junit.runner.notification.Failure;

/** Runs the JUnit 4 suite and prints the one line make test reads: "java: N passed, N failed". */
public final class TestMain {
  public static void main(String[] args) {
    Result result = new JUnitCore().run(TpurtTest.class, ErrorsTest.class, ClusterTest.class, ComputationThreadTest.class,
        SeedSurfaceTest.class, OutsideCompilationTest.class, ModelParallelTest.class,
        EmbeddingTest.class, ReplicaThreadsTest.class, StepJoinCancelTest.class, SupportLayerTest.class,
        CheckpointTest.class);
    for (Failure f : result.getFailures()) {
      System.out.println("FAILED " + f.getTestHeader() + ": " + f.getMessage());
      System.out.println(f.getTrace());
    }
    int failed = result.getFailureCount();
    System.out.println("java: " + (result.getRunCount() - failed) + " passed, " + failed + " failed");
    System.exit(failed == 0 ? 0 : 1);
  }
}
