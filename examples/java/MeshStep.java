// A step over a 2 x 2 mesh from Java: 2 replicas ("batch") of 2 cores each ("model") on
// a system of 4 cores. Each replica's [4] vector is split over its 2 cores; each core sums
// its half, and one cross_replica_sum over the mesh's "model" axis gives both cores their
// replica's total. Exits 0 when every core's total is the replica's sum.
import java.util.ArrayList;
import java.util.List;
import org.tpurt.DeviceAssignment;
import org.tpurt.DeviceOrderMode;
import org.tpurt.Mesh;
import org.tpurt.SystemOptions;
import org.tpurt.Tensor;
import org.tpurt.Topology;
import org.tpurt.TpuSystem;
import org.tpurt.tpu;

public final class MeshStep {
  static final int REPLICAS = 2, CORES_PER_REPLICA = 2;

  public static void main(String[] args) {
    SystemOptions options = new SystemOptions();
    options.setNumCores(REPLICAS * CORES_PER_REPLICA);
    boolean ok = true;
    try (TpuSystem system = tpu.initialize_system(options);
         Topology topology = system.topology();
         DeviceAssignment assignment = DeviceAssignment.build(
             topology, new int[] {CORES_PER_REPLICA, 1, 1, 1}, new int[0], REPLICAS, DeviceOrderMode.Auto);
         Mesh mesh = Mesh.create(assignment, new String[] {"batch", "model"}, new long[] {REPLICAS, CORES_PER_REPLICA})) {
      // Replica r's input: [10r + 1, 10r + 2, 10r + 3, 10r + 4].
      List<List<Tensor>> inputs = new ArrayList<>();
      for (int r = 0; r < REPLICAS; r++)
        inputs.add(List.of(Tensor.fromFloat32(new long[] {4}, new float[] {10 * r + 1, 10 * r + 2, 10 * r + 3, 10 * r + 4})));

      int[][] halves = {{CORES_PER_REPLICA}};  // cut in 2 along dimension 0 (in), joined back (out)
      List<Tensor[]> outputs = tpu.replicate((ctx, in) -> {
        float[] half = in[0].toFloat32Vector();  // this (replica, logical core)'s 2 elements
        Tensor partial = Tensor.fromFloat32(new long[] {1}, new float[] {half[0] + half[1]});
        return new Tensor[] {tpu.crossReplicaSum(partial, mesh, "model")};
      }, inputs, mesh, halves, halves);

      for (int r = 0; r < REPLICAS; r++) {
        float[] totals = outputs.get(r)[0].toFloat32Vector();  // {core 0's total, core 1's total}
        float want = 40 * r + 10;
        System.out.printf("replica %d: cores 0 and 1 got %s and %s (want %s)%n", r, totals[0], totals[1], want);
        ok &= totals.length == CORES_PER_REPLICA && totals[0] == want && totals[1] == want;
      }
    }
    System.exit(ok ? 0 : 1);
  }
}
