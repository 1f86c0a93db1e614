package io.leasebeat;

import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * The child process of {@link RecoveryTest}: a program that uses {@link HeartbeatRunner} as an
 * application would, so that a test can kill it with SIGKILL and start a fresh one from the
 * journal alone. It reports what happens as lines on stdout ({@code say}).
 *
 * <pre>
 * RecoveryChild commit URL API_KEY TENANT|- JOURNAL_DIR ACTUAL_JSON
 *     create a lease, wait for its reservation, commit ACTUAL_JSON, print the result
 * RecoveryChild replay URL API_KEY TENANT|- JOURNAL_DIR BARRIER|-
 *     (print "ready", wait until the file BARRIER exists,) create a lease whose runner replays the
 *     journal on start, flush, print what was settled, release the own lease
 * </pre>
 */
public final class RecoveryChild {
  private RecoveryChild() {}

  static synchronized void say(String line) {
    System.out.println(line);
    System.out.flush();
  }

  /** Prints everything the runner reports. */
  static final class Printer implements HeartbeatRunner.Listener {
    @Override
    public void onSettlementDecision(String reservationId, SettlementDecision d) {
      say("decision " + reservationId + " wall=" + System.currentTimeMillis() + " " + d.toJson());
    }

    @Override
    public void onSettled(SettleResult r) {
      say(
          "settled "
              + r.reservationId()
              + " "
              + r.outcome().wire()
              + " replayed="
              + r.replayed()
              + " kept="
              + r.recordKept()
              + " key="
              + r.key());
    }

    @Override
    public void onReplay(JournalReplay r) {
      say("replay settlements=" + r.settlements().size() + " busy=" + r.busy());
      for (JournalScan.Quarantined q : r.quarantined()) {
        say("quarantined " + q.file() + " -> " + q.movedTo() + " : " + q.reason());
      }
      for (JournalScan.Migrated m : r.migrated()) {
        say("migrated " + m.from() + " -> " + m.to() + " duplicate_removed=" + m.duplicateRemoved());
      }
    }

    @Override
    public void onHeartbeatFailure(HeartbeatRunner.HeartbeatFailure f) {
      say("heartbeat-failure " + f.reservationId().orElse("-") + " " + f.disposition());
    }
  }

  public static void main(String[] args) throws Exception {
    String mode = args[0];
    String url = args[1];
    String apiKey = args[2];
    String tenant = "-".equals(args[3]) ? null : args[3];
    Path journalDir = Path.of(args[4]);
    if ("replay".equals(mode) && !"-".equals(args[5])) {
      Path barrier = Path.of(args[5]);
      say("ready");
      while (!Files.exists(barrier)) {
        Thread.sleep(2);
      }
    }
    Heartbeat hb =
        Heartbeat.builder()
            .ttlMillis(60_000)
            .requestTimeoutMillis(2_000)
            .createRequestJson(RecoveryTest.CREATE)
            .build();
    HeartbeatRunner runner =
        HeartbeatRunner.builder(hb, new HttpClientTransport(URI.create(url), apiKey))
            .journalDir(journalDir)
            .tenant(tenant)
            .settlementRetry(new Settlement.RetryPolicy(5, 500, 4_000))
            .listener(new Printer())
            .build();
    runner.start();
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
    Optional<String> id = hb.reservationId();
    while (id.isEmpty() && System.nanoTime() < end) {
      Thread.sleep(5);
      id = hb.reservationId();
    }
    say("reservation " + id.orElse("-"));
    if ("commit".equals(mode)) {
      CompletableFuture<SettleResult> f = runner.commit(args[5], null, null);
      SettleResult r = f.get(60, TimeUnit.SECONDS);
      say("result " + r.outcome().wire() + " kept=" + r.recordKept());
    } else {
      boolean flushed = runner.flush(Duration.ofSeconds(30));
      say("flushed " + flushed);
      runner.release("recovery child done").get(20, TimeUnit.SECONDS);
    }
    runner.close();
    hb.close();
    say("exit");
    System.exit(0);
  }
}
