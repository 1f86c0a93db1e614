package io.leasebeat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/** Every file in tests/vectors/settlement/, discovered at run time, replayed through the Java API. */
class SettlementVectorsTest {
  @TestFactory
  Stream<DynamicTest> everySettlementVector() throws IOException {
    List<Path> files = SettleReplay.files();
    assertTrue(files.size() >= 40, "only " + files.size() + " settlement vectors");
    return files.stream()
        .map(
            f ->
                DynamicTest.dynamicTest(
                    f.getFileName().toString(),
                    f.toUri(),
                    () -> {
                      JsonNode root = VectorReplay.MAPPER.readTree(f.toFile());
                      assertEquals(
                          f.getFileName().toString().replace(".json", ""), root.get("id").textValue());
                      assertEquals(root.get("steps").size(), SettleReplay.replay(root));
                    }));
  }

  private static final String WORKED =
      "{\"id\":\"worked\",\"config\":{\"reservation_id\":\"r-1\","
          + "\"commit\":{\"actual\":{\"unit\":\"TOKENS\",\"amount\":900}},"
          + "\"event\":{\"subject\":{\"tenant\":\"acme\"},\"action\":{\"kind\":\"llm\",\"name\":\"x\"}}},"
          + "\"steps\":["
          + "{\"at\":0,\"wall\":1785585600000,\"start\":\"commit\",\"expect\":{\"next\":\"persist\",\"record\":{\"mode\":\"commit\",\"not_before_ms\":null}}},"
          + "{\"at\":1,\"persisted\":true,\"expect\":{\"next\":\"commit\",\"at\":1,\"key\":1}},"
          + "{\"at\":1,\"send\":\"commit\"},"
          + "{\"at\":1001,\"fail\":\"reset\",\"expect\":{\"next\":\"commit\",\"at\":1501,\"key\":1,\"delay_ms\":500}},"
          + "{\"at\":1501,\"send\":\"commit\"},"
          + "{\"at\":1530,\"recv\":{\"status\":429,\"headers\":{\"Retry-After\":\"3\"}},\"expect\":{\"next\":\"persist\",\"not_before_ms\":1785585604530}},"
          + "{\"at\":1531,\"persisted\":true,\"expect\":{\"next\":\"commit\",\"at\":4530}},"
          + "{\"at\":4530,\"send\":\"commit\"},"
          + "{\"at\":4560,\"recv\":{\"status\":410},\"expect\":{\"next\":\"persist\",\"mode\":\"event\",\"heartbeat\":\"stop\",\"record\":{\"mode\":\"event\"}}},"
          + "{\"at\":4561,\"persisted\":true,\"expect\":{\"next\":\"event\",\"at\":4561,\"attempt\":1,\"body\":{\"idempotency_key\":\"key-1\",\"subject\":{\"tenant\":\"acme\"},\"action\":{\"kind\":\"llm\",\"name\":\"x\"},\"actual\":{\"unit\":\"TOKENS\",\"amount\":900},\"metadata\":{\"recovered_reservation_id\":\"r-1\",\"recovery_reason\":\"commit_after_reservation_expired\"}}}},"
          + "{\"at\":4561,\"send\":\"event\"},"
          + "{\"at\":4600,\"recv\":{\"status\":201,\"body\":{\"status\":\"APPLIED\",\"event_id\":\"e-1\"}},\"expect\":{\"next\":\"done\",\"outcome\":\"applied\",\"record\":\"remove\",\"class\":\"success\",\"status\":201}}"
          + "]}";

  @Test
  void theReplayPassesTheWorkedExampleAndCatchesEveryWrongField() throws IOException {
    JsonNode root = VectorReplay.MAPPER.readTree(WORKED);
    assertEquals(12, SettleReplay.replay(root));
    Object[][] wrong = {
      {0, "{\"next\":\"commit\"}", "next"},
      {0, "{\"record\":{\"mode\":\"event\"}}", "record.mode"},
      {1, "{\"at\":2}", "at"},
      {1, "{\"key\":2}", "key"},
      {3, "{\"delay_ms\":1000}", "delay_ms"},
      {5, "{\"not_before_ms\":1785585604531}", "not_before_ms"},
      {5, "{\"record\":{\"not_before_ms\":null}}", "record.not_before_ms"},
      {8, "{\"heartbeat\":null}", "heartbeat"},
      {9, "{\"body\":{\"idempotency_key\":\"key-2\"}}", "body"},
      {9, "{\"warnings\":[\"persist_failed\"]}", "warnings"},
      {11, "{\"outcome\":\"committed\"}", "outcome"},
      {11, "{\"record\":\"keep\"}", "record"},
      {11, "{\"code\":\"NOT_FOUND\"}", "code"},
      {11, "{\"error\":\"invalid_argument\"}", "error"},
    };
    for (Object[] w : wrong) {
      JsonNode bad = SettleReplay.withExpect(root, (Integer) w[0], (String) w[1]);
      SettleReplay.Mismatch m =
          assertThrows(SettleReplay.Mismatch.class, () -> SettleReplay.replay(bad), (String) w[1]);
      assertEquals(w[2], m.field, (String) w[1]);
    }
  }

  @Test
  void theReplayChecksTheRulesItself() throws IOException {
    JsonNode root = VectorReplay.MAPPER.readTree(WORKED);
    JsonNode early = root.deepCopy();
    ((ObjectNode) early.get("steps").get(4)).put("at", 1500); // one ms before its due time
    for (int i = 4; i < early.get("steps").size(); i++) {
      ((ObjectNode) early.get("steps").get(i)).remove("expect");
    }
    SettleReplay.Mismatch m =
        assertThrows(SettleReplay.Mismatch.class, () -> SettleReplay.replay(early));
    assertEquals("send", m.field);
  }
}
