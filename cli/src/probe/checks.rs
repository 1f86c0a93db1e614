//! The findings: pure judgements of the recorded exchanges.
//!
//! Tolerances. A server reads its clock in whole milliseconds somewhere
//! inside each round trip, so a difference of two server readings may lie
//! 1 ms outside the client's interval; [`ROUND_MS`] allows 2. Clock rates:
//! two clocks disciplined by NTP differ by well under 0.1 %; [`RATE`]
//! allows 0.5 % of the measured span on top. Nothing else is tolerated:
//! every bound comes from the monotonic instants of the probe's own
//! requests (sent before, received after).

use serde_json::{Map, Value};

use super::{ProbeOptions, Record, Steps};

/// Whole-millisecond readings on each side: 2 ms.
pub const ROUND_MS: f64 = 2.0;
/// Clock rate allowance: 0.5 % of the span measured.
pub const RATE: f64 = 0.005;
/// A discrepancy beyond the tolerances but at most this large (ms) is a
/// WARN, not a FAIL: the core's safety margin (at least 1000 ms) absorbs
/// it, and servers whose nodes' clocks differ by a few milliseconds
/// (NTP) show it. A copied replay value is a FAIL at any size.
pub const SMALL_MS: f64 = 100.0;

/// How binding a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// A MUST of the protocol: a FAIL makes the exit status 1.
    Must,
    /// A SHOULD: a miss is a WARN.
    Should,
    /// Information about the server (regime, limit, cleanup).
    Info,
}

impl Level {
    /// `MUST`, `SHOULD`, `INFO`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Must => "MUST",
            Level::Should => "SHOULD",
            Level::Info => "INFO",
        }
    }
}

/// The verdict of a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Holds.
    Pass,
    /// Broken.
    Fail,
    /// Holds, but costs something (or a SHOULD is missed).
    Warn,
    /// Could not be checked (and why is in the detail).
    Skip,
}

impl Status {
    /// `PASS`, `FAIL`, `WARN`, `SKIP`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Warn => "WARN",
            Status::Skip => "SKIP",
        }
    }
}

/// One named finding with its evidence.
#[derive(Clone, Debug)]
pub struct Finding {
    /// Stable id, e.g. `replay.extend.remaining`.
    pub id: &'static str,
    /// What it checks, in a few words.
    pub title: &'static str,
    /// MUST, SHOULD or INFO.
    pub level: Level,
    /// The verdict.
    pub status: Status,
    /// Why, with the numbers.
    pub detail: String,
    /// The records (numbers) it rests on.
    pub evidence: Vec<usize>,
}

fn finding(
    id: &'static str,
    title: &'static str,
    level: Level,
    status: Status,
    detail: impl Into<String>,
    evidence: Vec<usize>,
) -> Finding {
    Finding {
        id,
        title,
        level,
        status,
        detail: detail.into(),
        evidence,
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn is_create(r: &Record) -> bool {
    r.path == "/v1/reservations"
}

fn is_extend(r: &Record) -> bool {
    r.path.ends_with("/extend")
}

/// First-time (not replayed) create and extend successes, in order.
fn first_time_successes<'r>(records: &'r [Record], steps: &Steps) -> Vec<&'r Record> {
    let replays = [
        steps.replay_e1,
        steps.replay_create,
        steps.mismatch_extend,
        steps.mismatch_create,
        steps.final_replay_e2,
        steps.final_replay_create,
    ];
    records
        .iter()
        .enumerate()
        .filter(|(i, r)| {
            (is_create(r) || is_extend(r))
                && r.status() == Some(200)
                // (A retried step's earlier attempts were never 200.)
                && !replays.contains(&Some(*i))
        })
        .map(|(_, r)| r)
        .collect()
}

