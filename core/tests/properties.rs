//! Property tests: the heartbeat against a simulated server (`leasebeat::sim`)
//! under random regimes, round trips, failures, 429s, lost responses, late
//! timers and stalled clocks; and the state machine under arbitrary input.
//!
//! Invariants (docs/heartbeat-contract.md, "Safety invariants"), the S-1/S-2 bounds
//! recomputed from the configuration and the harness's own round trips and
//! checked against the simulated server's true expiry (never from the numbers
//! the core reports about itself); D-14 late and duplicate outcomes; every
//! due time at or after its deciding event; HB-16 request bodies:
//! * S-1 a primary beat with next_delay > 0 is due at least retry_reserve
//!   before the true expiry;
//! * S-2 a primary retry is due at least attempt_budget + safety_margin
//!   before it;
//! * S-3 never more than two consecutive zero-delay primary successes;
//! * S-4 the key is reused exactly for retries, with a byte-identical body,
//!   and a new key is never one used before; a stop is final;
//! * S-5 no input makes the core panic, overflow or wrap.

use std::collections::HashSet;

use leasebeat::sim::{Policy, SimServer};
use leasebeat::{
    Action, AttemptKind, Config, Decision, ErrorKind, Heartbeat, KeyUse, Mode, Next, Num, Numbers,
    Response, SequentialKeys, TransportFailure,
};
use proptest::prelude::*;
use serde_json::json;

const NS: u64 = 1_000_000;
const CASES: u32 = 10_000;

#[derive(Clone, Debug)]
enum Fate {
    /// The server applies the request and the response arrives.
    Deliver,
    /// The server applies it, the response is lost (reset after applying).
    LostResponse,
    /// The server never sees it; the attempt times out.
    Timeout,
    /// The connection is refused.
    Connect,
    /// A 503 without applying.
    ServerError,
    /// A 429 with this Retry-After (None = missing).
    Throttle(Option<u64>),
    /// The server applies it but the 200 body is malformed.
    Malformed,
}

#[derive(Clone, Debug)]
struct Turn {
    fate: Fate,
    /// Round trip as a fraction of the budget, in thousandths.
    rtt_permille: u64,
    /// Where inside the attempt the server measures, in thousandths.
    measure_permille: u64,
    /// How late the caller's timer fires, in microseconds.
    late_us: u64,
    /// The caller's clock stalls: it sends at its previous reading.
    stall: bool,
    /// The round trip of this attempt is unknown.
    timing_unknown: bool,
    /// D-14: after the decision, report an outcome again for the attempt
    /// just decided (0: no, 1: a late duplicate response, 2: a late
    /// failure); it must be refused and change nothing.
    duplicate: u8,
}

#[derive(Clone, Debug)]
struct Case {
    /// Heartbeat a reservation created beforehand (`for_reservation`)
    /// instead of creating one.
    existing: bool,
    policy: Policy,
    ttl_ms: u64,
    timeout_ms: Option<u64>,
    offset_ms: u64,
    turns: Vec<Turn>,
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        12 => Just(Fate::Deliver),
        1 => Just(Fate::LostResponse),
        1 => Just(Fate::Timeout),
        1 => Just(Fate::Connect),
        2 => Just(Fate::ServerError),
        1 => prop::option::of(0u64..20).prop_map(Fate::Throttle),
        1 => Just(Fate::Malformed),
    ]
}

fn turn() -> impl Strategy<Value = Turn> {
    (
        fate(),
        0u64..=1000,
        0u64..=1000,
        prop_oneof![3 => Just(0u64), 1 => 0u64..50_000],
        prop::bool::weighted(0.05),
        prop::bool::weighted(0.03),
        prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)],
    )
        .prop_map(
            |(fate, rtt_permille, measure_permille, late_us, stall, timing_unknown, duplicate)| {
                Turn {
                    fate,
                    rtt_permille,
                    measure_permille,
                    late_us,
                    stall,
                    timing_unknown,
                    duplicate,
                }
            },
        )
}

