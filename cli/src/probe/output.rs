//! The table for people and the JSON object for machines.

use std::io::{self, Write};

use serde_json::{Map, Value, json};

use super::report::Report;
use super::{ProbeOptions, ProbeResult, Record};

/// Longest response body kept in the JSON evidence (characters).
const BODY_CHARS: usize = 2_000;

fn secs(ms: u64) -> String {
    if ms >= 3_600_000 {
        format!(
            "{}h {:02}m {:02}s",
            ms / 3_600_000,
            ms / 60_000 % 60,
            ms / 1000 % 60
        )
    } else if ms >= 60_000 {
        format!("{}m {:02}s", ms / 60_000, ms / 1000 % 60)
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

fn opt_secs(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), secs)
}

fn round3(x: f64) -> Value {
    Value::from((x * 1000.0).round() / 1000.0)
}

fn text(bytes: &[u8]) -> String {
    let t = String::from_utf8_lossy(bytes);
    if t.chars().count() > BODY_CHARS {
        let cut: String = t.chars().take(BODY_CHARS).collect();
        format!("{cut}...")
    } else {
        t.into_owned()
    }
}

fn record_json(r: &Record) -> Value {
    let mut m = Map::new();
    m.insert("n".into(), r.n.into());
    m.insert("step".into(), r.step.clone().into());
    m.insert("path".into(), r.path.clone().into());
    m.insert("key".into(), r.key.clone().map_or(Value::Null, Value::from));
    m.insert("request".into(), text(&r.request).into());
    m.insert("sent_ms".into(), round3(r.sent_ns as f64 / 1e6));
    m.insert("received_ms".into(), round3(r.received_ns as f64 / 1e6));
    m.insert("rtt_ms".into(), round3(r.rtt_ms()));
    match &r.outcome {
        Ok(resp) => {
            m.insert("status".into(), resp.status.into());
            let headers: Map<String, Value> = resp
                .headers
                .iter()
                .filter(|(n, _)| {
                    let n = String::from_utf8_lossy(n).to_ascii_lowercase();
                    matches!(
                        n.as_str(),
                        "retry-after" | "content-type" | "date" | "x-request-id"
                    )
                })
                .map(|(n, v)| {
                    (
                        String::from_utf8_lossy(n).to_ascii_lowercase(),
                        Value::from(String::from_utf8_lossy(v).into_owned()),
                    )
                })
                .collect();
            m.insert("headers".into(), Value::Object(headers));
            m.insert("response".into(), text(&resp.body).into());
        }
        Err(f) => {
            m.insert("failure".into(), f.as_str().into());
        }
    }
    Value::Object(m)
}

fn report_json(r: &Report) -> Value {
    json!({
        "ttl_ms": r.ttl_ms, "timeout_ms": r.timeout_ms, "rtt_ms": r.rtt_ms, "path": r.path,
        "attempt_budget_ms": r.attempt_budget_ms, "safety_margin_ms": r.safety_margin_ms,
        "retry_reserve_ms": r.retry_reserve_ms, "first_beat_ms": r.first_beat_ms,
        "steady_cadence_ms": r.steady_cadence_ms, "steady_lead_ms": r.steady_lead_ms,
        "extensions_per_hour": r.extensions_per_hour, "extension_limit": r.limit,
        "extension_limit_measured": r.limit_measured, "limit_stops_work_after_ms": r.limit_stop_ms,
        "limit_not_reached": r.limit_not_reached,
        "longest_outage_hanging_ms": r.outage_hanging_ms,
        "longest_outage_refused_ms": r.outage_refused_ms,
        "outage_lapses_silently": r.outage_lapses_silently,
        "dead_zone": r.dead_zone, "fix_timeout_ms": r.fix_timeout_ms, "fix_ttl_ms": r.fix_ttl_ms,
        "notes": r.notes,
    })
}