/// The extension regime measured from the create and the two extensions of A.
#[derive(Clone, Debug, Default)]
pub struct Regime {
    /// `additive`, `additive, grant cap`, `maximum lead`, or `unknown`.
    pub kind: String,
    /// `extend_by_ms` asked for (the TTL).
    pub requested_ms: u64,
    /// `remaining_ttl_ms` of the create.
    pub initial_lead_ms: Option<u64>,
    /// The initial TTL, when the create granted less than asked (ms).
    pub initial_cap_ms: Option<u64>,
    /// `expires_at_ms` differences E1 - E0, E2 - E1.
    pub grants_ms: Vec<i64>,
    /// The per-extension cap, when one shows.
    pub grant_cap_ms: Option<u64>,
    /// The maximum lead, when the server clamps to one (ms; its lower
    /// bound, the largest `remaining_ttl_ms` right after an extension).
    pub max_lead_ms: Option<u64>,
    /// The server omits `remaining_ttl_ms`.
    pub omits_remaining: bool,
    /// In words.
    pub detail: String,
}

fn regime(records: &[Record], steps: &Steps, ttl: u64) -> Regime {
    let mut g = Regime {
        kind: "unknown".into(),
        requested_ms: ttl,
        ..Regime::default()
    };
    let Some(c) = steps.create.map(|i| &records[i]) else {
        g.detail = "no create".into();
        return g;
    };
    g.initial_lead_ms = c.int("remaining_ttl_ms");
    g.omits_remaining = g.initial_lead_ms.is_none();
    if let Some(r0) = g.initial_lead_ms {
        // A create answered in one instant has remaining = granted TTL;
        // allow the round trip for a server that reads its clock twice.
        if (r0 as f64) + c.rtt_ms().ceil() + ROUND_MS < ttl as f64 {
            g.initial_cap_ms = Some(r0);
        }
    }
    let (Some(e1), Some(e2)) = (steps.e1.map(|i| &records[i]), steps.e2.map(|i| &records[i]))
    else {
        g.detail = "the two extensions of A did not both succeed".into();
        return g;
    };
    let (Some(x0), Some(x1), Some(x2)) = (
        c.int("expires_at_ms"),
        e1.int("expires_at_ms"),
        e2.int("expires_at_ms"),
    ) else {
        g.detail = "expires_at_ms missing".into();
        return g;
    };
    let g1 = x1 as i64 - x0 as i64;
    let g2 = x2 as i64 - x1 as i64;
    g.grants_ms = vec![g1, g2];
    let t = ttl as i64;
    let spacing_lo = ms(e2.sent_ns.saturating_sub(e1.received_ns)) - ROUND_MS;
    let span = ms(e2.received_ns.saturating_sub(e1.sent_ns));
    let spacing_hi = span + ROUND_MS + RATE * span;
    let spacing_lo = spacing_lo - RATE * span;
    let (r1, r2) = (e1.int("remaining_ttl_ms"), e2.int("remaining_ttl_ms"));
    let cap_note = match g.initial_cap_ms {
        Some(c) => format!("; the create granted {c} ms of {ttl} asked"),
        None => String::new(),
    };
    if g1 >= t && g2 >= t {
        g.kind = "additive".into();
        g.detail = format!(
            "each extension added its extend_by_ms ({g1} and {g2} ms for {ttl} asked){cap_note}"
        );
    } else if g1 == 0 && g2 == 0 {
        g.kind = "maximum lead".into();
        g.max_lead_ms = r2;
        g.detail = format!(
            "two extensions granted nothing: expiry already beyond the maximum lead (lead {} ms){cap_note}",
            r2.map_or_else(|| "unknown".into(), |r| r.to_string())
        );
    } else if (g2 as f64) >= spacing_lo
        && (g2 as f64) <= spacing_hi
        && g2 < t
        && match (r1, r2) {
            (Some(r1), Some(r2)) => {
                let allowed = e1.rtt_ms() + e2.rtt_ms() + 2.0 * ROUND_MS + RATE * span;
                (r1 as f64 - r2 as f64).abs() <= allowed
            }
            _ => true,
        }
    {
        g.kind = "maximum lead".into();
        g.max_lead_ms = match (r1, r2) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        g.detail = format!(
            "the second extension granted {g2} ms, the time between the two calls ({spacing_lo:.0}..{spacing_hi:.0} ms): expiry is held at now + L, L = {} ms{cap_note}",
            g.max_lead_ms
                .map_or_else(|| "unknown (no remaining_ttl_ms)".into(), |l| l.to_string())
        );
    } else if g1 == g2 && g1 > 0 && g1 < t {
        g.kind = "additive, grant cap".into();
        g.grant_cap_ms = Some(g1 as u64);
        g.detail = format!("each extension added {g1} ms of the {ttl} asked{cap_note}");
    } else {
        g.detail = format!(
            "grants {g1} and {g2} ms for {ttl} asked, calls {spacing_lo:.0}..{spacing_hi:.0} ms apart: no single regime fits{cap_note}"
        );
    }
    g
}

