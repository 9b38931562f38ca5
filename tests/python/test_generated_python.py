"""Proves bindings/tpurt.i is language-neutral: a Python module generated from it
runs one replicated cross_replica_sum on 8 cores, outside compilation with tensors, an
embedding step, and a Python exception in a computation or host function fails the step with its type and
message. Run by make test-python (tests/check_bindings_python.sh)."""
import sys

import tpurt

REPLICAS = 8


class Sum(tpurt.Computation):
    def run(self, ctx):
        x = ctx.input(0)
        ctx.setOutput(0, ctx.crossReplicaSum(x, tpurt.GroupAssignment(), tpurt.CollectiveOptions()))
        return tpurt.Status_Ok


class WeightsError(Exception):
    pass


class Raises(tpurt.Computation):
    """Replica 3 raises `error`; the others wait in a collective the failure releases."""

    def __init__(self, error):
        super().__init__()
        self.error = error

    def run(self, ctx):
        if ctx.replicaId() == 3:
            raise self.error
        ctx.barrier(tpurt.CollectiveOptions())
        return tpurt.Status_Ok


class HostRaises(tpurt.HostComputation):
    def run(self, replica):
        if replica == 5:
            raise ValueError("host rows are gone")
        return tpurt.Status_Ok


class CallsHost(tpurt.Computation):
    def __init__(self):
        super().__init__()
        self.host = HostRaises()

    def run(self, ctx):
        ctx.outsideCompilation(self.host)
        return tpurt.Status_Ok


def step_error(system, computation):
    """The message of the step's RuntimeError, or None if the step succeeded."""
    try:
        system.replicate(computation, REPLICAS, 0, tpurt.TensorVector(), 0, tpurt.StepOptions())
    except RuntimeError as e:
        return str(e)
    return None


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


EMBEDDING_CONFIG = """{"table_descriptor": [{"name": "items", "vocabulary_size": 6, "dimension": 2,
  "optimization_parameters": {"learning_rate": {"constant": 0.5}, "stochastic_gradient_descent": {}}}],
  "feature_descriptor": [{"name": "clicked", "table_id": 0, "input_shape": [2]}], "mode": "TRAINING"}"""


class EmbeddingStep(tpurt.Computation):
    """Replica r looks up samples {r, 5} and {5} (mean) and sends a gradient of ones."""
    def run(self, ctx):
        batch = tpurt.EmbeddingFeatureBatch()
        batch.feature = 0
        batch.ids = tpurt.Int64Vector([ctx.replicaId(), 5, 5])
        batch.rowSplits = tpurt.Int64Vector([0, 2, 3])
        batch.combiner = tpurt.EmbeddingCombiner_Mean
        ctx.embeddingEnqueue(tpurt.EmbeddingFeatureBatchVector([batch]))
        activations = ctx.embeddingRecvActivations()
        ctx.setOutput(0, activations[0])
        ones = tpurt.Tensor.fromFloat32Vector(tpurt.Int64Vector([2, 2]), tpurt.FloatVector([1.0] * 4))
        ctx.embeddingSendGradients(tpurt.TensorVector([ones]), tpurt.FloatVector())
        return tpurt.Status_Ok


def embedding_checks(check):
    """The embedding engine through the generated module: lookups, an SGD step, retrieve."""
    options = tpurt.SystemOptions()
    options.numCores = 2
    options.embeddingConfig = tpurt.ByteVector(tpurt.embeddingConfigFromJson(EMBEDDING_CONFIG))
    system = tpurt.TpuSystem(options)
    system.embeddingLoad(0, 0, 0, 6, tpurt.FloatVector([float(i // 2) for i in range(12)]))
    outputs = system.replicate(EmbeddingStep(), 2, 0, tpurt.TensorVector(), 1, tpurt.StepOptions())
    got = [list(outputs[r].toFloat32Vector()) for r in range(2)]
    check("embedding activations", got == [[2.5, 2.5, 5.0, 5.0], [3.0, 3.0, 5.0, 5.0]], got)
    rows = list(system.embeddingRetrieve(0, 0, 0, 6))
    check("embedding SGD step", rows[0] == -0.25 and rows[10] == 3.5 and rows[4] == 2.0, rows)
    system.close()


def main():
    options = tpurt.SystemOptions()
    options.numCores = REPLICAS
    system = tpurt.TpuSystem(options)
    inputs = tpurt.TensorVector()
    for r in range(REPLICAS):
        inputs.append(tpurt.Tensor.fromFloat32Vector(tpurt.Int64Vector([3]),
                                                     tpurt.FloatVector([r, 2.0 * r, 1.0])))
    computation = Sum()
    expected = [sum(range(REPLICAS)), 2.0 * sum(range(REPLICAS)), float(REPLICAS)]
    checks = []

    def check(what, ok, detail=""):
        checks.append(ok)
        if not ok:
            print(f"FAILED {what}: {detail}")

    outputs = system.replicate(computation, REPLICAS, 1, inputs, 1, tpurt.StepOptions())
    got = [list(outputs[r].toFloat32Vector()) for r in range(REPLICAS)]
    check("cross_replica_sum", all(g == expected for g in got), got)

    # An exception in a computation fails the step with "replica R: Type: message".
    for error, text in [(KeyError("weights"), "replica 3: KeyError: 'weights'"),
                        (WeightsError("NaN in layer 2"), "replica 3: __main__.WeightsError: NaN in layer 2"),
                        (RuntimeError(), "replica 3: RuntimeError")]:
        message = step_error(system, Raises(error))
        check(f"{type(error).__name__} in a computation", message is not None and text in message
              and "director method error" not in message, message)
    message = step_error(system, CallsHost())
    check("ValueError in a host function", message is not None
          and "replica 5" in message and "ValueError: host rows are gone" in message, message)

    # Data for a shape with elements: an empty vector is not zeros.
    try:
        tpurt.Tensor.fromFloat32Vector(tpurt.Int64Vector([2]), tpurt.FloatVector([]))
        check("empty data for a [2] tensor", False, "no error")
    except RuntimeError as e:
        check("empty data for a [2] tensor", "INVALID_ARGUMENT" in str(e), e)

    # Outside compilation with tensors: the director is language-neutral too.
    outputs = system.replicate(WithHost(), REPLICAS, 1, inputs, 1, tpurt.StepOptions())
    got = list(outputs[5].toFloat32Vector())
    check("outside compilation with tensors", got == [10.0, 20.0, 2.0], got)

    # The system still runs steps.
    outputs = system.replicate(computation, REPLICAS, 1, inputs, 1, tpurt.StepOptions())
    check("a step after the failures", list(outputs[0].toFloat32Vector()) == expected)
    system.close()
    embedding_checks(check)
    failed = checks.count(False)
    print(f"python: {len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
