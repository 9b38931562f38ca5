package org.tpurt;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;

/**
 * outside_compilation with tensors: Tensor arguments reach the host function through the
 * C call's inputs (tpu_outside_compilation_tensors), and the Tensor or Tensor[] it
 * returns comes back to the replica through the call's outputs.
 */
public class OutsideCompilationTest {
  private static final int R = 4;
  private static TpuSystem system;

  @BeforeClass
  public static void start() {
    SystemOptions options = new SystemOptions();
    options.setNumCores(R);
    system = tpu.initialize_system(options);
  }

  @AfterClass
  public static void stop() {
    system.close();
  }

  private static Tensor vec(float... v) {
    return Tensor.fromFloat32(new long[] {v.length}, v);
  }

  private static List<List<Tensor>> inputs() {
    List<List<Tensor>> rows = new ArrayList<>();
    for (int r = 0; r < R; r++) rows.add(Arrays.asList(vec(r, 1)));
    return rows;
  }

  @Test
  public void tensorsGoToTheHostAndBack() {
    HostFunction scale = (args, kw) -> {
      float[] v = ((Tensor) args[0]).toFloat32Vector();
      float k = (Float) args[1];
      return vec(v[0] * k, v[1] * k);
    };
    HostFunction split = (args, kw) -> {
      float[] v = ((Tensor) args[0]).toFloat32Vector();
      return new Tensor[] {vec(v[0] + 100), vec(v[1] + 100)};
    };
    List<Tensor[]> out = tpu.replicate((ctx, in) -> {
      Tensor one = (Tensor) tpu.outside_compilation(scale, in[0], 3f);
      Tensor[] many = (Tensor[]) tpu.outside_compilation(split, in[0]);
      return new Tensor[] {one, many[0], many[1]};
    }, inputs());
    for (int r = 0; r < R; r++) {
      assertArrayEquals(new float[] {3f * r, 3f}, out.get(r)[0].toFloat32Vector(), 0f);
      assertArrayEquals(new float[] {100f + r}, out.get(r)[1].toFloat32Vector(), 0f);
      assertArrayEquals(new float[] {101f}, out.get(r)[2].toFloat32Vector(), 0f);
    }
  }

  @Test
  public void outsideCompilationTensorsAndHostFailures() {
    // The support layer's call itself, with a director of our own.
    List<Tensor[]> out = tpu.replicate((ctx, in) -> {
      HostTensorComputation echo = new HostTensorComputation() {
        @Override
        public Status run(int replicaId, TensorVector inputs) {
          TensorVector v = new TensorVector();
          v.add(inputs.get(0));
          v.add(vec(replicaId));
          setOutputs(v);
          return Status.Ok;
        }
      };
      TensorVector in0 = new TensorVector();
      in0.add(in[0]);
      TensorVector back = ctx.outsideCompilationTensors(echo, in0);
      Tensor[] result = {new Tensor(back.get(0)), new Tensor(back.get(1))};
      echo.delete();
      return result;
    }, inputs());
    for (int r = 0; r < R; r++) {
      assertArrayEquals(new float[] {r, 1f}, out.get(r)[0].toFloat32Vector(), 0f);
      assertArrayEquals(new float[] {r}, out.get(r)[1].toFloat32Vector(), 0f);
    }
    try {
      tpu.replicate((ctx, in) -> new Tensor[] {(Tensor) tpu.outside_compilation((args, kw) -> {
        throw new DataLossError("no tensor today");
      }, in[0])}, inputs());
      fail("a failing host function did not fail the step");
    } catch (DataLossError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("no tensor today"));
    }
  }
}
