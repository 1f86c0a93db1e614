//! The scenario reader (and a replay of what it accepts) on arbitrary text:
//! no panic, no hang; emitted lines are JSON.
#![no_main]

use leasebeat::scenario;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(s) = scenario::parse(text) {
        let r = scenario::replay_with(&s, true);
        for line in &r.lines {
            assert!(
                serde_json::from_str::<serde_json::Value>(line).is_ok(),
                "{line}"
            );
        }
    }
});
