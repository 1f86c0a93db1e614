//! The journal's side of a [`Settlement`]: what every runner and binding calls, so that none
//! of them re-implements the order of writes, claims and removals (J-1, J-5, J-6).
//!
//! ```text
//! let mut s = Settlement::new(config, now)?;          // or one of Journal::replay's
//! loop {
//!     match s.poll_action() {
//!         SettlementAction::Persist(_) => { journal.persist(&mut s, now_ns)?; }   // J-1
//!         SettlementAction::Send(a) => { /* at a.due_ns: handle_sent, send, handle_response */ }
//!         SettlementAction::Wait(_) => { /* the response is awaited */ }
//!         SettlementAction::Done(_) => { journal.finish(&s)?; break; }           // J-5
//!     }
//! }
//! ```
//!
//! The two record types meet here: the settlement's record ([`crate::SettlementRecord`],
//! strict: the protocol's id length, no control characters, numbers within 64 bits) is
//! written as the journal's ([`JournalRecord`], lenient like journal.py, body text kept
//! verbatim) through its JSON text, and a journal record goes back through
//! [`Settlement::from_record_json`]. A record the journal reads but the settlement refuses
//! is quarantined (J-4), never replayed and never deleted.

use std::path::Path;

use crate::settlement::{RecordUpdate, RetryPolicy, Settlement, SettlementAction};
use crate::{Error, Now, SettlementDecision};

use super::{
    HeldClaim, Journal, JournalError, JournalErrorKind, JournalRecord, Quarantined, Scan,
    record_file_name,
};

/// What [`Journal::replay`] found: the settlements to drive, and the records it left.
#[derive(Debug, Default)]
pub struct Replay {
    /// One settlement per record of this server that this journal now holds the claim of,
    /// built with [`Settlement::from_record`] (SP-4: the record's key and mode, its
    /// `not_before_ms` honoured, a fresh attempt count). Drive each, then
    /// [`Journal::finish`] it.
    pub settlements: Vec<Settlement>,
    /// Reservation ids whose record another worker (this journal's own live settlement, or
    /// another process) holds the claim of: not returned, left for that worker (J-6).
    pub busy: Vec<String>,
    /// The scan: quarantined records (those the settlement refused included), migrations,
    /// skipped files, other servers' records.
    pub scan: Scan,
}

impl Journal {
    /// Does what [`SettlementAction::Persist`] asks (J-1, SP-3): writes the settlement's
    /// record durably, takes this journal's claim on the reservation when nobody holds it
    /// (so that a replaying process leaves a live settlement alone, J-6), then reports the
    /// write to the settlement and returns its decision: `handle_persisted`, or, when the
    /// write failed, `handle_persist_failed` with the journal error's text (the decision
    /// carries the `persist_failed` warning and the text in its detail; the request still
    /// goes, as the profile allows only when journal I/O itself fails).
    ///
    /// A record without a `base_url` is written with this journal's, so that this
    /// partition's replay finds it.
    ///
    /// Errors: the settlement's own ([`crate::ErrorKind::NotOutstanding`],
    /// [`crate::ErrorKind::Stopped`], [`crate::ErrorKind::TimeWentBackwards`]) when it is
    /// not asking for a write or `now_ns` is earlier than its last event; nothing is written
    /// then.
    pub fn persist(
        &self,
        settlement: &mut Settlement,
        now_ns: u64,
    ) -> Result<SettlementDecision, Error> {
        let written = match settlement.poll_action() {
            SettlementAction::Persist(record) => {
                if now_ns < settlement.last_event_ns() {
                    // Refused before any write: the settlement's own error.
                    return settlement.handle_persisted(now_ns);
                }
                let id = record.reservation_id.clone();
                let result = JournalRecord::from_json(record.to_json().as_bytes())
                    .map_err(|reason| {
                        JournalError::new(
                            JournalErrorKind::InvalidRecord,
                            Some(&self.path(&record_file_name(&id))),
                            reason,
                        )
                    })
                    .and_then(|mut r| {
                        if r.base_url.is_empty() {
                            r.base_url = self.base_url().to_owned();
                        }
                        self.write(&r)
                    });
                self.hold_claim(&id);
                result
            }
            // Not asking for a write: the settlement refuses, with its own error.
            _ => return settlement.handle_persisted(now_ns),
        };
        match written {
            Ok(()) => settlement.handle_persisted(now_ns),
            Err(e) => settlement.handle_persist_failed(&e.to_string(), now_ns),
        }
    }

