//! Seeded histories: one lease's environment (server regime, request budget,
//! round trips, faults, the client's clock and pauses), in virtual time.
//!
//! A history is drawn from its own ChaCha8 stream (`seed`, stream `index`),
//! so it never depends on which thread drew it or in which order.

use leasebeat::sim::Policy;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Nanoseconds per millisecond.
pub const MS: u64 = 1_000_000;

/// A fault window: attempts sent inside `[from_ns, to_ns)` meet `kind`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultWindow {
    /// Start (true time, ns).
    pub from_ns: u64,
    /// End, exclusive (true time, ns).
    pub to_ns: u64,
    /// What happens.
    pub kind: Fault,
}

/// What an extend attempt sent inside a fault window meets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// 503, not applied.
    ServerError,
    /// No answer: the client observes its timeout at the budget; the server
    /// applied the extension when `applied` (a lost response).
    Timeout {
        /// The request reached the server and was applied.
        applied: bool,
    },
    /// The connection is reset before the request reaches the server.
    Reset,
    /// The server applies the extension, the response is lost (reset).
    LostResponse,
    /// 429 with `Retry-After: secs`.
    Throttled {
        /// Retry-After in seconds.
        secs: u64,
    },
    /// The response is slower by this much (applied either way; beyond the
    /// budget it becomes a timeout).
    Slow {
        /// Extra delay (ms).
        extra_ms: u64,
    },
    /// The client's timers fire this much late.
    LateTimer {
        /// Lateness (ms).
        late_ms: u64,
    },
}

impl Fault {
    /// A short stable name.
    pub fn name(self) -> &'static str {
        match self {
            Fault::ServerError => "5xx-burst",
            Fault::Timeout { .. } => "timeout",
            Fault::Reset => "reset",
            Fault::LostResponse => "lost-response",
            Fault::Throttled { .. } => "429",
            Fault::Slow { .. } => "slow-response",
            Fault::LateTimer { .. } => "late-timer",
        }
    }
}

/// How the client's monotonic clock reads true time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// Exact.
    Exact,
    /// Reads true time rounded down to a granularity (ns).
    Coarse {
        /// Granularity (ns).
        grain_ns: u64,
    },
    /// Stands still on `[from_ns, from_ns + len_ns)`, then reads true time
    /// again (a VM's clock while its host deschedules it: the client runs
    /// nothing meanwhile, see [`History::wake`]).
    Stall {
        /// Start of the stall (ns).
        from_ns: u64,
        /// Length of the stall (ns).
        len_ns: u64,
    },
}

impl Clock {
    /// The client's reading at true time `t`.
    pub fn read(self, t: u64) -> u64 {
        match self {
            Clock::Exact => t,
            Clock::Coarse { grain_ns } => t - t % grain_ns,
            Clock::Stall { from_ns, len_ns } => {
                if t >= from_ns && t < from_ns.saturating_add(len_ns) {
                    from_ns
                } else {
                    t
                }
            }
        }
    }

    /// The earliest true time at which the client reads at least `c`.
    pub fn true_at(self, c: u64) -> u64 {
        match self {
            Clock::Exact => c,
            Clock::Coarse { grain_ns } => c.div_ceil(grain_ns).saturating_mul(grain_ns),
            Clock::Stall { from_ns, len_ns } => {
                if c <= from_ns {
                    c
                } else {
                    c.max(from_ns.saturating_add(len_ns))
                }
            }
        }
    }

    /// The clock's resolution (ns): a reading `c` means true time in
    /// `[c, c + resolution)` (what `clock_getres` tells a runner).
    pub fn resolution(self) -> u64 {
        match self {
            Clock::Coarse { grain_ns } => grain_ns,
            Clock::Exact | Clock::Stall { .. } => 1,
        }
    }

    /// The earliest true time at which a runner that knows the resolution
    /// can no longer rule out that true time reached `c`: the reading is
    /// above `c - resolution`.
    pub fn may_have_reached(self, c: u64) -> u64 {
        self.true_at(c.saturating_sub(self.resolution() - 1))
    }

    fn name(self) -> &'static str {
        match self {
            Clock::Exact => "exact",
            Clock::Coarse { .. } => "coarse-clock",
            Clock::Stall { .. } => "stalled-clock",
        }
    }
}

