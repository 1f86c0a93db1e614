//! The journal's side of a settlement (`Journal::persist`, `finish`, `replay`,
//! `release_claim`): J-1, J-4, J-5, J-6 and SP-4 through real directories.
#![cfg(all(feature = "journal", unix))]

use std::fs;
use std::path::Path;

use leasebeat::journal::{Journal, JournalErrorKind, JournalRecord, record_file_name};
use leasebeat::{
    Endpoint, Now, ResponseRef, RetryPolicy, SettleNext, SettleOutcome, SettleWarning, Settlement,
    SettlementAction, SettlementConfig, TransportFailure,
};

const URL: &str = "http://127.0.0.1:7878";
const WALL: u64 = 1_785_585_600_000;
const MS: u64 = 1_000_000;

fn open(base: &Path) -> Journal {
    Journal::open(base, URL, "key-1", Some("acme")).expect("open journal")
}

fn commit(id: &str) -> Settlement {
    let mut c =
        SettlementConfig::commit(id, br#"{"actual":{"unit":"TOKENS","amount":900}}"#.to_vec());
    c.event = Some(br#"{"subject":{"tenant":"acme"},"action":{"kind":"llm","name":"x"}}"#.to_vec());
    Settlement::new(c, Now::new(0, WALL)).expect("settlement")
}

/// Sends the due attempt and answers it with `status`/`body`; returns the decision.
fn answer(
    s: &mut Settlement,
    at_ms: u64,
    status: u16,
    headers: &[(&str, &str)],
    body: &[u8],
) -> leasebeat::SettlementDecision {
    let SettlementAction::Send(a) = s.poll_action() else {
        panic!("expected a send, got {:?}", s.poll_action())
    };
    let id = a.id;
    s.handle_sent(id, at_ms * MS).unwrap();
    let r = ResponseRef::new(status, body).headers(headers);
    s.handle_response(id, r, Now::new(at_ms * MS, WALL + at_ms))
        .unwrap()
}

const COMMITTED: &[u8] = br#"{"status":"COMMITTED","charged":{"unit":"TOKENS","amount":900}}"#;

#[test]
fn persist_writes_before_the_send_and_finish_removes_after_success() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(dir.path());
    let mut s = commit("r-1");
    assert!(matches!(s.poll_action(), SettlementAction::Persist(_)));
    let d = j.persist(&mut s, MS).unwrap();
    assert_eq!(d.next, SettleNext::Send(Endpoint::Commit));
    assert!(d.warnings.is_empty(), "{d}");
    let file = j.dir().join(record_file_name("r-1"));
    let stored = JournalRecord::from_json(&fs::read(&file).unwrap()).unwrap();
    assert_eq!(
        stored.base_url, URL,
        "a record without base_url gets the journal's"
    );
    assert!(
        stored.commit_body.unwrap().contains(s.key()),
        "the one key is in the record (ST-1)"
    );
    assert!(
        j.holds_claim("r-1"),
        "a live settlement holds its claim (J-6)"
    );
    // Finishing before the end touches nothing.
    let e = j.finish(&s).unwrap_err();
    assert_eq!(e.kind(), JournalErrorKind::NotFinished);
    assert!(file.exists());
    let d = answer(&mut s, 2, 200, &[], COMMITTED);
    assert_eq!(d.outcome(), Some(SettleOutcome::Committed));
    j.finish(&s).unwrap();
    assert!(!file.exists(), "J-5: removed after a schema-valid success");
    assert!(!j.holds_claim("r-1"));
    // A second persist of a settlement that is not asking for one: the settlement's error.
    assert!(j.persist(&mut s, 3 * MS).is_err());
}

#[test]
fn a_failed_write_is_a_warning_and_the_request_still_goes() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(dir.path());
    fs::remove_dir(j.dir()).unwrap();
    let mut s = commit("r-1");
    let d = j.persist(&mut s, MS).unwrap();
    assert_eq!(
        d.next,
        SettleNext::Send(Endpoint::Commit),
        "SP-3: the request goes anyway"
    );
    assert_eq!(d.warnings, vec![SettleWarning::PersistFailed]);
    assert!(d.detail.as_deref().unwrap_or("").contains("journal"), "{d}");
}

#[test]
fn time_going_backwards_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(dir.path());
    let mut c = SettlementConfig::commit(
        "r-1",
        br#"{"actual":{"unit":"TOKENS","amount":1}}"#.to_vec(),
    );
    c.retry = RetryPolicy::default();
    let mut s = Settlement::new(c, Now::new(10 * MS, WALL)).unwrap();
    assert!(j.persist(&mut s, MS).is_err());
    assert!(!j.dir().join(record_file_name("r-1")).exists());
}

