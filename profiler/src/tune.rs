//! The tuning loop: for each workload, rank the candidates analytically, time the top k on
//! the GPU when a [`Timer`] is given (else take the analytic top-1), verify the winner, and
//! record the result in the database. `bolt-tune` and the root crate's model mode are thin
//! wrappers around [`tune`].

use std::time::{Duration, Instant};

use bolt_codegen::spec::Arch;
use serde::Serialize;

use crate::analytic::{rank_all, Estimate};
use crate::db::{now, Db, DbError, Entry, Key, Source, Toolchain, Trial};
use crate::device::DeviceSpec;
use crate::timing::{Timer, DEFAULT_TOP_K};
use crate::workload::Workload;

#[derive(Clone, Debug)]
pub struct TuneOptions {
    pub arch: Arch,
    pub device: DeviceSpec,
    pub toolchain: Toolchain,
    /// Candidates timed per workload.
    pub top_k: usize,
    /// Stop timing once this much time has passed; later workloads get the analytic pick.
    pub time_budget: Option<Duration>,
    /// Skip workloads whose key is already in the database.
    pub resume: bool,
    /// The leading dimension (GEMM M, conv batch N) is dynamic: results are keyed by its
    /// power-of-two bucket ([`Key::bucketed`]), so one tuning serves every size in the bucket.
    pub dynamic_leading_dim: bool,
}

impl TuneOptions {
    pub fn new(arch: Arch, device: DeviceSpec) -> TuneOptions {
        TuneOptions {
            arch,
            device,
            toolchain: Toolchain::pinned(),
            top_k: DEFAULT_TOP_K,
            time_budget: None,
            resume: false,
            dynamic_leading_dim: false,
        }
    }
}

/// What happened to one workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "detail")]
pub enum Outcome {
    /// Picked from the analytic model alone.
    Analytic,
    /// Timed on the GPU.
    Measured,
    /// Measuring was wanted but did not happen (budget spent, every candidate skipped): the
    /// analytic pick, with why.
    AnalyticFallback(String),
    /// Already in the database (`--resume`).
    Resumed,
    /// No candidate can run it, with why.
    NoCandidate(String),
}

#[derive(Clone, Debug, Serialize)]
pub struct TuneResult {
    pub workload: String,
    pub description: String,
    pub key: Key,
    pub outcome: Outcome,
    pub entry: Option<Entry>,
    /// The analytic estimate of the best configuration.
    pub estimate: Option<Estimate>,
    pub flops: f64,
    /// The device's dense tensor peak for the input type, FLOP/s.
    pub peak_flops: f64,
    /// Candidates ranked and excluded.
    pub candidates: usize,
    pub excluded: usize,
}

impl TuneResult {
    /// Seconds of the best configuration (measured when measured).
    pub fn time_s(&self) -> Option<f64> {
        self.entry.as_ref().map(|e| e.time_s)
    }

    pub fn tflops(&self) -> Option<f64> {
        self.time_s().map(|t| self.flops / t / 1e12)
    }

    pub fn pct_peak(&self) -> Option<f64> {
        self.time_s().map(|t| 100.0 * self.flops / t / self.peak_flops)
    }

    /// When measured: how much slower the analytic top-1 ran than the best, in percent
    /// (0 when the analytic pick won; `None` when not measured or the pick was not timed).
    pub fn gap_to_analytic_pct(&self) -> Option<f64> {
        let e = self.entry.as_ref()?;
        if e.source != Source::Measured {
            return None;
        }
        let pick = e.analytic_pick.as_ref()?;
        let t = e.tried.iter().find(|t| &t.name == pick)?.measured_s?;
        Some(100.0 * (t / e.time_s - 1.0))
    }
}

/// Progress reports of [`tune`].
#[derive(Clone, Debug)]
pub enum Event<'a> {
    Start { total: usize },
    Workload { index: usize, name: &'a str },
    Done { index: usize, outcome: &'a Outcome },
    Finish,
}

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error(transparent)]
    Db(#[from] DbError),
}

