"""Proves bindings/tpurt.i is language-neutral: a Python module generated from it
runs one replicated cross_replica_sum on 8 cores, and outside compilation with tensors. Run by tests/check_python_binding.sh."""
import sys

import tpurt

REPLICAS = 8


class Sum(tpurt.Computation):
    def run(self, ctx):
        x = ctx.input(0)
        ctx.setOutput(0, ctx.crossReplicaSum(x, tpurt.GroupAssignment(), tpurt.CollectiveOptions()))
        return tpurt.Status_Ok


class Fails(tpurt.Computation):
    def run(self, ctx):
        if ctx.replicaId() == 3:
            raise KeyError("weights")
        return tpurt.Status_Ok


class HostTwice(tpurt.HostTensorComputation):
    """Outside compilation with tensors: doubles the replica's tensor on the host."""
    def run(self, replica, inputs):
        v = [2.0 * x for x in inputs[0].toFloat32Vector()]
        self.setOutputs(tpurt.TensorVector([tpurt.Tensor.fromFloat32Vector(tpurt.Int64Vector([len(v)]),
                                                                           tpurt.FloatVector(v))]))
        return tpurt.Status_Ok


class WithHost(tpurt.Computation):
    def run(self, ctx):
        host = HostTwice()
        ctx.setOutput(0, ctx.outsideCompilationTensors(host, tpurt.TensorVector([ctx.input(0)]))[0])
        return tpurt.Status_Ok


def main():
    options = tpurt.SystemOptions()
    options.numCores = REPLICAS
    system = tpurt.TpuSystem(options)
    inputs = tpurt.TensorVector()
    for r in range(REPLICAS):
        inputs.append(tpurt.Tensor.fromFloat32Vector(tpurt.Int64Vector([3]),
                                                     tpurt.FloatVector([r, 2.0 * r, 1.0])))
    computation = Sum()
    outputs = system.replicate(computation, REPLICAS, 1, inputs, 1, tpurt.StepOptions())
    expected = [sum(range(REPLICAS)), 2.0 * sum(range(REPLICAS)), float(REPLICAS)]
    failures = 0
    for r in range(REPLICAS):
        got = list(outputs[r].toFloat32Vector())
        if got != expected:
            print(f"replica {r}: got {got}, expected {expected}")
            failures += 1
    # An exception in a computation becomes that replica's error; the next step runs.
    try:
        system.replicate(Fails(), REPLICAS, 0, tpurt.TensorVector(), 0, tpurt.StepOptions())
        print("a raising computation did not fail the step")
        failures += 1
    except RuntimeError as e:
        if "replica 3" not in str(e):
            print(f"unexpected message: {e}")
            failures += 1
    outputs = system.replicate(computation, REPLICAS, 1, inputs, 1, tpurt.StepOptions())
    failures += list(outputs[0].toFloat32Vector()) != expected
    # Outside compilation with tensors: the director is language-neutral too.
    outputs = system.replicate(WithHost(), REPLICAS, 1, inputs, 1, tpurt.StepOptions())
    failures += list(outputs[5].toFloat32Vector()) != [10.0, 20.0, 2.0]
    system.close()
    print(f"python: {4 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
