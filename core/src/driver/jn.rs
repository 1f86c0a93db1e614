//! The driver's view of the journal: persist, finish, replay (feature
//! `journal`), or nothing (without it).

use crate::{Error, RetryPolicy, Settlement, SettlementDecision};

use super::settle::JournalReport;

/// What a replay hands the timer.
pub(crate) struct ReplayOut {
    pub(crate) settlements: Vec<Settlement>,
    pub(crate) report: JournalReport,
}

#[cfg(feature = "journal")]
mod imp {
    use super::*;
    use crate::Now;
    use crate::journal::{Journal, JournalError};

    /// An open journal partition.
    pub(crate) struct Jn {
        pub(crate) j: Journal,
    }

    impl Jn {
        pub(crate) fn open(
            opts: &super::super::JournalOptions,
            base_url: &str,
            api_key: &str,
        ) -> Result<Jn, JournalError> {
            let base = crate::journal::base_dir(opts.dir.as_deref())?;
            let tenant = opts.tenant.as_deref().filter(|t| !t.trim().is_empty());
            Ok(Jn {
                j: Journal::open(&base, base_url, api_key, tenant)?,
            })
        }

        pub(crate) fn dir(&self) -> std::path::PathBuf {
            self.j.dir().to_path_buf()
        }

        /// J-1 then the settlement's acknowledgement.
        pub(crate) fn persist(
            &self,
            s: &mut Settlement,
            now_ns: u64,
        ) -> Result<SettlementDecision, Error> {
            self.j.persist(s, now_ns)
        }

        /// J-5 and the claim's release.
        pub(crate) fn finish(&self, s: &Settlement) -> Result<(), String> {
            self.j
                .finish(s)
                .map_err(|e| format!("journal {}: {}", e.kind().as_str(), e.message()))
        }

        pub(crate) fn release_claim(&self, reservation_id: &str) {
            self.j.release_claim(reservation_id);
        }

        pub(crate) fn replay(&self, retry: RetryPolicy, now: Now) -> Result<ReplayOut, String> {
            let r = self
                .j
                .replay(retry, now)
                .map_err(|e| format!("journal {}: {}", e.kind().as_str(), e.message()))?;
            let report = JournalReport {
                dir: Some(self.dir()),
                replayed: r
                    .settlements
                    .iter()
                    .map(|s| s.reservation_id().to_owned())
                    .collect(),
                busy: r.busy.clone(),
                quarantined: r
                    .scan
                    .quarantined
                    .iter()
                    .map(|q| (q.file.clone(), q.reason.clone()))
                    .collect(),
                foreign: r.scan.foreign.len(),
                migrated: r.scan.migrated.len(),
                skipped: r
                    .scan
                    .skipped
                    .iter()
                    .map(|s| (s.file.clone(), s.reason.clone()))
                    .collect(),
                error: None,
            };
            Ok(ReplayOut {
                settlements: r.settlements,
                report,
            })
        }
    }
}

#[cfg(not(feature = "journal"))]
mod imp {
    use super::*;
    use crate::Now;

    /// No journal in this build (an empty type: never built).
    pub(crate) enum Jn {}

    impl Jn {
        pub(crate) fn dir(&self) -> std::path::PathBuf {
            match *self {}
        }
        pub(crate) fn persist(
            &self,
            _s: &mut Settlement,
            _now_ns: u64,
        ) -> Result<SettlementDecision, Error> {
            match *self {}
        }
        pub(crate) fn finish(&self, _s: &Settlement) -> Result<(), String> {
            match *self {}
        }
        pub(crate) fn release_claim(&self, _id: &str) {
            match *self {}
        }
        pub(crate) fn replay(&self, _retry: RetryPolicy, _now: Now) -> Result<ReplayOut, String> {
            match *self {}
        }
    }
}

pub(crate) use imp::Jn;

/// TEMPORARY: the lead's "journal: settle glue" (`Journal::persist`,
/// `finish`, `replay`, `release_claim`) as an extension trait until it lands
/// on main; inherent methods then take precedence and this goes.
#[cfg(feature = "journal")]
mod glue_shim {
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::sync::Mutex;

