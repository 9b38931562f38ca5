// Replicas on the caller's threads (1.4): by default tpu's steps run on the binding's
// own managed threads; with TpuSystem.UseCallbacks the raw tpu_step_join /
// tpu_step_leave API is free for a program's threads. A thread that never joins, one
// that ends inside its participant and one that overruns the deadline each fail the
// step with an error naming it, and the next step runs.
using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using NUnit.Framework;
using Tpurt;

[TestFixture]
public class CallerThreadTests {
  const int Cores = 4;
  const int TimeoutMs = 1500; // the system's collective deadline
  TpuSystem system;

  [TestFixtureSetUp]
  public void StartSystem() {
    using (var options = new SystemOptions { NumCores = Cores, CollectiveTimeoutMs = TimeoutMs })
      system = TpuSystem.InitializeSystem(options);
  }
  [TestFixtureTearDown]
  public void StopSystem() { system.Dispose(); }
  [TearDown]
  public void DefaultMode() { system.UseCallbacks = false; }

  static Tensor F(params float[] v) { return Tensor.Of(v); }

  // Each replica's sum of its input with the others', as a plain tpu user writes it.
  float[] SumStep() {
    var inputs = Enumerable.Range(0, Cores).Select(r => new[] { F(r + 1) }).ToList();
    Tensor[][] outputs = tpu.replicate(x => new[] { tpu.cross_replica_sum(x[0]) }, inputs, num_outputs: 1, system: system);
    return outputs.Select(o => o[0].ToFloatArray()[0]).ToArray();
  }

  [Test]
  public void StepsRunOnTheBindingsNamedBackgroundThreads() {
    var threads = new ConcurrentDictionary<int, Thread>();
    for (int step = 0; step < 3; ++step)
      tpu.replicate((ctx, x) => {
        Thread t = Thread.CurrentThread;
        Assert.AreEqual("tpurt replica core " + ctx.Core(), t.Name);
        Assert.IsTrue(t.IsBackground, t.Name);
        Assert.AreSame(threads.GetOrAdd(ctx.Core(), t), t, "core " + ctx.Core() + " changed threads");
        return x;
      }, num_replicas: Cores, system: system);
    Assert.AreEqual(Cores, threads.Values.Distinct().Count());
    Assert.IsFalse(threads.Values.Contains(Thread.CurrentThread));
    CollectionAssert.AreEqual(new[] { 10f, 10f, 10f, 10f }, SumStep());
  }

  [Test]
  public void EveryStepFormRunsOnThePool() {
    var names = new ConcurrentBag<string>();
    Func<Tensor[], Tensor[]> record = x => { names.Add(Thread.CurrentThread.Name ?? ""); return x; };
    CollectionAssert.AreEqual(new[] { 3f }, tpu.rewrite(record, new[] { F(3) }, num_outputs: 1, system: system)[0].ToFloatArray());
    CollectionAssert.AreEqual(new[] { 1f, 2f, 3f, 4f },
                              tpu.shard(record, new[] { F(1, 2, 3, 4) }, num_shards: 4, num_outputs: 1, system: system)[0].ToFloatArray());
    CollectionAssert.AreEqual(new[] { 1f, 2f, 3f, 4f },
                              tpu.batch_parallel(record, new[] { F(1, 2, 3, 4) }, num_shards: 4, num_outputs: 1, system: system)[0].ToFloatArray());
    using (var da = system.DefaultDeviceAssignment(4))
      tpu.replicate(record, num_replicas: 4, device_assignment: da, system: system);
    Assert.AreEqual(1 + 4 + 4 + 4, names.Count);
    Assert.IsTrue(names.All(n => n.StartsWith("tpurt replica core ")), string.Join(", ", names));
  }

  [Test]
  public void CallbackModeRunsOnTpurtsWorkersAndBack() {
    system.UseCallbacks = true;
    var names = new ConcurrentBag<string>();
    tpu.replicate(x => { names.Add(Thread.CurrentThread.Name ?? ""); return x; }, num_replicas: Cores, system: system);
    Assert.AreEqual(Cores, names.Count);
    Assert.IsFalse(names.Any(n => n.StartsWith("tpurt replica")), string.Join(", ", names));
    CollectionAssert.AreEqual(new[] { 10f, 10f, 10f, 10f }, SumStep());
    system.UseCallbacks = false;
    CollectionAssert.AreEqual(new[] { 10f, 10f, 10f, 10f }, SumStep());
  }