/// Tunes every workload (see the module docs); the database is saved after every measured
/// workload and at the end. With `timer = None` it picks analytically.
pub fn tune(
    workloads: &[Workload],
    opts: &TuneOptions,
    db: &mut Db,
    mut timer: Option<&mut dyn Timer>,
    progress: &mut dyn FnMut(Event),
) -> Result<Vec<TuneResult>, TuneError> {
    let started = Instant::now();
    progress(Event::Start { total: workloads.len() });
    let mut results = Vec::with_capacity(workloads.len());
    for (index, w) in workloads.iter().enumerate() {
        progress(Event::Workload { index, name: &w.name });
        let mut key = Key::new(w, &opts.device, opts.arch, &opts.toolchain);
        if opts.dynamic_leading_dim {
            key = key.bucketed(0);
        }
        let peak_flops = opts.device.peak_flops(w.types.input);
        let base =
            |outcome: Outcome, entry: Option<Entry>, estimate: Option<Estimate>, n: usize, x: usize| TuneResult {
                workload: w.name.clone(),
                description: w.describe(),
                key: key.clone(),
                outcome,
                entry,
                estimate,
                flops: w.flops(),
                peak_flops,
                candidates: n,
                excluded: x,
            };
        if opts.resume {
            if let Some(e) = db.get(&key) {
                let r = base(Outcome::Resumed, Some(e.clone()), None, 0, 0);
                progress(Event::Done { index, outcome: &r.outcome });
                results.push(r);
                continue;
            }
        }
        let ranking = rank_all(w, &opts.device, opts.arch);
        let (n, x) = (ranking.ranked.len(), ranking.excluded.len());
        let Some(top) = ranking.ranked.first() else {
            let reason = exclusion_summary(&ranking.excluded);
            let r = base(Outcome::NoCandidate(reason), None, None, n, x);
            progress(Event::Done { index, outcome: &r.outcome });
            results.push(r);
            continue;
        };
        let mut tried: Vec<Trial> = ranking
            .ranked
            .iter()
            .map(|r| Trial {
                name: r.candidate.name.clone(),
                analytic_s: r.estimate.time_s,
                measured_s: None,
                skipped: None,
            })
            .collect();
        let mut best = top;
        let mut source = Source::Analytic;
        let mut outcome = Outcome::Analytic;
        let mut time_s = top.estimate.time_s;
        if let Some(timer) = timer.as_deref_mut() {
            let over_budget = opts.time_budget.is_some_and(|b| started.elapsed() >= b);
            if over_budget {
                outcome = Outcome::AnalyticFallback("time budget spent".into());
            } else {
                let mut timed: Vec<(usize, f64)> = Vec::new();
                for (i, r) in ranking.ranked.iter().enumerate().take(opts.top_k.max(1)) {
                    match timer.time(w, r) {
                        Ok(t) => {
                            tried[i].measured_s = Some(t);
                            timed.push((i, t));
                        }
                        Err(reason) => tried[i].skipped = Some(reason),
                    }
                }
                // Fastest first; the first whose output matches the reference wins.
                timed.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
                let mut failures = Vec::new();
                for &(i, t) in &timed {
                    match timer.verify(w, &ranking.ranked[i]) {
                        Ok(()) => {
                            best = &ranking.ranked[i];
                            source = Source::Measured;
                            outcome = Outcome::Measured;
                            time_s = t;
                            break;
                        }
                        Err(reason) => {
                            failures.push(format!("{}: {reason}", ranking.ranked[i].candidate.name));
                            tried[i].skipped = Some(format!("wrong result: {reason}"));
                        }
                    }
                }
                if source != Source::Measured {
                    outcome = Outcome::AnalyticFallback(if timed.is_empty() {
                        let why = tried.iter().find_map(|t| t.skipped.clone()).unwrap_or_default();
                        format!("no candidate could be timed (e.g. {why})")
                    } else {
                        format!("every timed candidate failed the reference check ({})", failures.join("; "))
                    });
                }
            }
        }
        let entry = Entry {
            key: key.clone(),
            best: best.candidate.name.clone(),
            tile: best.candidate.tile,
            source,
            time_s,
            analytic_s: best.estimate.time_s,
            analytic_pick: Some(top.candidate.name.clone()),
            tried,
            updated: now(),
        };
        db.insert(entry.clone());
        if source == Source::Measured {
            db.save()?;
        }
        let r = base(outcome, Some(entry), Some(best.estimate.clone()), n, x);
        progress(Event::Done { index, outcome: &r.outcome });
        results.push(r);
    }
    db.save()?;
    progress(Event::Finish);
    Ok(results)
}

/// The distinct reasons candidates were excluded, most common first, with counts and an
/// example candidate each (at most three reasons).
fn exclusion_summary(excluded: &[crate::analytic::Excluded]) -> String {
    let mut reasons: Vec<(&str, usize, &str)> = Vec::new();
    for e in excluded {
        match reasons.iter_mut().find(|r| r.0 == e.reason) {
            Some(r) => r.1 += 1,
            None => reasons.push((&e.reason, 1, &e.name)),
        }
    }
    reasons.sort_by_key(|r| std::cmp::Reverse(r.1));
    reasons
        .iter()
        .take(3)
        .map(|(reason, count, name)| match (*name, *count) {
            ("*", _) => reason.to_string(),
            (_, 1) => format!("{name}: {reason}"),
            (_, c) => format!("{c} candidates (e.g. {name}): {reason}"),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// [`tune`] with no GPU: every pick is the analytic top-1.
pub fn tune_analytic(
    workloads: &[Workload],
    opts: &TuneOptions,
    db: &mut Db,
    progress: &mut dyn FnMut(Event),
) -> Result<Vec<TuneResult>, TuneError> {
    tune(workloads, opts, db, None, progress)
}