/// The `--json` object.
pub fn to_json(result: &ProbeResult, opts: &ProbeOptions) -> Value {
    let findings: Vec<Value> = result
        .findings
        .iter()
        .map(|f| {
            json!({
                "id": f.id, "title": f.title, "level": f.level.as_str(),
                "status": f.status.as_str(), "detail": f.detail, "evidence": f.evidence,
            })
        })
        .collect();
    let reservations: Vec<Value> = result
        .reservations
        .iter()
        .map(|r| {
            json!({
                "reservation_id": r.id, "role": r.role,
                "released": r.released.as_ref().is_some_and(|(ok, _)| *ok),
                "release": r.released.as_ref().map(|(_, how)| how.clone()),
            })
        })
        .collect();
    let rtts: Vec<f64> = result
        .records
        .iter()
        .filter(|r| r.status().is_some())
        .map(|r| r.rtt_ms())
        .collect();
    let median = {
        let mut s = rtts.clone();
        s.sort_by(f64::total_cmp);
        s.get(s.len() / 2).copied().map(round3)
    };
    json!({
        "url": opts.url,
        "ttl_ms": opts.ttl_ms,
        "timeout_ms": opts.timeout_ms,
        "exit_code": result.exit_code(),
        "error": result.fatal,
        "findings": findings,
        "regime": result.regime.as_ref().map(|g| json!({
            "kind": g.kind, "requested_ms": g.requested_ms, "initial_lead_ms": g.initial_lead_ms,
            "initial_cap_ms": g.initial_cap_ms, "grants_ms": g.grants_ms,
            "grant_cap_ms": g.grant_cap_ms, "max_lead_ms": g.max_lead_ms,
            "omits_remaining": g.omits_remaining, "detail": g.detail,
        })),
        "extension_limit": result.limit.as_ref().map(|l| match l {
            Ok(n) => json!({"extensions": n}),
            Err(why) => json!({"none_found": why}),
        }),
        "rtt_ms": {
            "count": rtts.len(),
            "median": median,
            "min": rtts.iter().copied().reduce(f64::min).map(round3),
            "max": rtts.iter().copied().reduce(f64::max).map(round3),
        },
        "report": result.report.as_ref().map(report_json),
        "reservations": reservations,
        "not_released": result.left_behind(),
        "notes": result.notes,
        "exchanges": result.records.iter().map(record_json).collect::<Vec<_>>(),
    })
}

