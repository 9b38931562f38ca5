using System;
using System.Collections.Generic;

namespace Tpurt {

public static partial class tpu {
  // outside_compilation's path through the C ABI (tpu_outside_compilation_tensors): the
  // Tensor arguments travel as the call's inputs and the host function gets them from
  // there; a Tensor or Tensor[] it returns comes back as the call's outputs.
  static object OnHostWithTensors(Delegate computation, object[] args) {
    var at = new List<int>();
    var inputs = new TensorVector();
    for (int i = 0; i < args.Length; ++i) {
      if (!(args[i] is Tensor)) continue;
      at.Add(i);
      inputs.Add((Tensor)args[i]);
    }
    using (var host = new DelegateHostTensorComputation(computation, args, at)) {
      TensorVector outputs = current_replica.OutsideCompilationTensors(host, inputs);
      if (!host.ReturnedTensors) return host.Result;
      var result = new Tensor[outputs.Count];
      for (int i = 0; i < result.Length; ++i) result[i] = outputs[i];
      return host.Result is Tensor ? (object)result[0] : result;
    }
  }
}

internal sealed class DelegateHostTensorComputation : NativeHostTensorComputation {
  readonly Delegate body;
  readonly object[] args;
  readonly List<int> tensorAt;
  internal object Result;
  internal bool ReturnedTensors;
  internal DelegateHostTensorComputation(Delegate body, object[] args, List<int> tensorAt) {
    this.body = body;
    this.args = args;
    this.tensorAt = tensorAt;
  }

  public override Status Run(int replicaId, TensorVector inputs) {
    try {
      var bound = (object[])args.Clone();
      for (int k = 0; k < tensorAt.Count; ++k) bound[tensorAt[k]] = inputs[k];
      Result = body.DynamicInvoke(bound);
      var returned = Result is Tensor ? new[] { (Tensor)Result } : Result as Tensor[];
      ReturnedTensors = returned != null;
      if (returned != null) {
        var v = new TensorVector();
        foreach (Tensor t in returned) {
          if (t == null) throw new ArgumentException("the host function returned a null tensor");
          v.Add(t);
        }
        SetOutputs(v);
      }
      return Status.Ok;
    } catch (Exception e) {
      try {
        return FailHost(DelegateComputation.CodeOf(e), DelegateComputation.MessageOf(e));
      } catch (Exception) {
        return Status.Unknown;
      }
    }
  }
}

}
