//! The version-1 pending-settlement record (J-2), member for member as runcycles Python
//! 0.5.3's `PendingCommitRecord` writes and reads it (`journal.py`), with its validation.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::value::RawValue;

/// The only record version written and accepted (`_RECORD_VERSION` of journal.py).
pub const RECORD_VERSION: u64 = 1;

/// Which request a record settles with: the settlement's own [`RecordMode`] (one enum for
/// both record types: the journal's lenient [`JournalRecord`] and the settlement's strict
/// [`crate::SettlementRecord`]).
pub use crate::settlement::RecordMode;

/// One pending settlement as stored in its file.
///
/// The request bodies are kept as the exact JSON text of an object (never re-encoded), so
/// amounts beyond 2^63, member order and anything the journal does not interpret survive a
/// round trip byte for byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalRecord {
    /// The exact reservation id (non-empty; any characters, NUL and `/` included: the file
    /// name is its sha256).
    pub reservation_id: String,
    /// The server the record settles against (replay skips records of another server).
    pub base_url: String,
    /// Commit or event (the event fallback after ST-5).
    pub mode: RecordMode,
    /// The commit request body (a JSON object text, idempotency key included), if known.
    /// Required in commit mode.
    pub commit_body: Option<String>,
    /// The `POST /v1/events` body (a JSON object text), if known. Required in event mode.
    pub event_fallback_body: Option<String>,
    /// Wall-clock Unix ms when the record was written.
    pub recorded_at_ms: u64,
    /// Absolute wall-clock Unix ms before which no request may go (ST-4), if any.
    pub not_before_ms: Option<u64>,
}

impl JournalRecord {
    /// A commit-mode record with no `not_before_ms`.
    pub fn commit(
        reservation_id: impl Into<String>,
        base_url: impl Into<String>,
        commit_body: impl Into<String>,
        event_fallback_body: Option<String>,
        recorded_at_ms: u64,
    ) -> JournalRecord {
        JournalRecord {
            reservation_id: reservation_id.into(),
            base_url: base_url.into(),
            mode: RecordMode::Commit,
            commit_body: Some(commit_body.into()),
            event_fallback_body,
            recorded_at_ms,
            not_before_ms: None,
        }
    }

    /// Checks what [`JournalRecord::from_json`] checks on the way in: a non-empty id, the
    /// mode's body present, every body a single JSON object.
    pub fn validate(&self) -> Result<(), String> {
        if self.reservation_id.is_empty() {
            return Err("journal record missing reservation_id".into());
        }
        for (name, body) in [
            ("commit_body", &self.commit_body),
            ("event_fallback_body", &self.event_fallback_body),
        ] {
            if let Some(text) = body {
                if !is_object_text(text) {
                    return Err(format!(
                        "journal record has invalid {name}: not one JSON object"
                    ));
                }
            }
        }
        match self.mode {
            RecordMode::Commit if self.commit_body.is_none() => {
                Err("commit-mode journal record missing commit_body".into())
            }
            RecordMode::Event if self.event_fallback_body.is_none() => {
                Err("event-mode journal record missing event_fallback_body".into())
            }
            _ => Ok(()),
        }
    }

    /// The file's text: one compact JSON object, members in journal.py's order.
    pub fn to_json(&self) -> Result<String, String> {
        self.validate()?;
        let body = |b: &Option<String>| b.as_deref().unwrap_or("null").to_owned();
        let mut out = String::with_capacity(
            160 + self.reservation_id.len()
                + self.base_url.len()
                + self.commit_body.as_deref().map_or(4, str::len)
                + self.event_fallback_body.as_deref().map_or(4, str::len),
        );
        out.push_str("{\"version\":1,\"reservation_id\":");
        out.push_str(&json_string(&self.reservation_id));
        out.push_str(",\"base_url\":");
        out.push_str(&json_string(&self.base_url));
        out.push_str(",\"mode\":\"");
        out.push_str(self.mode.as_str());
        out.push_str("\",\"commit_body\":");
        out.push_str(&body(&self.commit_body));
        out.push_str(",\"event_fallback_body\":");
        out.push_str(&body(&self.event_fallback_body));
        let _ = write!(out, ",\"recorded_at_ms\":{}", self.recorded_at_ms);
        match self.not_before_ms {
            Some(n) => {
                let _ = write!(out, ",\"not_before_ms\":{n}}}");
            }
            None => out.push_str(",\"not_before_ms\":null}"),
        }
        Ok(out)
    }

