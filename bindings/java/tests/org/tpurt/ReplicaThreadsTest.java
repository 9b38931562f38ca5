package org.tpurt;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReferenceArray;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;

/**
 * Where replicas run (1.4): on the binding's own Java threads by default (the one replica
 * pool: join / leave), and the raw API a thread uses to serve a core itself, with the pool off
 * (callback mode): a thread that never joins, one that exits inside its participant,
 * one that leaves too late.
 */
public class ReplicaThreadsTest {
  private static final int R = 8;
  private static final long WAIT_MS = 20_000;  // bounds every wait of these tests
  private static TpuSystem system;

  @BeforeClass
  public static void start() {
    SystemOptions options = new SystemOptions();
    options.setNumCores(R);
    system = tpu.initialize_system(options);
  }

  @AfterClass
  public static void stop() {
    system.close();
  }

  private static void okStep() {
    List<Tensor[]> out = tpu.replicate((ctx, in) -> new Tensor[] {tpu.cross_replica_sum(Tensor.fromFloat32(new long[] {1}, new float[] {1}))}, Replicas.none(R));
    assertEquals(R, out.size());
    assertArrayEquals(new float[] {R}, out.get(R - 1)[0].toFloat32Vector(), 0f);
  }

  /** name of the thread that ran each participant, indexed by replica. */
  private static String[] threadNames(java.util.function.Function<TpuComputation, Object> step, int n) {
    String[] names = new String[n];
    boolean[] daemon = new boolean[n];
    step.apply((ctx, in) -> {
      names[ctx.replicaId()] = Thread.currentThread().getName() + " core " + ctx.core();
      daemon[ctx.replicaId()] = Thread.currentThread().isDaemon();
      return new Tensor[] {Tensor.fromFloat32(new long[] {1}, new float[] {ctx.replicaId()})};
    });
    for (int r = 0; r < n; r++) assertTrue("replica " + r + " ran on a non-daemon thread", daemon[r]);
    return names;
  }

  @Test
  public void everyStepFormRunsOnTheBindingsThreads() {
    assertFalse(system.callbackMode());
    List<Tensor> batch = Collections.singletonList(Tensor.fromFloat32(new long[] {R}, new float[R]));
    List<String[]> seen = Arrays.asList(
        threadNames(c -> tpu.replicate(c, Replicas.none(R)), R),
        threadNames(c -> tpu.rewrite(c, null), 1),
        threadNames(c -> tpu.shard(c, batch, R), R),
        threadNames(c -> tpu.batch_parallel(c, batch, R), R),
        threadNames(c -> {
          TensorVector none = new TensorVector();
          return system.replicate(new JavaComputation(c, R), R, 0, none, 0, new StepOptions());
        }, R));
    for (String[] names : seen)
      for (String name : names) {
        // "tpurt-java-core-C core C": the pool's thread for the participant's own core.
        String[] parts = name.split(" core ");
        assertEquals(name, "tpurt-java-core-" + parts[1], parts[0]);
      }
  }

  private static List<Thread> replicaThreads() {
    List<Thread> out = new ArrayList<>();
    for (Thread t : Thread.getAllStackTraces().keySet())
      if (t.getName().startsWith(ReplicaThreads.THREAD_NAME)) out.add(t);
    return out;
  }

  /** Waits (at most 10 s) until n "tpurt-java-core-" threads are alive. */
  private static void awaitReplicaThreads(int n) throws InterruptedException {
    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (replicaThreads().size() != n) {
      assertTrue("expected " + n + " replica threads within 10 s: " + replicaThreads(), System.nanoTime() < until);
      Thread.sleep(10);
    }
  }

  @Test
  public void closingTheSystemEndsItsThreads() throws Exception {
    okStep();
    List<Thread> threads = replicaThreads();  // R, and any a mode switch just ended
    assertTrue(threads.toString(), threads.size() >= R);
    for (Thread t : threads) assertTrue(t.getName(), t.isDaemon());
    system.close();
    try {
      awaitReplicaThreads(0);  // close() shut the system down: each left its core at once
      joinAll(threads);
    } finally {
      start();
    }
    okStep();
    threads = replicaThreads();
    assertEquals(R, threads.size());
    system.delete();  // SWIG's delete() as well: the threads go before the native object
    try {
      awaitReplicaThreads(0);
      joinAll(threads);
    } finally {
      start();
    }
    okStep();
  }

