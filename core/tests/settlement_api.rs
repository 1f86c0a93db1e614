//! The settlement's public API: bad input gets a typed error, records round-trip in
//! runcycles Python 0.5.3's layout, calls out of turn are refused.

use leasebeat::{
    Endpoint, ErrorKind, Now, RecordMode, ResponseRef, RetryPolicy, SequentialKeys, SettleNext,
    SettleOutcome, Settlement, SettlementAction, SettlementConfig, SettlementRecord,
    TransportFailure,
};

const WALL0: u64 = 1_785_585_600_000;

/// What runcycles Python 0.5.3's `PendingCommitRecord.to_json()` wrote (journal.py,
/// `json.dumps` with its default separators and ASCII escapes), produced with that SDK.
const PYTHON_RECORD: &str = r#"{"version": 1, "reservation_id": "rsv/\u00fc 1", "base_url": "http://127.0.0.1:7878", "mode": "event", "commit_body": {"idempotency_key": "3f2b8c1e-5d4a-4f6b-9c7d-1e2f3a4b5c6d", "actual": {"unit": "TOKENS", "amount": 900}, "metadata": {"k": "v"}}, "event_fallback_body": {"idempotency_key": "3f2b8c1e-5d4a-4f6b-9c7d-1e2f3a4b5c6d", "subject": {"tenant": "acme"}, "action": {"kind": "llm", "name": "x"}, "actual": {"unit": "TOKENS", "amount": 900}, "metadata": {"k": "v", "recovered_reservation_id": "rsv/\u00fc 1", "recovery_reason": "commit_after_reservation_expired"}}, "recorded_at_ms": 1785585600000, "not_before_ms": 1785585610000}"#;

fn commit_config(id: &str, commit: &[u8]) -> SettlementConfig {
    SettlementConfig::commit(id, commit.to_vec())
}

const ACTUAL: &[u8] = br#"{"actual":{"unit":"TOKENS","amount":900}}"#;

fn kind(r: Result<Settlement, leasebeat::Error>) -> ErrorKind {
    r.expect_err("refused").kind()
}

#[test]
fn reservation_ids() {
    let now = Now::new(0, WALL0);
    for bad in [
        String::new(),
        "a".repeat(10_000),
        "a".repeat(129),
        "r\u{0}1".into(),
        "r\n1".into(),
        "r\u{7f}".into(),
    ] {
        assert_eq!(
            kind(Settlement::new(commit_config(&bad, ACTUAL), now)),
            ErrorKind::InvalidConfig,
            "{bad:?}"
        );
        assert_eq!(
            kind(Settlement::new(SettlementConfig::release(bad, None), now)),
            ErrorKind::InvalidConfig
        );
    }
    // Slashes, percent signs, spaces and non-ASCII are allowed: the caller percent-encodes.
    for good in ["a/b", "a%2Fb", "r 1", "résa-1", &"é".repeat(128)] {
        let s = Settlement::new(commit_config(good, ACTUAL), now).expect(good);
        assert_eq!(s.reservation_id(), good);
    }
    assert_eq!(
        Endpoint::Commit.path("a%2Fb"),
        "/v1/reservations/a%2Fb/commit"
    );
    assert_eq!(Endpoint::Event.path("ignored"), "/v1/events");
}