/// One lease's environment.
#[derive(Clone, Debug)]
pub struct History {
    /// Index of the history (its RNG stream).
    pub index: u64,
    /// The run's seed.
    pub seed: u64,
    /// The server regime's name.
    pub regime: &'static str,
    /// The server policy.
    pub policy: Policy,
    /// Requested lease (`ttl_ms`, also `extend_by_ms`).
    pub ttl_ms: u64,
    /// The client's enforced per-attempt budget (ms).
    pub budget_ms: u64,
    /// Smallest round trip (ms); each attempt adds up to as much again.
    pub rtt_ms: u64,
    /// How long the client works before it cancels (true time, ns).
    pub work_ns: u64,
    /// Fault windows (at most two).
    pub faults: Vec<FaultWindow>,
    /// The client's clock.
    pub clock: Clock,
    /// A pause of the whole client: `[from, from + len)` (true time, ns).
    pub pause: Option<(u64, u64)>,
}

/// Log-uniform integer in `[lo, hi]`.
fn log_uniform(rng: &mut ChaCha8Rng, lo: u64, hi: u64) -> u64 {
    let (a, b) = ((lo as f64).ln(), (hi as f64).ln());
    let v = rng.random_range(a..=b).exp().round() as u64;
    v.clamp(lo, hi)
}

impl History {
    /// A plain history: additive server, no fault, exact clock. The
    /// building block of hand-made histories (tests, `--explain`).
    pub fn plain(ttl_ms: u64, budget_ms: u64, rtt_ms: u64, work_ms: u64) -> History {
        History {
            index: 0,
            seed: 0,
            regime: "additive",
            policy: Policy::additive(),
            ttl_ms,
            budget_ms,
            rtt_ms,
            work_ns: work_ms * MS,
            faults: Vec::new(),
            clock: Clock::Exact,
            pause: None,
        }
    }

    /// The history `index` of the run seeded with `seed`.
    pub fn generate(seed: u64, index: u64) -> History {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(index.wrapping_mul(2));
        let r = &mut rng;
        // Lease and budget.
        let (ttl_ms, budget_ms) = match r.random_range(0..100u32) {
            // The 1-2 s zone: spec-legal leases shorter than any safe schedule.
            0..10 => (r.random_range(1_000..2_000), 1_000),
            // The seed's dead zone: 60 s lease, 30 s timeout.
            10..18 => (60_000, 30_000),
            _ => {
                let ttl = log_uniform(r, 2_000, 600_000);
                let budgets = [1_000, 2_000, 5_000, 10_000, 30_000];
                (ttl, budgets[r.random_range(0..budgets.len())])
            }
        };
        let rtt_ms = log_uniform(r, 2, 400);
        // Regime.
        let frac = |r: &mut ChaCha8Rng, lo: f64, hi: f64| {
            ((ttl_ms as f64) * r.random_range(lo..hi)).round().max(1.0) as u64
        };
        let (regime, policy) = match r.random_range(0..100u32) {
            0..25 => ("additive", Policy::additive()),
            25..40 => (
                "grant-cap",
                Policy {
                    grant_cap_ms: Some(frac(r, 0.2, 0.9)),
                    ..Policy::default()
                },
            ),
            40..60 => (
                "max-lead",
                Policy {
                    max_lead_ms: Some(ttl_ms),
                    ..Policy::default()
                },
            ),
            60..70 => (
                "initial-ttl-cap",
                Policy {
                    initial_ttl_cap_ms: Some(frac(r, 0.2, 0.9).max(1_000)),
                    ..Policy::default()
                },
            ),
            70..80 => (
                "extension-limit",
                Policy {
                    max_extensions: Some(r.random_range(2..=12)),
                    ..Policy::default()
                },
            ),
            80..90 => (
                "older-server",
                Policy {
                    omit_remaining: true,
                    ..Policy::default()
                },
            ),
            _ => {
                let mut p = Policy::default();
                match r.random_range(0..4u32) {
                    0 => p.max_lead_ms = Some(ttl_ms),
                    1 => p.grant_cap_ms = Some(frac(r, 0.2, 0.9)),
                    2 => p.initial_ttl_cap_ms = Some(frac(r, 0.2, 0.9).max(1_000)),
                    _ => p.omit_remaining = true,
                }
                if r.random_bool(0.5) {
                    p.max_extensions = Some(r.random_range(2..=20));
                }
                if r.random_bool(0.3) {
                    p.omit_remaining = !p.omit_remaining;
                }
                ("mix", p)
            }
        };
        let work_ns = ((ttl_ms as f64) * r.random_range(1.0..8.0) * MS as f64) as u64;
        // Faults.
        let n_faults = match r.random_range(0..100u32) {
            0..40 => 0,
            40..85 => 1,
            _ => 2,
        };
        let mut faults = Vec::with_capacity(n_faults);
        for _ in 0..n_faults {
            let from_ns = r.random_range(0..work_ns);
            let len_ns = ((ttl_ms as f64) * r.random_range(0.05..1.0) * MS as f64) as u64;
            let kind = match r.random_range(0..9u32) {
                0 => Fault::ServerError,
                1 => Fault::Timeout {
                    applied: r.random_bool(0.5),
                },
                2 => Fault::Reset,
                3 => Fault::LostResponse,
                // Retry-After inside the retry window (1-3 s) ...
                4 => Fault::Throttled {
                    secs: r.random_range(1..=3),
                },
                // ... and beyond it (longer than the lease).
                5 => Fault::Throttled {
                    secs: ttl_ms / 1000 + r.random_range(5..60),
                },
                6 => Fault::Slow {
                    extra_ms: ((budget_ms as f64) * r.random_range(0.2..1.5)) as u64,
                },
                _ => Fault::LateTimer {
                    late_ms: r.random_range(50..=2_500),
                },
            };
            faults.push(FaultWindow {
                from_ns,
                to_ns: from_ns.saturating_add(len_ns),
                kind,
            });
        }
        let clock = match r.random_range(0..100u32) {
            0..70 => Clock::Exact,
            70..85 => {
                let grains = [1, 4, 10, 16];
                Clock::Coarse {
                    grain_ns: grains[r.random_range(0..grains.len())] * MS,
                }
            }
            _ => Clock::Stall {
                from_ns: r.random_range(0..work_ns),
                len_ns: r.random_range(50..=900) * MS,
            },
        };
        let pause = if r.random_bool(0.05) {
            let from = (work_ns as f64 * r.random_range(0.2..0.8)) as u64;
            let len = ((ttl_ms as f64) * r.random_range(1.1..3.0) * MS as f64) as u64;
            Some((from, len))
        } else {
            None
        };
        History {
            index,
            seed,
            regime,
            policy,
            ttl_ms,
            budget_ms,
            rtt_ms,
            work_ns,
            faults,
            clock,
            pause,
        }
    }

