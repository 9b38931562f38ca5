package org.tpurt;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** tpu's collectives over several tensors: one cross_replica_sum per dtype. */
final class TpuCollectives {
  private TpuCollectives() {}

  /** Flattens and concatenates the tensors of each dtype, sums each dtype once, splits back. */
  static List<Tensor> fusedSum(List<Tensor> xs, int[][] groupAssignment) {
    for (int i = 0; i < xs.size(); i++)
      if (xs.get(i) == null) throw new IllegalArgumentException("tensor " + i + " is null");
    Map<DType, List<Integer>> byDtype = new LinkedHashMap<>();
    for (int i = 0; i < xs.size(); i++) byDtype.computeIfAbsent(xs.get(i).dtype(), d -> new ArrayList<>()).add(i);
    Tensor[] out = new Tensor[xs.size()];
    for (Map.Entry<DType, List<Integer>> group : byDtype.entrySet()) {
      DType dtype = group.getKey();
      long elementSize = tpurt.dtypeSize(dtype);
      long total = 0;
      for (int i : group.getValue()) total += xs.get(i).byteSize();
      byte[] joined = new byte[Math.toIntExact(total)];
      int at = 0;
      for (int i : group.getValue()) {
        byte[] b = xs.get(i).toBytes();
        System.arraycopy(b, 0, joined, at, b.length);
        at += b.length;
      }
      byte[] summed = tpu.cross_replica_sum(Tensor.fromBytes(dtype, new long[] {total / elementSize}, joined), groupAssignment).toBytes();
      at = 0;
      for (int i : group.getValue()) {
        int n = Math.toIntExact(xs.get(i).byteSize());
        out[i] = Tensor.fromBytes(dtype, xs.get(i).dims(), Arrays.copyOfRange(summed, at, at + n));
        at += n;
      }
    }
    return Arrays.asList(out);
  }

}
