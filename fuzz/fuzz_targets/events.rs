//! The state machine fed arbitrary events (times as increments, any attempt
//! id, any status and body, failures, cancels, duplicates): never a panic; a
//! refused call changes nothing (D-14); a stop is final; nothing is due before
//! its deciding event.
#![no_main]

use leasebeat::{Action, Config, Heartbeat, Next, Response, SequentialKeys, TransportFailure};
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

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let (Some(ttl), Some(timeout)) = (b.u64(), b.u64()) else {
        return;
    };
    let timeout = (timeout % 3 != 0).then_some(timeout >> 2);
    let Ok(mut hb) = Heartbeat::with_key_source(
        Config::new(ttl, timeout),
        Box::new(SequentialKeys::new("k")),
    ) else {
        return;
    };
    let mut now = 0u64;
    while let Some(op) = b.u8() {
        // Time moves by an increment (sometimes huge, sometimes backwards).
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
        let current = hb.attempt().map(|a| a.id);
        let id = match op & 0x08 {
            0 => current.unwrap_or(1),
            _ => u64::from(b.u8().unwrap_or(0)),
        };
        let stopped = hb.stop_reason().is_some();
        let before = format!("{hb:?}");
        let r = match op & 0x07 {
            0 | 1 => hb.handle_sent(id, t).map(|()| None),
            2 | 3 => {
                let status = b.u64().map_or(200, |s| (s % 700) as u16);
                let len = usize::from(b.u8().unwrap_or(0));
                let body = b.take(len).to_vec();
                hb.handle_response(id, Response::new(status).body(body), t)
                    .map(Some)
            }
            4 | 5 => {
                let f = [
                    TransportFailure::Timeout,
                    TransportFailure::Connect,
                    TransportFailure::Reset,
                ][usize::from(b.u8().unwrap_or(0) % 3)];
                hb.handle_failure(id, f, t).map(Some)
            }
            6 => hb.cancel(t).map(Some),
            _ => {
                let _ = hb.poll_action();
                let _ = hb.poll_timeout();
                Ok(None)
            }
        };
        match r {
            Err(_) => assert_eq!(
                format!("{hb:?}"),
                before,
                "a refused call changed the state"
            ),
            Ok(Some(d)) => {
                assert!(!stopped, "a call succeeded after a stop");
                if let (Next::Send(_), Some(at)) = (d.next, d.at_ns) {
                    assert!(at >= hb.last_event_ns(), "due before its deciding event");
                }
                let line = d.to_json_string();
                assert!(serde_json::from_str::<serde_json::Value>(&line).is_ok());
            }
            Ok(None) => {}
        }
        if let Action::Stop(_) = hb.poll_action() {
            assert!(hb.attempt().is_none());
        }
        now = t;
    }
});
