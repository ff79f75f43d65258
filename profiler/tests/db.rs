//! The tuning database: round trip, a writer killed mid-write, concurrent writers (threads and
//! processes), schema versions, export/import. Child processes are this test binary re-run
//! with `BOLT_DB_TEST_CHILD` set (see `child_entry_point`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bolt_codegen::epilogue::Epilogue;
use bolt_codegen::spec::{Arch, Layout};
use bolt_profiler::analytic::rank;
use bolt_profiler::db::{now, Db, DbError, Entry, Key, Source, Toolchain, Trial, SCHEMA_VERSION, TEST_PAUSE_ENV};
use bolt_profiler::device::DeviceSpec;
use bolt_profiler::workload::{Workload, F16_F32_F16};

const CHILD_ENV: &str = "BOLT_DB_TEST_CHILD";

/// An analytic entry for a GEMM of M = `m` (distinct keys per `m`).
fn entry(m: i64) -> Entry {
    let dev = DeviceSpec::h100_sxm5_80gb();
    let w = Workload::gemm("t", (m * 8, 256, 256, 1), F16_F32_F16, [Layout::RowMajor; 3], Epilogue::plain()).unwrap();
    let r = rank(&w, &dev, Arch::Sm90);
    let best = &r[0];
    Entry {
        key: Key::new(&w, &dev, Arch::Sm90, &Toolchain::pinned()),
        best: best.candidate.name.clone(),
        tile: best.candidate.tile,
        source: Source::Analytic,
        time_s: best.estimate.time_s,
        analytic_s: best.estimate.time_s,
        analytic_pick: Some(best.candidate.name.clone()),
        tried: r
            .iter()
            .map(|x| Trial {
                name: x.candidate.name.clone(),
                analytic_s: x.estimate.time_s,
                measured_s: None,
                skipped: None,
            })
            .collect(),
        updated: now(),
    }
}

fn child(args: &str, extra_env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_entry_point", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, args)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd
}

/// Not a test of its own: the body of child processes. `BOLT_DB_TEST_CHILD` is
/// `<db path>;<first m>;<count>`: add entries m = first..first+count, saving after each.
#[test]
fn child_entry_point() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let parts: Vec<&str> = spec.split(';').collect();
    let path = PathBuf::from(parts[0]);
    let first: i64 = parts[1].parse().unwrap();
    let count: i64 = parts[2].parse().unwrap();
    for m in first..first + count {
        let mut db = Db::open(&path).unwrap();
        db.insert(entry(m));
        db.save().unwrap();
    }
}

fn keys(path: &Path) -> Vec<i64> {
    let db = Db::open(path).unwrap();
    let mut ms: Vec<i64> = db.entries().map(|e| e.key.shape[0] / 8).collect();
    ms.sort();
    ms
}

#[test]
fn round_trip_and_export_import() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/tuning.json");
    let mut db = Db::open(&path).unwrap();
    assert!(db.is_empty());
    for m in 1..=5 {
        db.insert(entry(m));
    }
    db.save().unwrap();
    let again = Db::open(&path).unwrap();
    assert_eq!(again.entries().cloned().collect::<Vec<_>>(), db.entries().cloned().collect::<Vec<_>>());
    assert_eq!(again.get(&entry(3).key).unwrap(), db.get(&entry(3).key).unwrap());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(&format!("\"schema_version\": {SCHEMA_VERSION}")), "{text}");

    // Export, then import into another database.
    let shipped = dir.path().join("model.tuning.json");
    again.export(&shipped).unwrap();
    let mut other = Db::open(&dir.path().join("other.json")).unwrap();
    other.insert(entry(9));
    assert_eq!(other.import(&shipped).unwrap(), 5);
    other.save().unwrap();
    assert_eq!(keys(&dir.path().join("other.json")), vec![1, 2, 3, 4, 5, 9]);
    assert!(matches!(other.import(&dir.path().join("missing.json")), Err(DbError::Io { .. })));
}

