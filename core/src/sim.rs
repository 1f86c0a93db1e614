//! A model of a Cycles server's reservation endpoints, for simulation, property
//! tests and the reference server (`leasebeat serve`).
//!
//! It is sans-IO like the rest of the core: every call takes the server's
//! clock in milliseconds. It implements create, extend, commit and release
//! with the protocol's status codes and error bodies, idempotency per
//! endpoint and key (a same-key replay returns the stored response with
//! `remaining_ttl_ms` recomputed, 0 once the reservation is no longer
//! ACTIVE), and the policy regimes a server may apply ([`Policy`]).
//!
//! A reservation is alive while `server time <= expires_at_ms`; the model
//! knows each reservation's true expiry, so a test can check any lapse.

use std::collections::HashMap;

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
    extend_keys: HashMap<String, Stored>,
}

impl Lease {
    /// True when the lease is ACTIVE and not yet expired at `now_ms`.
    pub fn is_live(&self, now_ms: u64) -> bool {
        self.state == LeaseState::Active && now_ms <= self.expires_at_ms
    }
}

#[derive(Clone, Debug)]
struct Stored {
    request: Value,
    response: Map<String, Value>,
    expires_at_ms: u64,
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
    leases: HashMap<String, Lease>,
    create_keys: HashMap<String, (String, Stored)>,
    next_id: u64,
    next_request: u64,
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

    fn parse_request(
        &mut self,
        body: &[u8],
        header_key: Option<&str>,
    ) -> Result<(Value, String), SimResponse> {
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

    fn remaining_field(
        &self,
        response: &mut Map<String, Value>,
        expires_at_ms: u64,
        live: bool,
        now_ms: u64,
    ) {
        if self.policy.omit_remaining {
            response.remove("remaining_ttl_ms");
        } else {
            let remaining = if live {
                expires_at_ms.saturating_sub(now_ms)
            } else {
                0
            };
            response.insert("remaining_ttl_ms".into(), Value::from(remaining));
        }
    }

    /// `POST /v1/reservations` at server time `now_ms`.
    pub fn create(&mut self, now_ms: u64, header_key: Option<&str>, body: &[u8]) -> SimResponse {
        let (request, key) = match self.parse_request(body, header_key) {
            Ok(r) => r,
            Err(e) => return e,
        };
        if let Some((id, stored)) = self.create_keys.get(&key).cloned() {
            if stored.request != request {
                return self.error(409, "IDEMPOTENCY_MISMATCH", "same key, different request");
            }
            let live = self.leases.get(&id).is_some_and(|l| l.is_live(now_ms));
            let mut response = stored.response.clone();
            self.remaining_field(&mut response, stored.expires_at_ms, live, now_ms);
            return SimResponse::json(200, &Value::Object(response));
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
        let granted = self
            .policy
            .initial_ttl_cap_ms
            .map_or(ttl, |cap| ttl.min(cap));
        self.next_id += 1;
        let id = format!("rsv-{}", self.next_id);
        let expires_at_ms = now_ms.saturating_add(granted);
        let estimate = o.get("estimate").cloned().unwrap_or(Value::Null);
        let mut response = Map::new();
        response.insert("decision".into(), "ALLOW".into());
        response.insert("reservation_id".into(), Value::from(id.clone()));
        if estimate.is_object() {
            response.insert("reserved".into(), estimate);
        }
        response.insert("expires_at_ms".into(), Value::from(expires_at_ms));
        response.insert("affected_scopes".into(), json!(["tenant:sim"]));
        let stored = Stored {
            request: request.clone(),
            response: response.clone(),
            expires_at_ms,
        };
        self.create_keys.insert(key, (id.clone(), stored));
        self.leases.insert(
            id.clone(),
            Lease {
                id,
                expires_at_ms,
                extensions: 0,
                state: LeaseState::Active,
                created_at_ms: now_ms,
                extend_keys: HashMap::new(),
            },
        );
        self.remaining_field(&mut response, expires_at_ms, true, now_ms);
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
        if let Some(stored) = lease.extend_keys.get(&key).cloned() {
            if stored.request != request {
                return self.error(409, "IDEMPOTENCY_MISMATCH", "same key, different request");
            }
            let live = lease.is_live(now_ms);
            let mut response = stored.response.clone();
            self.remaining_field(&mut response, stored.expires_at_ms, live, now_ms);
            return SimResponse::json(200, &Value::Object(response));
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
        let stored = Stored {
            request,
            response: response.clone(),
            expires_at_ms: expires,
        };
        let lease = self.leases.get_mut(id).expect("looked up above");
        lease.expires_at_ms = expires;
        lease.extensions += 1;
        lease.extend_keys.insert(key, stored);
        self.remaining_field(&mut response, expires, true, now_ms);
        SimResponse::json(200, &Value::Object(response))
    }

    /// Commits (`commit = true`) or releases a reservation at `now_ms`.
    pub fn finalize(&mut self, now_ms: u64, id: &str, commit: bool) -> SimResponse {
        let Some(lease) = self.leases.get(id) else {
            return self.error(404, "NOT_FOUND", "reservation not found");
        };
        if lease.state != LeaseState::Active {
            return self.error(409, "RESERVATION_FINALIZED", "reservation is finalized");
        }
        if now_ms > lease.expires_at_ms {
            return self.error(410, "RESERVATION_EXPIRED", "reservation expired");
        }
        let lease = self.leases.get_mut(id).expect("looked up above");
        lease.state = if commit {
            LeaseState::Committed
        } else {
            LeaseState::Released
        };
        let status = if commit { "COMMITTED" } else { "RELEASED" };
        SimResponse::json(200, &json!({ "reservation_id": id, "status": status }))
    }
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
}
