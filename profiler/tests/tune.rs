//! The tuning loop's GPU path with a stand-in timer (no GPU here): top-k timing, skipped
//! candidates with reasons, the reference check of the winner, the time budget, the gap to
//! the analytic pick, and what lands in the database.

use std::collections::HashMap;
use std::time::Duration;

use bolt_codegen::epilogue::Epilogue;
use bolt_codegen::spec::{Arch, Layout};
use bolt_profiler::analytic::Ranked;
use bolt_profiler::db::{Db, Source};
use bolt_profiler::device::DeviceSpec;
use bolt_profiler::timing::Timer;
use bolt_profiler::tune::{tune, tune_analytic, Event, Outcome, TuneOptions};
use bolt_profiler::workload::{Workload, F16_F32_F16};

/// Times candidates as `factor * analytic estimate`, per name; refuses names listed in
/// `refuse`; fails the reference check for names in `wrong`.
struct FakeTimer {
    factor: HashMap<String, f64>,
    refuse: Vec<String>,
    wrong: Vec<String>,
    timed: Vec<String>,
    delay: Duration,
}

impl FakeTimer {
    fn new() -> FakeTimer {
        FakeTimer { factor: HashMap::new(), refuse: vec![], wrong: vec![], timed: vec![], delay: Duration::ZERO }
    }
}

impl Timer for FakeTimer {
    fn describe(&self) -> String {
        "fake".into()
    }
    fn time(&mut self, _w: &Workload, r: &Ranked) -> Result<f64, String> {
        std::thread::sleep(self.delay);
        self.timed.push(r.candidate.name.clone());
        if self.refuse.contains(&r.candidate.name) {
            return Err("can_implement: unsupported problem".into());
        }
        Ok(r.estimate.time_s * self.factor.get(&r.candidate.name).copied().unwrap_or(1.0))
    }
    fn verify(&mut self, _w: &Workload, r: &Ranked) -> Result<(), String> {
        if self.wrong.contains(&r.candidate.name) {
            Err("element 7: 3.5 vs reference 1.25".into())
        } else {
            Ok(())
        }
    }
}

fn workloads() -> Vec<Workload> {
    [(1280, 3072, 768), (4096, 4096, 4096), (8, 4096, 4096)]
        .iter()
        .map(|&(m, n, k)| {
            Workload::gemm(&format!("g{m}"), (m, n, k, 1), F16_F32_F16, [Layout::RowMajor; 3], Epilogue::plain())
                .unwrap()
        })
        .collect()
}

fn opts() -> TuneOptions {
    TuneOptions::new(Arch::Sm90, DeviceSpec::h100_sxm5_80gb())
}

#[test]
fn measuring_times_the_top_k_and_keeps_the_fastest() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(&dir.path().join("db.json")).unwrap();
    let ws = workloads();
    let ranking = bolt_profiler::rank(&ws[0], &opts().device, Arch::Sm90);
    let (first, third) = (ranking[0].candidate.name.clone(), ranking[2].candidate.name.clone());
    let mut timer = FakeTimer::new();
    // The analytic third is really 30% faster than the analytic first; the second is refused.
    let speedup = ranking[0].estimate.time_s / ranking[2].estimate.time_s * 0.7;
    timer.factor.insert(third.clone(), speedup);
    timer.refuse.push(ranking[1].candidate.name.clone());
    let mut o = opts();
    o.top_k = 4;
    let mut events = vec![];
    let results = tune(&ws[..1], &o, &mut db, Some(&mut timer), &mut |e| events.push(format!("{e:?}"))).unwrap();
    assert_eq!(timer.timed.len(), 4);
    let r = &results[0];
    assert_eq!(r.outcome, Outcome::Measured);
    let e = r.entry.as_ref().unwrap();
    assert_eq!(e.best, third);
    assert_eq!(e.source, Source::Measured);
    assert_eq!(e.analytic_pick.as_deref(), Some(first.as_str()));
    assert_eq!(e.tried.iter().filter(|t| t.measured_s.is_some()).count(), 3);
    assert!(e.tried[1].skipped.as_deref().unwrap().contains("can_implement"));
    // The analytic pick ran 1/0.7 - 1 = 43% slower than the best.
    let gap = r.gap_to_analytic_pct().unwrap();
    assert!((gap - 42.857).abs() < 0.1, "{gap}");
    assert!(events.first().unwrap().contains("Start") && events.last().unwrap().contains("Finish"));
    // Saved.
    let again = Db::open(&dir.path().join("db.json")).unwrap();
    assert_eq!(again.get(&r.key).unwrap().best, third);
}

