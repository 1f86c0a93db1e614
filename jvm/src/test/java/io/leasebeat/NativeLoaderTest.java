package io.leasebeat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/** Under Surefire the library comes from java.library.path (cargo's output directory). */
class NativeLoaderTest {
  @Test
  void loadedFromTheExpectedPlace() {
    NativeBridge.ensureLoaded();
    assertEquals(System.getProperty("leasebeat.expected.source", "java.library.path"), NativeLoader.source());
    assertEquals("/native/linux-x86_64/libleasebeat_jni.so", NativeLoader.resourcePath());
  }
}
