//! Retry-After parsing on arbitrary header lists: no panic, and a value is
//! accepted only as one run of ASCII digits (P-5, D-11) giving 1000 x it.
#![no_main]

use leasebeat::Response;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Header lines separated by 0xFF; each "name\0value" (no NUL: Retry-After).
    let mut r = Response::new(429);
    for line in data.split(|b| *b == 0xFF) {
        let (name, value) = match line.iter().position(|b| *b == 0) {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (&b"Retry-After"[..], line),
        };
        r = r.header(name.to_vec(), value.to_vec());
    }
    if let Ok(ms) = r.retry_after_ms() {
        assert_eq!(ms % 1000, 0);
    }
});