  // The raw API: the program's own threads join the cores of a step begun with
  // ReplicateOnJoinedThreads. join(core) runs on core's thread; its exceptions are
  // returned (index = core).
  Exception[] OnCoreThreads(Action<int> join, Action step) {
    var errors = new Exception[Cores];
    var threads = Enumerable.Range(0, Cores).Select(c => new Thread(() => {
      try {
        join(c);
      } catch (Exception e) {
        errors[c] = e;
      }
    }) { IsBackground = true }).ToArray();
    foreach (Thread t in threads) t.Start();
    step();
    // A core a failed step never handed over leaves its thread in StepJoin until its
    // limit (the tests use 4 * TimeoutMs, counted from before step()): wait past it.
    foreach (Thread t in threads) Assert.IsTrue(t.Join(6 * TimeoutMs), "a joined thread never returned");
    return errors;
  }

  TensorVector RunJoinedStep(long key, StepOptions options = null) {
    using (var inputs = new TensorVector(Enumerable.Range(0, Cores).Select(r => F(r + 1))))
    using (var o = options ?? new StepOptions())
      return system.ReplicateOnJoinedThreads(key, Cores, 1, inputs, 1, o);
  }

  // One participant by hand: its input summed over the replicas, as its output.
  static void RunSum(JoinedStep j, long key) {
    Assert.AreEqual(key, j.UserData());
    ReplicaContext ctx = j.Context();
    Assert.AreEqual(1, j.NumInputs());
    using (Tensor x = ctx.Input(0))
    using (Tensor sum = ctx.CrossReplicaSum(x))
      ctx.SetOutput(0, sum);
    j.Leave(Status.Ok);
    Assert.IsTrue(j.HasLeft());
    Assert.Throws<FailedPreconditionError>(() => j.Leave(Status.Ok));
  }

  [Test]
  public void RawStepJoinAndLeaveWithThePoolOff() {
    system.UseCallbacks = true;
    TensorVector outputs = null;
    Exception[] errors = OnCoreThreads(c => {
      using (JoinedStep j = system.StepJoin(c, 4 * TimeoutMs)) RunSum(j, 7);
    }, () => outputs = RunJoinedStep(7));
    Assert.IsTrue(errors.All(e => e == null), string.Join("; ", errors.Where(e => e != null)));
    using (outputs)
      CollectionAssert.AreEqual(new[] { 10f, 10f, 10f, 10f }, outputs.Select(t => t.ToFloatArray()[0]).ToArray());
    // No step: the join times out; a core out of range is named.
    Assert.Throws<DeadlineExceededError>(() => system.StepJoin(0, 0));
    StringAssert.Contains("99", Assert.Throws<InvalidArgumentError>(() => system.StepJoin(99, 0)).Message);
  }

  // StepJoinCancel ends a join waiting with no limit (CancelledError); the next join
  // waits as usual. And turning the pool off (UseCallbacks) cancels its threads' joins
  // the same way: every core is free at once, and no cancel is left for a raw join.
  [Test]
  public void StepJoinCancelEndsAWaitingJoin() {
    tpu.replicate(x => x, num_replicas: Cores, system: system);  // the pool serves every core
    system.UseCallbacks = true;
    for (int c = 0; c < Cores; ++c) Assert.Throws<DeadlineExceededError>(() => system.StepJoin(c, 0));
    Exception seen = null;
    var waiter = new Thread(() => {
      for (var giveUp = DateTime.UtcNow.AddSeconds(10); DateTime.UtcNow < giveUp; Thread.Sleep(1)) {
        try {
          system.StepJoin(1, -1).Dispose();
        } catch (AlreadyExistsError) {
          continue;  // the test's probe held the core for a moment
        } catch (Exception e) {
          seen = e;
        }
        return;
      }
    });
    waiter.Start();
    var until = DateTime.UtcNow.AddSeconds(10);
    while (true) {  // until the waiter holds core 1
      try {
        system.StepJoin(1, 0).Dispose();
      } catch (AlreadyExistsError) {
        break;
      } catch (DeadlineExceededError) {
      }
      Assert.Less(DateTime.UtcNow, until, "the waiter never joined core 1");
      Thread.Sleep(1);
    }
    system.StepJoinCancel(1);
    Assert.IsTrue(waiter.Join(10000), "the cancelled join did not return");
    Assert.IsInstanceOf<CancelledError>(seen);
    StringAssert.Contains("tpu_step_join_cancel", seen.Message);
    Assert.Throws<DeadlineExceededError>(() => system.StepJoin(1, 0));
    StringAssert.Contains("99", Assert.Throws<InvalidArgumentError>(() => system.StepJoinCancel(99)).Message);
  }

