//! A model of a Cycles server's reservation endpoints, for simulation, property
//! tests and the reference server (`leasebeat serve`).
//!
//! It is sans-IO like the rest of the core: every call takes the server's
//! clock in milliseconds. It implements create, extend, commit and release
//! with the protocol's status codes and error bodies, idempotency per
//! endpoint and key (a same-key replay returns the stored response with
//! `remaining_ttl_ms` recomputed, 0 once the reservation is no longer
//! ACTIVE; commit and release replays are verbatim), and the policy regimes
//! a server may apply ([`Policy`]).
//!
//! Commit and release answer the protocol's `CommitResponse`
//! (`{status: COMMITTED, charged, released?}`) and `ReleaseResponse`
//! (`{status: RELEASED, released}`). The model has no budgets: a commit is
//! charged its `actual` in full (`ALLOW_IF_AVAILABLE` / `ALLOW_WITH_OVERDRAFT`
//! with unlimited remaining), except that a reservation created with
//! `overage_policy: REJECT` refuses `actual > reserved` with 409
//! `BUDGET_EXCEEDED`.
//!
//! A reservation is alive while `server time <= expires_at_ms`; the model
//! knows each reservation's true expiry, so a test can check any lapse.
//!
//! [`ServerBugs`] (all off by default) makes the model break chosen
//! obligations on purpose, so that `leasebeat probe` can be shown to catch
//! each one.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use serde_json::{Map, Value, json};

/// How the server constrains leases (HEARTBEAT GUIDANCE, "Servers MAY
/// constrain extensions").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Cap on the initial TTL: a create's `ttl_ms` is silently reduced to it.
    pub initial_ttl_cap_ms: Option<u64>,
    /// Per-extension grant cap: each extension adds at most this much.
    pub grant_cap_ms: Option<u64>,
    /// Maximum lead: an extension never moves expiry beyond `now + L`
    /// (and never shortens it).
    pub max_lead_ms: Option<u64>,
    /// Maximum number of extensions per reservation (409
    /// `MAX_EXTENSIONS_EXCEEDED` after that).
    pub max_extensions: Option<u32>,
    /// Omit `remaining_ttl_ms` (an older server): clients use the fallback.
    pub omit_remaining: bool,
    /// The grace after expiry during which commit and release are still
    /// accepted (`grace_period_ms` of a create that gives none; the
    /// protocol's default is 5000, `leasebeat serve`'s too). Extensions get
    /// no grace.
    pub grace_ms: u64,
}

/// Deliberate server bugs (all off by default): each breaks one obligation
/// of the protocol's IDEMPOTENCY section or of `remaining_ttl_ms`, to prove
/// that `leasebeat probe` catches it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerBugs {
    /// A same-key replay of a create or extend copies the originally
    /// answered `remaining_ttl_ms` instead of recomputing it (also after
    /// the reservation was committed or released).
    pub replay_stale_remaining: bool,
    /// `remaining_ttl_ms` is computed from a clock that runs at this many
    /// thousandths of the expiry clock's rate (1500: 50 % fast), counted
    /// from the first request the model saw. `None`: the expiry clock.
    pub remaining_clock_permille: Option<u32>,
    /// A same-key replay of a create or extend answers the reservation's
    /// current `expires_at_ms` instead of the original one (`remaining_ttl_ms`
    /// is still recomputed from the original).
    pub replay_changed_body: bool,
    /// A reused key with another payload is answered as a replay of the
    /// original request instead of 409 `IDEMPOTENCY_MISMATCH` (create and
    /// extend).
    pub no_idempotency_mismatch: bool,
}

impl Policy {
    /// The reference server's default: additive extensions, no limits.
    pub fn additive() -> Policy {
        Policy::default()
    }
}

/// The lifecycle state of a reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Live (until its expiry passes).
    Active,
    /// Committed.
    Committed,
    /// Released.
    Released,
}

/// One reservation as the server sees it.
#[derive(Clone, Debug)]
pub struct Lease {
    /// The reservation id.
    pub id: String,
    /// Current expiry on the server clock (alive while `now <= expires_at_ms`).
    pub expires_at_ms: u64,
    /// Extensions applied so far.
    pub extensions: u32,
    /// Lifecycle state.
    pub state: LeaseState,
    /// Server time of the create.
    pub created_at_ms: u64,
    /// Commit and release are accepted until `expires_at_ms + grace_ms`.
    pub grace_ms: u64,
    /// The last [`EXTEND_KEYS_KEPT`] extension keys (a client only ever
    /// retries its latest key).
    extend_keys: VecDeque<(Box<str>, Stored)>,
    /// The lapse was reported by [`SimServer::take_lapses`].
    lapse_reported: bool,
    /// The create's `estimate` (echoed as `reserved`), as compact JSON.
    reserved: Box<[u8]>,
    /// The create asked for `overage_policy: REJECT`.
    overage_reject: bool,
    /// Commit and release idempotency records: (request, response).
    commit_keys: HashMap<String, (Value, SimResponse)>,
    release_keys: HashMap<String, (Value, SimResponse)>,
    /// What this reservation holds in the store's accounting (see
    /// [`StoreLimits`]): records (its create's included) and bytes.
    held: Held,
}

/// Records and bytes counted against the [`StoreLimits`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Held {
    records: usize,
    bytes: usize,
}

/// Bounds of the idempotency store (the reservations and their records,
/// which live and go together): a request that would store a new record
/// beyond either bound is refused with `503 INTERNAL_ERROR` ("server busy")
/// and changes nothing; a same-key replay of a stored record is still
/// answered, and an extension that replaces a reservation's oldest record
/// (it keeps [`EXTEND_KEYS_KEPT`]) counts only what it adds. Records go
/// with their reservation, `retention_ms` after its expiry (see
/// [`SimServer::take_lapses`]). The default is unbounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreLimits {
    /// Most idempotency records held (creates, extensions, commits,
    /// releases).
    pub max_records: usize,
    /// Most bytes held, as estimated by the model: each record's key,
    /// request and response texts plus a fixed overhead per record
    /// ([`RECORD_OVERHEAD_BYTES`]) and per reservation
    /// ([`LEASE_OVERHEAD_BYTES`]).
    pub max_bytes: usize,
}

impl Default for StoreLimits {
    fn default() -> StoreLimits {
        StoreLimits {
            max_records: usize::MAX,
            max_bytes: usize::MAX,
        }
    }
}

/// The fixed cost counted per idempotency record (hash table slot, boxes).
pub const RECORD_OVERHEAD_BYTES: usize = 96;
/// The fixed cost counted per reservation (its entry, its expiry entries).
pub const LEASE_OVERHEAD_BYTES: usize = 256;

impl Lease {
    /// True when the lease is ACTIVE and not yet expired at `now_ms`.
    pub fn is_live(&self, now_ms: u64) -> bool {
        self.state == LeaseState::Active && now_ms <= self.expires_at_ms
    }
}

/// An idempotency record, kept compact: a `serde_json::Value` costs a
/// B-tree node (over 600 bytes) per object, so the request is kept as its
/// canonical JSON text (serde_json's `Map` sorts its members, so two equal
/// requests have the same text) and the response as JSON text without
/// `remaining_ttl_ms` (recomputed on a replay). An extension's response is
/// not kept at all: it is rebuilt from `expires_at_ms`.
#[derive(Clone, Debug)]
struct Stored {
    request: Box<[u8]>,
    /// `None`: the extension response `{"status":"ACTIVE","expires_at_ms":..}`.
    response: Option<Box<[u8]>>,
    expires_at_ms: u64,
    /// The `remaining_ttl_ms` originally answered (only
    /// [`ServerBugs::replay_stale_remaining`] reads it).
    remaining_ttl_ms: u64,
}

impl Stored {
    fn response(&self) -> Map<String, Value> {
        match &self.response {
            Some(bytes) => match serde_json::from_slice(bytes) {
                Ok(Value::Object(m)) => m,
                _ => Map::new(),
            },
            None => {
                let mut m = Map::new();
                m.insert("status".into(), "ACTIVE".into());
                m.insert("expires_at_ms".into(), Value::from(self.expires_at_ms));
                m
            }
        }
    }
}

