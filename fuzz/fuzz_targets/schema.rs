//! The schema checks and the extend classifier on arbitrary bodies: no panic,
//! and a body is never both a success and carrying a permanent code's stop.
#![no_main]

use leasebeat::{Config, Heartbeat, Response, SequentialKeys, schema};
use libfuzzer_sys::fuzz_target;

const MS: u64 = 1_000_000;

fuzz_target!(|data: &[u8]| {
    let (status, body) = match data.split_first_chunk::<2>() {
        Some((s, rest)) => (100 + u16::from_be_bytes(*s) % 500, rest),
        None => (200, data),
    };
    let ext = schema::extend_response(body);
    let _ = schema::create_response(body);
    let code = schema::error_code(body);
    if let Some(c) = &code {
        assert!(c.len() <= 259, "the error code is capped");
    }
    if ext.is_ok() {
        assert!(code.is_none(), "a valid extend body has no error member");
    }
    // Through the classifier: a started lease, then this response.
    let mut hb = Heartbeat::with_key_source(
        Config::new(60_000, Some(10_000)),
        Box::new(SequentialKeys::new("k")),
    )
    .expect("valid config");
    let id = hb.attempt().expect("create").id;
    hb.handle_sent(id, 0).expect("sent");
    let create = br#"{"decision":"ALLOW","reservation_id":"r","affected_scopes":[],"expires_at_ms":60000,"remaining_ttl_ms":60000}"#;
    hb.handle_response(id, Response::new(200).body(&create[..]), MS)
        .expect("created");
    let id = hb.attempt().expect("extend").id;
    hb.handle_sent(id, 2 * MS).expect("sent");
    let d = hb
        .handle_response(id, Response::new(status).body(body), 3 * MS)
        .expect("accepted");
    if let Some(reason) = code.as_deref().and_then(leasebeat::permanent_reason) {
        if !(200..=299).contains(&status) {
            assert_eq!(d.stop_reason(), Some(reason), "P-3: the code wins");
        }
    }
    let _ = d.to_json_string();
});
