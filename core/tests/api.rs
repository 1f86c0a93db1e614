//! The public API's refusals (D-14 and friends): each is a typed error that
//! changes nothing.

use leasebeat::{
    Action, AdoptedCreate, AttemptKind, Config, CreateOutcome, ErrorKind, Heartbeat, KeyUse, Mode,
    Num, Response, SequentialKeys, StopReason, TransportFailure,
};

const MS: u64 = 1_000_000;

fn create_ok(remaining: u64) -> Response {
    Response::new(200).body(format!(
        r#"{{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["tenant:a"],"expires_at_ms":1000,"remaining_ttl_ms":{remaining}}}"#
    ))
}

fn started() -> (Heartbeat, u64) {
    let mut hb = Heartbeat::with_key_source(
        Config::new(60_000, Some(10_000)),
        Box::new(SequentialKeys::new("k")),
    )
    .unwrap();
    let id = hb.attempt().unwrap().id;
    hb.handle_sent(id, 0).unwrap();
    hb.handle_response(id, create_ok(61_500), 1_500 * MS)
        .unwrap();
    let id = hb.attempt().unwrap().id;
    (hb, id)
}

#[test]
fn first_action_is_a_create_with_the_exact_body() {
    let mut config = Config::new(30_000, None);
    config
        .create_request
        .insert("subject".into(), serde_json::json!({"tenant": "acme"}));
    let hb = Heartbeat::with_key_source(config, Box::new(SequentialKeys::new("k"))).unwrap();
    let Action::Send(a) = hb.poll_action() else {
        panic!("expected a send")
    };
    assert_eq!(a.kind, AttemptKind::Create);
    assert_eq!(a.key, "k1");
    assert_eq!(a.key_use, KeyUse::New);
    assert_eq!(
        String::from_utf8(a.body.clone()).unwrap(),
        r#"{"idempotency_key":"k1","subject":{"tenant":"acme"},"ttl_ms":30000}"#
    );
    assert_eq!(hb.poll_timeout(), Some(0));
}

#[test]
fn extend_body_and_key_rotation() {
    let (hb, _) = started();
    let a = hb.attempt().unwrap();
    assert_eq!(a.kind, AttemptKind::Extend);
    assert_eq!(a.key, "k2");
    assert_eq!(
        String::from_utf8(a.body.clone()).unwrap(),
        r#"{"extend_by_ms":60000,"idempotency_key":"k2"}"#
    );
    assert_eq!(a.due_ns, Some(38_500 * MS));
    assert_eq!(hb.reservation_id(), Some("r-1"));
    assert_eq!(hb.mode(), Some(Mode::Primary));
    assert_eq!(hb.max_rtt_ms(), 1_500);
}

#[test]
fn time_going_backwards_is_refused_and_changes_nothing() {
    let (mut hb, id) = started();
    let before = format!("{hb:?}");
    let e = hb.handle_sent(id, 1_000 * MS).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TimeWentBackwards);
    assert_eq!(e.kind().code(), "time_went_backwards");
    assert_eq!(format!("{hb:?}"), before);
    let e = hb.cancel(0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TimeWentBackwards);
}

#[test]
fn outcomes_out_of_turn_are_refused() {
    let (mut hb, id) = started();
    // Not yet sent.
    let e = hb
        .handle_failure(id, TransportFailure::Timeout, 2_000 * MS)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotSent);
    // A different attempt id (late or duplicate).
    let e = hb.handle_sent(id + 7, 2_000 * MS).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotOutstanding);
    hb.handle_sent(id, 38_500 * MS).unwrap();
    let e = hb.handle_sent(id, 38_500 * MS).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadySent);
    // The previous (create) attempt's response arriving late.
    let e = hb
        .handle_response(id - 1, create_ok(1), 38_600 * MS)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotOutstanding);
    // A failure, then the first attempt's late outcome.
    let d = hb
        .handle_failure(id, TransportFailure::Timeout, 38_600 * MS)
        .unwrap();
    assert_eq!(d.key, Some(KeyUse::Same));
    let e = hb
        .handle_failure(id, TransportFailure::Reset, 38_700 * MS)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotOutstanding);
}