/// The canonical JSON text of a value (members sorted: serde_json's `Map`
/// is a `BTreeMap` here).
fn compact(v: &Value) -> Box<[u8]> {
    serde_json::to_vec(v)
        .expect("JSON serializes")
        .into_boxed_slice()
}

/// A response of the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimResponse {
    /// HTTP status.
    pub status: u16,
    /// Headers (name, value).
    pub headers: Vec<(String, String)>,
    /// JSON body bytes (possibly empty).
    pub body: Vec<u8>,
}

impl SimResponse {
    fn json(status: u16, body: &Value) -> SimResponse {
        SimResponse {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: serde_json::to_vec(body).expect("JSON serializes"),
        }
    }
}

/// The modelled server: reservations, idempotency records and a policy.
#[derive(Clone, Debug, Default)]
pub struct SimServer {
    /// The policy in force (may be changed between calls).
    pub policy: Policy,
    /// Deliberate bugs (none by default; may be changed between calls).
    pub bugs: ServerBugs,
    /// The first server time seen (the origin of a skewed
    /// `remaining_ttl_ms` clock).
    clock_origin_ms: Option<u64>,
    leases: HashMap<String, Lease>,
    create_keys: HashMap<String, (String, Stored)>,
    next_id: u64,
    next_request: u64,
    /// Every expiry ever set, with the lease it belongs to (lazy deletion:
    /// an entry whose lease moved on is dropped when it surfaces).
    expiries: BinaryHeap<Reverse<(u64, String)>>,
    /// Extensions applied, over all leases.
    extensions_total: u64,
    /// Lapses reported by [`SimServer::take_lapses`].
    lapses_total: u64,
    /// `POST /v1/events` idempotency records: key -> (canonical request,
    /// the original 201 response).
    events: HashMap<String, (Box<[u8]>, SimResponse)>,
    /// Events applied.
    events_total: u64,
    /// Commits applied (replays not counted).
    commits_total: u64,
    /// Releases applied (replays not counted).
    releases_total: u64,
    /// Bounds of the idempotency store (default: none).
    pub limits: StoreLimits,
    /// Records and bytes held now (create records of forgotten leases
    /// included, until they are dropped).
    held: Held,
    /// Requests refused because the store was full.
    refused_full: u64,
}

/// How many extension idempotency records a reservation keeps (the most
/// recent ones): a client retries only its latest key, so older records
/// are dropped to bound memory per reservation.
pub const EXTEND_KEYS_KEPT: usize = 4;

/// The largest request body the model accepts (bytes): a conforming
/// request is far smaller (the protocol caps every subject field at 128
/// characters). Larger bodies are refused with 400 `INVALID_REQUEST` and
/// nothing is stored.
pub const MAX_REQUEST_BYTES: usize = 16 * 1024;

/// A reservation that expired while still ACTIVE (reported once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimLapse {
    /// The reservation.
    pub id: String,
    /// Its expiry (server clock).
    pub expires_at_ms: u64,
    /// Extensions it had received.
    pub extensions: u32,
}

/// What a create record counts (see [`StoreLimits`]).
fn create_record(key: &str, id: &str, stored: &Stored) -> Held {
    Held {
        records: 1,
        bytes: RECORD_OVERHEAD_BYTES
            + key.len()
            + id.len()
            + stored.request.len()
            + stored.response.as_ref().map_or(0, |r| r.len()),
    }
}

/// What an extension record counts.
fn extend_record(key: &str, stored: &Stored) -> Held {
    Held {
        records: 1,
        bytes: RECORD_OVERHEAD_BYTES + key.len() + stored.request.len(),
    }
}

fn int(o: &Map<String, Value>, name: &str) -> Option<u64> {
    o.get(name).and_then(Value::as_u64)
}

fn key_ok(k: &str) -> bool {
    let n = k.chars().count();
    (1..=256).contains(&n)
}

impl SimServer {
    /// A server with this policy and no reservations.
    pub fn new(policy: Policy) -> SimServer {
        SimServer {
            policy,
            ..SimServer::default()
        }
    }

    /// The reservation with this id.
    pub fn lease(&self, id: &str) -> Option<&Lease> {
        self.leases.get(id)
    }