#[test]
fn commit_bodies() {
    let now = Now::new(0, WALL0);
    for bad in [
        &b"not json"[..],
        b"",
        b"[]",
        b"{}",
        br#"{"actual":{"unit":"TOKENS","amount":9223372036854775808}}"#,
        br#"{"actual":{"unit":"TOKENS","amount":18446744073709551616}}"#,
        br#"{"actual":{"unit":"TOKENS","amount":-1}}"#,
        br#"{"actual":{"unit":"TOKENS","amount":1.5}}"#,
        br#"{"actual":{"unit":"TOKENS","amount":1e400}}"#,
        br#"{"actual":{"unit":"GOLD","amount":1}}"#,
        br#"{"actual":{"unit":"TOKENS","amount":1},"idempotency_key":"k"}"#,
        br#"{"actual":{"unit":"TOKENS","amount":1},"actual":{"unit":"TOKENS","amount":2}}"#,
        br#"{"actual":{"unit":"TOKENS","amount":1},"metrics":{"tokens_input":-1}}"#,
        br#"{"actual":{"unit":"TOKENS","amount":1},"metadata":[]}"#,
        br#"{"actual":{"unit":"TOKENS","amount":1},"metadata":{"big":100000000000000000000000}}"#,
        br#"{"actual":{"unit":"TOKENS","amount":1},"x":1}"#,
        b"{\"actual\":{\"unit\":\"TOKENS\",\"amount\":1},\"metadata\":{\"s\":\"\\ud800\"}}",
        b"{\"actual\":{\"unit\":\"TOKENS\",\"amount\":1},\"metadata\":{\"s\":\"\xff\"}}",
    ] {
        assert_eq!(
            kind(Settlement::new(commit_config("r-1", bad), now)),
            ErrorKind::InvalidConfig,
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    let deep = format!(
        r#"{{"actual":{{"unit":"TOKENS","amount":1}},"metadata":{}1{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert_eq!(
        kind(Settlement::new(commit_config("r-1", deep.as_bytes()), now)),
        ErrorKind::InvalidConfig
    );
    let max = br#"{"actual":{"unit":"TOKENS","amount":9223372036854775807}}"#;
    assert!(Settlement::new(commit_config("r-1", max), now).is_ok());
    // Events: subject and action only.
    for bad in [
        &br#"{"subject":{},"action":{"kind":"k","name":"n"}}"#[..],
        br#"{"subject":{"tenant":"t"}}"#,
        br#"{"subject":{"tenant":"t"},"action":{"kind":"k"}}"#,
        br#"{"subject":{"tenant":"t"},"action":{"kind":"k","name":"n"},"actual":{}}"#,
        b"nope",
    ] {
        let c = SettlementConfig {
            event: Some(bad.to_vec()),
            ..commit_config("r-1", ACTUAL)
        };
        assert_eq!(kind(Settlement::new(c, now)), ErrorKind::InvalidConfig);
    }
    // A release carries no body; retry policies are checked.
    let c = SettlementConfig {
        commit: Some(ACTUAL.to_vec()),
        ..SettlementConfig::release("r-1", None)
    };
    assert_eq!(kind(Settlement::new(c, now)), ErrorKind::InvalidConfig);
    for retry in [
        RetryPolicy {
            max_attempts: 0,
            ..RetryPolicy::default()
        },
        RetryPolicy {
            initial_ms: 2,
            max_ms: 1,
            ..RetryPolicy::default()
        },
    ] {
        let c = SettlementConfig {
            retry,
            ..commit_config("r-1", ACTUAL)
        };
        assert_eq!(kind(Settlement::new(c, now)), ErrorKind::InvalidConfig);
    }
}

#[test]
fn bad_keys_are_refused() {
    struct Fixed(String);
    impl leasebeat::KeySource for Fixed {
        fn next_key(&mut self) -> String {
            self.0.clone()
        }
    }
    for key in [String::new(), "k".repeat(257)] {
        let r = Settlement::with_key_source(
            commit_config("r-1", ACTUAL),
            Now::new(0, WALL0),
            &mut Fixed(key),
        );
        assert_eq!(kind(r), ErrorKind::InvalidKey);
    }
}

#[test]
fn a_python_record_replays_and_ours_has_its_layout() {
    let r = SettlementRecord::from_json(PYTHON_RECORD.as_bytes()).expect("journal.py's record");
    assert_eq!(r.reservation_id, "rsv/\u{fc} 1");
    assert_eq!(r.mode, RecordMode::Event);
    assert_eq!(r.not_before_ms, Some(1_785_585_610_000));
    assert_eq!(r.key(), "3f2b8c1e-5d4a-4f6b-9c7d-1e2f3a4b5c6d");
    // Round trip through our text and serde.
    let text = r.to_json();
    assert!(text.starts_with(r#"{"version":1,"reservation_id":"rsv/ü 1","base_url":"http://127.0.0.1:7878","mode":"event","commit_body":{"#));
    assert!(text.ends_with(r#""recorded_at_ms":1785585600000,"not_before_ms":1785585610000}"#));
    assert_eq!(SettlementRecord::from_json(text.as_bytes()).unwrap(), r);
    let via_serde: SettlementRecord =
        serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(via_serde, r);
    // SP-4: 5 s before the floor, the event is due 5 s after the restart, with the stored key.
    let s =
        Settlement::from_record(r, RetryPolicy::default(), Now::new(7, 1_785_585_605_000)).unwrap();
    let SettlementAction::Send(a) = s.poll_action() else {
        panic!("{:?}", s.poll_action())
    };
    assert_eq!(a.endpoint, Endpoint::Event);
    assert_eq!(a.due_ns, 7 + 5_000_000_000);
    assert_eq!(a.key, "3f2b8c1e-5d4a-4f6b-9c7d-1e2f3a4b5c6d");
    let body: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(body["subject"]["tenant"], "acme");
}

#[test]
fn records_journal_py_refuses_are_refused() {
    let ok: serde_json::Value = serde_json::from_str(PYTHON_RECORD).unwrap();
    let with = |f: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
        let mut v = ok.clone();
        f(v.as_object_mut().unwrap());
        v.to_string()
    };
    let bad = [
        "[]".to_owned(),
        "".to_owned(),
        PYTHON_RECORD[..PYTHON_RECORD.len() - 1].to_owned(),
        with(&|m| {
            m.insert("version".into(), 2.into());
        }),
        with(&|m| {
            m.insert("version".into(), true.into());
        }),
        with(&|m| {
            m.insert("version".into(), serde_json::json!(1.0));
        }),
        with(&|m| {
            m.remove("version");
        }),
        with(&|m| {
            m.insert("reservation_id".into(), "".into());
        }),
        with(&|m| {
            m.insert("mode".into(), "refund".into());
        }),
        with(&|m| {
            m.insert("event_fallback_body".into(), serde_json::Value::Null);
        }),
        with(&|m| {
            m.insert("commit_body".into(), "x".into());
        }),
        with(&|m| {
            m.insert("base_url".into(), 7.into());
        }),
        with(&|m| {
            m.insert("recorded_at_ms".into(), (-1).into());
        }),
        with(&|m| {
            m.insert("not_before_ms".into(), "soon".into());
        }),
        with(&|m| {
            m["event_fallback_body"]["idempotency_key"] = "other".into();
        }),
        with(&|m| {
            m["commit_body"]
                .as_object_mut()
                .unwrap()
                .remove("idempotency_key");
            m["event_fallback_body"]
                .as_object_mut()
                .unwrap()
                .remove("idempotency_key");
        }),
        PYTHON_RECORD.replacen("\"version\": 1,", "\"version\": 1, \"version\": 1,", 1),
    ];
    for text in bad {
        let e = SettlementRecord::from_json(text.as_bytes()).expect_err(&text);
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{text}");
        assert_eq!(
            Settlement::from_record_json(text.as_bytes(), RetryPolicy::default(), Now::new(0, 0))
                .expect_err("refused")
                .kind(),
            ErrorKind::InvalidArgument
        );
    }
    // journal.py's defaults: no mode = commit, no base_url = "", no recorded_at_ms = 0.
    let minimal = r#"{"version":1,"reservation_id":"r","commit_body":{"idempotency_key":"k","actual":{"unit":"TOKENS","amount":1}}}"#;
    let r = SettlementRecord::from_json(minimal.as_bytes()).unwrap();
    assert_eq!(
        (r.mode, r.base_url.as_str(), r.recorded_at_ms),
        (RecordMode::Commit, "", 0)
    );
}

#[test]
fn calls_out_of_turn_are_refused_and_change_nothing() {
    let mut s = Settlement::with_key_source(
        commit_config("r-1", ACTUAL),
        Now::new(1_000, WALL0),
        &mut SequentialKeys::new("k-"),
    )
    .unwrap();
    // A persist is outstanding: no outcome, no send.
    assert_eq!(
        s.handle_sent(1, 2_000).unwrap_err().kind(),
        ErrorKind::NotOutstanding
    );
    assert_eq!(
        s.handle_failure(1, TransportFailure::Reset, 2_000)
            .unwrap_err()
            .kind(),
        ErrorKind::NotOutstanding
    );
    assert_eq!(
        s.handle_persisted(999).unwrap_err().kind(),
        ErrorKind::TimeWentBackwards
    );
    s.handle_persisted(2_000).unwrap();
    assert_eq!(
        s.handle_persisted(2_000).unwrap_err().kind(),
        ErrorKind::NotOutstanding
    );
    let id = s.attempt().unwrap().id;
    assert_eq!(
        s.handle_response(id, ResponseRef::new(200, b""), Now::new(3_000, WALL0))
            .unwrap_err()
            .kind(),
        ErrorKind::NotSent
    );
    assert_eq!(
        s.handle_sent(id + 1, 3_000).unwrap_err().kind(),
        ErrorKind::NotOutstanding
    );
    s.handle_sent(id, 3_000).unwrap();
    assert_eq!(
        s.handle_sent(id, 3_000).unwrap_err().kind(),
        ErrorKind::AlreadySent
    );
    for status in [0u16, 99, 1000, u16::MAX] {
        assert_eq!(
            s.handle_response(id, ResponseRef::new(status, b""), Now::new(4_000, WALL0))
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidArgument
        );
    }
    let d = s
        .handle_response(
            id,
            ResponseRef::new(
                200,
                br#"{"status":"COMMITTED","charged":{"unit":"TOKENS","amount":900}}"#,
            ),
            Now::new(4_000, WALL0),
        )
        .unwrap();
    assert_eq!(d.next, SettleNext::Done(SettleOutcome::Committed));
    assert!(d.stop_heartbeat);
    assert_eq!(
        s.handle_persisted(5_000).unwrap_err().kind(),
        ErrorKind::Stopped
    );
    assert_eq!(s.outcome(), Some(SettleOutcome::Committed));
}

#[test]
fn no_actual_sends_nothing() {
    let c = SettlementConfig {
        commit: None,
        ..commit_config("r-1", ACTUAL)
    };
    let s = Settlement::new(c, Now::new(0, WALL0)).unwrap();
    assert_eq!(
        s.poll_action(),
        SettlementAction::Done(SettleOutcome::NoActual)
    );
    assert!(s.record().is_none());
    assert_eq!(
        s.last_decision().to_string(),
        r#"{"class":"start","detail":"no actual amount is known: nothing is sent (ST-10)","heartbeat":"stop","mode":"commit","next":"done","outcome":"no_actual"}"#
    );
}

#[test]
fn details_are_capped() {
    let mut s = Settlement::new(commit_config("r-1", ACTUAL), Now::new(0, WALL0)).unwrap();
    s.handle_persisted(1).unwrap();
    let id = s.attempt().unwrap().id;
    s.handle_sent(id, 1).unwrap();
    let body = format!(
        r#"{{"error":"NOT_FOUND","message":"m","request_id":"q","{}":1}}"#,
        "x".repeat(100_000)
    );
    let d = s
        .handle_response(
            id,
            ResponseRef::new(404, body.as_bytes()),
            Now::new(2, WALL0),
        )
        .unwrap();
    assert_eq!(d.outcome(), Some(SettleOutcome::Unclassified));
    let detail = d.detail.as_deref().unwrap();
    assert!(
        detail.len() <= leasebeat::MAX_DETAIL_BYTES,
        "{}",
        detail.len()
    );
    assert!(detail.ends_with(leasebeat::DETAIL_CUT_MARKER));
}