/// The table on stdout.
pub fn table(result: &ProbeResult, opts: &ProbeOptions, out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "leasebeat probe {} (--ttl-ms {}, --timeout-ms {})",
        opts.url, opts.ttl_ms, opts.timeout_ms
    )?;
    if let Some(why) = &result.fatal {
        writeln!(out, "\nCOULD NOT PROBE: {why}")?;
    }
    if !result.findings.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "{:<30} {:<6} {:<6} DETAIL (evidence: exchange numbers)",
            "CHECK", "LEVEL", "RESULT"
        )?;
        for f in &result.findings {
            let ev = if f.evidence.is_empty() {
                String::new()
            } else {
                format!(
                    " [#{}]",
                    f.evidence
                        .iter()
                        .map(|n| n.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                )
            };
            writeln!(
                out,
                "{:<30} {:<6} {:<6} {}{ev}",
                f.id,
                f.level.as_str(),
                f.status.as_str(),
                f.detail
            )?;
        }
    }
    for n in &result.notes {
        writeln!(out, "note: {n}")?;
    }
    if !result.records.is_empty() {
        writeln!(
            out,
            "\nexchanges (monotonic ms since the start: sent..received):"
        )?;
        for r in &result.records {
            let body = match &r.outcome {
                Ok(resp) => {
                    let t: String = String::from_utf8_lossy(&resp.body)
                        .chars()
                        .filter(|c| !c.is_control())
                        .take(160)
                        .collect();
                    let ra = r.header_values("retry-after");
                    if ra.is_empty() {
                        format!(" {t}")
                    } else {
                        format!(" Retry-After {ra:?} {t}")
                    }
                }
                Err(_) => String::new(),
            };
            writeln!(
                out,
                "  #{:<3} {:>10.3}..{:<10.3} {:<38} key {} -> {}{body}",
                r.n,
                r.sent_ns as f64 / 1e6,
                r.received_ns as f64 / 1e6,
                r.step,
                r.key.as_deref().unwrap_or("-"),
                r.status().map_or_else(|| r.summary(), |s| s.to_string()),
            )?;
        }
    }
    let rtts: Vec<f64> = result
        .records
        .iter()
        .filter(|r| r.status().is_some())
        .map(|r| r.rtt_ms())
        .collect();
    if !rtts.is_empty() {
        let mut sorted = rtts.clone();
        sorted.sort_by(f64::total_cmp);
        let slowest = result
            .records
            .iter()
            .filter(|r| r.status().is_some())
            .max_by(|a, b| a.rtt_ms().total_cmp(&b.rtt_ms()))
            .map_or_else(String::new, |r| format!(" (#{} {})", r.n, r.step));
        writeln!(
            out,
            "\nround trips: {} answers, min {:.1} / median {:.1} / max {:.1} ms{slowest}",
            rtts.len(),
            sorted[0],
            sorted[sorted.len() / 2],
            sorted[sorted.len() - 1]
        )?;
    }
    if let Some(r) = &result.report {
        writeln!(
            out,
            "\nWhat leasebeat does here (--ttl-ms {}, --timeout-ms {}, the largest round trip {} ms, {} path):",
            r.ttl_ms, r.timeout_ms, r.rtt_ms, r.path
        )?;
        writeln!(
            out,
            "  budgets             attempt {} / safety margin {} / retry reserve {}",
            opt_secs(r.attempt_budget_ms),
            opt_secs(r.safety_margin_ms),
            opt_secs(r.retry_reserve_ms)
        )?;
        writeln!(
            out,
            "  first beat          {} after the create's answer",
            opt_secs(r.first_beat_ms)
        )?;
        match &r.dead_zone {
            Some(why) => {
                writeln!(out, "  steady cadence      NONE: dead zone, {why}")?;
                let mut fixes = Vec::new();
                if let Some(t) = r.fix_timeout_ms {
                    fixes.push(format!("--timeout-ms {t} or less"));
                }
                if let Some(t) = r.fix_ttl_ms {
                    fixes.push(format!("--ttl-ms {t} or more (if the server grants it)"));
                }
                writeln!(
                    out,
                    "  WARNING             no positive cadence: the retry reserve does not fit in the lease; {}",
                    if fixes.is_empty() {
                        "neither a shorter timeout nor a longer TTL fixes it".to_owned()
                    } else {
                        format!("fix: {}", fixes.join(", or "))
                    }
                )?;
            }
            None => writeln!(
                out,
                "  steady cadence      a beat every {} (lead after a beat {})",
                opt_secs(r.steady_cadence_ms),
                opt_secs(r.steady_lead_ms)
            )?,
        }
        writeln!(
            out,
            "  extensions / hour   {}",
            r.extensions_per_hour
                .map_or_else(|| "-".into(), |n| n.to_string())
        )?;
        match (r.limit, r.limit_stop_ms) {
            (Some(n), Some(t)) => writeln!(
                out,
                "  extension limit     work stops after {} ({n} extensions{})",
                secs(t),
                if r.limit_measured {
                    ", measured"
                } else {
                    ": NOT measured, the protocol's example default; run with --exhaust"
                }
            )?,
            (Some(n), None) => writeln!(
                out,
                "  extension limit     {n} extensions: {}",
                r.limit_not_reached.as_deref().unwrap_or("not reached")
            )?,
            (None, _) => writeln!(out, "  extension limit     none found")?,
        }
        writeln!(
            out,
            "  longest outage      {} with requests hanging until the timeout, {} with connections refused",
            opt_secs(r.outage_hanging_ms),
            opt_secs(r.outage_refused_ms)
        )?;
        if r.outage_lapses_silently {
            writeln!(
                out,
                "  WARNING             a longer outage outlives the lease while leasebeat still retries (fallback path: no retry window to stop on)"
            )?;
        }
        for n in &r.notes {
            writeln!(out, "  note                {n}")?;
        }
    }
    if !result.reservations.is_empty() || !result.unknown_creates.is_empty() {
        writeln!(out, "\ntest reservations:")?;
        for r in &result.reservations {
            let how = match &r.released {
                Some((true, how)) => format!("released ({how})"),
                Some((false, how)) => format!("NOT RELEASED ({how})"),
                None => "NOT RELEASED".into(),
            };
            writeln!(out, "  {} {} {how}", r.role, r.id)?;
        }
        for k in &result.unknown_creates {
            writeln!(
                out,
                "  create with idempotency key {k}: outcome unknown, a reservation may exist"
            )?;
        }
    }
    let verdict = match result.exit_code() {
        0 => "every MUST holds",
        1 => "a MUST fails",
        _ => "could not probe",
    };
    writeln!(out, "\nresult: {verdict} (exit {})", result.exit_code())
}
