// One lease through the JVM binding's HeartbeatRunner against a Cycles server (the
// real-server stage). Run as a single-file source program with jvm/target/classes on the
// class path and the directory of libleasebeat_jni.so as java.library.path.
//
// usage: java ... RunJava.java URL API_KEY TTL_MS TIMEOUT_MS EXTENDS release|commit
//
// The entry points jvm/src/test/java/io/leasebeat/RunnerServerTest.java drives against
// `leasebeat serve`: Heartbeat.builder() + HeartbeatRunner.builder(hb, new
// HttpClientTransport(...)). With EXTENDS > 0 it stops after that many successful extensions
// (stop() releasing, or stopAndCommit); with 0 it runs until the heartbeat stops by itself
// (the server's extension limit) and releases. Prints one JSON line per event with the
// wall-clock time `t` (ms since the epoch).
import io.leasebeat.Decision;
import io.leasebeat.Heartbeat;
import io.leasebeat.HeartbeatRunner;
import io.leasebeat.HttpClientTransport;
import io.leasebeat.Response;
import io.leasebeat.Transport;
import io.leasebeat.TransportFailure;
import java.net.URI;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

public class RunJava {
  static synchronized void emit(String json) {
    System.out.println("{" + json + ",\"t\":" + System.currentTimeMillis() + "}");
    System.out.flush();
  }

  static String q(Object s) {
    return s == null ? "null" : "\"" + s.toString().replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }

  public static void main(String[] a) throws Exception {
    String url = a[0], key = a[1];
    long ttl = Long.parseLong(a[2]), timeout = Long.parseLong(a[3]);
    int extendsWanted = Integer.parseInt(a[4]);
    boolean commit = a[5].equals("commit");
    // LEASEBEAT_ADOPT_RESERVATION=ID: heartbeat that existing reservation (Builder.reservationId).
    String adopt = System.getenv("LEASEBEAT_ADOPT_RESERVATION");
    Heartbeat.Builder b = Heartbeat.builder().ttlMillis(ttl).requestTimeoutMillis(timeout);
    if (adopt != null && !adopt.isEmpty()) {
      b.reservationId(adopt);
    } else {
      b.createRequestJson("{\"subject\":{\"tenant\":\"demo\"},\"action\":{\"kind\":\"llm.completion\","
          + "\"name\":\"leasebeat-realserver\"},\"estimate\":{\"unit\":\"TOKENS\",\"amount\":1000}}");
    }
    Heartbeat hb = b.build();
    int created = (adopt != null && !adopt.isEmpty()) ? 0 : 1;
    AtomicInteger successes = new AtomicInteger();
    AtomicReference<HeartbeatRunner> self = new AtomicReference<>();
    HeartbeatRunner.Listener listener = new HeartbeatRunner.Listener() {
      @Override
      public void onDecision(Optional<String> rid, Decision d) {
        emit("\"ev\":\"decision\",\"rid\":" + q(rid.orElse(null)) + ",\"outcome\":" + q(d.outcome().wire())
            + ",\"decision\":" + d.toJson());
        if (d.outcome().wire().equals("success")
            && extendsWanted > 0 && successes.incrementAndGet() == extendsWanted + created) {
          HeartbeatRunner r = self.get();
          if (commit) {
            r.stopAndCommit("{\"unit\":\"TOKENS\",\"amount\":500}");
          } else {
            r.stop();
          }
        }
      }

      @Override
      public void onJeopardy(HeartbeatRunner.Jeopardy j) {
        emit("\"ev\":\"jeopardy\",\"rid\":" + q(j.reservationId().orElse(null)) + ",\"cause\":" + q(j.kind()));
      }

      @Override
      public void onStop(Optional<String> rid, Decision d) {
        emit("\"ev\":\"stop\",\"rid\":" + q(rid.orElse(null)) + ",\"decision\":" + d.toJson());
      }

      @Override
      public void onFinalized(Transport.Endpoint endpoint, String rid, Optional<Response> response,
          Optional<TransportFailure> failure) {
        emit("\"ev\":\"finalize\",\"endpoint\":" + q(endpoint) + ",\"status\":"
            + response.map(r -> String.valueOf(r.status())).orElse("null")
            + ",\"error\":" + q(failure.map(TransportFailure::wire).orElse(null)));
      }
    };
    try (HeartbeatRunner runner = HeartbeatRunner.builder(hb, new HttpClientTransport(URI.create(url), key))
        .listener(listener).releaseOnStop(true).build()) {
      self.set(runner);
      runner.start().get(120, TimeUnit.SECONDS);
    }
    emit("\"ev\":\"exit\"");
  }
}