fn object_without_remaining(r: &Record) -> Option<Map<String, Value>> {
    let mut m = r.json()?;
    m.remove("remaining_ttl_ms");
    Some(m)
}

fn verbatim(orig: &Record, replay: &Record) -> Result<(), String> {
    if replay.status() != Some(200) {
        return Err(format!(
            "#{} replay answered {}, not the original 200",
            replay.n,
            replay.summary()
        ));
    }
    let (Some(a), Some(b)) = (
        object_without_remaining(orig),
        object_without_remaining(replay),
    ) else {
        return Err("a body is not a JSON object".into());
    };
    let mut diffs = Vec::new();
    for (k, v) in &a {
        match b.get(k) {
            Some(w) if w == v => {}
            Some(w) => diffs.push(format!("{k}: {v} -> {w}")),
            None => diffs.push(format!("{k}: {v} -> absent")),
        }
    }
    for k in b.keys().filter(|k| !a.contains_key(*k)) {
        diffs.push(format!("{k}: absent -> {}", b[k]));
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "#{} vs #{}: {}",
            orig.n,
            replay.n,
            diffs.join(", ")
        ))
    }
}

struct ReplayIds {
    verbatim: &'static str,
    remaining: &'static str,
    released: &'static str,
    what: &'static str,
    /// The reservation's expiry when the live replay was sent (E2's).
    current_expiry: Option<u64>,
}