    /// Reads a record file's bytes with journal.py's rules (`PendingCommitRecord.from_json`):
    /// a JSON object; `version` the integer 1; `reservation_id` a non-empty string; `mode`
    /// absent (commit), `"commit"` or `"event"`; each body absent, null or an object, the
    /// mode's body an object; `base_url` absent (`""`) or a string; `recorded_at_ms` absent
    /// (0) or a non-negative integer; `not_before_ms` absent, null or a non-negative
    /// integer. Unknown members are ignored; a repeated member counts with its last value.
    ///
    /// Stricter than Python where Rust's types end: integers beyond 2^64-1, lone surrogate
    /// escapes and `NaN`/`Infinity` (anywhere in the record) are refused.
    pub fn from_json(bytes: &[u8]) -> Result<JournalRecord, String> {
        let text =
            std::str::from_utf8(bytes).map_err(|e| format!("journal record is not UTF-8: {e}"))?;
        let members: HashMap<String, &RawValue> = serde_json::from_str(text)
            .map_err(|e| format!("journal record is not a JSON object: {e}"))?;
        let get = |k: &str| members.get(k).map(|v| v.get());

        match get("version").map(non_negative_int) {
            Some(Some(RECORD_VERSION)) => {}
            _ => {
                return Err(format!(
                    "unsupported journal version: {}",
                    get("version").unwrap_or("absent")
                ));
            }
        }
        let reservation_id = match get("reservation_id").map(string) {
            Some(Some(id)) if !id.is_empty() => id,
            _ => return Err("journal record missing reservation_id".into()),
        };
        let mode = match get("mode") {
            None => RecordMode::Commit,
            Some(raw) => match string(raw).as_deref() {
                Some("commit") => RecordMode::Commit,
                Some("event") => RecordMode::Event,
                _ => return Err(format!("journal record has unknown mode: {raw}")),
            },
        };
        let body = |name: &str| -> Result<Option<String>, String> {
            match get(name) {
                None | Some("null") => Ok(None),
                Some(raw) if raw.starts_with('{') => Ok(Some(raw.to_owned())),
                Some(_) => Err(format!("journal record has invalid {name}")),
            }
        };
        let commit_body = body("commit_body")?;
        let event_fallback_body = body("event_fallback_body")?;
        if mode == RecordMode::Commit && commit_body.is_none() {
            return Err("commit-mode journal record missing commit_body".into());
        }
        if mode == RecordMode::Event && event_fallback_body.is_none() {
            return Err("event-mode journal record missing event_fallback_body".into());
        }
        let base_url = match get("base_url") {
            None => String::new(),
            Some(raw) => string(raw).ok_or("journal record has invalid base_url")?,
        };
        let recorded_at_ms = match get("recorded_at_ms") {
            None => 0,
            Some(raw) => {
                non_negative_int(raw).ok_or("journal record has invalid recorded_at_ms")?
            }
        };
        let not_before_ms = match get("not_before_ms") {
            None | Some("null") => None,
            Some(raw) => {
                Some(non_negative_int(raw).ok_or("journal record has invalid not_before_ms")?)
            }
        };
        Ok(JournalRecord {
            reservation_id,
            base_url,
            mode,
            commit_body,
            event_fallback_body,
            recorded_at_ms,
            not_before_ms,
        })
    }
}

/// A JSON string literal for `s`.
fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// A JSON integer literal (no fraction, no exponent) in 0..=u64::MAX; `true`, `1.0`,
/// `1e0` and negatives are not (Python's `isinstance(x, int)` and `>= 0`).
fn non_negative_int(raw: &str) -> Option<u64> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok()
}

/// The value of a JSON string literal.
fn string(raw: &str) -> Option<String> {
    if !raw.starts_with('"') {
        return None;
    }
    serde_json::from_str(raw).ok()
}