#[test]
fn status_outside_http_range_is_an_invalid_argument() {
    let (mut hb, id) = started();
    hb.handle_sent(id, 38_500 * MS).unwrap();
    for status in [0u16, 99, 1000, u16::MAX] {
        let e = hb
            .handle_response(id, Response::new(status), 38_600 * MS)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{status}");
    }
    let d = hb
        .handle_response(id, Response::new(600), 38_600 * MS)
        .unwrap();
    assert_eq!(d.stop_reason(), Some(StopReason::UnexpectedStatus));
}

#[test]
fn a_stop_is_final() {
    let (mut hb, id) = started();
    let d = hb.cancel(2_000 * MS).unwrap();
    assert_eq!(d.stop_reason(), Some(StopReason::Cancelled));
    assert_eq!(d.reservation_id.as_deref(), Some("r-1"));
    assert!(matches!(
        hb.poll_action(),
        Action::Stop(StopReason::Cancelled)
    ));
    assert_eq!(hb.poll_timeout(), None);
    for e in [
        hb.handle_sent(id, 3_000 * MS).unwrap_err(),
        hb.cancel(3_000 * MS).unwrap_err(),
        hb.handle_failure(id, TransportFailure::Reset, 3_000 * MS)
            .unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::Stopped);
    }
}

#[test]
fn bad_configs_are_refused() {
    for ttl in [0, 999, 86_400_001, u64::MAX] {
        let e = Heartbeat::new(Config::new(ttl, None)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    }
    let mut c = Config::default();
    c.create_request.insert("ttl_ms".into(), 5.into());
    assert_eq!(
        Heartbeat::new(c).unwrap_err().kind(),
        ErrorKind::InvalidConfig
    );
}

#[test]
fn a_key_source_that_repeats_is_refused_without_changing_state() {
    let keys = ["a", "b", "b", "c"];
    let mut i = 0;
    let source = move || {
        let k = keys[i.min(keys.len() - 1)].to_owned();
        i += 1;
        k
    };
    let mut hb =
        Heartbeat::with_key_source(Config::new(60_000, Some(1_000)), Box::new(source)).unwrap();
    let id = hb.attempt().unwrap().id;
    hb.handle_sent(id, 0).unwrap();
    hb.handle_response(id, create_ok(60_000), MS).unwrap();
    let id = hb.attempt().unwrap().id;
    hb.handle_sent(id, 2 * MS).unwrap();
    let ok = r#"{"status":"ACTIVE","expires_at_ms":2000,"remaining_ttl_ms":60000}"#;
    let before = format!("{hb:?}");
    // The source now returns "b" again: refused, nothing changes.
    let e = hb
        .handle_response(id, Response::new(200).body(ok), 3 * MS)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidKey);
    assert_eq!(format!("{hb:?}"), before);
    // The next key is fresh: accepted.
    let d = hb
        .handle_response(id, Response::new(200).body(ok), 3 * MS)
        .unwrap();
    assert_eq!(hb.attempt().unwrap().key, "c");
    assert_eq!(d.key_index, Some(3));
}

#[test]
fn an_overflowing_due_time_is_infinite() {
    let mut hb = Heartbeat::new(Config::new(60_000, Some(1_000))).unwrap();
    let id = hb.attempt().unwrap().id;
    hb.handle_sent(id, u64::MAX - 10 * MS).unwrap();
    let d = hb
        .handle_response(id, create_ok(i64::MAX as u64), u64::MAX - 5 * MS)
        .unwrap();
    assert_eq!(d.at_ns, None);
    assert_eq!(d.to_json()["at"], "inf");
    assert_eq!(
        d.numbers.next_delay(),
        Some(Num::Int(i128::from(i64::MAX) - 5 - 3_000))
    );
    assert_eq!(hb.poll_timeout(), None);
}

#[test]
fn default_keys_are_uuid_v4() {
    let hb = Heartbeat::new(Config::default()).unwrap();
    let key = &hb.attempt().unwrap().key;
    let parsed = uuid::Uuid::parse_str(key).expect("a UUID");
    assert_eq!(parsed.get_version_num(), 4);
}

