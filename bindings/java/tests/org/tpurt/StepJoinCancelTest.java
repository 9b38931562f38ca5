package org.tpurt;

import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.util.concurrent.atomic.AtomicReference;
import org.junit.Test;

/** stepJoinCancel (tpu_step_join_cancel): how a pool of raw stepJoin threads stops without a timeout. */
public class StepJoinCancelTest {
  private static final long BOUND_MS = 10_000;  // bounds every wait here

  @Test
  public void cancelEndsAWaitingJoinAndOnlyThatOne() throws InterruptedException {
    SystemOptions options = new SystemOptions();
    options.setNumCores(2);
    try (TpuSystem system = TpuSystem.initializeSystem(options)) {
      system.setCallbackMode(true);  // the pool off: the cores are the test's
      AtomicReference<Throwable> seen = new AtomicReference<>();
      Thread waiter = new Thread(() -> {
        long giveUp = System.currentTimeMillis() + BOUND_MS;
        while (System.currentTimeMillis() < giveUp) {
          try {
            system.stepJoin(1, -1).delete();
          } catch (AlreadyExistsError e) {
            continue;  // the test's probe held the core for a moment
          } catch (Throwable t) {
            seen.set(t);
          }
          return;
        }
      });
      waiter.start();
      long giveUp = System.currentTimeMillis() + BOUND_MS;
      for (;;) {  // until the waiter holds core 1
        try {
          system.stepJoin(1, 0).delete();
        } catch (AlreadyExistsError e) {
          break;
        } catch (DeadlineExceededError e) {
          if (System.currentTimeMillis() > giveUp) fail("the waiter never joined core 1");
          Thread.sleep(1);
        }
      }
      system.stepJoinCancel(1);
      waiter.join(BOUND_MS);
      assertTrue("the cancelled join did not return", !waiter.isAlive());
      assertTrue(String.valueOf(seen.get()), seen.get() instanceof CancelledError);
      assertTrue(seen.get().getMessage(), seen.get().getMessage().contains("tpu_step_join_cancel"));
      try {
        system.stepJoin(1, 0);
        fail("the next join returned a step");
      } catch (DeadlineExceededError e) {
        // consumed: the next join waits as usual
      }
      try {
        system.stepJoinCancel(2);
        fail("core 2 of 2 was accepted");
      } catch (InvalidArgumentError e) {
        assertTrue(e.getMessage(), e.getMessage().contains("core is 2"));
      }
    }
  }
}
