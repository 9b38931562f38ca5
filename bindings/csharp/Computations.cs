// The directors behind tpu's delegates. Each catches every managed exception and
// reports it as the replica's error: an exception escaping a director is fatal in Mono.
using System;
using System.Reflection;
using System.Threading;

namespace Tpurt {

public delegate Tensor[] ReplicaComputation(ReplicaContext ctx, Tensor[] inputs);

internal sealed class DelegateComputation : NativeComputation {
  // Set before each step; a director is reused (constructing one reflects over it).
  internal ReplicaComputation body;
  internal TpuSystem system; // the step's (ctx.Embedding reads feature names from it)
  [ThreadStatic] internal static ReplicaContext Current;
  // Collective results handed out during this replica's run: disposed when it returns,
  // so their buffers go back to the library's cache at once, not at the next GC (an
  // output keeps its own reference).
  [ThreadStatic] static System.Collections.Generic.List<Tensor> owned;

  internal static Tensor Own(Tensor t) {
    if (Current != null && t != null) (owned ?? (owned = new System.Collections.Generic.List<Tensor>())).Add(t);
    return t;
  }

  int running;
  // A late replica (its step already failed) may still be in this computation.
  internal bool Running { get { return Volatile.Read(ref running) > 0; } }

  public override Status Run(ReplicaContext ctx) {
    Interlocked.Increment(ref running);
    try {
      return RunReplica(body, system, ctx);
    } finally {
      Interlocked.Decrement(ref running);
    }
  }

  // One participant of `body` on this thread, whichever thread runs it (a callback
  // from tpurt's worker, or the binding's own pool thread, ReplicaPool.cs): the user
  // sees the same context, thread-local current replica and error messages.
  // numInputs / numOutputs: the context's, when the caller knows them (-1: ask it).
  internal static Status RunReplica(ReplicaComputation body, TpuSystem system, ReplicaContext ctx,
                                    int numInputs = -1, int numOutputs = -1) {
    ReplicaContext previous = Current;
    Current = ctx;
    ctx.StepSystem = system;
    var previousOwned = owned;
    owned = null; // made by the first Own, so an empty step allocates no list
    Tensor[] inputs = null;
    try {
      if (numInputs < 0) numInputs = ctx.NumInputs();
      inputs = numInputs == 0 ? NoTensors : new Tensor[numInputs];
      for (int i = 0; i < numInputs; ++i) inputs[i] = ctx.Input(i);
      Tensor[] outputs = body(ctx, inputs) ?? NoTensors;
      if (numOutputs < 0) numOutputs = ctx.NumOutputs();
      if (outputs.Length != numOutputs)
        return ctx.Fail(Status.InvalidArgument, "the computation returned " + outputs.Length +
                        " outputs; the step expects " + numOutputs);
      for (int j = 0; j < outputs.Length; ++j) ctx.SetOutput(j, outputs[j]);
      return Status.Ok;
    } catch (Exception e) {
      return Fail(ctx, e);
    } finally {
      if (owned != null)
        foreach (Tensor t in owned) t.Dispose();
      if (inputs != null)
        foreach (Tensor t in inputs) t?.Dispose();
      owned = previousOwned;
      Current = previous;
    }
  }
  static readonly Tensor[] NoTensors = new Tensor[0];

  static Status Fail(ReplicaContext ctx, Exception e) {
    try {
      return ctx.Fail(CodeOf(e), MessageOf(e));
    } catch (Exception) {
      return Status.Unknown;
    }
  }
  internal static Status CodeOf(Exception e) {
    var op = Unwrap(e) as OpError;
    return op != null && op.Code != Status.Ok ? op.Code : Status.Unknown;
  }
  internal static string MessageOf(Exception e) {
    e = Unwrap(e);
    return e is OpError ? e.Message : e.GetType().Name + ": " + e.Message;
  }
  static Exception Unwrap(Exception e) {
    while (e is TargetInvocationException && e.InnerException != null) e = e.InnerException;
    return e;
  }
}

}