    /// Ends a settlement's journaling (J-5): once it is done, removes its record when the
    /// final decision says so (a schema-valid success, ST-2, or an understood rejection,
    /// ST-7), keeps it otherwise (exhausted, auth_failed, unclassified, expired_unrecorded:
    /// the next replay settles it), and releases this journal's claim on it.
    ///
    /// Errors: [`JournalErrorKind::NotFinished`] when the settlement has not ended (nothing
    /// touched); the removal's I/O error (the claim is released all the same; the record
    /// then replays, and the server answers its key idempotently).
    pub fn finish(&self, settlement: &Settlement) -> Result<(), JournalError> {
        if settlement.outcome().is_none() {
            return Err(JournalError::new(
                JournalErrorKind::NotFinished,
                None,
                format!(
                    "the settlement of {:?} has not ended: nothing removed",
                    settlement.reservation_id()
                ),
            ));
        }
        let id = settlement.reservation_id();
        let removed = match settlement.last_decision().record {
            Some(RecordUpdate::Remove) => self.remove(id).map(|_| ()),
            _ => Ok(()),
        };
        self.release_claim(id);
        removed
    }

    /// Releases this journal's claim on `reservation_id`, if it holds one (a settlement
    /// abandoned before its end; its record stays for the next replay).
    pub fn release_claim(&self, reservation_id: &str) {
        let held = self.claims().remove(reservation_id);
        if let Some(h) = held {
            self.inner.unlock(h);
        }
    }

    /// Whether this journal holds the claim on `reservation_id`.
    pub fn holds_claim(&self, reservation_id: &str) -> bool {
        self.claims().contains_key(reservation_id)
    }

    /// Replays this partition (J-6, SP-4): [`Journal::scan`] (quarantine, migration), then
    /// for every record of this server the claim is taken and the record read again (it may
    /// have been settled since), and a [`Settlement`] is built from it at `now` with
    /// `retry`. A record claimed elsewhere is listed in [`Replay::busy`]; a record the
    /// settlement refuses is quarantined and listed with the scan's.
    ///
    /// Errors: the scan's (the directory cannot be read).
    pub fn replay(&self, retry: RetryPolicy, now: Now) -> Result<Replay, JournalError> {
        retry
            .validate()
            .map_err(|e| JournalError::new(JournalErrorKind::InvalidRecord, None, e.to_string()))?;
        let scan = self.scan()?;
        let mut out = Replay {
            settlements: Vec::new(),
            busy: Vec::new(),
            scan,
        };
        let records = std::mem::take(&mut out.scan.records);
        for listed in &records {
            let id = listed.reservation_id.as_str();
            if self.holds_claim(id) {
                out.busy.push(id.to_owned());
                continue;
            }
            let held = match self.lock_claim(id) {
                Ok(Some(h)) => h,
                Ok(None) => {
                    out.busy.push(id.to_owned());
                    continue;
                }
                Err(e) => {
                    out.scan.skipped.push(super::Skipped {
                        file: record_file_name(id),
                        reason: format!("claim failed: {e}"),
                    });
                    continue;
                }
            };
            let record = match self.load(id) {
                Ok(Some(r)) => r,
                // Settled by its previous holder since the scan.
                Ok(None) => {
                    self.inner.unlock(held);
                    continue;
                }
                Err(e) => {
                    if e.kind() == JournalErrorKind::Corrupt {
                        out.scan.quarantined.push(Quarantined {
                            file: record_file_name(id),
                            moved_to: e.quarantined_to().and_then(file_name),
                            reason: e.message().to_owned(),
                        });
                    } else {
                        out.scan.skipped.push(super::Skipped {
                            file: record_file_name(id),
                            reason: e.to_string(),
                        });
                    }
                    self.inner.unlock(held);
                    continue;
                }
            };
            let text = match record.to_json() {
                Ok(t) => t,
                Err(reason) => {
                    self.refuse(&mut out.scan, id, reason);
                    self.inner.unlock(held);
                    continue;
                }
            };
            match Settlement::from_record_json(text.as_bytes(), retry, now) {
                Ok(s) => {
                    out.scan.records.push(record);
                    self.claims().insert(id.to_owned(), held);
                    out.settlements.push(s);
                }
                Err(e) => {
                    self.refuse(&mut out.scan, id, format!("refused by the settlement: {e}"));
                    self.inner.unlock(held);
                }
            }
        }
        Ok(out)
    }

    /// Quarantines a record the settlement refuses (J-4) and lists it.
    fn refuse(&self, scan: &mut Scan, id: &str, reason: String) {
        let moved_to = self.quarantine(id).ok().flatten();
        scan.quarantined.push(Quarantined {
            file: record_file_name(id),
            moved_to: moved_to.as_deref().and_then(file_name),
            reason,
        });
    }

    fn hold_claim(&self, id: &str) {
        if self.holds_claim(id) {
            return;
        }
        // Best effort: a claim held elsewhere (a replaying process) or a failed lock does
        // not stop a live settlement; the one key keeps the server side exact (J-6).
        if let Ok(Some(h)) = self.lock_claim(id) {
            let previous = self.claims().insert(id.to_owned(), h);
            if let Some(p) = previous {
                self.inner.unlock(p);
            }
        }
    }

    fn claims(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, HeldClaim>> {
        self.inner
            .claims
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn file_name(p: &Path) -> Option<String> {
    p.file_name().and_then(|n| n.to_str()).map(str::to_owned)
}