fn case() -> impl Strategy<Value = Case> {
    (
        2_000u64..=120_000,
        prop::option::weighted(0.9, 1u64..=20_000),
    )
        .prop_flat_map(|(ttl, timeout)| {
            let policy = (
                prop::option::weighted(0.2, 1_000u64..=ttl),
                prop::option::weighted(0.25, 500u64..=ttl),
                prop::option::weighted(0.25, 1_000u64..=2 * ttl),
                prop::option::weighted(0.2, 0u32..=12),
                prop::bool::weighted(0.2),
            )
                .prop_map(|(initial, grant, lead, max_ext, omit)| Policy {
                    initial_ttl_cap_ms: initial,
                    grant_cap_ms: grant,
                    max_lead_ms: lead,
                    max_extensions: max_ext,
                    omit_remaining: omit,
                    grace_ms: 0,
                });
            (
                prop::bool::weighted(0.2),
                policy,
                Just(ttl),
                Just(timeout),
                0u64..=1_000_000_000_000,
                prop::collection::vec(turn(), 1..40),
            )
        })
        .prop_map(
            |(existing, policy, ttl_ms, timeout_ms, offset_ms, turns)| Case {
                existing,
                policy,
                ttl_ms,
                timeout_ms,
                offset_ms,
                turns,
            },
        )
}

fn create_request() -> serde_json::Map<String, serde_json::Value> {
    json!({
        "subject": {"tenant": "acme"},
        "action": {"kind": "llm.completion", "name": "m"},
        "estimate": {"unit": "TOKENS", "amount": 10}
    })
    .as_object()
    .expect("object")
    .clone()
}

struct Checker {
    used_keys: HashSet<String>,
    zero_streak: u32,
    /// The harness's own max_rtt (D-3: rounded-up ms of schema-valid
    /// successes with a known round trip), to recompute the bounds of S-1 and
    /// S-2 without the numbers the core reports about itself.
    max_rtt_ms: u64,
    /// The configured timeout (None: unbounded).
    timeout_ms: Option<u64>,
    last: Option<(String, Vec<u8>)>,
}

fn num(n: Option<Num>) -> u64 {
    match n {
        Some(Num::Int(v)) => u64::try_from(v).expect("non-negative duration"),
        Some(Num::Inf) => u64::MAX,
        other => panic!("unexpected duration {other:?}"),
    }
}

/// The first client-clock nanosecond at which the lease is dead.
fn true_expiry_ns(server: &SimServer, id: &str, offset_ms: u64) -> u64 {
    let lease = server.lease(id).expect("lease exists");
    (lease.expires_at_ms + 1)
        .saturating_sub(offset_ms)
        .saturating_mul(NS)
}

