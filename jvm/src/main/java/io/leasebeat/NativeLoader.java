package io.leasebeat;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;

/**
 * Loads libleasebeat_jni: first {@code System.loadLibrary("leasebeat_jni")} from {@code
 * java.library.path}, else the copy bundled in the jar under {@code /native/<os>-<arch>/},
 * extracted to a temporary file and {@code System.load}ed (the file is deleted right after
 * loading, or at exit where the platform keeps it open).
 */
final class NativeLoader {
  static final String LIBRARY = "leasebeat_jni";

  private static volatile String source;

  private NativeLoader() {}

  /** The bundled resource path for this platform, e.g. /native/linux-x86_64/libleasebeat_jni.so. */
  static String resourcePath() {
    return "/native/" + platform() + "/" + System.mapLibraryName(LIBRARY);
  }

  static String platform() {
    String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
    String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
    String o = os.contains("linux") ? "linux" : os.contains("mac") ? "macos" : os.contains("win") ? "windows" : os;
    String a =
        arch.equals("amd64") || arch.equals("x86_64")
            ? "x86_64"
            : arch.equals("aarch64") || arch.equals("arm64") ? "aarch64" : arch;
    return o + "-" + a;
  }

  /** Where the library came from: "java.library.path" or "jar:<resource>". Null before load. */
  static String source() {
    return source;
  }

  static synchronized void load() {
    if (source != null) {
      return;
    }
    UnsatisfiedLinkError fromPath;
    try {
      System.loadLibrary(LIBRARY);
      source = "java.library.path";
      return;
    } catch (UnsatisfiedLinkError e) {
      fromPath = e;
    }
    String resource = resourcePath();
    try (InputStream in = NativeLoader.class.getResourceAsStream(resource)) {
      if (in == null) {
        UnsatisfiedLinkError e =
            new UnsatisfiedLinkError(
                "leasebeat: " + LIBRARY + " is neither in java.library.path ("
                    + fromPath.getMessage() + ") nor bundled as " + resource
                    + " for this platform");
        e.addSuppressed(fromPath);
        throw e;
      }
      Path tmp = Files.createTempFile("libleasebeat_jni-", "-" + System.mapLibraryName(LIBRARY));
      try {
        Files.copy(in, tmp, StandardCopyOption.REPLACE_EXISTING);
        System.load(tmp.toAbsolutePath().toString());
      } finally {
        try {
          Files.deleteIfExists(tmp);
        } catch (IOException e) {
          tmp.toFile().deleteOnExit();
        }
      }
      source = "jar:" + resource;
    } catch (IOException e) {
      UnsatisfiedLinkError err =
          new UnsatisfiedLinkError("leasebeat: cannot extract " + resource + ": " + e);
      err.initCause(e);
      throw err;
    }
  }
}
