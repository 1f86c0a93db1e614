//! `leasebeat simulate`: heartbeat strategies compared on seeded
//! virtual-time histories against the server model, in parallel.
//!
//! Each history ([`History::generate`]) draws a lease, a request budget, a
//! server regime, round trips, faults, a clock and maybe a pause from its own
//! ChaCha8 stream (seed, index). Every strategy ([`Kind`]) runs on every
//! history against a fresh [`leasebeat::sim::SimServer`]; the results are
//! integer sums and histogram merges, so a run is deterministic for a seed
//! whatever the thread count.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use serde::Serialize;

pub mod engine;
pub mod history;
mod plot;
pub mod strategy;

pub use engine::{Lapse, RunResult, run, run_traced};
pub use history::{Clock, Fault, FaultWindow, History, MS};
pub use strategy::{Kind, Strategy};

/// Histories per work unit (and per progress tick).
const CHUNK: u64 = 2_048;

/// Running totals of one strategy.
#[derive(Clone, Debug)]
pub struct Tally {
    /// Histories run.
    pub histories: u64,
    /// Virtual lease time covered (ns).
    pub held_ns: u128,
    /// Extensions the server applied.
    pub extensions: u64,
    /// Requests sent.
    pub attempts: u64,
    /// Lapses with no stop and no standing jeopardy report before them.
    pub unreported_lapses: u64,
    /// Lapses the client had reported (jeopardy) before they happened.
    pub reported_lapses: u64,
    /// Jeopardy reports (D-15).
    pub jeopardy: u64,
    /// Histories where the server answered MAX_EXTENSIONS_EXCEEDED.
    pub exhausted: u64,
    /// Inputs the core refused (must stay 0).
    pub core_errors: u64,
    /// How runs ended (`lapsed` when the lease lapsed first).
    pub stops: BTreeMap<&'static str, u64>,
    /// Lead (ms) left on the server at each extend.
    pub leads: Histogram<u64>,
    /// Per history kind: (histories, unreported lapses).
    pub by_kind: BTreeMap<&'static str, (u64, u64)>,
    /// Per server regime: (virtual ns, extensions).
    pub by_regime: BTreeMap<&'static str, (u128, u64)>,
    /// The smallest indices of histories with an unreported lapse (at most
    /// [`EXAMPLES`]), to look at one with `--explain INDEX`.
    pub lapse_examples: Vec<u64>,
}

/// How many history indices with an unreported lapse a tally keeps.
pub const EXAMPLES: usize = 10;

impl Default for Tally {
    fn default() -> Tally {
        Tally {
            histories: 0,
            held_ns: 0,
            extensions: 0,
            attempts: 0,
            unreported_lapses: 0,
            reported_lapses: 0,
            jeopardy: 0,
            exhausted: 0,
            core_errors: 0,
            stops: BTreeMap::new(),
            leads: Histogram::new_with_bounds(1, 1 << 40, 2).expect("valid bounds"),
            by_kind: BTreeMap::new(),
            by_regime: BTreeMap::new(),
            lapse_examples: Vec::new(),
        }
    }
}

impl Tally {
    /// Adds one run.
    pub fn add(&mut self, h: &History, r: &RunResult) {
        self.histories += 1;
        self.held_ns += u128::from(r.held_ns);
        self.extensions += u64::from(r.extensions);
        self.attempts += u64::from(r.attempts);
        self.jeopardy += u64::from(r.jeopardy);
        self.core_errors += u64::from(r.core_errors);
        self.exhausted += u64::from(r.exhausted);
        let k = self.by_kind.entry(h.kind()).or_default();
        k.0 += 1;
        match r.lapse {
            Some(Lapse {
                reported: false, ..
            }) => {
                self.unreported_lapses += 1;
                k.1 += 1;
                if self.lapse_examples.len() < EXAMPLES {
                    self.lapse_examples.push(h.index);
                }
            }
            Some(_) => self.reported_lapses += 1,
            None => {}
        }
        let end = if r.lapse.is_some() {
            "lapsed"
        } else {
            r.stop.unwrap_or("(none)")
        };
        *self.stops.entry(end).or_default() += 1;
        let g = self.by_regime.entry(h.regime).or_default();
        g.0 += u128::from(r.held_ns);
        g.1 += u64::from(r.extensions);
    }