fn check_decision(
    c: &mut Checker,
    d: &Decision,
    hb: &Heartbeat,
    server: &SimServer,
    offset_ms: u64,
) -> Result<(), TestCaseError> {
    let attempt = hb.attempt();
    match d.next {
        Next::Stop(_) => {
            prop_assert!(attempt.is_none());
            return Ok(());
        }
        Next::Send(kind) => {
            let a = attempt.expect("a send decision installs an attempt");
            prop_assert_eq!(a.kind, kind);
            prop_assert_eq!(a.due_ns, d.at_ns);
            match d.key.expect("send decisions say new or same") {
                KeyUse::New => {
                    prop_assert!(!c.used_keys.contains(&a.key), "a new key was used before");
                }
                KeyUse::Same => {
                    let (k, b) = c.last.as_ref().expect("a retry follows an attempt");
                    prop_assert_eq!(&a.key, k);
                    prop_assert_eq!(&a.body, b);
                }
            }
        }
    }
    if d.outcome == leasebeat::OutcomeClass::Success && d.mode == Some(Mode::Primary) {
        if num(d.numbers.next_delay()) == 0 {
            c.zero_streak += 1;
        } else {
            c.zero_streak = 0;
        }
        prop_assert!(c.zero_streak <= 1 || d.stop_reason().is_some());
    } else if d.outcome == leasebeat::OutcomeClass::Success && num(d.numbers.next_delay()) > 0 {
        c.zero_streak = 0;
    }
    if d.mode != Some(Mode::Primary) {
        return Ok(());
    }
    let Some(id) = hb.reservation_id() else {
        return Ok(());
    };
    let expiry = true_expiry_ns(server, id, offset_ms);
    let Some(at) = d.at_ns else { return Ok(()) };
    // The bounds recomputed from the configuration and the harness's own
    // max_rtt (docs/heartbeat-contract.md, "The primary path"), saturating at +infinity.
    let two_rtt = c.max_rtt_ms.saturating_mul(2);
    let own_budget = c.timeout_ms.map_or(u64::MAX, |t| t.max(1000).max(two_rtt));
    let own_margin = two_rtt.max(1000);
    let own_reserve = own_budget.saturating_mul(2).saturating_add(own_margin);
    match d.key {
        Some(KeyUse::New) => {
            let delay = num(d.numbers.next_delay());
            if delay > 0 {
                let reserve = own_reserve;
                // S-1
                prop_assert!(
                    at.saturating_add(reserve.saturating_mul(NS)) <= expiry,
                    "beat due at {at} with reserve {reserve} ms passes the true expiry {expiry}"
                );
            }
        }
        Some(KeyUse::Same) => {
            let budget = own_budget;
            let margin = own_margin;
            // S-2
            prop_assert!(
                at.saturating_add(budget.saturating_add(margin).saturating_mul(NS)) <= expiry,
                "retry due at {at} with budget {budget} + margin {margin} passes the true expiry {expiry}"
            );
        }
        None => {}
    }
    Ok(())
}

