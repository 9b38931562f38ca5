// Handles and the process around a step: a disposed handle of any type is refused by
// name wherever it is passed; a computation may call the GC as it likes; a process
// whose Main returns during a step exits within the documented bound.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using NUnit.Framework;
using Tpurt;

[TestFixture]
public class LifetimeTests {
  const int Replicas = 4;
  TpuSystem system;

  [TestFixtureSetUp]
  public void StartSystem() { system = tpu.initialize_system(num_cores: Replicas); }
  [TestFixtureTearDown]
  public void StopSystem() { system.Dispose(); }

  static void AssertDisposed(string type, TestDelegate call) {
    var e = Assert.Throws<ObjectDisposedException>(call);
    Assert.AreEqual(type, e.ObjectName, e.Message);
  }
  static T Disposed<T>(T handle) where T : IDisposable {
    handle.Dispose();
    return handle;
  }
  static IEnumerable<IEnumerable<Tensor>> Inputs() {
    return Enumerable.Range(0, Replicas).Select(r => (IEnumerable<Tensor>)new[] { Tensor.Of(new float[] { r }) }).ToList();
  }
  Tensor[][] Sum(DeviceAssignment device_assignment = null, InfeedQueue infeed_queue = null, IEnumerable<IEnumerable<Tensor>> inputs = null) {
    return tpu.replicate(x => new[] { tpu.cross_replica_sum(x.Length > 0 ? x[0] : Tensor.Of(new float[] { 1 })) },
                         inputs ?? Inputs(), infeed_queue, device_assignment, num_outputs: 1, system: system);
  }

  // A disposed DeviceAssignment or InfeedQueue used to reach C as NULL ("none"): the
  // step ran as if none had been given.
  [Test]
  public void DisposedHandlesAreRefusedByTypeWhereverPassed() {
    AssertDisposed("DeviceAssignment", () => Sum(device_assignment: Disposed(system.DefaultDeviceAssignment(Replicas))));
    var shapes = new ShapeVector { Shape.Of(new Int64Vector(new long[] { 1 })) };
    var dtypes = new Int32Vector(new[] { (int)DType.Float32 });
    AssertDisposed("InfeedQueue", () => Sum(infeed_queue: Disposed(new InfeedQueue(system, Replicas, dtypes, shapes, 2))));
    AssertDisposed("Tensor", () => Sum(inputs: Enumerable.Range(0, Replicas).Select(r => (IEnumerable<Tensor>)new[] { Disposed(Tensor.Of(new float[] { r })) }).ToList()));
    AssertDisposed("Topology", () => DeviceAssignment.Build(Disposed(system.GetTopology()), new Int32Vector(), new Int32Vector(), 1, DeviceOrderMode.Auto));
    AssertDisposed("ShapeVector", () => new InfeedQueue(system, Replicas, dtypes, Disposed(new ShapeVector()), 2));
    AssertDisposed("ClusterResolver", () => tpu.initialize_tpu_system(Disposed(new TPUClusterResolver(tpu: "local"))));
    AssertDisposed("StepOptions", () => system.Replicate(new Echo(), 1, 0, new TensorVector(), 0, Disposed(new StepOptions())));
    // As `this`: the proxy's own methods.
    AssertDisposed("Tensor", () => Disposed(Tensor.Of(new float[] { 1 })).ToFloatArray());
    AssertDisposed("TensorVector", () => Disposed(new TensorVector()).Add(Tensor.Of(new float[] { 1 })));
    AssertDisposed("DeviceAssignment", () => Disposed(system.DefaultDeviceAssignment(1)).NumReplicas());
    // Inside a computation too (the step fails with the exception's message).
    var e = Assert.Throws<UnknownError>(() => tpu.replicate(x => new[] { tpu.cross_replica_sum(Disposed(Tensor.Of(new float[] { 1 }))) },
                                                           num_outputs: 1, num_replicas: Replicas, system: system));
    StringAssert.Contains("ObjectDisposedException", e.Message);
    // And the system still runs steps.
    CollectionAssert.AreEqual(new float[] { 6 }, Sum()[0][0].ToFloatArray());
  }

  sealed class Echo : NativeComputation {
    public override Status Run(ReplicaContext ctx) { return Status.Ok; }
  }

  internal static string RunProgram(string name, int expectedExitCode = 0) {
    string dir = Environment.GetEnvironmentVariable("TPURT_CS_DIR") ?? ".";
    var info = new ProcessStartInfo("mono", Path.Combine(dir, name)) {
      UseShellExecute = false, RedirectStandardOutput = true,
    };
    using (Process p = Process.Start(info)) {
      // Read while waiting: ReadToEnd alone would wait for the child's exit unbounded.
      System.Threading.Tasks.Task<string> output = p.StandardOutput.ReadToEndAsync();
      bool exited = p.WaitForExit(20000);
      if (!exited) p.Kill();
      Assert.IsTrue(exited, name + " did not exit within 20 s");
      Assert.AreEqual(expectedExitCode, p.ExitCode, output.Result);
      return output.Result;
    }
  }

  // Used to hang for good: Mono wakes one WaitForPendingFinalizers caller per finalizer
  // pass (FinalizerPump.cs). A subprocess, so a hang cannot stall the suite.
  [Test]
  public void GcInsideAComputationDoesNotHangTheStep() {
    StringAssert.Contains("10 steps, sum 28", RunProgram("GcInComputation.exe"));
  }

  // Used to wait for the step (here 60 s; the system deadline at most).
  [Test]
  public void MainReturningDuringAStepExitsWithItsCode() {
    StringAssert.Contains("main returns", RunProgram("ExitDuringStep.exe", 3));
  }

  // Used to wait for the late replica at exit, up to the deadline again (22 s in all).
  [Test]
  public void MainReturningWithALateReplicaExitsWithItsCode() {
    StringAssert.Contains("late: ", RunProgram("ExitWithLateReplica.exe", 4));
  }
}
