//! Property tests of the settlement (ST-/SP- rules of settlement.md): a
//! driver plays the caller and a journal under random outcomes, persist
//! failures, late timers and restarts (only the acknowledged record crosses
//! a restart), and checks on every step:
//! * at most one terminal success per settlement, restarts included;
//! * the key never changes (header and body, across restarts), ST-1;
//! * no request before a persisted `not_before_ms` on the wall clock, ST-4;
//! * no commit or event request before its record is acknowledged (or its
//!   write reported failed), SP-3: the durable record then equals the
//!   settlement's record;
//! * no release from a commit settlement, whatever happened (ST-9), and
//!   nothing after an end;
//! * at most `max_attempts` requests per mode per run (SP-1);
//! * the record is removed only after a success or an understood rejection.
//!
//! And, separately, that no input (any call in any order, any bytes, any
//! status, any configuration or record text) makes it panic.

use leasebeat::{
    Endpoint, ErrorKind, Now, RecordUpdate, ResponseRef, RetryPolicy, SequentialKeys, SettleNext,
    SettleOutcome, Settlement, SettlementAction, SettlementConfig, SettlementRecord,
    TransportFailure,
};
use proptest::prelude::*;

const NS: u64 = 1_000_000;
const WALL0: u64 = 1_785_585_600_000;

#[derive(Clone, Debug)]
enum Reply {
    Success,
    Ambiguous(u8),
    Throttle(Option<&'static str>, u16),
    Expired(bool),
    Auth(u16),
    Reject(&'static str),
    Unclassified(u8),
    Transient(u16),
    Transport(u8),
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        3 => Just(Reply::Success),
        2 => (0u8..4).prop_map(Reply::Ambiguous),
        2 => (
            prop::option::of(prop_oneof![
                Just("0"), Just("1"), Just("3"), Just("60"), Just("7200"), Just("x"), Just("1, 2")
            ]),
            prop_oneof![Just(429u16), Just(409u16)]
        )
            .prop_map(|(ra, s)| Reply::Throttle(ra, s)),
        1 => any::<bool>().prop_map(Reply::Expired),
        1 => prop_oneof![Just(401u16), Just(403u16)].prop_map(Reply::Auth),
        1 => prop_oneof![
            Just("BUDGET_EXCEEDED"), Just("RESERVATION_FINALIZED"), Just("NOT_FOUND"),
            Just("IDEMPOTENCY_MISMATCH")
        ]
        .prop_map(Reply::Reject),
        1 => (0u8..3).prop_map(Reply::Unclassified),
        3 => prop_oneof![Just(500u16), Just(503u16), Just(302u16), Just(100u16), Just(700u16)]
            .prop_map(Reply::Transient),
        3 => (0u8..3).prop_map(Reply::Transport),
    ]
}

#[derive(Clone, Debug)]
struct Turn {
    reply: Reply,
    /// Round trip, ms.
    rtt_ms: u64,
    /// How late the timer fires, ms.
    late_ms: u64,
    /// The next persist fails.
    persist_fails: bool,
    /// The process dies before this turn's send (a restart from the record).
    restart: bool,
    /// Wall-clock time that passes during a restart, ms.
    downtime_ms: u64,
}

fn turn() -> impl Strategy<Value = Turn> {
    (
        reply(),
        0u64..5_000,
        0u64..3,
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.1),
        0u64..20_000,
    )
        .prop_map(
            |(reply, rtt_ms, late_ms, persist_fails, restart, downtime_ms)| Turn {
                reply,
                rtt_ms,
                late_ms,
                persist_fails,
                restart,
                downtime_ms,
            },
        )
}

#[derive(Clone, Debug)]
struct Case {
    release: bool,
    actual: Option<u64>,
    event: bool,
    retry: RetryPolicy,
    turns: Vec<Turn>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::bool::weighted(0.15),
        prop::option::weighted(0.95, 0u64..=i64::MAX as u64),
        any::<bool>(),
        (1u32..7, 0u64..2_000, 0u64..40_000),
        prop::collection::vec(turn(), 1..40),
    )
        .prop_map(
            |(release, actual, event, (max_attempts, a, b), turns)| Case {
                release,
                actual,
                event,
                retry: RetryPolicy {
                    max_attempts,
                    initial_ms: a.min(b),
                    max_ms: a.max(b),
                },
                turns,
            },
        )
}

/// A response: status, headers, body.
type Answer = (u16, Vec<(String, String)>, Vec<u8>);