    /// Adds another tally (commutative and associative: integer sums).
    pub fn merge(&mut self, o: &Tally) {
        self.histories += o.histories;
        self.held_ns += o.held_ns;
        self.extensions += o.extensions;
        self.attempts += o.attempts;
        self.unreported_lapses += o.unreported_lapses;
        self.reported_lapses += o.reported_lapses;
        self.jeopardy += o.jeopardy;
        self.exhausted += o.exhausted;
        self.core_errors += o.core_errors;
        for (k, v) in &o.stops {
            *self.stops.entry(k).or_default() += v;
        }
        self.leads.add(&o.leads).expect("same bounds");
        for (k, v) in &o.by_kind {
            let e = self.by_kind.entry(k).or_default();
            e.0 += v.0;
            e.1 += v.1;
        }
        for (k, v) in &o.by_regime {
            let e = self.by_regime.entry(k).or_default();
            e.0 += v.0;
            e.1 += v.1;
        }
        self.lapse_examples.extend_from_slice(&o.lapse_examples);
        self.lapse_examples.sort_unstable();
        self.lapse_examples.truncate(EXAMPLES);
    }

    fn hours(&self) -> f64 {
        self.held_ns as f64 / 3.6e12
    }

    /// Extensions per hour of lease.
    pub fn extensions_per_hour(&self) -> f64 {
        per_hour(self.extensions, self.held_ns)
    }

    /// A lead percentile (ms), 0 when no extend found the lease alive.
    pub fn lead_ms(&self, q: f64) -> u64 {
        if self.leads.is_empty() {
            0
        } else {
            self.leads.value_at_quantile(q)
        }
    }
}

fn per_hour(n: u64, ns: u128) -> f64 {
    if ns == 0 {
        0.0
    } else {
        n as f64 / (ns as f64 / 3.6e12)
    }
}

/// Runs every strategy on one history.
pub fn run_history(h: &History, tallies: &mut [Tally]) {
    for (kind, tally) in Kind::ALL.iter().zip(tallies.iter_mut()) {
        let mut s = kind.start(h);
        let leads = &mut tally.leads;
        let r = run(h, &mut *s, &mut |v| leads.saturating_record(v));
        tally.add(h, &r);
    }
}

/// Runs one strategy on one history, keeping every lead (for tests and
/// close looks at a single history).
pub fn run_one(h: &History, kind: Kind) -> (RunResult, Vec<u64>) {
    let mut leads = Vec::new();
    let mut s = kind.start(h);
    let r = run(h, &mut *s, &mut |v| leads.push(v));
    (r, leads)
}

/// Writes history `index` of the run seeded with `seed` and, for each
/// strategy, every event of its run and how it ended (`--explain`).
pub fn explain(seed: u64, index: u64, w: &mut impl Write) -> std::io::Result<()> {
    let h = History::generate(seed, index);
    writeln!(w, "history {index} of seed {seed} ({}):\n{h:#?}", h.kind())?;
    for kind in Kind::ALL {
        let mut s = kind.start(&h);
        let mut trace = Vec::new();
        let r = run_traced(&h, &mut *s, &mut |_| {}, Some(&mut trace));
        writeln!(w, "\n== {} ({})", kind.name(), kind.about())?;
        writeln!(w, "  true time s  event")?;
        for line in trace {
            writeln!(w, "{line}")?;
        }
        writeln!(w, "result: {r:?}")?;
    }
    Ok(())
}

/// The totals of a run of `sequences` histories from `seed`.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Histories.
    pub sequences: u64,
    /// Seed.
    pub seed: u64,
    /// One tally per strategy, in [`Kind::ALL`] order.
    pub tallies: Vec<Tally>,
}

/// Runs `sequences` histories from `seed` on the current rayon pool, with a
/// progress bar on stderr when `progress` (hidden when stderr is not a
/// terminal).
pub fn simulate(sequences: u64, seed: u64, progress: bool) -> Summary {
    let bar = if progress {
        let b = ProgressBar::with_draw_target(Some(sequences), ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template(
                "{spinner} simulate [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} histories ({eta} left)",
            )
            .expect("a valid template"),
        );
        b
    } else {
        ProgressBar::hidden()
    };
    let chunks = sequences.div_ceil(CHUNK);
    let empty = || -> Vec<Tally> { Kind::ALL.iter().map(|_| Tally::default()).collect() };
    let tallies = (0..chunks)
        .into_par_iter()
        .map(|c| {
            let mut t = empty();
            let from = c * CHUNK;
            let to = (from + CHUNK).min(sequences);
            for i in from..to {
                let h = History::generate(seed, i);
                run_history(&h, &mut t);
            }
            bar.inc(to - from);
            t
        })
        .reduce(empty, |mut a, b| {
            for (x, y) in a.iter_mut().zip(&b) {
                x.merge(y);
            }
            a
        });
    bar.finish_and_clear();
    Summary {
        sequences,
        seed,
        tallies,
    }
}