fn replay_findings(
    ids: &ReplayIds,
    records: &[Record],
    orig: Option<usize>,
    replay: Option<usize>,
    final_orig: Option<usize>,
    final_replay: Option<usize>,
    release_note: Option<String>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    // Verbatim: every replay compared with its original.
    let pairs: Vec<(&Record, &Record)> = [(orig, replay), (final_orig, final_replay)]
        .into_iter()
        .filter_map(|(o, r)| Some((&records[o?], &records[r?])))
        .collect();
    let title_v = "replay: every other field verbatim";
    if pairs.is_empty() {
        out.push(finding(
            ids.verbatim,
            title_v,
            Level::Must,
            Status::Skip,
            format!("no {} replay was possible", ids.what),
            vec![],
        ));
    } else {
        let mut errors = Vec::new();
        let mut evidence = Vec::new();
        for (i, (o, r)) in pairs.iter().enumerate() {
            evidence.extend([o.n, r.n]);
            // A non-200 after release is judged by the `released` finding.
            if i == 1 && r.status() != Some(200) {
                continue;
            }
            if let Err(e) = verbatim(o, r) {
                errors.push(e);
            }
        }
        out.push(if errors.is_empty() {
            finding(
                ids.verbatim,
                title_v,
                Level::Must,
                Status::Pass,
                format!(
                    "{} replay(s) identical but for remaining_ttl_ms",
                    pairs.len()
                ),
                evidence,
            )
        } else {
            finding(
                ids.verbatim,
                title_v,
                Level::Must,
                Status::Fail,
                errors.join("; "),
                evidence,
            )
        });
    }
    // Remaining recomputed on the live replay.
    let title_r = "replay: remaining_ttl_ms recomputed";
    match (orig.map(|i| &records[i]), replay.map(|i| &records[i])) {
        (Some(o), Some(r)) if r.status() == Some(200) => {
            match (o.int("remaining_ttl_ms"), r.int("remaining_ttl_ms")) {
                (Some(ro), Some(rp)) => {
                    let delay_lo = ms(r.sent_ns.saturating_sub(o.received_ns));
                    let delay_hi = ms(r.received_ns.saturating_sub(o.sent_ns));
                    let upper = ro as f64 - delay_lo + ROUND_MS + RATE * delay_hi;
                    let lower = ro as f64 - delay_hi - ROUND_MS - RATE * delay_hi;
                    let base = format!(
                        "original #{} {ro} ms, replay #{} {delay_lo:.1} ms later (at most {delay_hi:.1}): {rp} ms, expected {:.0}..{:.0}",
                        o.n,
                        r.n,
                        lower.max(0.0),
                        upper.max(0.0)
                    );
                    let (status, text) = if (rp as f64) > upper {
                        // A later extension moved the expiry by `shift`.
                        let shift = ids
                            .current_expiry
                            .zip(o.int("expires_at_ms"))
                            .map_or(0.0, |(c, e)| c as f64 - e as f64);
                        let why = if rp == ro {
                            "equal to the original: copied from the stored response; a client scheduling from it overshoots the real lease".to_owned()
                        } else if shift > 0.0 && (rp as f64) <= upper + shift && (rp as f64) >= lower + shift {
                            format!("computed from the reservation's current expiry (moved {shift:.0} ms by a later extension), not from the original expires_at_ms as the MUST says (not unsafe by itself, but the replay is rebuilt, not replayed)")
                        } else {
                            format!("overstates the lead by {:.0} ms: a client scheduling from it overshoots the real lease", rp as f64 - upper)
                        };
                        let over = rp as f64 - upper;
                        let status = if rp != ro && over <= SMALL_MS {
                            Status::Warn
                        } else {
                            Status::Fail
                        };
                        (status, format!("{base}; {why}"))
                    } else if (rp as f64) < lower && upper > 0.0 {
                        (Status::Warn, format!("{base}; understates by {:.0} ms (safe, but a shorter cadence, or lease_too_short on a short lease)", lower - rp as f64))
                    } else {
                        (Status::Pass, base)
                    };
                    out.push(finding(ids.remaining, title_r, Level::Must, status, text, vec![o.n, r.n]));
                }
                (None, _) => out.push(finding(ids.remaining, title_r, Level::Must, Status::Skip, "the original carries no remaining_ttl_ms", vec![o.n])),
                (Some(_), None) => out.push(finding(ids.remaining, title_r, Level::Must, Status::Warn, format!("#{} replay omits remaining_ttl_ms that the original carried: the client falls back for that answer", r.n), vec![o.n, r.n])),
            }
        }
        (Some(o), Some(r)) => out.push(finding(
            ids.remaining,
            title_r,
            Level::Must,
            Status::Skip,
            format!("replay #{} answered {}", r.n, r.summary()),
            vec![o.n, r.n],
        )),
        _ => out.push(finding(
            ids.remaining,
            title_r,
            Level::Must,
            Status::Skip,
            format!("no {} replay was possible", ids.what),
            vec![],
        )),
    }
    // 0 after release.
    let title_f = "replay after release: remaining_ttl_ms 0";
    match final_replay.map(|i| &records[i]) {
        Some(r) if r.status() == Some(200) => match r.int("remaining_ttl_ms") {
            Some(0) => out.push(finding(ids.released, title_f, Level::Must, Status::Pass, format!("#{} 0 ms", r.n), vec![r.n])),
            Some(v) => out.push(finding(ids.released, title_f, Level::Must, Status::Fail, format!("#{} {v} ms for a released reservation: a client would keep scheduling from a lease that is gone", r.n), vec![r.n])),
            None => out.push(finding(ids.released, title_f, Level::Must, Status::Pass, format!("#{} not emitted", r.n), vec![r.n])),
        },
        Some(r) => out.push(finding(ids.released, title_f, Level::Must, Status::Fail, format!("#{} answered {}: a same-key replay must return the original outcome (with remaining_ttl_ms 0)", r.n, r.summary()), vec![r.n])),
        None => out.push(finding(ids.released, title_f, Level::Must, Status::Skip, release_note.unwrap_or_else(|| format!("no {} replay after release was possible", ids.what)), vec![])),
    }
    out
}

