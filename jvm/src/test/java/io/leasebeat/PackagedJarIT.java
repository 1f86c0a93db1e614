package io.leasebeat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import java.util.Optional;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * Runs under Failsafe against the packaged jar, with no java.library.path pointing at cargo's
 * output: the native library must be extracted from the jar's resources.
 */
class PackagedJarIT {
  @Test
  void libraryIsExtractedFromTheJar() {
    String location = Heartbeat.class.getProtectionDomain().getCodeSource().getLocation().toString();
    assertTrue(location.endsWith(".jar"), "classes not loaded from the jar: " + location);
    String libPath = System.getProperty("java.library.path", "");
    assertFalse(libPath.contains("target/release"), libPath);
    try (Heartbeat hb = HeartbeatApiTest.workedExample(0)) {
      hb.handleSent(1, 0);
      Decision d = hb.handleResponse(1, Response.of(200).withBody(HeartbeatApiTest.CREATE_OK), 1_500_000_000L);
      assertEquals(Optional.of(Num.of(37_000)), d.numbers().nextDelay());
    }
    assertEquals("jar:/native/linux-x86_64/libleasebeat_jni.so", NativeLoader.source());
    assertEquals(System.getProperty("leasebeat.expected.source"), NativeLoader.source());
  }

  @TestFactory
  Stream<DynamicTest> everyVectorThroughTheJar() throws IOException {
    List<Path> files = VectorReplay.vectorFiles();
    assertFalse(files.isEmpty(), "no vectors in " + VectorReplay.vectorsDir());
    return files.stream()
        .map(f -> DynamicTest.dynamicTest(f.getFileName().toString(), () -> VectorReplay.replay(f)));
  }

  @TestFactory
  Stream<DynamicTest> everySettlementVectorThroughTheJar() throws IOException {
    List<Path> files = SettleReplay.files();
    assertFalse(files.isEmpty(), "no settlement vectors");
    return files.stream()
        .map(f -> DynamicTest.dynamicTest(f.getFileName().toString(), () -> SettleReplay.replay(f)));
  }
}
