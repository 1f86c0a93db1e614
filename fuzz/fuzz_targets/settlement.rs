//! The settlement fed arbitrary input: a record file's bytes (a restart, SP-4) or a commit
//! body, then arbitrary events (times as increments, any attempt id, any status, headers and
//! body, failures, persist acknowledgements). Never a panic; a refused call changes nothing;
//! at most one terminal outcome, never changed; the key never changes (ST-1); no request is
//! due before a persist it waits for was acknowledged.
#![no_main]

use leasebeat::{
    Now, ResponseRef, RetryPolicy, SequentialKeys, SettleOutcome, Settlement, SettlementAction,
    SettlementConfig, TransportFailure,
};
use libfuzzer_sys::fuzz_target;

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(*b)
    }
    fn u64(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for _ in 0..8 {
            v = v << 8 | u64::from(self.u8()?);
        }
        Some(v)
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

const WALL: u64 = 1_785_585_600_000;

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let Some(kind) = b.u8() else { return };
    let len = usize::from(b.u8().unwrap_or(0)) * 4;
    let text = b.take(len).to_vec();
    let retry = RetryPolicy {
        max_attempts: u32::from(kind >> 4) % 6 + 1,
        ..RetryPolicy::default()
    };
    let built = match kind % 4 {
        0 => Settlement::from_record_json(&text, retry, Now::new(0, WALL)),
        1 => {
            let mut c = SettlementConfig::commit("r-1", text);
            c.retry = retry;
            c.event = Some(br#"{"subject":{"tenant":"t"},"action":{"kind":"k","name":"n"}}"#.to_vec());
            Settlement::with_key_source(c, Now::new(0, WALL), &mut SequentialKeys::new("k"))
        }
        2 => {
            let mut c = SettlementConfig::release("r-1", None);
            c.retry = retry;
            Settlement::with_key_source(c, Now::new(0, WALL), &mut SequentialKeys::new("k"))
        }
        _ => {
            let mut c = SettlementConfig::commit(
                String::from_utf8_lossy(&text).into_owned(),
                br#"{"actual":{"unit":"TOKENS","amount":1}}"#.to_vec(),
            );
            c.retry = retry;
            Settlement::with_key_source(c, Now::new(0, WALL), &mut SequentialKeys::new("k"))
        }
    };
    let Ok(mut s) = built else { return };
    let key = s.key().to_owned();
    let mut outcome: Option<SettleOutcome> = s.outcome();
    let mut now = 0u64;
    let mut wall = WALL;
    let mut persist_pending = matches!(s.poll_action(), SettlementAction::Persist(_));
    let mut acked_at = 0u64;
    while let Some(op) = b.u8() {
        let step = match op >> 5 {
            0 => 0,
            1..=5 => u64::from(b.u8().unwrap_or(0)) * 1_000_000,
            6 => b.u64().unwrap_or(0),
            _ => 0,
        };
        let t = if op & 0x10 != 0 {
            now.saturating_sub(step)
        } else {
            now.saturating_add(step)
        };
        let current = s.attempt().map(|a| a.id);
        let id = match op & 0x08 {
            0 => current.unwrap_or(1),
            _ => u64::from(b.u8().unwrap_or(0)),
        };
        let before = format!("{:?}", s.last_decision());
        let before_action = format!("{:?}", s.poll_action());
        let r = match op & 0x07 {
            0 => s.handle_persisted(t),
            1 => s.handle_persist_failed("disk full", t),
            2 => s.handle_sent(id, t),
            3 | 4 => {
                let status = b.u64().map_or(200, |v| (v % 1100) as u16);
                let hl = usize::from(b.u8().unwrap_or(0) % 16);
                let ra = String::from_utf8_lossy(b.take(hl)).into_owned();
                let headers = [("Retry-After", ra.as_str())];
                let bl = usize::from(b.u8().unwrap_or(0)) * 2;
                let body = b.take(bl).to_vec();
                wall = wall.saturating_add(step / 1_000_000);
                s.handle_response(
                    id,
                    ResponseRef::new(status, &body).headers(&headers),
                    Now::new(t, wall),
                )
            }
            5 | 6 => {
                let f = [
                    TransportFailure::Timeout,
                    TransportFailure::Connect,
                    TransportFailure::Reset,
                ][usize::from(b.u8().unwrap_or(0) % 3)];
                s.handle_failure(id, f, t)
            }
            _ => {
                let _ = s.poll_timeout();
                continue;
            }
        };
        match r {
            Ok(d) => {
                now = t;
                if op & 0x07 <= 1 && persist_pending {
                    persist_pending = false;
                    acked_at = t;
                }
                if let SettlementAction::Send(a) = s.poll_action() {
                    assert!(
                        a.due_ns >= acked_at,
                        "a request due before its persist was acknowledged"
                    );
                    assert_eq!(a.key, key, "ST-1: one key");
                }
                if matches!(s.poll_action(), SettlementAction::Persist(_)) {
                    persist_pending = true;
                }
                if let Some(o) = outcome {
                    panic!("a call after the end was accepted ({o}): {d}");
                }
                outcome = d.outcome();
                assert_eq!(outcome, s.outcome());
                let _ = d.to_string();
            }
            Err(_) => {
                assert_eq!(before, format!("{:?}", s.last_decision()), "a refusal changed the state");
                assert_eq!(before_action, format!("{:?}", s.poll_action()));
            }
        }
        assert_eq!(s.key(), key, "ST-1: the key never changes");
    }
});
