// outside_compilation with tensors: Tensor arguments reach the host function through
// the C call's inputs (tpu_outside_compilation_tensors) and the Tensor or Tensor[] it
// returns comes back to the replica through the call's outputs.
using System;
using System.Linq;
using NUnit.Framework;
using Tpurt;

[TestFixture]
public class OutsideCompilationTests {
  const int Replicas = 4;
  TpuSystem system;

  [TestFixtureSetUp]
  public void StartSystem() { system = tpu.initialize_system(num_cores: Replicas); }
  [TestFixtureTearDown]
  public void StopSystem() { system.Dispose(); }

  static Tensor Scaled(Tensor t, float factor) { return Tensor.Of(t.ToFloatArray().Select(v => v * factor).ToArray()); }

  Tensor[][] Run(Func<Tensor[], Tensor[]> computation, int numOutputs) {
    var inputs = Enumerable.Range(0, Replicas).Select(r => new[] { Tensor.Of(new float[] { r, 1 }) }).ToList();
    return tpu.replicate(computation, inputs, num_outputs: numOutputs, system: system);
  }

  [Test]
  public void TensorsGoToTheHostAndBack() {
    Func<Tensor, float, Tensor> scale = Scaled;
    Func<Tensor, Tensor[]> split = t => t.ToFloatArray().Select(v => Tensor.Of(new[] { v + 100 })).ToArray();
    Tensor[][] o = Run(x => {
      var one = (Tensor)tpu.outside_compilation(scale, x[0], 3f);
      var many = (Tensor[])tpu.outside_compilation(split, x[0]);
      return new[] { one, many[0], many[1] };
    }, 3);
    for (int r = 0; r < Replicas; ++r) {
      CollectionAssert.AreEqual(new float[] { 3 * r, 3 }, o[r][0].ToFloatArray());
      CollectionAssert.AreEqual(new float[] { 100 + r }, o[r][1].ToFloatArray());
      CollectionAssert.AreEqual(new float[] { 101 }, o[r][2].ToFloatArray());
    }
  }

  // The support layer's call itself, with a director of our own.
  sealed class Echo : NativeHostTensorComputation {
    public override Status Run(int replicaId, TensorVector inputs) {
      if (replicaId == 2) return FailHost(Status.DataLoss, "replica 2's host failed");
      SetOutputs(new TensorVector { inputs[0], Tensor.Of(new float[] { replicaId }) });
      return Status.Ok;
    }
  }

  [Test]
  public void OutsideCompilationTensorsAndHostFailures() {
    var e = Assert.Throws<DataLossError>(() => Run(x => {
      using (var echo = new Echo()) {
        TensorVector back = tpu.current_replica.OutsideCompilationTensors(echo, new TensorVector { x[0] });
        return new[] { back[0], back[1] };
      }
    }, 2));
    StringAssert.Contains("replica 2's host failed", e.Message);
    Func<Tensor, Tensor> bad = t => { throw new DataLossError("no tensor today"); };
    var d = Assert.Throws<DataLossError>(() => Run(x => new[] { (Tensor)tpu.outside_compilation(bad, x[0]) }, 1));
    StringAssert.Contains("no tensor today", d.Message);
    Func<Tensor, Tensor> none = t => null;
    Run(x => { Assert.IsNull(tpu.outside_compilation(none, x[0])); return new[] { x[0] }; }, 1);
    Tensor[][] o = Run(x => new[] { (Tensor)tpu.outside_compilation((Func<Tensor, Tensor>)(t => t), x[0]) }, 1);
    for (int r = 0; r < Replicas; ++r) CollectionAssert.AreEqual(new float[] { r, 1 }, o[r][0].ToFloatArray());
  }
}