#[test]
fn an_existing_reservation_starts_with_an_extension() {
    let ok = r#"{"status":"ACTIVE","expires_at_ms":90000,"remaining_ttl_ms":60000}"#;
    let mut hb = Heartbeat::for_reservation_with_key_source(
        Config::new(60_000, Some(10_000)),
        "rsv-9",
        Box::new(SequentialKeys::new("k")),
    )
    .unwrap();
    let Action::Send(a) = hb.poll_action() else {
        panic!("expected a send")
    };
    assert_eq!(
        (a.kind, a.id, a.key.as_str(), a.key_index),
        (AttemptKind::Extend, 1, "k1", 1)
    );
    assert_eq!(
        String::from_utf8(a.body.clone()).unwrap(),
        r#"{"extend_by_ms":60000,"idempotency_key":"k1"}"#
    );
    assert_eq!(hb.reservation_id(), Some("rsv-9"));
    hb.handle_sent(1, 0).unwrap();
    let d = hb
        .handle_response(1, Response::new(200).body(ok), 1_000 * MS)
        .unwrap();
    assert_eq!(d.numbers.next_delay(), Some(Num::Int(59_000 - 22_000)));
    assert_eq!(d.key_index, Some(2));

    // Before any success nothing proves a lead: a transient failure stops.
    let mut hb = Heartbeat::for_reservation(Config::new(60_000, Some(10_000)), "rsv-9").unwrap();
    hb.handle_sent(1, 0).unwrap();
    let d = hb
        .handle_failure(1, TransportFailure::Timeout, 10_000 * MS)
        .unwrap();
    assert_eq!(d.stop_reason(), Some(StopReason::RetryWindowExhausted));

    // Without remaining_ttl_ms, the first success is the fallback's anchor.
    let mut hb = Heartbeat::for_reservation(Config::new(60_000, Some(10_000)), "rsv-9").unwrap();
    hb.handle_sent(1, 0).unwrap();
    let d = hb
        .handle_response(
            1,
            Response::new(200).body(r#"{"status":"ACTIVE","expires_at_ms":90000}"#),
            MS,
        )
        .unwrap();
    assert_eq!((d.mode, d.at_ns), (Some(Mode::Fallback), Some(MS)));

    for bad in ["", &"x".repeat(129)] {
        let e = Heartbeat::for_reservation(Config::default(), bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }
}

fn adopted(outcome: CreateOutcome, body: Option<&str>) -> AdoptedCreate {
    AdoptedCreate {
        key: "sdk-key".into(),
        body: body.map(|b| b.as_bytes().to_vec()),
        sent_ns: Some(0),
        received_ns: 1_500 * MS,
        outcome,
    }
}

#[test]
fn an_adopted_create_schedules_without_a_priming_extension() {
    let (hb, d) = Heartbeat::adopt_create_with_key_source(
        Config::new(60_000, Some(10_000)),
        adopted(CreateOutcome::Response(create_ok(61_500)), None),
        Box::new(SequentialKeys::new("k")),
    )
    .unwrap();
    assert_eq!(d.at_ns, Some(38_500 * MS));
    assert_eq!(d.proven_until_ns, Some(61_500 * MS));
    assert_eq!(d.remaining_ttl_ms, Some(61_500));
    assert_eq!(d.expires_at_ms, Some(1000));
    let Action::Send(a) = hb.poll_action() else {
        panic!("expected a send")
    };
    assert_eq!((a.id, a.kind, a.key_index), (2, AttemptKind::Extend, 2));
    assert_eq!(a.key, "k1");
    // Display is the emitted JSON line.
    assert!(d.to_string().contains("\"proven_until\":61500"));
}

#[test]
fn an_adopted_create_failure_retries_with_the_callers_key_and_bytes() {
    let body = r#"{"subject":{"tenant":"a"},"ttl_ms":60000,"idempotency_key":"sdk-key"}"#;
    let (mut hb, d) = Heartbeat::adopt_create(
        Config::new(60_000, Some(10_000)),
        adopted(CreateOutcome::Failure(TransportFailure::Reset), Some(body)),
    )
    .unwrap();
    assert_eq!(d.key, Some(KeyUse::Same));
    assert_eq!(d.proven_until_ns, None);
    let a = hb.attempt().unwrap().clone();
    assert_eq!(
        (a.kind, a.key.as_str(), a.body.as_slice()),
        (AttemptKind::Create, "sdk-key", body.as_bytes())
    );
    hb.handle_sent(a.id, 2_000 * MS).unwrap();
    let d = hb
        .handle_failure(a.id, TransportFailure::Timeout, 3_000 * MS)
        .unwrap();
    assert_eq!(d.stop_reason(), Some(StopReason::CreateFailed));
}

#[test]
fn key_sources_with_control_characters_are_refused() {
    // A sequential prefix with CR or LF (the bindings' `key_prefix`): the
    // first key is refused when the heartbeat is built.
    for prefix in ["a\r\n", "a\n", "\r", "x\u{1}-"] {
        let e = Heartbeat::with_key_source(
            Config::new(60_000, Some(1_000)),
            Box::new(SequentialKeys::new(prefix)),
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidKey, "{prefix:?}");
        assert!(e.message().contains("header value"), "{e}");
    }
    let e = Heartbeat::for_reservation_with_key_source(
        Config::new(60_000, Some(1_000)),
        "r-1",
        Box::new(SequentialKeys::new("p\n")),
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidKey);
    // A custom source that turns bad later: refused at that key.
    let mut n = 0;
    let source = move || {
        n += 1;
        if n == 1 {
            "good".to_owned()
        } else {
            "bad\r\n".to_owned()
        }
    };
    let mut hb =
        Heartbeat::with_key_source(Config::new(60_000, Some(1_000)), Box::new(source)).unwrap();
    let id = hb.attempt().unwrap().id;
    hb.handle_sent(id, 0).unwrap();
    let e = hb.handle_response(id, create_ok(60_000), MS).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidKey);
}

#[test]
fn bad_adoptions_are_refused() {
    let config = Config::new(60_000, Some(10_000));
    let ok = || CreateOutcome::Response(create_ok(61_500));
    let mut a = adopted(ok(), None);
    a.key = String::new();
    assert_eq!(
        Heartbeat::adopt_create(config.clone(), a)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidKey
    );
    // A key that cannot be a header value (issue 25, defect 7): refused up
    // front, not sent and failed locally as a `reset`.
    for bad in ["k\r\nX-Evil: 1", "k\n", "\rk", "k\u{0}", "k\tk", "k\u{7f}"] {
        let mut a = adopted(ok(), None);
        a.key = bad.to_owned();
        let e = Heartbeat::adopt_create(config.clone(), a).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidKey, "{bad:?}");
        assert!(e.message().contains("header value"), "{e}");
        assert!(!e.message().contains("Evil"), "{e}");
    }
    let mut a = adopted(ok(), None);
    a.key = "k é ~!\"\\".to_owned();
    assert!(Heartbeat::adopt_create(config.clone(), a).is_ok());
    let mut a = adopted(ok(), None);
    a.sent_ns = Some(2_000 * MS);
    assert_eq!(
        Heartbeat::adopt_create(config.clone(), a)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    let a = adopted(ok(), Some(r#"{"idempotency_key":"other"}"#));
    assert_eq!(
        Heartbeat::adopt_create(config.clone(), a)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    let a = adopted(ok(), Some("[1]"));
    assert_eq!(
        Heartbeat::adopt_create(config.clone(), a)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    let a = adopted(CreateOutcome::Response(Response::new(1000)), None);
    assert_eq!(
        Heartbeat::adopt_create(config.clone(), a)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    let a = adopted(ok(), None);
    assert_eq!(
        Heartbeat::adopt_create(Config::new(10, None), a)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidConfig
    );
}

#[test]
fn a_huge_error_code_is_cut_in_the_detail() {
    let (mut hb, id) = started();
    hb.handle_sent(id, 40_000 * MS).unwrap();
    let code = "X".repeat(5_000_000);
    let body = format!(
        r#"{{"error":"{code}","details":{}1{}}}"#,
        "[".repeat(1000),
        "]".repeat(1000)
    );
    let d = hb
        .handle_response(id, Response::new(400).body(body), 41_000 * MS)
        .unwrap();
    assert_eq!(d.stop_reason(), Some(StopReason::Rejected));
    let detail = d.detail.unwrap();
    assert!(
        detail.len() <= leasebeat::MAX_DETAIL_BYTES,
        "{}",
        detail.len()
    );
    // The code itself is cut at 256 bytes and says so.
    assert!(detail.contains("X...)"), "{detail}");
}

#[test]
fn keys_unique_by_construction_are_not_remembered() {
    // A long lease with sequential keys: the used-key set stays empty.
    let (mut hb, mut id) = started();
    let mut t = 40_000u64;
    for _ in 0..500 {
        hb.handle_sent(id, t * MS).unwrap();
        let ok = format!(r#"{{"status":"ACTIVE","expires_at_ms":{t},"remaining_ttl_ms":60000}}"#);
        hb.handle_response(id, Response::new(200).body(ok), t * MS)
            .unwrap();
        id = hb.attempt().unwrap().id;
        t += 40_000;
    }
    assert!(format!("{hb:?}").contains("used_keys: 0"), "{hb:?}");
    // An adopted key is remembered, and a source repeating it is refused.
    let create = AdoptedCreate {
        key: "k2".into(),
        body: None,
        sent_ns: Some(0),
        received_ns: MS,
        outcome: CreateOutcome::Response(create_ok(60_000)),
    };
    let r = Heartbeat::adopt_create_with_key_source(
        Config::new(60_000, Some(10_000)),
        create,
        Box::new(SequentialKeys::new("k")),
    );
    // The source's first key "k1" is fresh; its next, "k2", repeats the adopted one.
    let (mut hb, _) = r.unwrap();
    let id = hb.attempt().unwrap().id;
    assert_eq!(hb.attempt().unwrap().key, "k1");
    hb.handle_sent(id, 45_000 * MS).unwrap();
    let ok = r#"{"status":"ACTIVE","expires_at_ms":2000,"remaining_ttl_ms":60000}"#;
    let e = hb
        .handle_response(id, Response::new(200).body(ok), 45_000 * MS)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidKey);
}

/// Extends `hb` `n` times (each beat sent when due, answered 100 ms later).
fn beat(hb: &mut Heartbeat, n: u32) {
    for _ in 0..n {
        let (id, due) = match hb.poll_action() {
            Action::Send(a) => (a.id, a.due_ns.unwrap()),
            other => panic!("unexpected {other:?}"),
        };
        hb.handle_sent(id, due).unwrap();
        let ok = br#"{"status":"ACTIVE","expires_at_ms":5000,"remaining_ttl_ms":60000}"#;
        hb.handle_response(id, Response::new(200).body(&ok[..]), due + 100 * MS)
            .unwrap();
    }
}

#[test]
fn used_keys_of_a_custom_source_stay_bounded_over_a_long_lease() {
    // A custom source (a closure) does not say its keys are unique: the
    // heartbeat remembers its most recent MAX_REMEMBERED_KEYS keys, no more.
    let mut n = 0u64;
    let mut hb = Heartbeat::with_key_source(
        Config::new(60_000, Some(10_000)),
        Box::new(move || {
            n += 1;
            format!("custom-{n}")
        }),
    )
    .unwrap();
    let id = hb.attempt().unwrap().id;
    hb.handle_sent(id, 0).unwrap();
    hb.handle_response(id, create_ok(61_500), 1_500 * MS)
        .unwrap();
    beat(&mut hb, 5_000);
    let shown = format!("{hb:?}");
    assert!(
        shown.contains(&format!("used_keys: {}", leasebeat::MAX_REMEMBERED_KEYS)),
        "{shown}"
    );
    // A source repeating a recent key is still refused, and the refusal
    // changes nothing.
    let mut hb = Heartbeat::with_key_source(
        Config::new(60_000, Some(10_000)),
        Box::new({
            let mut n = 0u64;
            move || {
                n += 1;
                // 1, 2, ..., 10, then 5 again.
                format!("r-{}", if n <= 10 { n } else { 5 })
            }
        }),
    )
    .unwrap();
    let id = hb.attempt().unwrap().id;
    hb.handle_sent(id, 0).unwrap();
    hb.handle_response(id, create_ok(61_500), 1_500 * MS)
        .unwrap();
    beat(&mut hb, 8);
    let (id, due) = match hb.poll_action() {
        Action::Send(a) => (a.id, a.due_ns.unwrap()),
        other => panic!("unexpected {other:?}"),
    };
    hb.handle_sent(id, due).unwrap();
    let before = format!("{hb:?}");
    let ok = br#"{"status":"ACTIVE","expires_at_ms":5000,"remaining_ttl_ms":60000}"#;
    let e = hb
        .handle_response(id, Response::new(200).body(&ok[..]), due + MS)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidKey);
    assert_eq!(format!("{hb:?}"), before);
}

#[test]
fn the_create_request_is_not_kept_once_the_create_succeeded() {
    let mut config = Config::new(60_000, Some(10_000));
    config.create_request.insert(
        "subject".into(),
        serde_json::json!({"tenant": "acme", "pad": "x".repeat(2_500)}),
    );
    let mut hb =
        Heartbeat::with_key_source(config.clone(), Box::new(SequentialKeys::new("k"))).unwrap();
    // Only the create body is kept, never the map: a retry resends the
    // body byte for byte, and the members read back from it.
    assert!(hb.config().create_request.is_empty());
    assert_eq!(hb.create_request().as_ref(), Some(&config.create_request));
    let first = hb.attempt().unwrap().clone();
    hb.handle_sent(first.id, 0).unwrap();
    hb.handle_failure(first.id, TransportFailure::Timeout, MS)
        .unwrap();
    assert_eq!(hb.create_request().as_ref(), Some(&config.create_request));
    let retry = hb.attempt().unwrap().clone();
    assert_eq!((retry.key_use, &retry.body), (KeyUse::Same, &first.body));
    hb.handle_sent(retry.id, 2 * MS).unwrap();
    hb.handle_response(retry.id, create_ok(61_500), 1_500 * MS)
        .unwrap();
    // Once it succeeded, the lease holds neither the request nor its body.
    assert!(hb.config().create_request.is_empty());
    assert_eq!(hb.create_request(), None);
    let next = hb.attempt().unwrap();
    assert_eq!(next.kind, AttemptKind::Extend);
    assert!(!String::from_utf8_lossy(&next.body).contains("acme"));
    assert_eq!(hb.config().ttl_ms, 60_000);
    beat(&mut hb, 3);
    assert!(hb.config().create_request.is_empty());
}

#[test]
fn last_decision_matches_the_returned_one() {
    let (mut hb, mut id) = started();
    for i in 0..20u64 {
        hb.handle_sent(id, (40_000 + i * 40_000) * MS).unwrap();
        let d = if i % 3 == 2 {
            hb.handle_failure(id, TransportFailure::Reset, (40_001 + i * 40_000) * MS)
                .unwrap()
        } else {
            let ok = br#"{"status":"ACTIVE","expires_at_ms":5000,"remaining_ttl_ms":60000}"#;
            hb.handle_response(
                id,
                Response::new(200).body(&ok[..]),
                (40_001 + i * 40_000) * MS,
            )
            .unwrap()
        };
        assert_eq!(hb.last_decision(), Some(&d));
        assert_eq!(hb.last_decision().unwrap().to_string(), d.to_string());
        id = hb.attempt().unwrap().id;
    }
    let d = hb.cancel(10_000_000 * MS).unwrap();
    assert_eq!(hb.last_decision(), Some(&d));
}

#[test]
fn a_rejected_create_shows_the_servers_message() {
    let mut hb = Heartbeat::with_key_source(
        Config::new(60_000, Some(10_000)),
        Box::new(SequentialKeys::new("k")),
    )
    .unwrap();
    let id = hb.attempt().unwrap().id;
    hb.handle_sent(id, 0).unwrap();
    let d = hb
        .handle_response(
            id,
            Response::new(400)
                .body(r#"{"error":"INVALID_REQUEST","message":"subject is required"}"#),
            MS,
        )
        .unwrap();
    assert_eq!(d.stop_reason(), Some(StopReason::CreateRejected));
    assert_eq!(
        d.detail.as_deref(),
        Some("the create was rejected with 400 (INVALID_REQUEST: subject is required)")
    );
}
