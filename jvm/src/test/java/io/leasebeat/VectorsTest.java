package io.leasebeat;

import static org.junit.jupiter.api.Assertions.assertFalse;

import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/** Every file in tests/vectors/, discovered at run time, replayed through the Java API. */
class VectorsTest {
  @TestFactory
  Stream<DynamicTest> everyVector() throws IOException {
    List<Path> files = VectorReplay.vectorFiles();
    assertFalse(files.isEmpty(), "no *.json vectors in " + VectorReplay.vectorsDir().toAbsolutePath());
    return files.stream()
        .map(f -> DynamicTest.dynamicTest(f.getFileName().toString(), f.toUri(), () -> VectorReplay.replay(f)));
  }
}