    /// Every reservation.
    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        self.leases.values()
    }

    fn error(&mut self, status: u16, code: &str, message: &str) -> SimResponse {
        self.next_request += 1;
        SimResponse::json(
            status,
            &json!({
                "error": code,
                "message": message,
                "request_id": format!("req-{}", self.next_request),
            }),
        )
    }

    /// Number of reservations held.
    pub fn lease_count(&self) -> usize {
        self.leases.len()
    }

    /// Extensions applied over all reservations.
    pub fn extensions_total(&self) -> u64 {
        self.extensions_total
    }

    /// Lapses reported so far by [`SimServer::take_lapses`].
    pub fn lapses_total(&self) -> u64 {
        self.lapses_total
    }

    /// Events applied (`POST /v1/events`, replays not counted).
    pub fn events_total(&self) -> u64 {
        self.events_total
    }

    /// Commits applied (replays and refusals not counted).
    pub fn commits_total(&self) -> u64 {
        self.commits_total
    }

    /// Releases applied (replays and refusals not counted).
    pub fn releases_total(&self) -> u64 {
        self.releases_total
    }

    /// `POST /v1/events` at server time `now_ms` (`createEvent`): post-only
    /// accounting, the expired-commit fallback of a settlement.
    ///
    /// The body is an `EventCreateRequest` (`idempotency_key`, `subject`
    /// with at least one standard field, `action` {kind, name, tags?},
    /// `actual` an Amount, optional `overage_policy`, `metrics`,
    /// `client_time_ms`, `metadata`; nothing else); `header_key`, when
    /// present, must equal the body's key. Answers 201 with an
    /// `EventCreateResponse` (`{"status":"APPLIED","event_id":..}`); a
    /// same-key replay returns the original 201 verbatim, another request
    /// under the same key 409 `IDEMPOTENCY_MISMATCH`; 400
    /// `INVALID_REQUEST` for a body that is not an `EventCreateRequest`. The
    /// model keeps no balances, so an event is counted
    /// ([`SimServer::events_total`]) and never refused for budget.
    pub fn event(&mut self, now_ms: u64, header_key: Option<&str>, body: &[u8]) -> SimResponse {
        let _ = now_ms;
        let (request, key) = match self.parse_request(body, header_key) {
            Ok(r) => r,
            Err(e) => return e,
        };
        let request_text = compact(&request);
        if let Some((stored, response)) = self.events.get(&key) {
            if *stored != request_text {
                return self.error(409, "IDEMPOTENCY_MISMATCH", "same key, different request");
            }
            return response.clone();
        }
        if let Err(why) = check_event(request.as_object().expect("checked object")) {
            return self.error(400, "INVALID_REQUEST", &why);
        }
        let response = SimResponse::json(
            201,
            &json!({"status": "APPLIED", "event_id": format!("evt-{}", self.events_total + 1)}),
        );
        // An event's record counts toward the store's limits like any other
        // (it is kept for good: events have no reservation to go with).
        let record = Held {
            records: 1,
            bytes: RECORD_OVERHEAD_BYTES + key.len() + request_text.len() + response.body.len(),
        };
        if !self.room_for(record, Held::default()) {
            return self.store_full();
        }
        self.held.records += record.records;
        self.held.bytes += record.bytes;
        self.events_total += 1;
        self.events.insert(key, (request_text, response.clone()));
        response
    }

    /// Idempotency records and bytes held now (see [`StoreLimits`]).
    pub fn store_held(&self) -> (usize, usize) {
        (self.held.records, self.held.bytes)
    }

    /// Requests refused so far because the store was full.
    pub fn refused_full(&self) -> u64 {
        self.refused_full
    }

    /// Whether `add` more records and bytes (after `free` freed) stay within
    /// the limits. When not, drops the create records of forgotten leases
    /// first and looks again.
    fn room_for(&mut self, add: Held, free: Held) -> bool {
        let fits = |held: Held, limits: StoreLimits| {
            let records = held.records.saturating_sub(free.records);
            let bytes = held.bytes.saturating_sub(free.bytes);
            records.saturating_add(add.records) <= limits.max_records
                && bytes.saturating_add(add.bytes) <= limits.max_bytes
        };
        if fits(self.held, self.limits) {
            return true;
        }
        self.drop_forgotten_create_records();
        fits(self.held, self.limits)
    }

    /// The 503 of a full store (counted).
    fn store_full(&mut self) -> SimResponse {
        self.refused_full += 1;
        let limits = self.limits;
        self.error(
            503,
            "INTERNAL_ERROR",
            &format!(
                "server busy: the idempotency store is full (at most {} records, {} bytes); retry later",
                limits.max_records, limits.max_bytes
            ),
        )
    }

    /// Drops the create records whose reservation was forgotten.
    fn drop_forgotten_create_records(&mut self) {
        let leases = &self.leases;
        let held = &mut self.held;
        self.create_keys.retain(|key, (id, stored)| {
            let keep = leases.contains_key(id);
            if !keep {
                let h = create_record(key, id, stored);
                held.records -= h.records;
                held.bytes -= h.bytes;
            }
            keep
        });
    }

    /// Reservations that lapsed (expired while ACTIVE, `now_ms >
    /// expires_at_ms`) and were not reported yet. Driven by a heap of
    /// expiries: the cost is `O(log n)` per expiry that passed, never a
    /// scan of every reservation. A lapsed reservation (and its
    /// idempotency records) is then forgotten after `retention_ms`
    /// further milliseconds (an extend of it is then `404 NOT_FOUND`);
    /// finalized ones are forgotten `retention_ms` after their expiry.
    pub fn take_lapses(&mut self, now_ms: u64, retention_ms: u64) -> Vec<SimLapse> {
        let mut out = Vec::new();
        while let Some(Reverse((t, _))) = self.expiries.peek() {
            if *t >= now_ms {
                break;
            }
            let Some(Reverse((t, id))) = self.expiries.pop() else {
                break;
            };
            let Some(lease) = self.leases.get_mut(&id) else {
                continue;
            };
            if lease.expires_at_ms != t {
                // A retention entry (pushed as expiry + retention), or an
                // expiry that an extension moved on.
                if t.checked_sub(retention_ms) == Some(lease.expires_at_ms) && retention_ms > 0 {
                    let lease = self.leases.remove(&id).expect("present");
                    self.held.records -= lease.held.records;
                    self.held.bytes -= lease.held.bytes;
                }
                continue;
            }
            if lease.state == LeaseState::Active && !lease.lapse_reported {
                lease.lapse_reported = true;
                self.lapses_total += 1;
                out.push(SimLapse {
                    id: id.clone(),
                    expires_at_ms: t,
                    extensions: lease.extensions,
                });
            }
            if retention_ms > 0 {
                self.expiries
                    .push(Reverse((t.saturating_add(retention_ms), id)));
            }
        }
        if retention_ms > 0 && out.is_empty() {
            let leases = &self.leases;
            if self.create_keys.len() > 2 * leases.len() + 1024 {
                self.drop_forgotten_create_records();
            }
        }
        out
    }

    fn parse_request(
        &mut self,
        body: &[u8],
        header_key: Option<&str>,
    ) -> Result<(Value, String), SimResponse> {
        if body.len() > MAX_REQUEST_BYTES {
            return Err(self.error(
                400,
                "INVALID_REQUEST",
                &format!("request body exceeds {MAX_REQUEST_BYTES} bytes"),
            ));
        }
        let v: Value = match serde_json::from_slice(body) {
            Ok(v @ Value::Object(_)) => v,
            _ => return Err(self.error(400, "INVALID_REQUEST", "body must be a JSON object")),
        };
        let key = match v.get("idempotency_key").and_then(Value::as_str) {
            Some(k) if key_ok(k) => k.to_owned(),
            _ => {
                return Err(self.error(
                    400,
                    "INVALID_REQUEST",
                    "idempotency_key must be a string of 1..=256 characters",
                ));
            }
        };
        if let Some(h) = header_key {
            if h != key {
                return Err(self.error(
                    400,
                    "INVALID_REQUEST",
                    "X-Idempotency-Key must match the body idempotency_key",
                ));
            }
        }
        Ok((v, key))
    }

    /// The server time `remaining_ttl_ms` is computed from: `now_ms`, or
    /// the skewed clock of [`ServerBugs::remaining_clock_permille`].
    fn remaining_clock(&mut self, now_ms: u64) -> u64 {
        let origin = *self.clock_origin_ms.get_or_insert(now_ms);
        match self.bugs.remaining_clock_permille {
            Some(p) if now_ms > origin => {
                let skewed = u128::from(now_ms - origin) * u128::from(p) / 1000;
                origin.saturating_add(u64::try_from(skewed).unwrap_or(u64::MAX))
            }
            _ => now_ms,
        }
    }

    fn remaining_value(&mut self, expires_at_ms: u64, live: bool, now_ms: u64) -> u64 {
        let clock = self.remaining_clock(now_ms);
        if live {
            expires_at_ms.saturating_sub(clock)
        } else {
            0
        }
    }

    fn remaining_field(&self, response: &mut Map<String, Value>, remaining: u64) {
        if self.policy.omit_remaining {
            response.remove("remaining_ttl_ms");
        } else {
            response.insert("remaining_ttl_ms".into(), Value::from(remaining));
        }
    }

    /// The answer to a same-key replay of a create or extend whose record
    /// is `stored`, for the reservation `id`.
    fn replay(&mut self, stored: &Stored, id: &str, now_ms: u64) -> SimResponse {
        let lease = self.leases.get(id);
        let live = lease.is_some_and(|l| l.is_live(now_ms));
        let current = lease.map(|l| l.expires_at_ms);
        let mut response = stored.response();
        let mut remaining = self.remaining_value(stored.expires_at_ms, live, now_ms);
        if self.bugs.replay_stale_remaining {
            remaining = stored.remaining_ttl_ms;
        }
        if self.bugs.replay_changed_body {
            if let Some(e) = current {
                response.insert("expires_at_ms".into(), Value::from(e));
            }
        }
        self.remaining_field(&mut response, remaining);
        SimResponse::json(200, &Value::Object(response))
    }

    /// `POST /v1/reservations` at server time `now_ms`.
    pub fn create(&mut self, now_ms: u64, header_key: Option<&str>, body: &[u8]) -> SimResponse {
        let (request, key) = match self.parse_request(body, header_key) {
            Ok(r) => r,
            Err(e) => return e,
        };
        let request_text = compact(&request);
        if let Some((id, stored)) = self.create_keys.get(&key).cloned() {
            if stored.request != request_text && !self.bugs.no_idempotency_mismatch {
                return self.error(409, "IDEMPOTENCY_MISMATCH", "same key, different request");
            }
            return self.replay(&stored, &id, now_ms);
        }
        let o = request.as_object().expect("checked object");
        for required in ["subject", "action", "estimate"] {
            if !o.get(required).is_some_and(Value::is_object) {
                return self.error(400, "INVALID_REQUEST", &format!("{required} is required"));
            }
        }
        let ttl = match o.get("ttl_ms") {
            None => 60_000,
            Some(_) => match int(o, "ttl_ms") {
                Some(t) if (1_000..=86_400_000).contains(&t) => t,
                _ => return self.error(400, "INVALID_REQUEST", "ttl_ms must be 1000..=86400000"),
            },
        };
        let grace_ms = match o.get("grace_period_ms") {
            None => self.policy.grace_ms,
            Some(_) => match int(o, "grace_period_ms") {
                Some(g) if g <= 60_000 => g,
                _ => {
                    return self.error(400, "INVALID_REQUEST", "grace_period_ms must be 0..=60000");
                }
            },
        };
        let granted = self
            .policy
            .initial_ttl_cap_ms
            .map_or(ttl, |cap| ttl.min(cap));
        self.next_id += 1;
        let id = format!("rsv-{}", self.next_id);
        let expires_at_ms = now_ms.saturating_add(granted);
        let remaining = self.remaining_value(expires_at_ms, true, now_ms);
        let estimate = o.get("estimate").cloned().unwrap_or(Value::Null);
        let overage_reject = o.get("overage_policy").and_then(Value::as_str) == Some("REJECT");
        let mut response = Map::new();
        response.insert("decision".into(), "ALLOW".into());
        response.insert("reservation_id".into(), Value::from(id.clone()));
        if estimate.is_object() {
            response.insert("reserved".into(), estimate.clone());
        }
        response.insert("expires_at_ms".into(), Value::from(expires_at_ms));
        response.insert("affected_scopes".into(), json!(["tenant:sim"]));
        let stored = Stored {
            request: request_text,
            response: Some(compact(&Value::Object(response.clone()))),
            expires_at_ms,
            remaining_ttl_ms: remaining,
        };
        let reserved = compact(&estimate);
        let record = create_record(&key, &id, &stored);
        let lease_held = Held {
            records: 0,
            bytes: LEASE_OVERHEAD_BYTES + 2 * id.len() + reserved.len(),
        };
        let add = Held {
            records: record.records,
            bytes: record.bytes + lease_held.bytes,
        };
        if !self.room_for(add, Held::default()) {
            self.next_id -= 1;
            return self.store_full();
        }
        self.held.records += add.records;
        self.held.bytes += add.bytes;
        self.create_keys.insert(key, (id.clone(), stored));
        self.expiries.push(Reverse((expires_at_ms, id.clone())));
        self.leases.insert(
            id.clone(),
            Lease {
                id,
                expires_at_ms,
                extensions: 0,
                state: LeaseState::Active,
                created_at_ms: now_ms,
                grace_ms,
                extend_keys: VecDeque::with_capacity(EXTEND_KEYS_KEPT),
                lapse_reported: false,
                reserved,
                overage_reject,
                commit_keys: HashMap::new(),
                release_keys: HashMap::new(),
                held: lease_held,
            },
        );
        self.remaining_field(&mut response, remaining);
        SimResponse::json(200, &Value::Object(response))
    }

    /// `POST /v1/reservations/{id}/extend` at server time `now_ms`.
    pub fn extend(
        &mut self,
        now_ms: u64,
        id: &str,
        header_key: Option<&str>,
        body: &[u8],
    ) -> SimResponse {
        let (request, key) = match self.parse_request(body, header_key) {
            Ok(r) => r,
            Err(e) => return e,
        };
        let Some(lease) = self.leases.get(id) else {
            return self.error(404, "NOT_FOUND", "reservation not found");
        };
        let request_text = compact(&request);
        if let Some(stored) = lease
            .extend_keys
            .iter()
            .find(|(k, _)| **k == *key)
            .map(|(_, s)| s.clone())
        {
            if stored.request != request_text && !self.bugs.no_idempotency_mismatch {
                return self.error(409, "IDEMPOTENCY_MISMATCH", "same key, different request");
            }
            return self.replay(&stored, id, now_ms);
        }
        let extend_by = match request.as_object().and_then(|o| int(o, "extend_by_ms")) {
            Some(e) if (1..=86_400_000).contains(&e) => e,
            _ => return self.error(400, "INVALID_REQUEST", "extend_by_ms must be 1..=86400000"),
        };
        match lease.state {
            LeaseState::Active => {}
            LeaseState::Committed | LeaseState::Released => {
                return self.error(409, "RESERVATION_FINALIZED", "reservation is finalized");
            }
        }
        if now_ms > lease.expires_at_ms {
            return self.error(410, "RESERVATION_EXPIRED", "reservation expired");
        }
        if self
            .policy
            .max_extensions
            .is_some_and(|m| lease.extensions >= m)
        {
            return self.error(409, "MAX_EXTENSIONS_EXCEEDED", "extension limit reached");
        }
        let grant = self
            .policy
            .grant_cap_ms
            .map_or(extend_by, |c| extend_by.min(c));
        let mut expires = lease.expires_at_ms.saturating_add(grant);
        if let Some(l) = self.policy.max_lead_ms {
            expires = expires
                .min(now_ms.saturating_add(l))
                .max(lease.expires_at_ms);
        }
        let mut response = Map::new();
        response.insert("status".into(), "ACTIVE".into());
        response.insert("expires_at_ms".into(), Value::from(expires));
        let free = lease
            .extend_keys
            .front()
            .filter(|_| lease.extend_keys.len() >= EXTEND_KEYS_KEPT)
            .map_or(Held::default(), |(k, s)| extend_record(k, s));
        let remaining = self.remaining_value(expires, true, now_ms);
        let stored = Stored {
            request: request_text,
            response: None,
            expires_at_ms: expires,
            remaining_ttl_ms: remaining,
        };
        let add = extend_record(&key, &stored);
        if !self.room_for(add, free) {
            return self.store_full();
        }
        let lease = self.leases.get_mut(id).expect("looked up above");
        lease.held.records = lease.held.records + add.records - free.records;
        lease.held.bytes = lease.held.bytes + add.bytes - free.bytes;
        self.held.records = self.held.records + add.records - free.records;
        self.held.bytes = self.held.bytes + add.bytes - free.bytes;
        if lease.expires_at_ms != expires {
            self.expiries.push(Reverse((expires, id.to_owned())));
        }
        lease.expires_at_ms = expires;
        lease.extensions += 1;
        self.extensions_total += 1;
        if lease.extend_keys.len() >= EXTEND_KEYS_KEPT {
            lease.extend_keys.pop_front();
        }
        lease.extend_keys.push_back((key.into_boxed_str(), stored));
        self.remaining_field(&mut response, remaining);
        SimResponse::json(200, &Value::Object(response))
    }

    /// `POST /v1/reservations/{id}/commit` at server time `now_ms`
    /// (`commitReservation`).
    ///
    /// The body is a `CommitRequest` (`idempotency_key`, `actual` an
    /// `Amount`, optional `metrics` and `metadata` objects, nothing else);
    /// `header_key` is the `X-Idempotency-Key` header, which must equal the
    /// body key when present. Answers 200 with a `CommitResponse`
    /// (`charged` = `actual`; `released` = reserved − actual when actual is
    /// smaller), a same-key replay of it verbatim, or an error body: 400
    /// `INVALID_REQUEST` / `UNIT_MISMATCH`, 404 `NOT_FOUND`, 409
    /// `IDEMPOTENCY_MISMATCH` / `RESERVATION_FINALIZED` / `BUDGET_EXCEEDED`
    /// (`overage_policy: REJECT` and actual > reserved), 410
    /// `RESERVATION_EXPIRED`.
    pub fn commit(
        &mut self,
        now_ms: u64,
        id: &str,
        header_key: Option<&str>,
        body: &[u8],
    ) -> SimResponse {
        self.finalize(now_ms, id, header_key, body, Finalize::Commit)
    }

    /// `POST /v1/reservations/{id}/release` at server time `now_ms`
    /// (`releaseReservation`).
    ///
    /// The body is a `ReleaseRequest` (`idempotency_key`, optional `reason`
    /// of at most 256 characters, nothing else); `header_key` as for
    /// [`SimServer::commit`]. Answers 200 with a `ReleaseResponse`
    /// (`released` = the reserved amount), a same-key replay of it verbatim,
    /// or an error body: 400 `INVALID_REQUEST`, 404 `NOT_FOUND`, 409
    /// `IDEMPOTENCY_MISMATCH` / `RESERVATION_FINALIZED`, 410
    /// `RESERVATION_EXPIRED`.
    pub fn release(
        &mut self,
        now_ms: u64,
        id: &str,
        header_key: Option<&str>,
        body: &[u8],
    ) -> SimResponse {
        self.finalize(now_ms, id, header_key, body, Finalize::Release)
    }

    fn finalize(
        &mut self,
        now_ms: u64,
        id: &str,
        header_key: Option<&str>,
        body: &[u8],
        which: Finalize,
    ) -> SimResponse {
        let (request, key) = match self.parse_request(body, header_key) {
            Ok(r) => r,
            Err(e) => return e,
        };
        let Some(lease) = self.leases.get(id) else {
            return self.error(404, "NOT_FOUND", "reservation not found");
        };
        let keys = match which {
            Finalize::Commit => &lease.commit_keys,
            Finalize::Release => &lease.release_keys,
        };
        if let Some((stored_request, stored)) = keys.get(&key) {
            if *stored_request != request {
                return self.error(409, "IDEMPOTENCY_MISMATCH", "same key, different request");
            }
            return stored.clone();
        }
        let o = request.as_object().expect("checked object");
        if let Err(why) = which.check_fields(o) {
            return self.error(400, "INVALID_REQUEST", &why);
        }
        match lease.state {
            LeaseState::Active => {}
            LeaseState::Committed | LeaseState::Released => {
                return self.error(409, "RESERVATION_FINALIZED", "reservation is finalized");
            }
        }
        // Commit and release are accepted through expires_at_ms +
        // grace_period_ms (ERROR SEMANTICS).
        if now_ms > lease.expires_at_ms.saturating_add(lease.grace_ms) {
            return self.error(410, "RESERVATION_EXPIRED", "reservation expired");
        }
        let reserved: Value = serde_json::from_slice(&lease.reserved).unwrap_or(Value::Null);
        let overage_reject = lease.overage_reject;
        let mut response = Map::new();
        match which {
            Finalize::Commit => {
                let actual = o.get("actual").cloned().unwrap_or(Value::Null);
                let (unit, amount) = amount_of(&actual).expect("checked by check_fields");
                let unit = unit.to_owned();
                let reserved_amount = amount_of(&reserved);
                if reserved_amount.is_some_and(|(u, _)| u != unit) {
                    return self.error(
                        400,
                        "UNIT_MISMATCH",
                        "actual.unit differs from the reservation's estimate.unit",
                    );
                }
                if overage_reject && reserved_amount.is_some_and(|(_, r)| amount > r) {
                    return self.error(
                        409,
                        "BUDGET_EXCEEDED",
                        "actual exceeds reserved under overage_policy REJECT",
                    );
                }
                response.insert("status".into(), "COMMITTED".into());
                response.insert("charged".into(), actual);
                if let Some((_, r)) = reserved_amount.filter(|(_, r)| amount < *r) {
                    response.insert(
                        "released".into(),
                        json!({"unit": unit, "amount": r - amount}),
                    );
                }
            }
            Finalize::Release => {
                response.insert("status".into(), "RELEASED".into());
                response.insert("released".into(), reserved);
            }
        }
        let r = SimResponse::json(200, &Value::Object(response));
        let add = Held {
            records: 1,
            bytes: RECORD_OVERHEAD_BYTES + key.len() + compact(&request).len() + r.body.len(),
        };
        if !self.room_for(add, Held::default()) {
            return self.store_full();
        }
        self.held.records += add.records;
        self.held.bytes += add.bytes;
        let lease = self.leases.get_mut(id).expect("looked up above");
        lease.held.records += add.records;
        lease.held.bytes += add.bytes;
        match which {
            Finalize::Commit => {
                self.commits_total += 1;
                lease.state = LeaseState::Committed;
                lease.commit_keys.insert(key, (request, r.clone()));
            }
            Finalize::Release => {
                self.releases_total += 1;
                lease.state = LeaseState::Released;
                lease.release_keys.insert(key, (request, r.clone()));
            }
        }
        r
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Finalize {
    Commit,
    Release,
}

impl Finalize {
    /// Checks a commit or release body against `CommitRequest` /
    /// `ReleaseRequest` (both `additionalProperties: false`).
    fn check_fields(self, o: &Map<String, Value>) -> Result<(), String> {
        let allowed: &[&str] = match self {
            Finalize::Commit => &["idempotency_key", "actual", "metrics", "metadata"],
            Finalize::Release => &["idempotency_key", "reason"],
        };
        if let Some(extra) = o.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(format!("unknown field {extra}"));
        }
        match self {
            Finalize::Commit => {
                if amount_of(o.get("actual").unwrap_or(&Value::Null)).is_none() {
                    return Err("actual must be an Amount {unit, amount >= 0}".into());
                }
                for name in ["metrics", "metadata"] {
                    if o.get(name).is_some_and(|v| !v.is_object()) {
                        return Err(format!("{name} must be an object"));
                    }
                }
            }
            Finalize::Release => match o.get("reason") {
                None => {}
                Some(Value::String(r)) if r.chars().count() <= 256 => {}
                Some(_) => return Err("reason must be a string of at most 256 characters".into()),
            },
        }
        Ok(())
    }
}