/// One strategy in the JSON output.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct StrategyJson {
    /// Strategy name.
    pub name: &'static str,
    /// What it does.
    pub about: &'static str,
    /// Extensions the server applied per hour of lease.
    pub extensions_per_hour: f64,
    /// Requests sent per hour of lease.
    pub attempts_per_hour: f64,
    /// Lapses before any stop or standing jeopardy report.
    pub unreported_lapses: u64,
    /// Lapses the client had reported (jeopardy) first.
    pub reported_lapses: u64,
    /// Jeopardy reports.
    pub jeopardy_reports: u64,
    /// Histories whose extension limit this strategy exhausted.
    pub exhausted_extension_limit: u64,
    /// How runs ended, by reason (`lapsed`: the lease lapsed first;
    /// `cancelled`: the work ended and the client cancelled).
    pub stops: BTreeMap<&'static str, u64>,
    /// Lead (ms) left on the server at each extend: p1, p50, p99.
    pub lead_ms: BTreeMap<&'static str, u64>,
    /// Extensions per lease-hour by server regime.
    pub extensions_per_hour_by_regime: BTreeMap<&'static str, f64>,
    /// Unreported lapses by history kind.
    pub unreported_lapses_by_kind: BTreeMap<&'static str, u64>,
    /// The smallest indices of histories with an unreported lapse (at most
    /// ten; `leasebeat simulate --seed S --explain INDEX` replays one).
    pub unreported_lapse_examples: Vec<u64>,
    /// Inputs the core refused (always 0 unless the simulator is wrong).
    pub core_errors: u64,
    /// Virtual lease-hours covered.
    pub lease_hours: f64,
}

/// The `--json` object.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct SummaryJson {
    /// Histories.
    pub sequences: u64,
    /// Seed.
    pub seed: u64,
    /// Histories per kind.
    pub histories_by_kind: BTreeMap<&'static str, u64>,
    /// One entry per strategy.
    pub strategies: Vec<StrategyJson>,
}

impl Summary {
    /// The `--json` object.
    pub fn to_json(&self) -> SummaryJson {
        let strategies = Kind::ALL
            .iter()
            .zip(&self.tallies)
            .map(|(k, t)| StrategyJson {
                name: k.name(),
                about: k.about(),
                extensions_per_hour: round2(t.extensions_per_hour()),
                attempts_per_hour: round2(per_hour(t.attempts, t.held_ns)),
                unreported_lapses: t.unreported_lapses,
                reported_lapses: t.reported_lapses,
                jeopardy_reports: t.jeopardy,
                exhausted_extension_limit: t.exhausted,
                stops: t.stops.clone(),
                lead_ms: [
                    ("p1", t.lead_ms(0.01)),
                    ("p50", t.lead_ms(0.5)),
                    ("p99", t.lead_ms(0.99)),
                ]
                .into_iter()
                .collect(),
                extensions_per_hour_by_regime: t
                    .by_regime
                    .iter()
                    .map(|(k, (ns, n))| (*k, round2(per_hour(*n, *ns))))
                    .collect(),
                unreported_lapses_by_kind: t.by_kind.iter().map(|(k, v)| (*k, v.1)).collect(),
                unreported_lapse_examples: t.lapse_examples.clone(),
                core_errors: t.core_errors,
                lease_hours: round2(t.hours()),
            })
            .collect();
        SummaryJson {
            sequences: self.sequences,
            seed: self.seed,
            histories_by_kind: self.tallies[0]
                .by_kind
                .iter()
                .map(|(k, v)| (*k, v.0))
                .collect(),
            strategies,
        }
    }

    /// The readable tables.
    pub fn print(&self, w: &mut impl Write) -> std::io::Result<()> {
        self.print_table(w)?;
        self.print_details(w)
    }

