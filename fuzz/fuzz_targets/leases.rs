//! The state machine on mostly valid leases against the simulated server
//! (`leasebeat::sim`), the bytes choosing each attempt's fate, round trip
//! and lateness; S-1..S-4 checked with bounds recomputed from the
//! configuration and the harness's own round trips against the server's true
//! expiry (docs/heartbeat-contract.md, "Safety invariants").
#![no_main]

use std::collections::HashSet;

use leasebeat::sim::{Policy, SimServer};
use leasebeat::{
    Action, AttemptKind, Config, ErrorKind, Heartbeat, KeyUse, Mode, Next, OutcomeClass, Response,
    SequentialKeys, TransportFailure,
};
use libfuzzer_sys::fuzz_target;

const NS: u64 = 1_000_000;

fuzz_target!(|data: &[u8]| {
    let mut it = data.iter().copied();
    let mut next = || it.next().unwrap_or(0);
    let ttl_ms = 2_000 + u64::from(next()) * 500;
    let timeout_ms = 1 + u64::from(next()) * 80;
    let mut policy = Policy::default();
    if next() % 4 == 0 {
        policy.grant_cap_ms = Some(500 + u64::from(next()) * 200);
    }
    if next() % 4 == 0 {
        policy.max_lead_ms = Some(1_000 + u64::from(next()) * 400);
    }
    let mut server = SimServer::new(policy);
    let mut config = Config::new(ttl_ms, Some(timeout_ms));
    config.create_request = serde_json::json!({
        "subject": {"tenant": "acme"},
        "action": {"kind": "llm.completion", "name": "m"},
        "estimate": {"unit": "TOKENS", "amount": 10}
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    let Ok(mut hb) = Heartbeat::with_key_source(config, Box::new(SequentialKeys::new("k"))) else {
        return;
    };
    let mut used = HashSet::new();
    let mut last: Option<(String, Vec<u8>)>;
    let mut max_rtt_ms = 0u64;
    let mut zero_streak = 0u32;
    let mut now = 1_000 * NS;
    for _ in 0..64 {
        let attempt = match hb.poll_action() {
            Action::Send(a) => a.clone(),
            _ => break,
        };
        let Some(due) = attempt.due_ns else { break };
        let send_at = due.max(now) + u64::from(next() % 8) * NS;
        hb.handle_sent(attempt.id, send_at).expect("send accepted");
        used.insert(attempt.key.clone());
        last = Some((attempt.key.clone(), attempt.body.clone()));
        let rtt_ns = timeout_ms * NS * u64::from(next()) / 255;
        let server_ms = (send_at + rtt_ns * u64::from(next()) / 255) / NS;
        let observed = send_at + rtt_ns;
        let key = attempt.key.clone();
        let fate = next() % 10;
        let apply = |server: &mut SimServer| match attempt.kind {
            AttemptKind::Create => server.create(server_ms, Some(&key), &attempt.body),
            AttemptKind::Extend => {
                let id = hb.reservation_id().unwrap_or("").to_owned();
                server.extend(server_ms, &id, Some(&key), &attempt.body)
            }
        };
        let d = match fate {
            0 => {
                let _ = apply(&mut server);
                hb.handle_failure(attempt.id, TransportFailure::Reset, observed)
            }
            1 => hb.handle_failure(
                attempt.id,
                TransportFailure::Timeout,
                send_at + timeout_ms * NS,
            ),
            2 => hb.handle_response(attempt.id, Response::new(503), observed),
            _ => {
                let r = apply(&mut server);
                let mut resp = Response::new(r.status).body(r.body.clone());
                for (n, v) in &r.headers {
                    resp = resp.header(n.as_bytes(), v.as_bytes());
                }
                hb.handle_response(attempt.id, resp, observed)
            }
        }
        .expect("outcome accepted");
        now = hb.last_event_ns();
        if d.outcome == OutcomeClass::Success {
            max_rtt_ms = max_rtt_ms.max((now - send_at).div_ceil(NS));
        }
        match d.next {
            Next::Stop(_) => {
                assert!(hb.attempt().is_none());
                assert_eq!(
                    hb.cancel(now + NS).map_err(|e| e.kind()).err(),
                    Some(ErrorKind::Stopped)
                );
                break;
            }
            Next::Send(_) => {
                let a = hb.attempt().expect("a send installs an attempt");
                let at = d.at_ns.unwrap_or(u64::MAX);
                assert!(at >= now, "due before its deciding event");
                // S-4
                match d.key {
                    Some(KeyUse::New) => {
                        assert!(!used.contains(&a.key), "a new key was used before")
                    }
                    _ => {
                        let (k, b) = last.as_ref().expect("a retry follows an attempt");
                        assert_eq!(&a.key, k);
                        assert_eq!(&a.body, b);
                    }
                }
                if d.mode != Some(Mode::Primary) || at == u64::MAX {
                    continue;
                }
                // S-3
                if d.outcome == OutcomeClass::Success {
                    if d.numbers.next_delay() == Some(leasebeat::Num::Int(0)) {
                        zero_streak += 1;
                    } else {
                        zero_streak = 0;
                    }
                    assert!(zero_streak <= 2, "S-3");
                }
                let Some(id) = hb.reservation_id() else {
                    continue;
                };
                let Some(lease) = server.lease(id) else {
                    continue;
                };
                let expiry = (lease.expires_at_ms + 1).saturating_mul(NS);
                let two_rtt = max_rtt_ms * 2;
                let budget = timeout_ms.max(1000).max(two_rtt);
                let margin = two_rtt.max(1000);
                match d.key {
                    Some(KeyUse::New) if d.numbers.next_delay() != Some(leasebeat::Num::Int(0)) => {
                        // S-1
                        assert!(at + (2 * budget + margin) * NS <= expiry, "S-1");
                    }
                    Some(KeyUse::Same) => {
                        // S-2
                        assert!(at + (budget + margin) * NS <= expiry, "S-2");
                    }
                    _ => {}
                }
            }
        }
    }
});
