/**
 * Java binding of leasebeat, the one audited lease-heartbeat scheduler for Cycles reservations.
 *
 * <p>Start with {@link io.leasebeat.HeartbeatRunner}: the ready loop on a {@code
 * ScheduledExecutorService} over a {@link io.leasebeat.Transport} (the bundled {@link
 * io.leasebeat.HttpClientTransport} or your own HTTP client), with a {@link
 * io.leasebeat.HeartbeatRunner.Listener} for decisions, jeopardy and the stop. A lease whose
 * create your SDK already performed is taken over with {@link
 * io.leasebeat.Heartbeat.Builder#adopt(io.leasebeat.AdoptedCreate)}.
 *
 * <p>{@link io.leasebeat.Heartbeat} is the per-reservation state machine. It performs no I/O and
 * reads no clock: the caller sends the attempts it asks for (a create, then extensions), reports
 * what happened with {@link java.lang.System#nanoTime()} values, and gets back a {@link
 * io.leasebeat.Decision} saying when to send next with which idempotency key, or why to stop.
 * {@link io.leasebeat.HeartbeatMath} exposes the scheduling arithmetic alone. Every rule lives in
 * the Rust core ({@code libleasebeat_jni.so}, bundled in the jar); this package only translates.
 */
package io.leasebeat;