fn run_case(case: Case) -> Result<(), TestCaseError> {
    let mut config = Config::new(case.ttl_ms, case.timeout_ms);
    config.create_request = create_request();
    let mut server = SimServer::new(case.policy.clone());
    let keys = Box::new(SequentialKeys::new("k"));
    let mut hb = if case.existing {
        // Created by someone else half a second before the caller's clock starts.
        let mut body = create_request();
        body.insert("idempotency_key".into(), "elsewhere".into());
        body.insert("ttl_ms".into(), case.ttl_ms.into());
        let body = serde_json::to_vec(&body).expect("JSON");
        let r = server.create(500 + case.offset_ms, None, &body);
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
        let id = v["reservation_id"].as_str().expect("created").to_owned();
        Heartbeat::for_reservation_with_key_source(config, id, keys).expect("valid config")
    } else {
        Heartbeat::with_key_source(config, keys).expect("valid config")
    };
    let mut checker = Checker {
        used_keys: HashSet::new(),
        zero_streak: 0,
        max_rtt_ms: 0,
        timeout_ms: case.timeout_ms,
        last: None,
    };
    // The caller's clock starts one second in.
    let mut now: u64 = NS * 1000;
    let budget_ms = case.timeout_ms.unwrap_or(5_000).max(1);
    for turn in &case.turns {
        let attempt = match hb.poll_action() {
            Action::Send(a) => a.clone(),
            Action::Stop(_) => break,
            Action::AwaitOutcome(_) => panic!("the harness always reports outcomes"),
        };
        let send_at = if turn.stall {
            now
        } else {
            match attempt.due_ns {
                Some(due) => due.max(now).saturating_add(turn.late_us * 1000),
                // Due at +infinity: nothing more to do in this lease.
                None => break,
            }
        };
        if send_at > u64::MAX / 4 {
            break;
        }
        hb.handle_sent(attempt.id, send_at).expect("send accepted");
        // HB-16: an extension asks for the configured ttl, and the body's key
        // is the attempt's key (the Idempotency-Key header's value).
        let sent_body: serde_json::Value =
            serde_json::from_slice(&attempt.body).expect("the core sends JSON");
        prop_assert_eq!(
            sent_body["idempotency_key"].as_str(),
            Some(attempt.key.as_str())
        );
        if attempt.kind == AttemptKind::Extend {
            prop_assert_eq!(sent_body["extend_by_ms"].as_u64(), Some(case.ttl_ms));
        }
        checker.used_keys.insert(attempt.key.clone());
        checker.last = Some((attempt.key.clone(), attempt.body.clone()));
        let rtt_ns = budget_ms * NS * turn.rtt_permille / 1000;
        let measure_ns = send_at + rtt_ns * turn.measure_permille / 1000;
        let server_ms = measure_ns / NS + case.offset_ms;
        let key = attempt.key.as_str();
        let apply = |server: &mut SimServer| match attempt.kind {
            AttemptKind::Create => server.create(server_ms, Some(key), &attempt.body),
            AttemptKind::Extend => {
                let id = hb.reservation_id().expect("extend after create").to_owned();
                server.extend(server_ms, &id, Some(key), &attempt.body)
            }
        };
        let observed = send_at + rtt_ns;
        let decision = match &turn.fate {
            Fate::Deliver | Fate::Malformed => {
                let r = apply(&mut server);
                let mut response = Response::new(r.status).body(r.body.clone());
                for (n, v) in &r.headers {
                    response = response.header(n.as_bytes(), v.as_bytes());
                }
                if matches!(turn.fate, Fate::Malformed) && r.status == 200 {
                    let mut b = r.body.clone();
                    b.pop(); // truncated JSON
                    response.body = b;
                }
                if turn.timing_unknown {
                    response = response.timing_unknown();
                }
                hb.handle_response(attempt.id, response, observed)
            }
            Fate::LostResponse => {
                let _ = apply(&mut server);
                hb.handle_failure(attempt.id, TransportFailure::Reset, observed)
            }
            Fate::Timeout => {
                let at = send_at + budget_ms * NS;
                hb.handle_failure(attempt.id, TransportFailure::Timeout, at)
            }
            Fate::Connect => hb.handle_failure(attempt.id, TransportFailure::Connect, observed),
            Fate::ServerError => hb.handle_response(
                attempt.id,
                Response::new(503).body(&b"<html>busy</html>"[..]),
                observed,
            ),
            Fate::Throttle(ra) => {
                let mut r = Response::new(429).body(
                    &br#"{"error":"LIMIT_EXCEEDED","message":"slow down","request_id":"q"}"#[..],
                );
                if let Some(s) = ra {
                    r = r.header("Retry-After", s.to_string());
                }
                hb.handle_response(attempt.id, r, observed)
            }
        }
        .expect("outcome accepted");
        let deciding = hb.last_event_ns();
        // The deciding event is the outcome's observation: nothing is due before it.
        if let (Next::Send(_), Some(at)) = (decision.next, decision.at_ns) {
            prop_assert!(
                at >= deciding,
                "due {at} before the deciding event {deciding}"
            );
        }
        now = deciding;
        if decision.outcome == leasebeat::OutcomeClass::Success && !turn.timing_unknown {
            let rtt_ms = (deciding - send_at).div_ceil(NS);
            checker.max_rtt_ms = checker.max_rtt_ms.max(rtt_ms);
        }
        check_decision(&mut checker, &decision, &hb, &server, case.offset_ms)?;
        if turn.duplicate != 0 {
            // D-14: a late or duplicate outcome for the attempt just decided.
            let before = format!("{hb:?}");
            let late = now.saturating_add(NS);
            let r = if turn.duplicate == 1 {
                hb.handle_response(attempt.id, Response::new(200).body(&b"{}"[..]), late)
            } else {
                hb.handle_failure(attempt.id, TransportFailure::Reset, late)
            };
            prop_assert!(
                r.is_err(),
                "a late outcome for attempt {} was accepted",
                attempt.id
            );
            prop_assert_eq!(format!("{hb:?}"), before);
        }
        if decision.stop_reason().is_some() {
            // S-4: a stop is final.
            prop_assert_eq!(
                hb.cancel(now + NS).map_err(|e| e.kind()),
                Err(ErrorKind::Stopped)
            );
            break;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn safety_invariants_hold_against_simulated_servers(c in case()) {
        run_case(c)?;
    }
}

#[derive(Clone, Debug)]
enum Input {
    Sent(u64),
    Response {
        status: u16,
        headers: Vec<(Vec<u8>, Vec<u8>)>,
        body: Vec<u8>,
        unknown: bool,
        at: u64,
    },
    Failure(u8, u64),
    Cancel(u64),
    WrongAttempt(u64),
}

fn extreme_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        Just(0u64),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(i64::MAX as u64),
        Just(i64::MAX as u64 + 1),
        0u64..100_000_000_000,
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    let int = prop_oneof![
        extreme_u64().prop_map(|v| v.to_string()),
        Just("9223372036854775807".to_owned()),
        Just("9223372036854775808".to_owned()),
        Just("-1".to_owned()),
        Just("6e4".to_owned()),
        Just("60000.0".to_owned()),
        Just("1e400".to_owned()),
        Just("null".to_owned()),
    ];
    prop_oneof![
        (int.clone(), int.clone()).prop_map(|(e, r)| format!(
            r#"{{"status":"ACTIVE","expires_at_ms":{e},"remaining_ttl_ms":{r}}}"#
        )
        .into_bytes()),
        (int.clone(), int.clone()).prop_map(|(e, r)| format!(
            r#"{{"decision":"ALLOW","reservation_id":"r","affected_scopes":[],"expires_at_ms":{e},"remaining_ttl_ms":{r}}}"#
        )
        .into_bytes()),
        int.prop_map(|e| format!(r#"{{"decision":"ALLOW","reservation_id":"r","affected_scopes":[],"expires_at_ms":{e}}}"#).into_bytes()),
        prop::sample::select(vec!["NOT_FOUND", "RESERVATION_EXPIRED", "LIMIT_EXCEEDED", "X"])
            .prop_map(|c| format!(r#"{{"error":"{c}","message":"m","request_id":"r"}}"#).into_bytes()),
        prop::collection::vec(any::<u8>(), 0..64),
    ]
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        extreme_u64().prop_map(Input::Sent),
        (
            prop_oneof![
                100u16..=999,
                any::<u16>(),
                Just(200u16),
                Just(429u16),
                Just(503u16)
            ],
            prop::collection::vec(
                (
                    prop::sample::select(vec![
                        b"Retry-After".to_vec(),
                        b"retry-after".to_vec(),
                        b"X".to_vec()
                    ]),
                    prop_oneof![
                        extreme_u64().prop_map(|v| v.to_string().into_bytes()),
                        prop::collection::vec(any::<u8>(), 0..24),
                    ],
                ),
                0..3,
            ),
            body(),
            any::<bool>(),
            extreme_u64(),
        )
            .prop_map(|(status, headers, body, unknown, at)| Input::Response {
                status,
                headers,
                body,
                unknown,
                at
            }),
        (0u8..3, extreme_u64()).prop_map(|(k, at)| Input::Failure(k, at)),
        extreme_u64().prop_map(Input::Cancel),
        extreme_u64().prop_map(Input::WrongAttempt),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    /// S-5: arbitrary, extreme and out-of-order input never panics; a refused
    /// call changes nothing; a stop is final.
    #[test]
    fn arbitrary_input_never_panics(
        ttl in prop_oneof![Just(1_000u64), Just(86_400_000u64), 1_000u64..=86_400_000, any::<u64>()],
        timeout in prop::option::of(extreme_u64()),
        inputs in prop::collection::vec(input(), 0..30),
    ) {
        let Ok(mut hb) = Heartbeat::with_key_source(Config::new(ttl, timeout), Box::new(SequentialKeys::new("k"))) else {
            prop_assert!(!(1_000..=86_400_000).contains(&ttl));
            return Ok(());
        };
        for input in inputs {
            let before = format!("{hb:?}");
            let stopped = hb.stop_reason().is_some();
            let id = hb.attempt().map(|a| a.id).unwrap_or(0);
            let result = match input {
                Input::Sent(at) => hb.handle_sent(id, at).map(|_| None),
                Input::Response { status, headers, body, unknown, at } => {
                    let mut r = Response::new(status).body(body);
                    r.headers = headers;
                    if unknown { r = r.timing_unknown(); }
                    hb.handle_response(id, r, at).map(Some)
                }
                Input::Failure(k, at) => {
                    let f = [TransportFailure::Timeout, TransportFailure::Connect, TransportFailure::Reset][usize::from(k)];
                    hb.handle_failure(id, f, at).map(Some)
                }
                Input::Cancel(at) => hb.cancel(at).map(Some),
                Input::WrongAttempt(at) => hb.handle_sent(id.wrapping_add(1), at).map(|_| None),
            };
            match result {
                Ok(Some(d)) => {
                    prop_assert!(!stopped);
                    let _ = d.to_json();
                }
                Ok(None) => prop_assert!(!stopped),
                Err(e) => {
                    prop_assert_eq!(before, format!("{hb:?}"), "a refused call changed the state: {}", e);
                    if stopped {
                        prop_assert_eq!(e.kind(), ErrorKind::Stopped);
                    }
                }
            }
        }
    }
}

fn slot_value() -> impl Strategy<Value = Option<Num>> {
    prop_oneof![
        Just(None),
        Just(Some(Num::Inf)),
        Just(Some(Num::NegInf)),
        Just(Some(Num::Int(0))),
        any::<u64>().prop_map(|m| Some(Num::Int(i128::from(m)))),
        any::<u64>().prop_map(|m| Some(Num::Int(-i128::from(m)))),
    ]
}

/// A slot's (tag, magnitude): mostly a valid pair, sometimes anything.
fn packed_slot() -> impl Strategy<Value = (u64, u64)> {
    prop_oneof![
        9 => prop_oneof![
            Just((0u64, 0u64)),
            any::<u64>().prop_map(|m| (1, m)),
            (1u64..).prop_map(|m| (2, m)),
            Just((3, 0)),
            Just((4, 0)),
        ],
        1 => (0u64..8, 0u64..3),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    /// `Numbers::packed` (what the bindings copy) round-trips exactly, and
    /// `from_packed` accepts exactly the packed forms of real numbers.
    #[test]
    fn packed_numbers_round_trip(values in prop::array::uniform14(slot_value()),
                                 raw in prop::array::uniform14(packed_slot()), high in 0u64..2) {
        let tags = raw.iter().enumerate().fold(high << 42, |t, (i, (tag, _))| t | tag << (3 * i));
        let mags = raw.map(|(_, mag)| mag);
        let n = Numbers::from_array(values);
        let (t, m) = n.packed();
        prop_assert_eq!(Numbers::from_packed(t, *m), Some(n));
        prop_assert_eq!(Numbers::from_packed(t, *m).map(|x| x.to_array()), Some(values));
        let valid = high == 0 && raw.iter().all(|&(tag, mag)| match tag {
            1 => true,
            2 => mag != 0,
            0 | 3 | 4 => mag == 0,
            _ => false,
        });
        prop_assert_eq!(Numbers::from_packed(tags, mags).is_some(), valid);
        if let Some(x) = Numbers::from_packed(tags, mags) {
            let back = Numbers::from_array(x.to_array());
            let (t2, m2) = back.packed();
            prop_assert_eq!((t2, *m2), (tags, mags));
        }
    }
}