  // A core another thread has joined is AlreadyExists (the one status a pool retries
  // on), not InvalidArgument, which stays a programming error (a core out of range).
  // The thread that joined first gets the step.
  [Test]
  public void ABusyCoreIsAlreadyExistsAndACoreOutOfRangeInvalidArgument() {
    system.UseCallbacks = true;
    TensorVector outputs = null;
    AlreadyExistsError busy = null;
    InvalidArgumentError outOfRange = null;
    Exception[] errors = OnCoreThreads(c => {
      JoinedStep joined = null;
      while (joined == null) {
        try {
          joined = system.StepJoin(c, 4 * TimeoutMs);
        } catch (AlreadyExistsError) {
          Thread.Sleep(1); // the probe below holds the core for a moment
        }
      }
      using (joined) RunSum(joined, 11);
    }, () => {
      // Until core 0's thread waits in its join, a probe finds no step (DeadlineExceeded).
      DateTime until = DateTime.UtcNow.AddMilliseconds(4 * TimeoutMs);
      while (busy == null) {
        try {
          system.StepJoin(0, 0).Dispose();
          Assert.Fail("the probe joined core 0 with no step started");
        } catch (AlreadyExistsError e) {
          busy = e;
        } catch (DeadlineExceededError) {
          Assert.Less(DateTime.UtcNow, until, "core 0's thread never joined");
          Thread.Sleep(1);
        }
      }
      outOfRange = Assert.Throws<InvalidArgumentError>(() => system.StepJoin(Cores, 0));
      outputs = RunJoinedStep(11);
    });
    Assert.IsTrue(errors.All(e => e == null), string.Join("; ", errors.Where(e => e != null)));
    Assert.AreEqual(Status.AlreadyExists, busy.Code);
    StringAssert.Contains("core 0 has been joined by another thread", busy.Message);
    Assert.AreEqual(Status.InvalidArgument, outOfRange.Code);
    StringAssert.Contains("core is " + Cores, outOfRange.Message);
    using (outputs)
      CollectionAssert.AreEqual(new[] { 10f, 10f, 10f, 10f }, outputs.Select(t => t.ToFloatArray()[0]).ToArray());
    system.UseCallbacks = false;
    CollectionAssert.AreEqual(new[] { 10f, 10f, 10f, 10f }, SumStep());
  }

  // A pool thread whose join fails with anything but a busy core, a deadline or a
  // shutdown ends, and the next step throws its error: a pool (internal, reached by
  // reflection) of Cores + 1 threads on a system of Cores, whose core Cores is out of
  // range (InvalidArgumentError), is the one way to get there.
  [Test]
  public void APoolThreadEndingOnAJoinErrorIsReportedByTheNextStep() {
    system.UseCallbacks = true;
    Type poolType = typeof(TpuSystem).Assembly.GetType("Tpurt.ReplicaPool", true);
    const System.Reflection.BindingFlags Internal = System.Reflection.BindingFlags.NonPublic | System.Reflection.BindingFlags.Instance;
    object pool = poolType.GetConstructor(Internal, null, new[] { typeof(TpuSystem), typeof(int) }, null)
                      .Invoke(new object[] { system, Cores + 1 });
    System.Reflection.MethodInfo check = poolType.GetMethod("ThrowIfAThreadEnded", Internal);
    try {
      for (int round = 0; round < 2; ++round) { // a new thread takes the core, and ends the same way
        DateTime until = DateTime.UtcNow.AddMilliseconds(4 * TimeoutMs);
        for (;;) {
          try {
            check.Invoke(pool, null);
          } catch (System.Reflection.TargetInvocationException e) {
            Assert.IsInstanceOf<InvalidArgumentError>(e.InnerException, e.InnerException.ToString());
            StringAssert.Contains("thread of core " + Cores + " ended", e.InnerException.Message);
            StringAssert.Contains("core is " + Cores, e.InnerException.Message);
            break;
          }
          Assert.Less(DateTime.UtcNow, until, "core " + Cores + "'s thread did not end");
          Thread.Sleep(1);
        }
      }
    } finally {
      poolType.GetMethod("Stop", Internal).Invoke(pool, new object[] { false });
    }
    system.UseCallbacks = false;
    CollectionAssert.AreEqual(new[] { 10f, 10f, 10f, 10f }, SumStep());
  }