#[test]
fn a_wrong_winner_loses_to_the_next_fastest_correct_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(&dir.path().join("db.json")).unwrap();
    let ws = workloads();
    let ranking = bolt_profiler::rank(&ws[1], &opts().device, Arch::Sm90);
    let mut timer = FakeTimer::new();
    timer.factor.insert(ranking[1].candidate.name.clone(), 0.5);
    timer.wrong.push(ranking[1].candidate.name.clone());
    let results = tune(&ws[1..2], &opts(), &mut db, Some(&mut timer), &mut |_| {}).unwrap();
    let r = &results[0];
    assert_eq!(r.outcome, Outcome::Measured);
    let e = r.entry.as_ref().unwrap();
    assert_eq!(e.best, ranking[0].candidate.name);
    assert!(e.tried[1].skipped.as_deref().unwrap().starts_with("wrong result"));

    // Every timed one wrong: the analytic pick, flagged.
    let mut timer = FakeTimer::new();
    timer.wrong = ranking.iter().map(|r| r.candidate.name.clone()).collect();
    let results = tune(&ws[1..2], &opts(), &mut db, Some(&mut timer), &mut |_| {}).unwrap();
    match &results[0].outcome {
        Outcome::AnalyticFallback(why) => assert!(why.contains("failed the reference check"), "{why}"),
        o => panic!("{o:?}"),
    }
    let e = results[0].entry.as_ref().unwrap();
    assert_eq!((e.best.as_str(), e.source), (ranking[0].candidate.name.as_str(), Source::Analytic));
    // The database keeps the earlier measured result over the new analytic one.
    assert_eq!(db.get(&e.key).unwrap().source, Source::Measured);
}

#[test]
fn every_candidate_refused_and_the_time_budget() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(&dir.path().join("db.json")).unwrap();
    let ws = workloads();
    let mut timer = FakeTimer::new();
    timer.refuse =
        bolt_profiler::rank(&ws[2], &opts().device, Arch::Sm90).iter().map(|r| r.candidate.name.clone()).collect();
    let results = tune(&ws[2..], &opts(), &mut db, Some(&mut timer), &mut |_| {}).unwrap();
    assert!(matches!(&results[0].outcome, Outcome::AnalyticFallback(w) if w.contains("no candidate could be timed")));

    // A budget spent after the first workload: the rest are analytic picks.
    let mut timer = FakeTimer::new();
    timer.delay = Duration::from_millis(30);
    let mut o = opts();
    o.top_k = 2;
    o.time_budget = Some(Duration::from_millis(10));
    let mut db = Db::open(&dir.path().join("db2.json")).unwrap();
    let results = tune(&ws, &o, &mut db, Some(&mut timer), &mut |_| {}).unwrap();
    assert_eq!(results[0].outcome, Outcome::Measured);
    for r in &results[1..] {
        assert_eq!(r.outcome, Outcome::AnalyticFallback("time budget spent".into()));
    }
    assert_eq!(timer.timed.len(), 2);
}

#[test]
fn analytic_tuning_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.json");
    let mut db = Db::open(&path).unwrap();
    let ws = workloads();
    let results = tune_analytic(&ws, &opts(), &mut db, &mut |_: Event| {}).unwrap();
    assert!(results.iter().all(|r| r.outcome == Outcome::Analytic));
    assert!(results.iter().all(|r| r.gap_to_analytic_pct().is_none()));
    assert_eq!(Db::open(&path).unwrap().len(), 3);
    let mut o = opts();
    o.resume = true;
    let mut timer = FakeTimer::new();
    let again = tune(&ws, &o, &mut db, Some(&mut timer), &mut |_| {}).unwrap();
    assert!(again.iter().all(|r| r.outcome == Outcome::Resumed));
    assert!(timer.timed.is_empty());
    for (a, b) in results.iter().zip(&again) {
        assert_eq!(a.entry.as_ref().unwrap().best, b.entry.as_ref().unwrap().best);
    }
}

#[test]
fn dynamic_leading_dims_share_bucketed_entries() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(&dir.path().join("db.json")).unwrap();
    let mut o = opts();
    o.dynamic_leading_dim = true;
    let w = |m| Workload::gemm("d", (m, 768, 768, 1), F16_F32_F16, [Layout::RowMajor; 3], Epilogue::plain()).unwrap();
    let r = tune_analytic(&[w(1000)], &o, &mut db, &mut |_| {}).unwrap();
    assert_eq!(r[0].key.shape[0], 1024);
    assert_eq!(r[0].key.bucket.as_ref().unwrap().upper, 1024);
    // M = 600 falls in the same bucket: resumed, and found by lookup.
    o.resume = true;
    let again = tune_analytic(&[w(600)], &o, &mut db, &mut |_| {}).unwrap();
    assert_eq!(again[0].outcome, Outcome::Resumed);
    let tc = bolt_profiler::db::Toolchain::pinned();
    assert!(db.lookup(&w(700), &o.device, Arch::Sm90, &tc).is_some());
    assert!(db.lookup(&w(1100), &o.device, Arch::Sm90, &tc).is_none());
}