    /// The RNG of per-attempt round trips: the same sequence for every
    /// strategy run on this history.
    pub fn attempt_rng(&self) -> ChaCha8Rng {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(self.index.wrapping_mul(2).wrapping_add(1));
        rng
    }

    /// The fault met by an attempt sent at `t`, if any (the first window).
    pub fn fault_at(&self, t: u64) -> Option<Fault> {
        self.faults
            .iter()
            .find(|w| t >= w.from_ns && t < w.to_ns)
            .map(|w| w.kind)
    }

    /// When a timer due at true time `t` fires: late inside a late-timer
    /// window, and not before the client wakes from a pause.
    pub fn fire_at(&self, t: u64) -> u64 {
        let late = match self.fault_at(t) {
            Some(Fault::LateTimer { late_ms }) => late_ms * MS,
            _ => 0,
        };
        self.wake(t.saturating_add(late))
    }

    /// The first instant at or after `t` at which the client runs.
    ///
    /// A stalled clock stands still because the client's machine is not
    /// running it (a VM descheduled by its host): the client runs nothing
    /// until the clock catches up, like after a pause.
    pub fn wake(&self, t: u64) -> u64 {
        // A stall may end inside the pause or the pause inside a stall: the
        // client runs again only outside both.
        let mut t = t;
        loop {
            let mut n = t;
            if let Some((from, len)) = self.pause {
                if n >= from && n < from.saturating_add(len) {
                    n = from + len;
                }
            }
            if let Clock::Stall { from_ns, len_ns } = self.clock {
                if n >= from_ns && n < from_ns.saturating_add(len_ns) {
                    n = from_ns + len_ns;
                }
            }
            if n == t {
                return t;
            }
            t = n;
        }
    }

    /// What the history is mainly about, for the per-kind table.
    pub fn kind(&self) -> &'static str {
        if self.pause.is_some() {
            return "pause > lease";
        }
        if self.ttl_ms < 2_000 {
            return "ttl 1-2 s";
        }
        if self.ttl_ms == 60_000 && self.budget_ms == 30_000 {
            return "60 s lease, 30 s budget";
        }
        if let Some(w) = self.faults.first() {
            return match w.kind {
                Fault::Throttled { secs } if secs * 1000 > self.ttl_ms => "429 beyond window",
                Fault::Throttled { .. } => "429 inside window",
                Fault::Timeout { .. } => "timeout at budget",
                k => k.name(),
            };
        }
        if self.clock != Clock::Exact {
            return self.clock.name();
        }
        self.regime
    }
}