  [Test]
  public void AThreadThatThrowsBeforeJoiningIsNamedAtTheDeadline() {
    system.UseCallbacks = true;
    DeadlineExceededError failure = null;
    OnCoreThreads(c => {
      if (c == 2) throw new InvalidOperationException("this thread never joins");
      using (JoinedStep j = system.StepJoin(c, 4 * TimeoutMs)) {
        try {
          using (Tensor x = j.Context().Input(0)) j.Context().CrossReplicaSum(x).Dispose();
        } catch (OpError e) {
          j.LeaveFailed(e.Code, e.Message); // aborted by replica 2's failure
          return;
        }
        j.Leave(Status.Ok);
      }
    }, () => failure = Assert.Throws<DeadlineExceededError>(() => RunJoinedStep(8)));
    StringAssert.Contains("replica 2 (core 2) never started", failure.Message);
    system.UseCallbacks = false;
    CollectionAssert.AreEqual(new[] { 10f, 10f, 10f, 10f }, SumStep());
  }

  [Test]
  public void AThreadEndingWithoutLeavingFailsItsReplicaAtOnce() {
    system.UseCallbacks = true;
    OpError failure = null;
    OnCoreThreads(c => {
      JoinedStep j = system.StepJoin(c, 4 * TimeoutMs);
      if (c == 1) return; // the thread ends inside its participant
      j.Leave(Status.Ok);
    }, () => failure = Assert.Throws<CancelledError>(() => RunJoinedStep(9)));
    StringAssert.Contains("exited before tpu_step_leave", failure.Message);
    system.UseCallbacks = false;
    CollectionAssert.AreEqual(new[] { 10f, 10f, 10f, 10f }, SumStep());
  }

  // A pool thread aborted inside its computation is a thread killed: the step fails,
  // a new thread serves the core, and the next step runs.
  [Test]
  public void APoolThreadKilledInsideItsReplicaFailsTheStepAndIsReplaced() {
    Thread killed = null;
    var e = Assert.Catch<OpError>(() => tpu.replicate((ctx, x) => {
      if (ctx.ReplicaId() == 1) {
        killed = Thread.CurrentThread;
        Thread.CurrentThread.Abort();
      }
      return x;
    }, num_replicas: Cores, system: system));
    StringAssert.Contains("replica 1", e.Message);
    Assert.IsTrue(killed.Join(4 * TimeoutMs));
    CollectionAssert.AreEqual(new[] { 10f, 10f, 10f, 10f }, SumStep());
  }

  // A replica that overruns the deadline fails the step; its core serves the next
  // step once it returns.
  [Test]
  public void AnAbandonedStepEndsAtTheDeadlineAndTheNextRunsAfterItsReplicaLeaves() {
    using (var release = new ManualResetEventSlim(false))
    using (var returned = new ManualResetEventSlim(false)) {
      var e = Assert.Throws<DeadlineExceededError>(() => tpu.replicate((ctx, x) => {
        if (ctx.ReplicaId() == 0) {
          release.Wait(10 * TimeoutMs);
          returned.Set();
        }
        return x;
      }, num_replicas: Cores, system: system));
      StringAssert.Contains("replica 0", e.Message);
      Assert.IsFalse(returned.IsSet, "the step waited for its late replica");
      release.Set();
      Assert.IsTrue(returned.Wait(4 * TimeoutMs));
      CollectionAssert.AreEqual(new[] { 10f, 10f, 10f, 10f }, SumStep());
    }
  }
}
