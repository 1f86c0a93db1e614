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