/// Checks an `EventCreateRequest` (`additionalProperties: false`).
fn check_event(o: &Map<String, Value>) -> Result<(), String> {
    const ALLOWED: [&str; 8] = [
        "idempotency_key",
        "subject",
        "action",
        "actual",
        "overage_policy",
        "metrics",
        "client_time_ms",
        "metadata",
    ];
    const STANDARD: [&str; 6] = ["tenant", "workspace", "app", "workflow", "agent", "toolset"];
    if let Some(extra) = o.keys().find(|k| !ALLOWED.contains(&k.as_str())) {
        return Err(format!("unknown field {extra}"));
    }
    let subject = o
        .get("subject")
        .and_then(Value::as_object)
        .ok_or("subject is required")?;
    for (k, v) in subject {
        match k.as_str() {
            "dimensions" if v.is_object() => {}
            k if STANDARD.contains(&k) && v.as_str().is_some_and(|s| s.chars().count() <= 128) => {}
            _ => return Err(format!("subject.{k} is invalid")),
        }
    }
    if !STANDARD.iter().any(|f| subject.contains_key(*f)) {
        return Err("subject needs one of tenant, workspace, app, workflow, agent, toolset".into());
    }
    let action = o
        .get("action")
        .and_then(Value::as_object)
        .ok_or("action is required")?;
    let text = |name: &str, max: usize| {
        action
            .get(name)
            .and_then(Value::as_str)
            .is_some_and(|s| s.chars().count() <= max)
    };
    if !text("kind", 64)
        || !text("name", 256)
        || action
            .keys()
            .any(|k| !["kind", "name", "tags"].contains(&k.as_str()))
    {
        return Err("action must be {kind, name, tags?}".into());
    }
    if amount_of(o.get("actual").unwrap_or(&Value::Null)).is_none() {
        return Err("actual must be an Amount {unit, amount >= 0}".into());
    }
    if let Some(p) = o.get("overage_policy") {
        if !matches!(
            p.as_str(),
            Some("REJECT" | "ALLOW_IF_AVAILABLE" | "ALLOW_WITH_OVERDRAFT")
        ) {
            return Err("overage_policy is not a CommitOveragePolicy".into());
        }
    }
    for name in ["metrics", "metadata"] {
        if o.get(name).is_some_and(|v| !v.is_object()) {
            return Err(format!("{name} must be an object"));
        }
    }
    if o.get("client_time_ms")
        .is_some_and(|v| v.as_u64().is_none_or(|t| t > i64::MAX as u64))
    {
        return Err("client_time_ms must be an integer 0..=2^63-1".into());
    }
    Ok(())
}

