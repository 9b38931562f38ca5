package org.tpurt;

/** A replicated computation that sees its replica's context: returns its outputs (null for none). */
@FunctionalInterface
public interface TpuComputation {
  Tensor[] apply(ReplicaContext ctx, Tensor[] inputs) throws Exception;
}