    use crate::journal::{Claim, Journal, JournalError, JournalRecord, Scan};
    use crate::{
        Error, ErrorKind, Now, RecordUpdate, RetryPolicy, Settlement, SettlementAction,
        SettlementDecision,
    };

    static CLAIMS: Mutex<Option<HashMap<(PathBuf, String), Claim>>> = Mutex::new(None);

    fn claims() -> std::sync::MutexGuard<'static, Option<HashMap<(PathBuf, String), Claim>>> {
        CLAIMS.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) struct Replay {
        pub(crate) settlements: Vec<Settlement>,
        pub(crate) busy: Vec<String>,
        pub(crate) scan: Scan,
    }

    pub(crate) trait Glue {
        fn persist(&self, s: &mut Settlement, now_ns: u64) -> Result<SettlementDecision, Error>;
        fn finish(&self, s: &Settlement) -> Result<(), JournalError>;
        fn release_claim(&self, id: &str);
        fn replay(&self, retry: RetryPolicy, now: Now) -> Result<Replay, JournalError>;
    }

    fn take_claim(j: &Journal, id: &str) -> Result<bool, JournalError> {
        let k = (j.dir().to_path_buf(), id.to_owned());
        if claims().get_or_insert_with(HashMap::new).contains_key(&k) {
            return Ok(true);
        }
        match j.claim(id)? {
            Some(c) => {
                claims().get_or_insert_with(HashMap::new).insert(k, c);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    impl Glue for Journal {
        fn persist(&self, s: &mut Settlement, now_ns: u64) -> Result<SettlementDecision, Error> {
            let text = match s.poll_action() {
                SettlementAction::Persist(r) => r.to_json(),
                _ => return Err(Error::new(ErrorKind::NotOutstanding, "no persist")),
            };
            let id = s.reservation_id().to_owned();
            let written = JournalRecord::from_json(text.as_bytes())
                .map_err(|m| m.to_string())
                .and_then(|r| self.write(&r).map_err(|e| e.to_string()));
            match written {
                Ok(()) => {
                    let _ = take_claim(self, &id);
                    s.handle_persisted(now_ns)
                }
                Err(m) => s.handle_persist_failed(&m, now_ns),
            }
        }

        fn finish(&self, s: &Settlement) -> Result<(), JournalError> {
            if s.outcome().is_some() && s.last_decision().record == Some(RecordUpdate::Remove) {
                self.remove(s.reservation_id())?;
            }
            self.release_claim(s.reservation_id());
            Ok(())
        }

        fn release_claim(&self, id: &str) {
            let k = (self.dir().to_path_buf(), id.to_owned());
            let c = claims().get_or_insert_with(HashMap::new).remove(&k);
            drop(c);
        }

        fn replay(&self, retry: RetryPolicy, now: Now) -> Result<Replay, JournalError> {
            let mut scan = self.scan()?;
            let mut settlements = Vec::new();
            let mut busy = Vec::new();
            for r in std::mem::take(&mut scan.records) {
                let id = r.reservation_id.clone();
                if !take_claim(self, &id)? {
                    busy.push(id);
                    continue;
                }
                let Some(r) = self.load(&id)? else {
                    self.release_claim(&id);
                    continue;
                };
                let text = r.to_json().unwrap_or_default();
                match Settlement::from_record_json(text.as_bytes(), retry, now) {
                    Ok(s) => settlements.push(s),
                    Err(e) => {
                        let moved = self.quarantine(&id)?;
                        self.release_claim(&id);
                        scan.quarantined.push(crate::journal::Quarantined {
                            file: crate::journal::record_file_name(&id),
                            moved_to: moved.map(|p| p.display().to_string()),
                            reason: e.to_string(),
                        });
                    }
                }
            }
            Ok(Replay {
                settlements,
                busy,
                scan,
            })
        }
    }
}
#[cfg(feature = "journal")]
#[allow(unused_imports)]
use glue_shim::Glue;