/// The protocol's units (`UnitEnum`).
const UNITS: [&str; 4] = ["USD_MICROCENTS", "TOKENS", "CREDITS", "RISK_POINTS"];

/// `(unit, amount)` of a valid `Amount` object (exactly `unit` from
/// [`UNITS`] and an integer `amount` in `0..=i64::MAX`).
fn amount_of(v: &Value) -> Option<(&str, u64)> {
    let o = v.as_object()?;
    if o.len() != 2 {
        return None;
    }
    let unit = o.get("unit")?.as_str().filter(|u| UNITS.contains(u))?;
    let amount = o
        .get("amount")?
        .as_u64()
        .filter(|a| *a <= i64::MAX as u64)?;
    Some((unit, amount))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create_body(key: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "idempotency_key": key, "ttl_ms": 60000,
            "subject": {"tenant": "t"}, "action": {"kind": "k", "name": "n"},
            "estimate": {"unit": "TOKENS", "amount": 1}
        }))
        .unwrap()
    }

    fn extend_body(key: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({"idempotency_key": key, "extend_by_ms": 60000})).unwrap()
    }

    fn body(r: &SimResponse) -> Value {
        serde_json::from_slice(&r.body).unwrap()
    }

    #[test]
    fn regimes_and_replays() {
        let mut s = SimServer::new(Policy {
            max_lead_ms: Some(60_000),
            ..Policy::default()
        });
        let r = s.create(1_000, None, &create_body("c1"));
        assert_eq!(body(&r)["remaining_ttl_ms"], 60_000);
        let id = body(&r)["reservation_id"].as_str().unwrap().to_owned();
        // Max lead: an immediate extension grants nothing.
        let r = s.extend(1_000, &id, Some("e1"), &extend_body("e1"));
        assert_eq!(body(&r)["expires_at_ms"], 61_000);
        let r = s.extend(31_000, &id, None, &extend_body("e2"));
        assert_eq!(body(&r)["expires_at_ms"], 91_000);
        // Replay: stored expiry, recomputed remaining.
        let r = s.extend(41_000, &id, None, &extend_body("e2"));
        assert_eq!(body(&r)["expires_at_ms"], 91_000);
        assert_eq!(body(&r)["remaining_ttl_ms"], 50_000);
        // Header/body mismatch.
        assert_eq!(
            s.extend(41_000, &id, Some("x"), &extend_body("e3")).status,
            400
        );
        // Expiry.
        assert_eq!(s.extend(91_001, &id, None, &extend_body("e4")).status, 410);
        let r = s.extend(91_001, &id, None, &extend_body("e2"));
        assert_eq!(body(&r)["remaining_ttl_ms"], 0);
        assert_eq!(s.extend(0, "nope", None, &extend_body("e5")).status, 404);
    }

    #[test]
    fn server_bugs_break_exactly_their_rule() {
        let mut s = SimServer::new(Policy::default());
        let id = body(&s.create(1_000, None, &create_body("c1")))["reservation_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let e1 = body(&s.extend(2_000, &id, None, &extend_body("e1")));
        assert_eq!(
            (
                e1["expires_at_ms"].as_u64(),
                e1["remaining_ttl_ms"].as_u64()
            ),
            (Some(121_000), Some(119_000))
        );
        let _ = s.extend(3_000, &id, None, &extend_body("e2"));
        // Correct: the original expiry, remaining recomputed, 409 on a mismatch.
        let r = body(&s.extend(5_000, &id, None, &extend_body("e1")));
        assert_eq!(
            (r["expires_at_ms"].as_u64(), r["remaining_ttl_ms"].as_u64()),
            (Some(121_000), Some(116_000))
        );
        let other =
            serde_json::to_vec(&json!({"idempotency_key": "e1", "extend_by_ms": 1})).unwrap();
        assert_eq!(s.extend(5_000, &id, None, &other).status, 409);
        // Stale remaining.
        s.bugs.replay_stale_remaining = true;
        let r = body(&s.extend(5_000, &id, None, &extend_body("e1")));
        assert_eq!(
            (r["expires_at_ms"].as_u64(), r["remaining_ttl_ms"].as_u64()),
            (Some(121_000), Some(119_000))
        );
        let r = body(&s.create(5_000, None, &create_body("c1")));
        assert_eq!(r["remaining_ttl_ms"].as_u64(), Some(60_000));
        s.bugs = ServerBugs::default();
        // Changed body: the current expiry.
        s.bugs.replay_changed_body = true;
        let r = body(&s.extend(5_000, &id, None, &extend_body("e1")));
        assert_eq!(
            (r["expires_at_ms"].as_u64(), r["remaining_ttl_ms"].as_u64()),
            (Some(181_000), Some(116_000))
        );
        s.bugs = ServerBugs::default();
        // No 409: the mismatched request is answered as a replay.
        s.bugs.no_idempotency_mismatch = true;
        let r = s.extend(5_000, &id, None, &other);
        assert_eq!(r.status, 200);
        assert_eq!(body(&r)["expires_at_ms"].as_u64(), Some(121_000));
        let mut c = serde_json::from_slice::<Value>(&create_body("c1")).unwrap();
        c["ttl_ms"] = json!(2_000);
        let r = s.create(5_000, None, &serde_json::to_vec(&c).unwrap());
        assert_eq!(body(&r)["reservation_id"].as_str(), Some(id.as_str()));
        s.bugs = ServerBugs::default();
        // A clock 50 % fast from the first request (1_000): at 5_000 it reads 7_000.
        s.bugs.remaining_clock_permille = Some(1_500);
        let r = body(&s.extend(5_000, &id, None, &extend_body("e3")));
        assert_eq!(
            (r["expires_at_ms"].as_u64(), r["remaining_ttl_ms"].as_u64()),
            (Some(241_000), Some(234_000))
        );
    }

    #[test]
    fn lapses_come_from_the_expiry_heap_once_and_are_then_forgotten() {
        let mut s = SimServer::new(Policy::default());
        let a = body(&s.create(0, None, &create_body("a")))["reservation_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let b = body(&s.create(0, None, &create_body("b")))["reservation_id"]
            .as_str()
            .unwrap()
            .to_owned();
        // b is extended (its first expiry entry goes stale), a is not.
        assert_eq!(s.extend(30_000, &b, None, &extend_body("e1")).status, 200);
        assert!(s.take_lapses(60_000, 1_000).is_empty()); // alive at its expiry
        let l = s.take_lapses(60_001, 1_000);
        assert_eq!(l.len(), 1);
        assert_eq!((l[0].id.as_str(), l[0].expires_at_ms), (a.as_str(), 60_000));
        assert!(s.take_lapses(60_500, 1_000).is_empty()); // reported once
        assert_eq!(s.lapses_total(), 1);
        assert_eq!(s.extensions_total(), 1);
        // After the retention, a is forgotten; b lives on.
        assert!(s.take_lapses(61_001, 1_000).is_empty());
        assert!(s.lease(&a).is_none());
        assert_eq!(s.extend(61_001, &a, None, &extend_body("e2")).status, 404);
        assert_eq!(s.lease_count(), 1);
        assert_eq!(s.take_lapses(120_001, 1_000).len(), 1);
    }

    #[test]
    fn the_store_accounting_returns_to_zero_and_the_limits_hold() {
        let mut s = SimServer::new(Policy::default());
        s.limits.max_records = 7;
        let a = body(&s.create(0, None, &create_body("a")))["reservation_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let after_create = s.store_held();
        assert_eq!(after_create.0, 1);
        for k in ["e1", "e2", "e3", "e4", "e5", "e6"] {
            assert_eq!(s.extend(1_000, &a, None, &extend_body(k)).status, 200);
        }
        // 4 extension records kept: 5 records.
        assert_eq!(s.store_held().0, 5);
        let b = body(&s.create(0, None, &create_body("b")))["reservation_id"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(s.store_held().0, 6);
        assert_eq!(s.extend(1_000, &b, None, &extend_body("f1")).status, 200);
        // Full: a new create is refused and changes nothing.
        let before = s.store_held();
        let r = s.create(1_000, None, &create_body("c"));
        assert_eq!(
            (r.status, body(&r)["error"].as_str()),
            (503, Some("INTERNAL_ERROR"))
        );
        assert_eq!(s.store_held(), before);
        assert_eq!((s.lease_count(), s.refused_full()), (2, 1));
        // A replay still works; a release would add a record: refused.
        assert_eq!(s.create(1_000, None, &create_body("a")).status, 200);
        let rel = br#"{"idempotency_key":"r1"}"#;
        assert_eq!(s.release(1_000, &b, None, rel).status, 503);
        // Once both are forgotten (retention after expiry), their records go.
        let far = 10 * 86_400_000;
        s.take_lapses(far, 1_000);
        s.take_lapses(far + 2_000, 1_000);
        assert_eq!(s.lease_count(), 0);
        // The create records of forgotten leases go when room is needed.
        assert_eq!(s.store_held().0, 2);
        s.limits.max_records = 1;
        let r = s.create(far, None, &create_body("c"));
        assert_eq!(r.status, 200);
        // (The same create but for the longer expiry in its response.)
        let held = s.store_held();
        assert_eq!(held.0, 1);
        assert_eq!(held.1, after_create.1 + "864000000".len() - "60000".len());
        // By bytes: nothing more fits.
        s.limits.max_records = usize::MAX;
        s.limits.max_bytes = held.1 + 100;
        assert_eq!(s.create(far, None, &create_body("d")).status, 503);
    }

    #[test]
    fn extension_records_are_bounded_and_big_requests_refused() {
        let mut s = SimServer::new(Policy::default());
        let id = body(&s.create(0, None, &create_body("c")))["reservation_id"]
            .as_str()
            .unwrap()
            .to_owned();
        for i in 0..100 {
            let k = format!("e{i}");
            assert_eq!(s.extend(1, &id, None, &extend_body(&k)).status, 200);
        }
        assert_eq!(s.lease(&id).unwrap().extend_keys.len(), EXTEND_KEYS_KEPT);
        // The latest key still replays (no new extension).
        let before = s.lease(&id).unwrap().expires_at_ms;
        assert_eq!(s.extend(2, &id, None, &extend_body("e99")).status, 200);
        assert_eq!(s.lease(&id).unwrap().expires_at_ms, before);
        let mut req: Value = serde_json::from_slice(&create_body("big")).unwrap();
        req["subject"]["tenant"] = Value::from("x".repeat(MAX_REQUEST_BYTES));
        let r = s.create(3, None, &serde_json::to_vec(&req).unwrap());
        assert_eq!(r.status, 400);
        assert_eq!(s.lease_count(), 1);
    }

    fn created(s: &mut SimServer, key: &str, extra: Value) -> String {
        let mut req: Value = serde_json::from_slice(&create_body(key)).unwrap();
        req["estimate"] = json!({"unit": "TOKENS", "amount": 10});
        for (k, v) in extra.as_object().unwrap() {
            req[k] = v.clone();
        }
        let r = s.create(1_000, None, &serde_json::to_vec(&req).unwrap());
        assert_eq!(r.status, 200);
        body(&r)["reservation_id"].as_str().unwrap().to_owned()
    }

    fn commit_body(key: &str, amount: u64) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "idempotency_key": key, "actual": {"unit": "TOKENS", "amount": amount}
        }))
        .unwrap()
    }

    fn error_code(r: &SimResponse) -> (u16, String) {
        let b = body(r);
        assert!(b["request_id"].is_string() && b["message"].is_string());
        (r.status, b["error"].as_str().unwrap().to_owned())
    }

    #[test]
    fn commit_answers_a_commit_response_and_replays_it() {
        let mut s = SimServer::new(Policy::default());
        let id = created(&mut s, "c1", json!({}));
        let r = s.commit(2_000, &id, Some("k1"), &commit_body("k1", 4));
        assert_eq!(r.status, 200);
        assert_eq!(
            body(&r),
            json!({"status": "COMMITTED", "charged": {"unit": "TOKENS", "amount": 4},
                   "released": {"unit": "TOKENS", "amount": 6}})
        );
        assert_eq!(s.lease(&id).unwrap().state, LeaseState::Committed);
        // Same key, same body, even after expiry: the original, verbatim.
        assert_eq!(s.commit(99_000_000, &id, None, &commit_body("k1", 4)), r);
        // Same key, different body.
        let e = s.commit(2_000, &id, None, &commit_body("k1", 5));
        assert_eq!(error_code(&e), (409, "IDEMPOTENCY_MISMATCH".into()));
        // A new key on a finalized reservation, on either endpoint.
        let e = s.commit(2_000, &id, None, &commit_body("k2", 4));
        assert_eq!(error_code(&e), (409, "RESERVATION_FINALIZED".into()));
        let e = s.release(2_000, &id, None, br#"{"idempotency_key":"k1"}"#);
        assert_eq!(error_code(&e), (409, "RESERVATION_FINALIZED".into()));
        // Extends see it finalized too.
        let e = s.extend(2_000, &id, None, &extend_body("e1"));
        assert_eq!(error_code(&e), (409, "RESERVATION_FINALIZED".into()));
        // Charged in full when actual >= reserved: no `released`.
        let id2 = created(&mut s, "c2", json!({}));
        let r = s.commit(2_000, &id2, None, &commit_body("k1", 12));
        assert_eq!(
            body(&r),
            json!({"status": "COMMITTED", "charged": {"unit": "TOKENS", "amount": 12}})
        );
    }

    #[test]
    fn release_answers_a_release_response_and_replays_it() {
        let mut s = SimServer::new(Policy::default());
        let id = created(&mut s, "c1", json!({}));
        let rel = br#"{"idempotency_key":"r1","reason":"done"}"#;
        let r = s.release(2_000, &id, Some("r1"), rel);
        assert_eq!(r.status, 200);
        assert_eq!(
            body(&r),
            json!({"status": "RELEASED", "released": {"unit": "TOKENS", "amount": 10}})
        );
        assert_eq!(s.lease(&id).unwrap().state, LeaseState::Released);
        assert_eq!(s.release(3_000, &id, None, rel), r);
        let e = s.release(3_000, &id, None, br#"{"idempotency_key":"r1"}"#);
        assert_eq!(error_code(&e), (409, "IDEMPOTENCY_MISMATCH".into()));
        let e = s.commit(3_000, &id, None, &commit_body("r1", 1));
        assert_eq!(error_code(&e), (409, "RESERVATION_FINALIZED".into()));
    }

    #[test]
    fn finalize_errors() {
        let mut s = SimServer::new(Policy::default());
        let id = created(&mut s, "c1", json!({}));
        let bad = |s: &mut SimServer, commit: bool, header: Option<&str>, b: &[u8]| {
            let r = if commit {
                s.commit(2_000, &id, header, b)
            } else {
                s.release(2_000, &id, header, b)
            };
            error_code(&r)
        };
        let invalid = (400, "INVALID_REQUEST".to_owned());
        for b in [
            &b"not json"[..],
            b"[]",
            br#"{}"#,
            br#"{"idempotency_key":""}"#,
            br#"{"idempotency_key":"k"}"#,
            br#"{"idempotency_key":"k","actual":{"unit":"TOKENS"}}"#,
            br#"{"idempotency_key":"k","actual":{"unit":"TOKENS","amount":-1}}"#,
            br#"{"idempotency_key":"k","actual":{"unit":"GOLD","amount":1}}"#,
            br#"{"idempotency_key":"k","actual":{"unit":"TOKENS","amount":1,"x":1}}"#,
            br#"{"idempotency_key":"k","actual":{"unit":"TOKENS","amount":1},"metrics":1}"#,
            br#"{"idempotency_key":"k","actual":{"unit":"TOKENS","amount":1},"extra":1}"#,
        ] {
            assert_eq!(
                bad(&mut s, true, None, b),
                invalid,
                "{}",
                String::from_utf8_lossy(b)
            );
        }
        for b in [
            &br#"{"idempotency_key":"k","reason":7}"#[..],
            br#"{"idempotency_key":"k","extra":true}"#,
        ] {
            assert_eq!(
                bad(&mut s, false, None, b),
                invalid,
                "{}",
                String::from_utf8_lossy(b)
            );
        }
        let long = serde_json::to_vec(&json!({"idempotency_key": "k", "reason": "x".repeat(257)}))
            .unwrap();
        assert_eq!(bad(&mut s, false, None, &long), invalid);
        // Header key must equal the body key.
        assert_eq!(
            bad(&mut s, true, Some("other"), &commit_body("k", 1)),
            invalid
        );
        assert_eq!(
            bad(&mut s, false, Some("other"), br#"{"idempotency_key":"k"}"#),
            invalid
        );
        // Unit mismatch.
        let b = br#"{"idempotency_key":"k","actual":{"unit":"CREDITS","amount":1}}"#;
        assert_eq!(bad(&mut s, true, None, b), (400, "UNIT_MISMATCH".into()));
        // None of these changed the reservation.
        assert_eq!(s.lease(&id).unwrap().state, LeaseState::Active);
        // Unknown reservation.
        let e = s.commit(2_000, "nope", None, &commit_body("k", 1));
        assert_eq!(error_code(&e), (404, "NOT_FOUND".into()));
        let e = s.release(2_000, "nope", None, br#"{"idempotency_key":"k"}"#);
        assert_eq!(error_code(&e), (404, "NOT_FOUND".into()));
        // Expired (alive while now <= expires_at_ms = 61_000).
        let r = s.release(61_000, &id, None, br#"{"idempotency_key":"k"}"#);
        assert_eq!(r.status, 200);
        let id2 = created(&mut s, "c2", json!({}));
        let e = s.commit(61_001, &id2, None, &commit_body("k", 1));
        assert_eq!(error_code(&e), (410, "RESERVATION_EXPIRED".into()));
        let e = s.release(61_001, &id2, None, br#"{"idempotency_key":"k"}"#);
        assert_eq!(error_code(&e), (410, "RESERVATION_EXPIRED".into()));
        assert_eq!(s.lease(&id2).unwrap().state, LeaseState::Active);
        // overage_policy REJECT: actual > reserved is refused, = is fine.
        let id3 = created(&mut s, "c3", json!({"overage_policy": "REJECT"}));
        let e = s.commit(2_000, &id3, None, &commit_body("k", 11));
        assert_eq!(error_code(&e), (409, "BUDGET_EXCEEDED".into()));
        assert_eq!(
            s.commit(2_000, &id3, None, &commit_body("k2", 10)).status,
            200
        );
    }

    #[test]
    fn finalize_keys_are_per_endpoint_and_reservation() {
        let mut s = SimServer::new(Policy::default());
        let a = created(&mut s, "c1", json!({}));
        let b = created(&mut s, "c2", json!({}));
        // The same key on release and commit, and on two reservations.
        assert_eq!(
            s.release(2_000, &a, None, br#"{"idempotency_key":"k"}"#)
                .status,
            200
        );
        assert_eq!(s.commit(2_000, &b, None, &commit_body("k", 1)).status, 200);
        assert_eq!(
            s.release(2_000, &a, None, br#"{"idempotency_key":"k"}"#)
                .status,
            200
        );
        let e = s.release(2_000, &b, None, br#"{"idempotency_key":"k"}"#);
        assert_eq!(error_code(&e), (409, "RESERVATION_FINALIZED".into()));
    }

    /// Commit and release are accepted through expires_at_ms + grace (the
    /// create's `grace_period_ms`, else the policy's); extensions are not.
    #[test]
    fn commit_and_release_are_accepted_within_the_grace_after_expiry() {
        let mut s = SimServer::new(Policy {
            grace_ms: 5_000,
            ..Policy::default()
        });
        // Created at 1000 with the default 60 s TTL: expires at 61000.
        let a = created(&mut s, "a", json!({}));
        assert_eq!(s.lease(&a).unwrap().grace_ms, 5_000);
        assert_eq!(s.extend(61_001, &a, None, &extend_body("e1")).status, 410);
        let r = s.commit(66_000, &a, None, &commit_body("k1", 4));
        assert_eq!(
            (r.status, body(&r)["status"].clone()),
            (200, json!("COMMITTED"))
        );
        let b = created(&mut s, "b", json!({}));
        let e = s.release(66_001, &b, None, br#"{"idempotency_key":"k2"}"#);
        assert_eq!(error_code(&e), (410, "RESERVATION_EXPIRED".into()));
        // The create's own grace_period_ms wins over the policy's.
        let c = created(&mut s, "c", json!({"grace_period_ms": 0}));
        let e = s.commit(61_001, &c, None, &commit_body("k3", 4));
        assert_eq!(error_code(&e), (410, "RESERVATION_EXPIRED".into()));
        let d = created(&mut s, "d", json!({"grace_period_ms": 60_000}));
        assert_eq!(
            s.release(121_000, &d, None, br#"{"idempotency_key":"k4"}"#)
                .status,
            200
        );
        for bad in [json!(-1), json!(60_001), json!("5"), json!(1.5)] {
            let mut req: Value = serde_json::from_slice(&create_body("x")).unwrap();
            req["grace_period_ms"] = bad;
            let r = s.create(1_000, None, &serde_json::to_vec(&req).unwrap());
            assert_eq!(error_code(&r), (400, "INVALID_REQUEST".into()));
        }
    }

    fn event_body(key: &str, amount: u64) -> Value {
        json!({
            "idempotency_key": key,
            "subject": {"tenant": "acme"},
            "action": {"kind": "llm.completion", "name": "gpt"},
            "actual": {"unit": "TOKENS", "amount": amount},
            "metrics": {"tokens_input": 3},
            "metadata": {"why": "expired commit"}
        })
    }

    /// `POST /v1/events`: 201 + EventCreateResponse, same-key replays
    /// verbatim, another request under a used key 409, bad bodies 400.
    #[test]
    fn events_are_applied_once_per_key() {
        let mut s = SimServer::new(Policy::default());
        let bytes = serde_json::to_vec(&event_body("ev1", 9)).unwrap();
        let r = s.event(0, Some("ev1"), &bytes);
        assert_eq!(r.status, 201);
        assert_eq!(body(&r), json!({"status": "APPLIED", "event_id": "evt-1"}));
        let again = s.event(5, None, &bytes);
        assert_eq!((again.status, &again.body), (201, &r.body));
        assert_eq!(s.events_total(), 1);
        let other = serde_json::to_vec(&event_body("ev1", 10)).unwrap();
        assert_eq!(
            error_code(&s.event(6, None, &other)),
            (409, "IDEMPOTENCY_MISMATCH".into())
        );
        assert_eq!(
            error_code(&s.event(6, Some("other"), &bytes)),
            (400, "INVALID_REQUEST".into())
        );
        let mut bad_cases = Vec::new();
        for (field, value) in [
            ("subject", json!({"dimensions": {"a": "b"}})),
            ("subject", json!({"tenant": 5})),
            ("subject", json!({"tenant": "t", "extra": "x"})),
            ("action", json!({"kind": "k"})),
            ("actual", json!({"unit": "TOKENS", "amount": -1})),
            ("actual", json!({"unit": "EUROS", "amount": 1})),
            ("overage_policy", json!("SOMETIMES")),
            ("metrics", json!(3)),
            ("client_time_ms", json!(-5)),
            ("unknown", json!(1)),
        ] {
            let mut b = event_body(&format!("bad-{}", bad_cases.len()), 1);
            b[field] = value;
            bad_cases.push(b);
        }
        let mut missing = event_body("bad-missing", 1);
        missing.as_object_mut().unwrap().remove("action");
        bad_cases.push(missing);
        for b in bad_cases {
            let r = s.event(7, None, &serde_json::to_vec(&b).unwrap());
            assert_eq!(error_code(&r), (400, "INVALID_REQUEST".into()), "{b}");
        }
        assert_eq!(s.events_total(), 1);
        // Events count toward the store's limits; a replay is still answered.
        let mut s = SimServer::new(Policy::default());
        s.limits = StoreLimits {
            max_records: 1,
            ..StoreLimits::default()
        };
        assert_eq!(s.event(0, None, &bytes).status, 201);
        assert_eq!(s.store_held().0, 1);
        let other = serde_json::to_vec(&event_body("ev2", 9)).unwrap();
        assert_eq!(
            error_code(&s.event(1, None, &other)),
            (503, "INTERNAL_ERROR".into())
        );
        assert_eq!(s.event(2, None, &bytes).status, 201);
        assert_eq!((s.events_total(), s.refused_full()), (1, 1));
    }
}