fn error_body(code: &str) -> Vec<u8> {
    format!(r#"{{"error":"{code}","message":"m","request_id":"q"}}"#).into_bytes()
}

/// The response for `reply` to a request to `endpoint`: (status, headers, body).
fn respond(reply: &Reply, endpoint: Endpoint) -> Result<Answer, TransportFailure> {
    let ok = |e: Endpoint| -> (u16, Vec<u8>) {
        match e {
            Endpoint::Commit => (
                200,
                br#"{"status":"COMMITTED","charged":{"unit":"TOKENS","amount":1}}"#.to_vec(),
            ),
            Endpoint::Event => (201, br#"{"status":"APPLIED","event_id":"e"}"#.to_vec()),
            Endpoint::Release => (
                200,
                br#"{"status":"RELEASED","released":{"unit":"TOKENS","amount":1}}"#.to_vec(),
            ),
        }
    };
    Ok(match reply {
        Reply::Success => {
            let (s, b) = ok(endpoint);
            (s, vec![], b)
        }
        Reply::Ambiguous(k) => {
            let (s, b) = ok(endpoint);
            match k {
                0 => (if s == 200 { 201 } else { 200 }, vec![], b),
                1 => (s, vec![], b"{}".to_vec()),
                2 => (204, vec![], vec![]),
                _ => (s, vec![], b[..b.len() - 1].to_vec()),
            }
        }
        Reply::Throttle(ra, status) => (
            *status,
            ra.iter()
                .map(|v| ("Retry-After".to_owned(), (*v).to_owned()))
                .collect(),
            error_body("LIMIT_EXCEEDED"),
        ),
        Reply::Expired(bare) => (
            410,
            vec![],
            if *bare {
                vec![]
            } else {
                error_body("RESERVATION_EXPIRED")
            },
        ),
        Reply::Auth(s) => (*s, vec![], vec![]),
        Reply::Reject(code) => (409, vec![], error_body(code)),
        Reply::Unclassified(k) => match k {
            0 => (400, vec![], vec![]),
            1 => (409, vec![], error_body("SOMETHING_NEW")),
            _ => (400, vec![], error_body("INTERNAL_ERROR")),
        },
        Reply::Transient(s) => (*s, vec![], vec![]),
        Reply::Transport(k) => {
            return Err([
                TransportFailure::Timeout,
                TransportFailure::Connect,
                TransportFailure::Reset,
            ][usize::from(*k)]);
        }
    })
}

/// Plays one case; `Err` names the broken property.
fn play(c: &Case) -> Result<(), String> {
    let config = if c.release {
        SettlementConfig {
            retry: c.retry,
            ..SettlementConfig::release("r-1", None)
        }
    } else {
        SettlementConfig {
            reservation_id: "r-1".into(),
            base_url: "http://127.0.0.1:1".into(),
            commit: c
                .actual
                .map(|a| format!(r#"{{"actual":{{"unit":"TOKENS","amount":{a}}}}}"#).into_bytes()),
            event: c.event.then(|| {
                br#"{"subject":{"tenant":"t"},"action":{"kind":"k","name":"n"}}"#.to_vec()
            }),
            release: false,
            release_reason: None,
            retry: c.retry,
        }
    };
    // The caller's clocks: monotonic ns since the process started; wall = base + mono ms.
    let mut mono: u64 = 0;
    let mut wall_base: u64 = WALL0;
    let wall = |base: u64, mono: u64| base + mono / NS;
    let mut s = Settlement::with_key_source(
        config,
        Now::new(mono, wall(wall_base, mono)),
        &mut SequentialKeys::new("k-"),
    )
    .map_err(|e| format!("a valid configuration was refused: {e}"))?;
    if !c.release && c.actual.is_none() {
        return match s.poll_action() {
            SettlementAction::Done(SettleOutcome::NoActual) => Ok(()),
            other => Err(format!("ST-10: no actual must end at once, got {other:?}")),
        };
    }
    let first_key = s.key().to_owned();
    let mut store: Option<SettlementRecord> = None;
    let mut write_failed = false;
    let mut successes = 0;
    let mut sends_in_mode = 0u32;
    let mut mode = s.mode();
    let mut turns = c.turns.iter();
    let mut turn = turns.next();
    let mut steps = 0;
    loop {
        steps += 1;
        if steps > 1_000 {
            return Err("the settlement never ended".into());
        }
        let Some(t) = turn else { return Ok(()) };
        if s.mode() != mode {
            mode = s.mode();
            sends_in_mode = 0;
        }
        match s.poll_action() {
            SettlementAction::Done(_) => return Ok(()),
            SettlementAction::Persist(r) => {
                let r = r.clone();
                mono += NS;
                if t.persist_fails {
                    write_failed = true;
                    s.handle_persist_failed("disk full", mono)
                        .map_err(|e| e.to_string())?;
                } else {
                    write_failed = false;
                    store = Some(r);
                    s.handle_persisted(mono).map_err(|e| e.to_string())?;
                }
            }
            SettlementAction::Send(a) => {
                let a = a.clone();
                if t.restart && store.is_some() && !c.release {
                    // The process dies: only the durable record survives.
                    wall_base = wall(wall_base, mono) + t.downtime_ms;
                    mono = 0;
                    let record = store.clone().unwrap_or_else(|| unreachable!());
                    s = Settlement::from_record(record, c.retry, Now::new(0, wall_base))
                        .map_err(|e| format!("SP-4: the stored record was refused: {e}"))?;
                    mode = s.mode();
                    sends_in_mode = 0;
                    write_failed = false;
                    turn = turns.next();
                    continue;
                }
                mono = mono.max(a.due_ns) + t.late_ms * NS;
                // ST-1: one key, header and body.
                if a.key != first_key {
                    return Err(format!(
                        "ST-1: key {:?} is not the first key {first_key:?}",
                        a.key
                    ));
                }
                let body: serde_json::Value =
                    serde_json::from_slice(&a.body).map_err(|e| e.to_string())?;
                if body.get("idempotency_key").and_then(|k| k.as_str()) != Some(first_key.as_str())
                {
                    return Err("ST-1: the body's key differs".into());
                }
                // ST-9: a commit settlement never releases.
                if !c.release && a.endpoint == Endpoint::Release {
                    return Err("ST-9: a commit settlement sent a release".into());
                }
                if a.endpoint != Endpoint::Release {
                    // SP-3: what guards the request is durable.
                    if !write_failed && store.as_ref() != s.record() {
                        return Err(format!(
                            "SP-3: sending with an unacknowledged record: durable {store:?}, current {:?}",
                            s.record()
                        ));
                    }
                    // ST-4: never before the durable floor.
                    if let Some(nb) = store.as_ref().and_then(|r| r.not_before_ms) {
                        if wall(wall_base, mono) < nb {
                            return Err(format!(
                                "ST-4: sent at wall {} before not_before_ms {nb}",
                                wall(wall_base, mono)
                            ));
                        }
                    }
                }
                sends_in_mode += 1;
                if sends_in_mode > c.retry.max_attempts {
                    return Err("SP-1: more requests in one mode than max_attempts".into());
                }
                s.handle_sent(a.id, mono).map_err(|e| e.to_string())?;
                mono += t.rtt_ms * NS;
                let now = Now::new(mono, wall(wall_base, mono));
                let d = match respond(&t.reply, a.endpoint) {
                    Ok((status, headers, body)) => {
                        let h: Vec<(&[u8], &[u8])> = headers
                            .iter()
                            .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
                            .collect();
                        s.handle_response(a.id, ResponseRef::new(status, &body).headers(&h), now)
                    }
                    Err(f) => s.handle_failure(a.id, f, mono),
                }
                .map_err(|e| e.to_string())?;
                if let Some(o) = d.outcome() {
                    if o.is_success() {
                        successes += 1;
                        if successes > 1 {
                            return Err("a second terminal success".into());
                        }
                    }
                }
                if d.record == Some(RecordUpdate::Remove) {
                    match d.outcome() {
                        Some(
                            SettleOutcome::Committed
                            | SettleOutcome::Applied
                            | SettleOutcome::Rejected,
                        ) => {}
                        other => return Err(format!("J-5: record removed with {other:?}")),
                    }
                    store = None;
                }
                if d.next == SettleNext::Wait {
                    return Err("an outcome left the attempt in flight".into());
                }
                turn = turns.next();
            }
            SettlementAction::Wait(_) => return Err("nothing in flight between turns".into()),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    #[test]
    fn settlement_properties(c in case()) {
        if let Err(why) = play(&c) {
            prop_assert!(false, "{why}\n{c:#?}");
        }
    }
}

#[derive(Clone, Debug)]
enum Call {
    Persisted(u64),
    PersistFailed(u64),
    Sent(u64, u64),
    Response(u64, u16, Vec<(Vec<u8>, Vec<u8>)>, Vec<u8>, u64, u64),
    Failure(u64, u8, u64),
}

fn call() -> impl Strategy<Value = Call> {
    let id = prop_oneof![0u64..4, any::<u64>()];
    let t = prop_oneof![0u64..10_000_000_000, any::<u64>()];
    prop_oneof![
        t.clone().prop_map(Call::Persisted),
        t.clone().prop_map(Call::PersistFailed),
        (id.clone(), t.clone()).prop_map(|(i, t)| Call::Sent(i, t)),
        (
            id.clone(),
            any::<u16>(),
            prop::collection::vec(
                (
                    prop_oneof![Just(b"Retry-After".to_vec()), prop::collection::vec(any::<u8>(), 0..12)],
                    prop_oneof![
                        Just(b"5".to_vec()),
                        Just(b"18446744073709551615".to_vec()),
                        prop::collection::vec(any::<u8>(), 0..12)
                    ]
                ),
                0..3
            ),
            prop_oneof![
                prop::collection::vec(any::<u8>(), 0..64),
                Just(br#"{"error":"RESERVATION_EXPIRED","message":"m","request_id":"q"}"#.to_vec()),
                Just(br#"{"status":"COMMITTED","charged":{"unit":"TOKENS","amount":99999999999999999999}}"#.to_vec()),
            ],
            t.clone(),
            any::<u64>()
        )
            .prop_map(|(i, s, h, b, t, w)| Call::Response(i, s, h, b, t, w)),
        (id, 0u8..3, t).prop_map(|(i, k, t)| Call::Failure(i, k, t)),
    ]
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..80),
        Just(br#"{"actual":{"unit":"TOKENS","amount":5}}"#.to_vec()),
        Just(br#"{"actual":{"unit":"TOKENS","amount":9223372036854775808}}"#.to_vec()),
        Just(br#"{"actual":{"unit":"TOKENS","amount":-1}}"#.to_vec()),
        Just(br#"{"actual":{"unit":"TOKENS","amount":1e400}}"#.to_vec()),
        Just(br#"{"subject":{"tenant":"t"},"action":{"kind":"k","name":"n"}}"#.to_vec()),
        Just(br#"{"version":1,"reservation_id":"r","mode":"event","event_fallback_body":{"idempotency_key":"k"},"not_before_ms":18446744073709551615}"#.to_vec()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    /// No input makes the settlement panic; a refused call changes nothing.
    #[test]
    fn no_input_panics(
        id in prop_oneof![Just("r-1".to_owned()), ".{0,200}", Just("a".repeat(10_000)), Just("r\u{0}1".to_owned())],
        commit in prop::option::of(bytes()),
        event in prop::option::of(bytes()),
        release in any::<bool>(),
        record in bytes(),
        max_attempts in 0u32..4,
        initial_ms in prop_oneof![0u64..1000, any::<u64>()],
        max_ms in prop_oneof![0u64..40_000, any::<u64>()],
        wall in any::<u64>(),
        calls in prop::collection::vec(call(), 0..30),
    ) {
        let retry = RetryPolicy { max_attempts, initial_ms, max_ms };
        let config = SettlementConfig {
            reservation_id: id,
            base_url: String::new(),
            commit,
            event,
            release,
            release_reason: None,
            retry,
        };
        let mut settlements = Vec::new();
        if let Ok(s) = Settlement::new(config, Now::new(0, wall)) {
            settlements.push(s);
        }
        if let Ok(s) = Settlement::from_record_json(&record, retry, Now::new(0, wall)) {
            settlements.push(s);
        }
        for mut s in settlements {
            for c in &calls {
                let before = format!("{s:?}");
                let last = s.last_decision().clone();
                let r = match c {
                    Call::Persisted(t) => s.handle_persisted(*t),
                    Call::PersistFailed(t) => s.handle_persist_failed("x", *t),
                    Call::Sent(i, t) => s.handle_sent(*i, *t),
                    Call::Response(i, st, h, b, t, w) => s.handle_response(
                        *i,
                        ResponseRef::new(*st, b).headers(h),
                        Now::new(*t, *w),
                    ),
                    Call::Failure(i, k, t) => s.handle_failure(
                        *i,
                        [TransportFailure::Timeout, TransportFailure::Connect, TransportFailure::Reset][usize::from(*k)],
                        *t,
                    ),
                };
                match r {
                    Ok(d) => {
                        let line = d.to_string();
                        prop_assert!(serde_json::from_str::<serde_json::Value>(&line).is_ok());
                    }
                    Err(e) => {
                        prop_assert_eq!(format!("{s:?}"), before, "a refused call changed the state");
                        prop_assert_eq!(s.last_decision(), &last);
                        prop_assert!(ErrorKind::ALL.contains(&e.kind()));
                    }
                }
                let _ = s.poll_action();
                let _ = s.poll_timeout();
            }
        }
    }
}

/// The key really is chosen once: a key source is asked exactly once.
#[test]
fn the_key_source_is_asked_once() {
    struct Counting(u32);
    impl leasebeat::KeySource for Counting {
        fn next_key(&mut self) -> String {
            self.0 += 1;
            format!("c-{}", self.0)
        }
    }
    let mut keys = Counting(0);
    let config = SettlementConfig {
        event: Some(br#"{"subject":{"tenant":"t"},"action":{"kind":"k","name":"n"}}"#.to_vec()),
        ..SettlementConfig::commit(
            "r-1",
            br#"{"actual":{"unit":"TOKENS","amount":5}}"#.to_vec(),
        )
    };
    let s = Settlement::with_key_source(config, Now::new(0, WALL0), &mut keys).unwrap();
    assert_eq!(keys.0, 1);
    let r = s.record().unwrap();
    assert_eq!(r.key(), "c-1");
    assert_eq!(
        r.event_fallback_body.as_ref().unwrap()["idempotency_key"],
        "c-1"
    );
}
