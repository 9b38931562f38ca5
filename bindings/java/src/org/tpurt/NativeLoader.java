package org.tpurt;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * Loads libtpurt_java: from java.library.path, else the copy packed in the jar (as OR-Tools does).
 * The Maven jar (make jar-pom) also packs libtpurt.so.1, loaded first so that the glue's
 * dependency on it is met by soname without an installed library.
 */
final class NativeLoader {
  static final String LIBRARY = "tpurt_java";
  static final String RESOURCE_DIR = "/org/tpurt/native/linux-x86_64/";
  static final String RESOURCE = RESOURCE_DIR + "libtpurt_java.so";
  static final String CORE = "libtpurt.so.1";
  private static boolean loaded;

  private NativeLoader() {}

  static synchronized void load() {
    if (loaded) return;
    // -Dtpurt.java.forceJar=true skips java.library.path so the jar path can be tested.
    if (!Boolean.getBoolean("tpurt.java.forceJar")) {
      try {
        System.loadLibrary(LIBRARY);
        loaded = true;
        return;
      } catch (UnsatisfiedLinkError notOnPath) {
        // fall through to the packed copy
      }
    }
    if (NativeLoader.class.getResource(RESOURCE) == null)
      throw new UnsatisfiedLinkError("lib" + LIBRARY + ".so is neither on java.library.path nor in the jar at " + RESOURCE);
    if (NativeLoader.class.getResource(RESOURCE_DIR + CORE) != null) loadPacked(RESOURCE_DIR + CORE, CORE);
    loadPacked(RESOURCE, "lib" + LIBRARY + ".so");
    loaded = true;
  }

  /** Copies a packed library to a fresh directory, loads it and removes the copy. */
  private static void loadPacked(String resource, String name) {
    try (InputStream in = NativeLoader.class.getResourceAsStream(resource)) {
      Path dir = Files.createTempDirectory("tpurt-java");
      Path so = dir.resolve(name);
      Files.copy(in, so, StandardCopyOption.REPLACE_EXISTING);
      System.load(so.toAbsolutePath().toString());
      // The mapping stays valid after unlinking, so nothing is left in /tmp.
      Files.delete(so);
      Files.delete(dir);
    } catch (IOException e) {
      throw new UnsatisfiedLinkError("cannot unpack " + resource + ": " + e.getMessage());
    }
  }
}
