//! TEMPORARY: the lead's "journal: settle glue" (persist, finish, replay,
//! release_claim on `leasebeat::journal::Journal`) until it lands on main.
//! Deleted at the merge; the binding calls the same names.
#![allow(dead_code, clippy::map_entry, clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use leasebeat as lb;
use leasebeat::journal as lj;

pub struct Replay {
    pub settlements: Vec<lb::Settlement>,
    pub busy: Vec<String>,
    pub scan: lj::Scan,
}

fn claims() -> &'static Mutex<HashMap<(PathBuf, String), lj::Claim>> {
    static C: OnceLock<Mutex<HashMap<(PathBuf, String), lj::Claim>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

pub trait Glue {
    fn persist(
        &self,
        s: &mut lb::Settlement,
        now_ns: u64,
    ) -> Result<lb::SettlementDecision, lb::Error>;
    fn finish(&self, s: &lb::Settlement) -> Result<(), lj::JournalError>;
    fn replay(&self, retry: lb::RetryPolicy, now: lb::Now) -> Result<Replay, lj::JournalError>;
    fn release_claim(&self, id: &str);
}

impl Glue for lj::Journal {
    fn persist(
        &self,
        s: &mut lb::Settlement,
        now_ns: u64,
    ) -> Result<lb::SettlementDecision, lb::Error> {
        let json = match s.poll_action() {
            lb::SettlementAction::Persist(r) => r.to_json(),
            _ => return s.handle_persisted(now_ns),
        };
        let id = s.reservation_id().to_owned();
        let res = lj::JournalRecord::from_json(json.as_bytes())
            .map_err(|m| m.to_string())
            .and_then(|r| self.write(&r).map_err(|e| e.to_string()));
        match res {
            Ok(()) => {
                let k = (self.dir().to_path_buf(), id.clone());
                let mut m = claims().lock().unwrap();
                if !m.contains_key(&k) {
                    if let Ok(Some(c)) = self.claim(&id) {
                        m.insert(k, c);
                    }
                }
                drop(m);
                s.handle_persisted(now_ns)
            }
            Err(msg) => s.handle_persist_failed(&msg, now_ns),
        }
    }

    fn finish(&self, s: &lb::Settlement) -> Result<(), lj::JournalError> {
        if s.outcome().is_none() {
            // (temporary: JournalError::new is private; an empty id is InvalidRecord)
            let mut bad = lj::JournalRecord::commit("", self.base_url(), "{}".to_owned(), None, 0);
            bad.reservation_id.clear();
            return Err(self.write(&bad).expect_err("invalid record"));
        }
        if s.last_decision().record == Some(lb::RecordUpdate::Remove) {
            self.remove(s.reservation_id())?;
        }
        self.release_claim(s.reservation_id());
        Ok(())
    }

    fn replay(&self, retry: lb::RetryPolicy, now: lb::Now) -> Result<Replay, lj::JournalError> {
        let mut scan = self.scan()?;
        let mut out = Replay {
            settlements: vec![],
            busy: vec![],
            scan: lj::Scan::default(),
        };
        for r in std::mem::take(&mut scan.records) {
            let id = r.reservation_id.clone();
            let k = (self.dir().to_path_buf(), id.clone());
            let claim = match self.claim(&id)? {
                Some(c) => c,
                None => {
                    out.busy.push(id);
                    continue;
                }
            };
            let Some(rec) = self.load(&id)? else { continue };
            let json = rec.to_json().unwrap_or_default();
            match lb::Settlement::from_record_json(json.as_bytes(), retry, now) {
                Ok(s) => {
                    claims().lock().unwrap().insert(k, claim);
                    out.settlements.push(s);
                }
                Err(e) => {
                    let to = self.quarantine(&id)?;
                    scan.quarantined.push(lj::Quarantined {
                        file: lj::record_file_name(&id),
                        moved_to: to
                            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned())),
                        reason: e.to_string(),
                    });
                }
            }
        }
        out.scan = scan;
        Ok(out)
    }

    fn release_claim(&self, id: &str) {
        claims()
            .lock()
            .unwrap()
            .remove(&(self.dir().to_path_buf(), id.to_owned()));
    }
}