    /// The main table: one row per strategy.
    pub fn print_table(&self, w: &mut impl Write) -> std::io::Result<()> {
        writeln!(
            w,
            "{} histories, seed {}; every strategy on the same histories\n",
            self.sequences, self.seed
        )?;
        writeln!(
            w,
            "{:<15} {:>11} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "strategy",
            "ext/lease-h",
            "unreported",
            "reported",
            "jeopardy",
            "exhausted",
            "lead p1",
            "lead p50",
            "lead p99",
            "stopped"
        )?;
        writeln!(
            w,
            "{:<15} {:>11} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "", "", "lapses", "lapses", "reports", "ext.limit", "s", "s", "s", "itself"
        )?;
        for (k, t) in Kind::ALL.iter().zip(&self.tallies) {
            let by_itself: u64 = t
                .stops
                .iter()
                .filter(|(r, _)| !matches!(**r, "cancelled" | "lapsed" | "(none)"))
                .map(|(_, n)| n)
                .sum();
            writeln!(
                w,
                "{:<15} {:>11.1} {:>10} {:>10} {:>9} {:>9} {:>9.1} {:>9.1} {:>9.1} {:>9}",
                k.name(),
                t.extensions_per_hour(),
                t.unreported_lapses,
                t.reported_lapses,
                t.jeopardy,
                t.exhausted,
                t.lead_ms(0.01) as f64 / 1000.0,
                t.lead_ms(0.5) as f64 / 1000.0,
                t.lead_ms(0.99) as f64 / 1000.0,
                by_itself,
            )?;
        }
        let errors: u64 = self.tallies.iter().map(|t| t.core_errors).sum();
        if errors > 0 {
            writeln!(
                w,
                "\nWARNING: the core refused {errors} inputs (a simulator bug)"
            )?;
        }
        Ok(())
    }

    /// The tables behind the main one: where each strategy lapses and
    /// over-spends, and how runs ended.
    pub fn print_details(&self, w: &mut impl Write) -> std::io::Result<()> {
        let names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
        let core = &self.tallies[0];
        if !core.lapse_examples.is_empty() {
            writeln!(
                w,
                "\nleasebeat lapsed unreported in histories {:?} (replay one with --explain INDEX)",
                core.lapse_examples
            )?;
        }
        // Where each strategy lapses.
        writeln!(w, "\nunreported lapses by history kind")?;
        write!(w, "{:<24} {:>10}", "history kind", "histories")?;
        for n in &names {
            write!(w, " {:>14}", n)?;
        }
        writeln!(w)?;
        for (kind, (count, _)) in &self.tallies[0].by_kind {
            write!(w, "{:<24} {:>10}", kind, count)?;
            for t in &self.tallies {
                write!(w, " {:>14}", t.by_kind.get(kind).map_or(0, |v| v.1))?;
            }
            writeln!(w)?;
        }
        // Where each strategy over-spends.
        writeln!(w, "\nextensions per lease-hour by server regime")?;
        write!(w, "{:<24} {:>10}", "regime", "")?;
        for n in &names {
            write!(w, " {:>14}", n)?;
        }
        writeln!(w)?;
        for regime in self.tallies[0].by_regime.keys() {
            write!(w, "{:<24} {:>10}", regime, "")?;
            for t in &self.tallies {
                let (ns, n) = t.by_regime.get(regime).copied().unwrap_or_default();
                write!(w, " {:>14.1}", per_hour(n, ns))?;
            }
            writeln!(w)?;
        }
        // How runs ended.
        writeln!(w, "\nhow runs ended")?;
        let mut reasons: Vec<&str> = Vec::new();
        for t in &self.tallies {
            for r in t.stops.keys() {
                if !reasons.contains(r) {
                    reasons.push(r);
                }
            }
        }
        let order = strategy::stop_reasons();
        reasons.sort_by_key(|r| (order.iter().position(|o| o == r).unwrap_or(usize::MAX), *r));
        write!(w, "{:<24} {:>10}", "end", "")?;
        for n in &names {
            write!(w, " {:>14}", n)?;
        }
        writeln!(w)?;
        for r in reasons {
            write!(w, "{:<24} {:>10}", r, "")?;
            for t in &self.tallies {
                write!(w, " {:>14}", t.stops.get(r).copied().unwrap_or(0))?;
            }
            writeln!(w)?;
        }
        Ok(())
    }

    /// Draws the comparison as SVG.
    pub fn plot(&self, path: &Path) -> Result<(), String> {
        plot::draw(self, path)
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