fn mismatch(id: &'static str, what: &str, rec: Option<&Record>) -> Finding {
    let title = "reused key, other payload: 409 IDEMPOTENCY_MISMATCH";
    let Some(r) = rec else {
        return finding(
            id,
            title,
            Level::Must,
            Status::Skip,
            format!("no {what} to reuse"),
            vec![],
        );
    };
    let code = r.error_code();
    if r.status() == Some(409) && code.as_deref() == Some("IDEMPOTENCY_MISMATCH") {
        finding(
            id,
            title,
            Level::Must,
            Status::Pass,
            format!("#{} {}", r.n, r.summary()),
            vec![r.n],
        )
    } else {
        let extra = if r.status() == Some(200) {
            ": the server answered as if it were a replay or a new request"
        } else {
            ""
        };
        finding(
            id,
            title,
            Level::Must,
            Status::Fail,
            format!(
                "#{} {} for {what}'s key with another payload{extra}",
                r.n,
                r.summary()
            ),
            vec![r.n],
        )
    }
}

/// Judges the records.
pub(crate) fn evaluate(
    records: &[Record],
    steps: &Steps,
    opts: &ProbeOptions,
    limit: Option<&Result<u32, String>>,
) -> (Vec<Finding>, Regime) {
    let mut out = Vec::new();
    // Schema of every create/extend 200.
    {
        let mut bad = Vec::new();
        let mut evidence = Vec::new();
        for r in records
            .iter()
            .filter(|r| (is_create(r) || is_extend(r)) && r.status() == Some(200))
        {
            evidence.push(r.n);
            let body = &r.outcome.as_ref().expect("a status").body;
            let check = if is_create(r) {
                leasebeat::schema::create_response(body).map(|_| ())
            } else {
                leasebeat::schema::extend_response(body).map(|_| ())
            };
            if let Err(e) = check {
                bad.push(format!("#{} {e}", r.n));
            }
        }
        let title = "create/extend 200 bodies match the response schema";
        out.push(if bad.is_empty() {
            finding(
                "responses.schema",
                title,
                Level::Must,
                Status::Pass,
                format!("{} bodies", evidence.len()),
                evidence,
            )
        } else {
            finding(
                "responses.schema",
                title,
                Level::Must,
                Status::Fail,
                format!(
                    "{}: leasebeat treats such a 200 as ambiguous (HB-18) and retries it",
                    bad.join("; ")
                ),
                evidence,
            )
        });
    }
    let firsts = first_time_successes(records, steps);
    // Presence.
    {
        let all: Vec<&Record> = records
            .iter()
            .filter(|r| (is_create(r) || is_extend(r)) && r.status() == Some(200))
            .collect();
        let with = all
            .iter()
            .filter(|r| r.int("remaining_ttl_ms").is_some())
            .count();
        let evidence = all.iter().map(|r| r.n).collect::<Vec<_>>();
        let title = "remaining_ttl_ms on create and extend successes";
        let cost = "leasebeat then takes the fallback path (FB-): the first extension goes out at once, the cadence comes from measured grants, nothing is proven (lease_in_jeopardy at once), and under maximum-lead clamping the fallback is unsound";
        out.push(if all.is_empty() {
            finding("remaining_ttl_ms.present", title, Level::Should, Status::Skip, "no success", evidence)
        } else if with == all.len() {
            finding("remaining_ttl_ms.present", title, Level::Should, Status::Pass, format!("on all {with} successes"), evidence)
        } else if with == 0 {
            finding("remaining_ttl_ms.present", title, Level::Should, Status::Warn, format!("absent on all {} successes: {cost}", all.len()), evidence)
        } else {
            finding("remaining_ttl_ms.present", title, Level::Should, Status::Warn, format!("present on {with} of {} successes: the answers without it take the fallback path", all.len()), evidence)
        });
    }
    // Consistency: the server time each success implies, expires - remaining.
    {
        let readings: Vec<(&Record, i64)> = firsts
            .iter()
            .filter_map(|r| {
                Some((
                    *r,
                    r.int("expires_at_ms")? as i64 - r.int("remaining_ttl_ms")? as i64,
                ))
            })
            .collect();
        let title = "remaining_ttl_ms and expires_at_ms from one clock at the client's rate";
        if readings.len() < 2 {
            out.push(finding(
                "remaining_ttl_ms.consistent",
                title,
                Level::Must,
                Status::Skip,
                "fewer than two successes carry both fields",
                readings.iter().map(|(r, _)| r.n).collect(),
            ));
        } else {
            let mut worst: Option<(f64, String)> = None;
            for w in readings.windows(2) {
                let ((a, sa), (b, sb)) = (w[0], w[1]);
                let moved = (sb - sa) as f64;
                let lo = ms(b.sent_ns.saturating_sub(a.received_ns));
                let hi = ms(b.received_ns.saturating_sub(a.sent_ns));
                let tol = ROUND_MS + RATE * hi;
                let off = if moved > hi + tol {
                    moved - hi - tol
                } else if moved < lo - tol {
                    lo - tol - moved
                } else {
                    0.0
                };
                if off > 0.0 && worst.as_ref().is_none_or(|(o, _)| off > *o) {
                    worst = Some((
                        off,
                        format!(
                            "between #{} and #{} the server's clock (expires_at_ms - remaining_ttl_ms) moved {moved:.0} ms while the client measured {lo:.1}..{hi:.1} ms",
                            a.n, b.n
                        ),
                    ));
                }
            }
            let (first, last) = (readings[0], readings[readings.len() - 1]);
            // Over the whole span: what the server's clock did against the
            // client's interval (a rate from mid-points would be noise when
            // a round trip is long, e.g. a cold server's first answer).
            let server = last.1 - first.1;
            let span_lo = ms(last.0.sent_ns.saturating_sub(first.0.received_ns));
            let span_hi = ms(last.0.received_ns.saturating_sub(first.0.sent_ns));
            let overall = format!(
                "from #{} to #{} the server's clock moved {server} ms, the client's {span_lo:.1}..{span_hi:.1} ms",
                first.0.n, last.0.n
            );
            let evidence = readings.iter().map(|(r, _)| r.n).collect();
            out.push(match worst {
                None => finding("remaining_ttl_ms.consistent", title, Level::Must, Status::Pass, format!("{} successes, each pair within its round trips; {overall}", readings.len()), evidence),
                Some((off, why)) if off <= SMALL_MS => finding("remaining_ttl_ms.consistent", title, Level::Must, Status::Warn, format!("{why} ({off:.0} ms outside; at most {SMALL_MS:.0} ms: within the safety margin); {overall}: clocks that disagree slightly (nodes?)"), evidence),
                Some((_, why)) => finding("remaining_ttl_ms.consistent", title, Level::Must, Status::Fail, format!("{why}; {overall}: remaining_ttl_ms is not max(0, expires_at_ms - now) on the expiry clock (a skewed clock, or nodes whose clocks disagree)"), evidence),
            });
        }
    }
    let release_note = steps
        .release_a
        .and_then(|i| {
            (records[i].status() != Some(200)).then(|| {
                format!(
                    "release of A answered {} (#{})",
                    records[i].summary(),
                    records[i].n
                )
            })
        })
        .or_else(|| steps.release_failure.clone());
    out.extend(replay_findings(
        &ReplayIds {
            verbatim: "replay.extend.verbatim",
            remaining: "replay.extend.remaining",
            released: "replay.extend.released",
            what: "extend",
            current_expiry: steps.e2.and_then(|i| records[i].int("expires_at_ms")),
        },
        records,
        steps.e1,
        steps.replay_e1,
        steps.e2,
        steps.final_replay_e2,
        release_note.clone(),
    ));
    out.extend(replay_findings(
        &ReplayIds {
            verbatim: "replay.create.verbatim",
            remaining: "replay.create.remaining",
            released: "replay.create.released",
            what: "create",
            current_expiry: steps.e2.and_then(|i| records[i].int("expires_at_ms")),
        },
        records,
        steps.create,
        steps.replay_create,
        steps.create,
        steps.final_replay_create,
        release_note,
    ));
    out.push(mismatch(
        "idempotency.mismatch.extend",
        "extend E1",
        steps.mismatch_extend.map(|i| &records[i]),
    ));
    out.push(mismatch(
        "idempotency.mismatch.create",
        "create A",
        steps.mismatch_create.map(|i| &records[i]),
    ));
    // Retry-After on every 429.
    {
        let title = "Retry-After on 429: one delta-seconds value";
        let throttled: Vec<&Record> = records.iter().filter(|r| r.status() == Some(429)).collect();
        let evidence: Vec<usize> = throttled.iter().map(|r| r.n).collect();
        if throttled.is_empty() {
            out.push(finding(
                "retry_after.delta_seconds",
                title,
                Level::Must,
                Status::Skip,
                "no 429 met",
                evidence,
            ));
        } else {
            let mut fails = Vec::new();
            let mut missing = Vec::new();
            for r in &throttled {
                let values = r.header_values("retry-after");
                match leasebeat::arith::parse_retry_after(&values) {
                    Ok(_) => {}
                    Err(leasebeat::arith::RetryAfterError::Missing) => {
                        missing.push(format!("#{}", r.n))
                    }
                    Err(e) => fails.push(format!("#{} {values:?} ({})", r.n, e.as_str())),
                }
            }
            out.push(if !fails.is_empty() {
                finding("retry_after.delta_seconds", title, Level::Must, Status::Fail, format!("{}: only delta-seconds is valid (an HTTP-date needs the wall clock); leasebeat stops such a heartbeat `throttled`", fails.join("; ")), evidence)
            } else if !missing.is_empty() {
                finding("retry_after.delta_seconds", title, Level::Must, Status::Warn, format!("no Retry-After on {} (optional in v0, but leasebeat then stops `throttled`)", missing.join(", ")), evidence)
            } else {
                finding("retry_after.delta_seconds", title, Level::Must, Status::Pass, format!("{} 429(s), each with one delta-seconds value", throttled.len()), evidence)
            });
        }
    }
    let g = regime(records, steps, opts.ttl_ms);
    {
        let evidence = [steps.create, steps.e1, steps.e2]
            .iter()
            .flatten()
            .map(|i| records[*i].n)
            .collect();
        let title = "extension regime";
        let status = if g.kind == "unknown" {
            Status::Warn
        } else {
            Status::Pass
        };
        out.push(finding(
            "extension.regime",
            title,
            Level::Info,
            status,
            format!("{}: {}", g.kind, g.detail),
            evidence,
        ));
    }
    {
        let title = "extension limit";
        let b: Vec<usize> = records
            .iter()
            .filter(|r| r.step.contains(" B"))
            .map(|r| r.n)
            .collect();
        out.push(match limit {
            None => finding(
                "extension.limit",
                title,
                Level::Info,
                Status::Skip,
                "not measured (run with --exhaust: it costs a reservation's extensions)",
                vec![],
            ),
            Some(Ok(n)) => finding(
                "extension.limit",
                title,
                Level::Info,
                Status::Pass,
                format!("{n} extensions, then 409 MAX_EXTENSIONS_EXCEEDED"),
                b,
            ),
            Some(Err(why)) if why.starts_with("no limit") => finding(
                "extension.limit",
                title,
                Level::Info,
                Status::Pass,
                why.clone(),
                b,
            ),
            Some(Err(why)) => finding(
                "extension.limit",
                title,
                Level::Info,
                Status::Warn,
                why.clone(),
                b,
            ),
        });
    }
    (out, g)
}