#[test]
fn measured_entries_beat_analytic_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.json");
    let mut measured = entry(1);
    measured.source = Source::Measured;
    measured.best = "measured-winner".into();
    let mut db = Db::open(&path).unwrap();
    db.insert(measured.clone());
    db.save().unwrap();
    // A later analytic tune of the same key (another process) does not replace it.
    let mut later = entry(1);
    later.updated += 10;
    let mut db2 = Db::open(&dir.path().join("db.json")).unwrap();
    db2.insert(later.clone());
    assert_eq!(db2.get(&later.key).unwrap().best, "measured-winner");
    let mut fresh = Db::open(&dir.path().join("elsewhere.json")).unwrap();
    fresh.insert(later);
    fresh.save().unwrap();
    fresh.import(&path).unwrap();
    assert_eq!(fresh.get(&measured.key).unwrap().best, "measured-winner");
}

#[test]
fn a_writer_killed_mid_write_leaves_the_previous_contents() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tuning.json");
    let mut db = Db::open(&path).unwrap();
    for m in 1..=3 {
        db.insert(entry(m));
    }
    db.save().unwrap();
    let before = std::fs::read(&path).unwrap();

    // The child holds the lock and pauses halfway through its temporary file.
    let mut c = child(&format!("{};100;1", path.display()), &[(TEST_PAUSE_ENV, "30000")]).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let temp = loop {
        let found = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .find(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .filter(|e| e.metadata().map(|m| m.len() > 0).unwrap_or(false));
        if let Some(e) = found {
            break e.path();
        }
        assert!(Instant::now() < deadline, "the child never started writing");
        assert!(c.try_wait().unwrap().is_none(), "the child exited early");
        std::thread::sleep(Duration::from_millis(20));
    };
    c.kill().unwrap(); // SIGKILL
    c.wait().unwrap();

    // The half-written temporary file is left behind; the database is untouched.
    let partial = std::fs::read(&temp).unwrap();
    assert!(serde_json::from_slice::<serde_json::Value>(&partial).is_err(), "the kill landed after the write");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(keys(&path), vec![1, 2, 3]);

    // The lock died with the child: the next writer proceeds at once.
    let t = Instant::now();
    let mut db = Db::open(&path).unwrap();
    db.insert(entry(4));
    db.save().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(keys(&path), vec![1, 2, 3, 4]);
}

#[test]
fn concurrent_writers_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tuning.json");
    const PER: i64 = 6;
    // Three processes and three threads, each adding its own keys with a save per key.
    let mut children: Vec<_> =
        (0..3).map(|i| child(&format!("{};{};{PER}", path.display(), 1000 + i * 100), &[]).spawn().unwrap()).collect();
    let threads: Vec<_> = (0..3)
        .map(|i| {
            let path = path.clone();
            std::thread::spawn(move || {
                for m in 0..PER {
                    let mut db = Db::open(&path).unwrap();
                    db.insert(entry(2000 + i * 100 + m));
                    db.save().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for c in &mut children {
        assert!(c.wait().unwrap().success());
    }
    let got = keys(&path);
    let mut want: Vec<i64> = (0..3).flat_map(|i| (0..PER).map(move |m| 1000 + i * 100 + m)).collect();
    want.extend((0..3).flat_map(|i| (0..PER).map(move |m| 2000 + i * 100 + m)));
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn newer_schema_and_corrupt_files_are_rejected_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.json");
    std::fs::write(&path, r#"{"schema_version": 99, "entries": [], "something_new": true}"#).unwrap();
    let err = Db::open(&path).unwrap_err();
    assert!(matches!(err, DbError::NewerSchema { found: 99, .. }));
    let msg = err.to_string();
    assert!(msg.contains("future.json") && msg.contains("schema_version 99") && msg.contains("reads up to 1"), "{msg}");
    // Saving into it is refused too (nothing overwritten).
    let mut db = Db::open(&dir.path().join("ok.json")).unwrap();
    db.insert(entry(1));
    std::fs::copy(&path, dir.path().join("ok.json")).unwrap();
    assert!(matches!(db.save(), Err(DbError::NewerSchema { .. })));

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{ not json").unwrap();
    let msg = Db::open(&bad).unwrap_err().to_string();
    assert!(msg.contains("bad.json") && msg.contains("not a valid database"), "{msg}");
}

#[test]
fn dynamic_dims_share_a_power_of_two_bucket() {
    let k = |m: i64| entry(m).key.bucketed(0);
    assert_eq!(k(65).shape[0], 1024); // 520 -> 1024
    assert_eq!(k(65), k(100)); // 520 and 800
    assert_ne!(k(65), k(200)); // 1600 -> 2048
    assert_ne!(k(65).id(), entry(65).key.id());
}
