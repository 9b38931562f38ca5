package org.tpurt;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.ServiceLoader;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;

/** What a computation sees of the JVM on the library's threads, and what it may return. */
public class ComputationThreadTest {
  private static final int R = 8;
  private static TpuSystem system;

  /** A service only a test class loader lists (META-INF/services in a temporary directory). */
  public interface Greeter {
    String greet();
  }

  public static final class Hello implements Greeter {
    @Override
    public String greet() {
      return "hello";
    }
  }

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

  private static String greeting() {
    for (Greeter g : ServiceLoader.load(Greeter.class)) return g.greet();
    return "no Greeter for " + Thread.currentThread().getContextClassLoader();
  }

  @Test
  public void computationsAndHostFunctionsUseTheCallersContextClassLoader() throws Exception {
    Path dir = Files.createTempDirectory("tpurt-loader");
    Path services = Files.createDirectories(dir.resolve("META-INF/services"));
    Files.write(services.resolve(Greeter.class.getName()), Hello.class.getName().getBytes(StandardCharsets.UTF_8));
    List<String> problems = Collections.synchronizedList(new ArrayList<>());
    Thread caller = Thread.currentThread();
    ClassLoader had = caller.getContextClassLoader();
    try (URLClassLoader loader = new URLClassLoader(new URL[] {dir.toUri().toURL()}, getClass().getClassLoader())) {
      caller.setContextClassLoader(loader);
      tpu.replicate((ctx, in) -> {
        int r = ctx.replicaId();
        ClassLoader seen = Thread.currentThread().getContextClassLoader();
        if (seen != loader) problems.add("replica " + r + " has context class loader " + seen);
        if (!greeting().equals("hello")) problems.add("replica " + r + ": " + greeting());
        Object host = tpu.outside_compilation((args, kwargs) ->
            Thread.currentThread().getContextClassLoader().loadClass(Hello.class.getName()).getName() + " " + greeting());
        if (!host.equals(Hello.class.getName() + " hello")) problems.add("replica " + r + " host: " + host);
        return null;
      }, Replicas.none(R));
      assertTrue(problems.toString(), problems.isEmpty());
      // A caller with another loader: the workers do not keep the previous step's.
      caller.setContextClassLoader(had);
      tpu.replicate((ctx, in) -> {
        if (Thread.currentThread().getContextClassLoader() != had) problems.add("replica " + ctx.replicaId() + " kept a loader");
        return null;
      }, Replicas.none(R));
      assertTrue(problems.toString(), problems.isEmpty());
    } finally {
      caller.setContextClassLoader(had);
      Files.delete(services.resolve(Greeter.class.getName()));
      Files.delete(services);
      Files.delete(services.getParent());
      Files.delete(dir);
    }
  }

  @Test
  public void aNullOutputFailsTheStepNamingReplicaAndOutput() {
    Tensor one = Tensor.fromFloat32(new long[] {1}, new float[] {1});
    try {
      tpu.replicate((ctx, in) -> new Tensor[] {one, ctx.replicaId() == 3 ? null : one}, Replicas.none(R));
      fail("a null output did not fail the step");
    } catch (InvalidArgumentError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("replica 3") && e.getMessage().contains("output 1 is null"));
    }
    try {
      tpu.rewrite((ctx, in) -> new Tensor[] {null}, null);
      fail("rewrite: a null output did not fail the step");
    } catch (InvalidArgumentError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("replica 0") && e.getMessage().contains("output 0 is null"));
    }
    // A raw step that expects outputs: too few fails it too.
    try {
      system.replicate(new JavaComputation((ctx, in) -> new Tensor[] {one}, R), R, 0, new TensorVector(), 2, new StepOptions());
      fail("one output where the step expects two");
    } catch (InvalidArgumentError e) {
      assertTrue(e.getMessage(), e.getMessage().contains("returned 1 outputs; the step expects 2"));
    }
    List<Tensor[]> out = tpu.replicate((ctx, in) -> new Tensor[] {one}, Replicas.none(R));
    assertEquals(R, out.size());
    assertEquals(1, out.get(R - 1).length);
  }
}
