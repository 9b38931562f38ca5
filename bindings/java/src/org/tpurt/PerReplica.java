package org.tpurt;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;

/** One value per replica; inside a computation, tpu.cross_replica_sum uses the current replica's. */
public final class PerReplica {
  private final List<Tensor> values;

  public PerReplica(List<Tensor> values) {
    if (values == null) throw new IllegalArgumentException("values is null");
    for (int i = 0; i < values.size(); i++)
      if (values.get(i) == null) throw new IllegalArgumentException("value for replica " + i + " is null");
    this.values = Collections.unmodifiableList(new ArrayList<>(values));
  }

  public PerReplica(Tensor... values) {
    this(values == null ? null : Arrays.asList(values));
  }

  public List<Tensor> values() {
    return values;
  }

  public Tensor get(int replica) {
    if (replica < 0 || replica >= values.size())
      throw new InvalidArgumentError("replica " + replica + " has no value (PerReplica holds " + values.size() + ")");
    return values.get(replica);
  }
}
