import io.leasebeat.Attempt;
import io.leasebeat.Decision;
import io.leasebeat.Heartbeat;
import io.leasebeat.Num;
import io.leasebeat.Response;
import java.nio.charset.StandardCharsets;

/**
 * Smoke test of the packaged jar alone, run as a single-file program with nothing else on the
 * class path and no java.library.path: {@code java -cp target/leasebeat-0.1.0.jar
 * examples/JarSmoke.java}. The native library must come out of the jar.
 */
public class JarSmoke {
  public static void main(String[] args) {
    byte[] create =
        ("{\"decision\":\"ALLOW\",\"reservation_id\":\"r-1\",\"affected_scopes\":[\"tenant:a\"],"
                + "\"remaining_ttl_ms\":61500}")
            .getBytes(StandardCharsets.UTF_8);
    try (Heartbeat hb =
        Heartbeat.builder().ttlMillis(60_000).requestTimeoutMillis(10_000).originNanos(0).build()) {
      Attempt a = hb.pollAction().attempt().orElseThrow();
      hb.handleSent(a.id(), 0);
      Decision d = hb.handleResponse(a.id(), Response.of(200).withBody(create), 1_500_000_000L);
      if (!d.numbers().nextDelay().equals(java.util.Optional.of(Num.of(37_000)))) {
        throw new AssertionError("unexpected decision " + d.toJson());
      }
      System.out.println("jar smoke test ok: native " + Heartbeat.nativeVersion() + ", " + d.toJson());
    }
  }
}