/// `text` is exactly one JSON object (surrounding whitespace allowed).
pub(crate) fn is_object_text(text: &str) -> bool {
    match serde_json::from_str::<&RawValue>(text) {
        Ok(raw) => raw.get().starts_with('{'),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec() -> JournalRecord {
        JournalRecord::commit(
            "r-1",
            "http://127.0.0.1:7878",
            r#"{"idempotency_key":"k","actual":{"unit":"TOKENS","amount":18446744073709551617}}"#,
            None,
            1_785_585_600_000,
        )
    }

    #[test]
    fn round_trip_keeps_bodies_verbatim() {
        let r = rec();
        let text = r.to_json().unwrap();
        assert!(text.starts_with(r#"{"version":1,"reservation_id":"r-1","base_url":"#));
        assert!(text.contains("18446744073709551617"));
        assert_eq!(JournalRecord::from_json(text.as_bytes()).unwrap(), r);
    }

    #[test]
    fn python_defaults_for_absent_members() {
        let r = JournalRecord::from_json(
            br#"{"version": 1, "reservation_id": "x", "commit_body": {}}"#,
        )
        .unwrap();
        assert_eq!(r.mode, RecordMode::Commit);
        assert_eq!(r.base_url, "");
        assert_eq!(r.recorded_at_ms, 0);
        assert_eq!(r.not_before_ms, None);
        assert_eq!(r.event_fallback_body, None);
    }

    #[test]
    fn refusals_follow_journal_py() {
        for bad in [
            "",
            "[]",
            "{",
            r#"{"version":2,"reservation_id":"x","commit_body":{}}"#,
            r#"{"version":true,"reservation_id":"x","commit_body":{}}"#,
            r#"{"version":1.0,"reservation_id":"x","commit_body":{}}"#,
            r#"{"reservation_id":"x","commit_body":{}}"#,
            r#"{"version":1,"reservation_id":"","commit_body":{}}"#,
            r#"{"version":1,"reservation_id":5,"commit_body":{}}"#,
            r#"{"version":1,"reservation_id":"x","mode":null,"commit_body":{}}"#,
            r#"{"version":1,"reservation_id":"x","mode":"release","commit_body":{}}"#,
            r#"{"version":1,"reservation_id":"x"}"#,
            r#"{"version":1,"reservation_id":"x","commit_body":[]}"#,
            r#"{"version":1,"reservation_id":"x","mode":"event","commit_body":{}}"#,
            r#"{"version":1,"reservation_id":"x","commit_body":{},"event_fallback_body":"s"}"#,
            r#"{"version":1,"reservation_id":"x","commit_body":{},"base_url":null}"#,
            r#"{"version":1,"reservation_id":"x","commit_body":{},"recorded_at_ms":-1}"#,
            r#"{"version":1,"reservation_id":"x","commit_body":{},"recorded_at_ms":1.5}"#,
            r#"{"version":1,"reservation_id":"x","commit_body":{},"not_before_ms":false}"#,
            r#"{"version":1,"reservation_id":"x","commit_body":{}} trailing"#,
        ] {
            assert!(
                JournalRecord::from_json(bad.as_bytes()).is_err(),
                "accepted {bad}"
            );
        }
    }

    #[test]
    fn last_duplicate_member_wins_like_python() {
        let r = JournalRecord::from_json(
            br#"{"version":1,"reservation_id":"a","reservation_id":"b","commit_body":{}}"#,
        )
        .unwrap();
        assert_eq!(r.reservation_id, "b");
    }

    #[test]
    fn writing_refuses_what_reading_would_quarantine() {
        let mut r = rec();
        r.commit_body = Some("[1]".into());
        assert!(r.to_json().is_err());
        r.commit_body = Some("{} {}".into());
        assert!(r.to_json().is_err());
        r.commit_body = None;
        assert!(r.to_json().is_err());
        let mut r = rec();
        r.reservation_id.clear();
        assert!(r.to_json().is_err());
        let mut r = rec();
        r.mode = RecordMode::Event;
        assert!(r.to_json().is_err());
        r.event_fallback_body = Some(r#"{"subject":{"tenant":"acme"}}"#.into());
        assert!(r.to_json().is_ok());
    }

    #[test]
    fn odd_ids_are_escaped_and_read_back() {
        let mut r = rec();
        r.reservation_id = "a/b\0c\"\\\u{1F600}".into();
        let back = JournalRecord::from_json(r.to_json().unwrap().as_bytes()).unwrap();
        assert_eq!(back.reservation_id, r.reservation_id);
    }
}
