package org.tpurt;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/** Loads libtpurt_java: from java.library.path, else the copy packed in the jar (as OR-Tools does). */
final class NativeLoader {
  static final String LIBRARY = "tpurt_java";
  static final String RESOURCE = "/org/tpurt/native/linux-x86_64/libtpurt_java.so";
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
    try (InputStream in = NativeLoader.class.getResourceAsStream(RESOURCE)) {
      if (in == null)
        throw new UnsatisfiedLinkError("lib" + LIBRARY + ".so is neither on java.library.path nor in the jar at " + RESOURCE);
      Path dir = Files.createTempDirectory("tpurt-java");
      Path so = dir.resolve("lib" + LIBRARY + ".so");
      Files.copy(in, so, StandardCopyOption.REPLACE_EXISTING);
      System.load(so.toAbsolutePath().toString());
      // The mapping stays valid after unlinking, so nothing is left in /tmp.
      Files.delete(so);
      Files.delete(dir);
      loaded = true;
    } catch (IOException e) {
      throw new UnsatisfiedLinkError("cannot unpack " + RESOURCE + ": " + e.getMessage());
    }
  }
}