  /** A shutdown without close ends every join of the pool: its threads end too. */
  @Test
  public void shuttingTheSystemDownEndsItsThreads() throws Exception {
    okStep();
    assertTrue(replicaThreads().toString(), replicaThreads().size() >= R);
    system.shutdown();  // not closed: the handle stays
    try {
      assertTrue(system.isClosed());
      awaitReplicaThreads(0);
      try {
        okStep();
        fail("a step ran on a shut-down system");
      } catch (OpError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("shut down"));
      }
      assertTrue(replicaThreads().toString(), replicaThreads().isEmpty());  // that step started none
    } finally {
      system.close();
      start();
    }
    okStep();
    awaitReplicaThreads(R);
  }

  /** tf.tpu's rule: the default system lives until shutdown_system, after which initialize_system starts anew. */
  @Test
  public void shutdownSystemEndsTheThreadsAndInitializeSystemWorksAgain() throws Exception {
    okStep();
    tpu.shutdown_system();
    try {
      awaitReplicaThreads(0);
      try {
        tpu.system();
        fail("the default system outlived shutdown_system");
      } catch (FailedPreconditionError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("initialize_system"));
      }
    } finally {
      start();  // tpu.initialize_system again
    }
    assertTrue(tpu.system() == system);
    okStep();
    awaitReplicaThreads(R);
  }

  /** A step on a system no one else holds (not tpu's default): its threads do not keep it. */
  private static void stepOnASystemThenDropIt() {
    SystemOptions options = new SystemOptions();
    options.setNumCores(R);
    TpuSystem dropped = new TpuSystem(options);
    dropped.replicate(new JavaComputation((ctx, in) -> null, R), R, 0, new TensorVector(), 0, new StepOptions());
  }

  /** The pool's threads hold the pool, not the TpuSystem: a system dropped without close is finalized, and they end. */
  @Test
  public void aSystemDroppedWithoutCloseIsFinalizedAndItsThreadsEnd() throws Exception {
    system.close();  // one system per process at a time
    try {
      awaitReplicaThreads(0);
      stepOnASystemThenDropIt();
      assertEquals(R, replicaThreads().size());
      long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (!replicaThreads().isEmpty()) {
        assertTrue("a dropped system's threads still run after 10 s: " + replicaThreads(), System.nanoTime() < until);
        System.gc();
        System.runFinalization();
        Thread.sleep(10);
      }
    } finally {
      start();
    }
    okStep();
  }

  @Test
  public void callbackModeRunsOnTheLibrarysWorkersAndBack() throws Exception {
    try {
      system.setCallbackMode(true);  // cancels the pool's joins: its threads end, no timeout waited out
      awaitReplicaThreads(0);
      for (String name : threadNames(c -> tpu.replicate(c, Replicas.none(R)), R))
        assertFalse(name, name.startsWith(ReplicaThreads.THREAD_NAME));
      okStep();
    } finally {
      system.setCallbackMode(false);
    }
    for (String name : threadNames(c -> tpu.replicate(c, Replicas.none(R)), R)) assertTrue(name, name.startsWith(ReplicaThreads.THREAD_NAME));
    okStep();
  }

  /** Cpus_allowed_list of the calling thread. */
  private static String allowedCpus() {
    try {
      for (String line : java.nio.file.Files.readAllLines(java.nio.file.Paths.get("/proc/thread-self/status")))
        if (line.startsWith("Cpus_allowed_list:")) return line.substring("Cpus_allowed_list:".length()).trim();
    } catch (java.io.IOException e) {
      throw new AssertionError(e);
    }
    throw new AssertionError("no Cpus_allowed_list in /proc/thread-self/status");
  }

  private static String[] cpusPerCore() {
    String[] cpus = new String[R];
    tpu.replicate((ctx, in) -> {
      cpus[ctx.core()] = allowedCpus();
      return null;
    }, Replicas.none(R));
    return cpus;
  }

  @Test
  public void theThreadsRunWhereTheLibrarysWorkersRun() {
    // With more cores than CPUs the library pins core C's worker to one CPU (TPU_PIN_AUTO):
    // the Java thread serving core C runs on that same CPU.
    String[] onJavaThreads = cpusPerCore();
    String[] onWorkers;
    try {
      system.setCallbackMode(true);
      onWorkers = cpusPerCore();
    } finally {
      system.setCallbackMode(false);
    }
    assertArrayEquals(onWorkers, onJavaThreads);
    assertArrayEquals(onJavaThreads, cpusPerCore());
  }

  @Test
  public void aComputationThatOutlivesTheDeadlineFailsItsStepAndTheNextRunsAfterIt() throws Exception {
    StepOptions options = new StepOptions();
    options.setCollectiveTimeoutMs(300);
    CountDownLatch late = new CountDownLatch(1);
    try {
      system.replicate(new JavaComputation((ctx, in) -> {
        if (ctx.replicaId() == 2) {
          Thread.sleep(1000);
          late.countDown();
        }
        return null;
      }, R), R, 0, new TensorVector(), 0, options);
      fail("a replica 700 ms past the deadline did not fail the step");
    } catch (DeadlineExceededError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("replica 2"));
    }
    assertTrue(late.await(WAIT_MS, TimeUnit.MILLISECONDS));
    okStep();
  }

  // ---- The raw API: test threads serve the cores, the pool is off ----------------------

  /** Runs serve(core) on one new thread per core; returns them started. */
  private static List<Thread> serveCores(java.util.function.IntConsumer serve) {
    List<Thread> threads = new ArrayList<>();
    for (int c = 0; c < R; c++) {
      final int core = c;
      Thread t = new Thread(() -> serve.accept(core), "test-core-" + c);
      t.setDaemon(true);
      t.setUncaughtExceptionHandler((th, e) -> { });  // the throwing thread's exception is the test's
      threads.add(t);
      t.start();
    }
    return threads;
  }

  private static void joinAll(List<Thread> threads) throws InterruptedException {
    for (Thread t : threads) {
      t.join(WAIT_MS);
      assertFalse(t.getName() + " still runs", t.isAlive());
    }
  }

  /** One participant on this thread: a sum over the replicas, as output 0. */
  private static void sumAndLeave(JoinedStep joined) {
    ReplicaContext ctx = joined.context();
    try {
      Tensor x = Tensor.fromFloat32(new long[] {1}, new float[] {ctx.replicaId()});
      ctx.setOutput(0, ctx.crossReplicaSum(x, new GroupAssignment(), new CollectiveOptions()));
      joined.leave(Status.Ok);
    } catch (OpError e) {
      joined.leaveFailed(e.status(), e.getMessage());
    } finally {
      joined.delete();
    }
  }

  private static TensorVector sumStep(long key, int timeoutMs) {
    StepOptions options = new StepOptions();
    options.setCollectiveTimeoutMs(timeoutMs);
    TensorVector inputs = new TensorVector();
    return system.replicateOnJoinedThreads(key, R, 0, inputs, 1, options);
  }

  @Test
  public void rawStepJoinAndLeaveRunAStepOnTheCallersThreads() throws Exception {
    system.setCallbackMode(true);
    try {
      AtomicReferenceArray<String> seen = new AtomicReferenceArray<>(R);
      List<Thread> threads = serveCores(core -> {
        JoinedStep joined = system.stepJoin(core, WAIT_MS);
        seen.set(core, joined.userData() + " replica " + joined.replicaId() + " on " + Thread.currentThread().getName());
        sumAndLeave(joined);
      });
      TensorVector out = sumStep(77, 10_000);
      joinAll(threads);
      assertEquals(R, out.size());
      for (int r = 0; r < R; r++) {
        assertArrayEquals(new float[] {R * (R - 1) / 2}, out.get(r).toFloat32Vector(), 0f);
        assertEquals("77 replica " + r + " on test-core-" + r, seen.get(r));
      }
      // No step comes: DeadlineExceeded; a core out of range names it.
      try {
        system.stepJoin(0, 10);
        fail("stepJoin without a step returned");
      } catch (DeadlineExceededError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("core 0"));
      }
      try {
        system.stepJoin(R, 10);
        fail("stepJoin of core " + R + " returned");
      } catch (InvalidArgumentError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("core is " + R));
      }
    } finally {
      system.setCallbackMode(false);
    }
    okStep();
  }

  /**
   * A core another thread has joined is AlreadyExistsError (the one error the pool retries
   * on), not InvalidArgumentError, which stays a programming error (a core out of range).
   * The thread that joined first gets the step.
   */
  @Test
  public void aBusyCoreIsAlreadyExistsAndACoreOutOfRangeInvalidArgument() throws Exception {
    system.setCallbackMode(true);
    try {
      AtomicReferenceArray<String> seen = new AtomicReferenceArray<>(R);
      List<Thread> threads = serveCores(core -> {
        JoinedStep joined = null;
        while (joined == null) {
          try {
            joined = system.stepJoin(core, WAIT_MS);
          } catch (AlreadyExistsError e) {
            Thread.onSpinWait();  // the probe below holds the core for a moment
          }
        }
        seen.set(core, joined.userData() + " on " + Thread.currentThread().getName());
        sumAndLeave(joined);
      });
      // Until core 0's thread waits in its join, a probe finds no step (DeadlineExceeded).
      AlreadyExistsError busy = null;
      long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(WAIT_MS);
      while (busy == null) {
        try {
          system.stepJoin(0, 0).delete();
          fail("the probe joined core 0 with no step started");
        } catch (AlreadyExistsError e) {
          busy = e;
        } catch (DeadlineExceededError e) {
          assertTrue("core 0's thread never joined", System.nanoTime() < until);
          Thread.sleep(1);
        }
      }
      assertEquals(Status.AlreadyExists, busy.status());
      assertTrue(busy.getMessage(), busy.getMessage().contains("core 0 has been joined by another thread"));
      try {
        system.stepJoin(R, 0);
        fail("stepJoin of core " + R + " returned");
      } catch (InvalidArgumentError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("core is " + R));
      }
      TensorVector out = sumStep(78, 10_000);
      joinAll(threads);
      assertEquals(R, out.size());
      for (int r = 0; r < R; r++) {
        assertArrayEquals(new float[] {R * (R - 1) / 2}, out.get(r).toFloat32Vector(), 0f);
        assertEquals("78 on test-core-" + r, seen.get(r));
      }
    } finally {
      system.setCallbackMode(false);
    }
    okStep();
  }

  /**
   * A pool thread whose stepJoin fails with anything but a busy core, a deadline or a
   * shutdown ends, and the next step throws its error: threads for R + 1 cores on a system
   * of R, whose core R is out of range (InvalidArgumentError), are the one way to get there.
   */
  @Test
  public void aReplicaThreadEndingOnAJoinErrorIsReportedByTheNextStep() throws Exception {
    system.setCallbackMode(true);
    ReplicaThreads threads = new ReplicaThreads(system, R + 1);
    try {
      for (int round = 0; round < 2; round++) {  // a new thread takes the core, and ends the same way
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(WAIT_MS);
        for (;;) {
          try {
            threads.throwIfAThreadEnded();
          } catch (InvalidArgumentError e) {
            assertTrue(e.getMessage(), e.getMessage().contains("thread of core " + R + " ended"));
            assertTrue(e.getMessage(), e.getMessage().contains("core is " + R));
            break;
          }
          assertTrue("core " + R + "'s thread did not end", System.nanoTime() < until);
          Thread.sleep(1);
        }
      }
    } finally {
      threads.stop();
      system.setCallbackMode(false);
    }
    okStep();
  }

  /**
   * An unexpected Throwable in a pool thread outside any body (an OutOfMemoryError, here
   * from the test hook) ends that thread: its participant fails the step it was in, the
   * next step reports it naming the core and the cause, and a new thread serves the core
   * (not a "never started" for every step after).
   */
  @Test
  public void anUnexpectedErrorOutsideTheBodyIsReportedByTheNextStepAndTheCoreServedAgain() throws Exception {
    okStep();
    awaitReplicaThreads(R);
    OutOfMemoryError oom = new OutOfMemoryError("test hook: no memory outside the body");
    ReplicaThreads.FAIL_ONCE_IN_SERVE.set(oom);
    try {
      okStep();
      fail("a participant whose thread ended did not fail the step");
    } catch (OpError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("java.lang.OutOfMemoryError: test hook"));
    } finally {
      ReplicaThreads.FAIL_ONCE_IN_SERVE.set(null);
    }
    try {
      okStep();
      fail("the next step did not report the thread that ended");
    } catch (InternalError e) {
      assertTrue(e.getMessage(), e.getMessage().matches(
          "the replica thread of core [0-9]+ ended: java.lang.OutOfMemoryError: test hook: no memory outside the body"));
      assertTrue(e.getCause() == oom);
    }
    okStep();  // reported once; a new thread serves the core
    okStep();
    awaitReplicaThreads(R);
  }

  @Test
  public void aThreadThatThrowsBeforeJoiningIsAReplicaThatNeverStarted() throws Exception {
    system.setCallbackMode(true);
    try {
      List<Thread> threads = serveCores(core -> {
        if (core == 3) throw new IllegalStateException("core 3's thread failed before it joined");
        sumAndLeave(system.stepJoin(core, WAIT_MS));
      });
      try {
        sumStep(1, 300);
        fail("a core no thread joined did not fail the step");
      } catch (DeadlineExceededError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("replica 3 (core 3) never started"));
      }
      joinAll(threads);  // the others' collectives were aborted: they left
    } finally {
      system.setCallbackMode(false);
    }
    okStep();
  }

  @Test
  public void aJoinedThreadThatEndsWithoutLeavingFailsItsReplica() throws Exception {
    system.setCallbackMode(true);
    try {
      List<Thread> threads = serveCores(core -> {
        JoinedStep joined = system.stepJoin(core, WAIT_MS);
        if (core != 5) sumAndLeave(joined);
        // core 5's thread ends here, inside its participant
      });
      try {
        sumStep(2, 10_000);
        fail("a thread that exited inside its participant did not fail the step");
      } catch (CancelledError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("replica 5") && e.getMessage().contains("exited before tpu_step_leave"));
      }
      joinAll(threads);
    } finally {
      system.setCallbackMode(false);
    }
    okStep();
  }

  @Test
  public void aJoinedThreadThatLeavesTooLateFailsTheStepAndTheNextRunsOnceItLeft() throws Exception {
    system.setCallbackMode(true);
    try {
      CountDownLatch failed = new CountDownLatch(1);
      List<Thread> threads = serveCores(core -> {
        JoinedStep joined = system.stepJoin(core, WAIT_MS);
        if (core == 6) {
          try {
            failed.await(WAIT_MS, TimeUnit.MILLISECONDS);  // still inside when the step gives up
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
          }
          joined.leave(Status.Ok);
          joined.delete();
          return;
        }
        joined.leave(Status.Ok);
        joined.delete();
      });
      StepOptions options = new StepOptions();
      options.setCollectiveTimeoutMs(300);
      try {
        system.replicateOnJoinedThreads(3, R, 0, new TensorVector(), 0, options);
        fail("a participant that did not leave did not fail the step");
      } catch (DeadlineExceededError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("replica 6"));
      } finally {
        failed.countDown();
      }
      joinAll(threads);
      // Core 6 is free again: the next step gets every core.
      threads = serveCores(core -> sumAndLeave(system.stepJoin(core, WAIT_MS)));
      TensorVector out = sumStep(4, 10_000);
      joinAll(threads);
      assertNotNull(out.get(6));
      assertArrayEquals(new float[] {R * (R - 1) / 2}, out.get(6).toFloat32Vector(), 0f);
      try {
        system.stepJoin(6, 0);
        fail("a core with no step gave a participant");
      } catch (DeadlineExceededError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("core 6"));
      }
    } finally {
      system.setCallbackMode(false);
    }
    okStep();
  }
}