#[test]
fn records_kept_after_exhaustion_replay_with_the_same_key_and_claims_keep_workers_apart() {
    let dir = tempfile::tempdir().unwrap();
    let key;
    {
        let j = open(dir.path());
        let mut c = SettlementConfig::commit(
            "r-1",
            br#"{"actual":{"unit":"TOKENS","amount":900}}"#.to_vec(),
        );
        c.retry.max_attempts = 1;
        let mut s = Settlement::new(c, Now::new(0, WALL)).unwrap();
        key = s.key().to_owned();
        j.persist(&mut s, MS).unwrap();
        let SettlementAction::Send(a) = s.poll_action() else {
            panic!()
        };
        let id = a.id;
        s.handle_sent(id, MS).unwrap();
        let d = s
            .handle_failure(id, TransportFailure::Reset, 2 * MS)
            .unwrap();
        assert_eq!(d.outcome(), Some(SettleOutcome::Exhausted));
        j.finish(&s).unwrap();
        assert!(
            j.dir().join(record_file_name("r-1")).exists(),
            "kept for replay (ST-3)"
        );
    }
    let a = open(dir.path());
    let b = open(dir.path());
    let mut ra = a.replay(RetryPolicy::default(), Now::new(0, WALL)).unwrap();
    let rb = b.replay(RetryPolicy::default(), Now::new(0, WALL)).unwrap();
    assert_eq!(ra.settlements.len(), 1);
    assert!(
        rb.settlements.is_empty(),
        "J-6: the second worker does not get it"
    );
    assert_eq!(rb.busy, vec!["r-1".to_owned()]);
    let mut s = ra.settlements.pop().unwrap();
    assert_eq!(s.key(), key, "SP-4: the record's key");
    assert!(
        matches!(s.poll_action(), SettlementAction::Send(_)),
        "nothing to persist on a restart"
    );
    // A replay by the holder itself does not hand the same record out twice.
    let again = a.replay(RetryPolicy::default(), Now::new(0, WALL)).unwrap();
    assert!(again.settlements.is_empty());
    assert_eq!(again.busy, vec!["r-1".to_owned()]);
    answer(&mut s, 1, 200, &[], COMMITTED);
    a.finish(&s).unwrap();
    let after = b.replay(RetryPolicy::default(), Now::new(0, WALL)).unwrap();
    assert!(after.settlements.is_empty() && after.busy.is_empty());
    assert!(after.scan.records.is_empty());
}

#[test]
fn a_live_settlement_s_claim_keeps_a_replaying_worker_away() {
    let dir = tempfile::tempdir().unwrap();
    let live = open(dir.path());
    let mut s = commit("r-1");
    live.persist(&mut s, MS).unwrap();
    let other = open(dir.path());
    let r = other
        .replay(RetryPolicy::default(), Now::new(0, WALL))
        .unwrap();
    assert!(r.settlements.is_empty());
    assert_eq!(r.busy, vec!["r-1".to_owned()]);
    live.release_claim("r-1");
    let r = other
        .replay(RetryPolicy::default(), Now::new(0, WALL))
        .unwrap();
    assert_eq!(
        r.settlements.len(),
        1,
        "an abandoned settlement's record replays"
    );
}

#[test]
fn a_429_floor_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let j = open(dir.path());
        let mut s = commit("r-1");
        j.persist(&mut s, MS).unwrap();
        let d = answer(
            &mut s,
            2,
            429,
            &[("Retry-After", "30")],
            br#"{"error":"LIMIT_EXCEEDED","message":"slow","request_id":"q"}"#,
        );
        assert_eq!(d.next, SettleNext::Persist);
        assert_eq!(d.not_before_ms, Some(WALL + 2 + 30_000));
        j.persist(&mut s, 3 * MS).unwrap();
        // The process dies here: no finish.
    }
    let j = open(dir.path());
    let mut r = j
        .replay(RetryPolicy::default(), Now::new(0, WALL + 10_000))
        .unwrap();
    let s = r.settlements.pop().unwrap();
    let SettlementAction::Send(a) = s.poll_action() else {
        panic!()
    };
    assert_eq!(
        a.due_ns,
        20_002 * MS,
        "no attempt before the persisted not_before_ms (ST-4)"
    );
}

#[test]
fn a_record_the_settlement_refuses_is_quarantined_not_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(dir.path());
    // journal.py accepts any id; the protocol (and the settlement) at most 128 characters.
    let long = "x".repeat(200);
    let good = JournalRecord::commit(
        "r-good",
        URL,
        r#"{"idempotency_key":"k-1","actual":{"unit":"TOKENS","amount":900}}"#,
        None,
        WALL,
    );
    let mut bad = good.clone();
    bad.reservation_id = long.clone();
    j.write(&good).unwrap();
    j.write(&bad).unwrap();
    let r = j.replay(RetryPolicy::default(), Now::new(0, WALL)).unwrap();
    assert_eq!(r.settlements.len(), 1);
    assert_eq!(r.settlements[0].reservation_id(), "r-good");
    assert_eq!(r.scan.quarantined.len(), 1, "{:?}", r.scan);
    assert!(
        r.scan.quarantined[0]
            .reason
            .contains("refused by the settlement")
    );
    assert!(!j.dir().join(record_file_name(&long)).exists());
    assert!(
        r.scan.quarantined[0].moved_to.is_some(),
        "renamed aside, never deleted"
    );
    assert!(!j.holds_claim(&long));
}

#[test]
fn an_understood_rejection_removes_and_an_auth_failure_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(dir.path());
    let mut s = commit("r-1");
    j.persist(&mut s, MS).unwrap();
    let d = answer(
        &mut s,
        2,
        409,
        &[],
        br#"{"error":"RESERVATION_FINALIZED","message":"done","request_id":"q"}"#,
    );
    assert_eq!(d.outcome(), Some(SettleOutcome::Rejected));
    j.finish(&s).unwrap();
    assert!(
        !j.dir().join(record_file_name("r-1")).exists(),
        "ST-7 removes"
    );
    let mut s = commit("r-2");
    j.persist(&mut s, MS).unwrap();
    let d = answer(
        &mut s,
        2,
        401,
        &[],
        br#"{"error":"UNAUTHORIZED","message":"no","request_id":"q"}"#,
    );
    assert_eq!(d.outcome(), Some(SettleOutcome::AuthFailed));
    j.finish(&s).unwrap();
    assert!(j.dir().join(record_file_name("r-2")).exists(), "ST-6 keeps");
}
