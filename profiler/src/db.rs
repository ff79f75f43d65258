//! The tuning database: the best configuration per (GPU, toolchain, kernel kind, problem),
//! with the timings of everything tried.
//!
//! * One JSON file (`schema_version` + entries sorted by key), shippable with a model
//!   ([`Db::export`], [`Db::import`]).
//! * Crash-safe: every save writes a temporary file in the same directory and renames it over
//!   the database (atomic on POSIX), so a writer killed at any point leaves the previous
//!   contents.
//! * Safe under concurrent tuners: saves hold an exclusive lock on the sibling `<db>.lock`
//!   file around read-modify-write and merge what other writers saved meanwhile (per key,
//!   measured beats analytic, then the newer entry wins).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use bolt_codegen::spec::{Alignment, Arch, Family, Layout, TileConfig, Types};
use serde::{Deserialize, Serialize};

use crate::device::DeviceSpec;
use crate::workload::Workload;

/// The schema this build writes. Files of a newer schema are rejected (an older Bolt must not
/// silently drop fields it does not know); older ones are migrated on load.
pub const SCHEMA_VERSION: u32 = 1;

/// Environment variable naming the database (else `~/.cache/bolt/tuning.json`).
pub const DB_ENV: &str = "BOLT_TUNING_DB";

/// Test hook: milliseconds to pause halfway through writing the temporary file (the crash
/// tests kill a writer there). Unset in normal use.
#[doc(hidden)]
pub const TEST_PAUSE_ENV: &str = "BOLT_TUNING_DB_TEST_PAUSE_MS";

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("tuning database {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("tuning database {}: not a valid database ({reason})", path.display())]
    Corrupt { path: PathBuf, reason: String },
    #[error("tuning database {} has schema_version {found}; this Bolt reads up to {SCHEMA_VERSION}: upgrade Bolt or tune into another file (--db)", path.display())]
    NewerSchema { path: PathBuf, found: u32 },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> DbError + '_ {
    move |source| DbError::Io { path: path.into(), source }
}

/// What identifies a tuning result.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Key {
    pub gpu: String,
    pub sm_count: u32,
    pub cuda_version: String,
    pub cutlass_version: String,
    pub arch: String,
    /// `gemm`, `batched_gemm`, `conv2d_fprop` (+ `_grouped`/`_depthwise`).
    pub family: String,
    /// `input/accumulator/output`, e.g. `f16/f32/f16`.
    pub dtypes: String,
    /// A, B, C: `rrr`, `rcr`, ...
    pub layouts: String,
    /// `a/b/c` in elements.
    pub alignment: String,
    /// The epilogue's normal-form name (`bias_gelu_erf`, `identity`, ...).
    pub epilogue: String,
    /// See [`Workload::shape`]; a bucketed dimension holds its bucket's upper bound.
    pub shape: Vec<i64>,
    /// For dynamic shapes: which dimension was bucketed (index into `shape`) and how.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<Bucket>,
}

/// A symbolic dimension's power-of-two bucket: every size in `(upper/2, upper]` shares one
/// entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Bucket {
    pub dim: usize,
    pub upper: i64,
}

/// The power-of-two bucket (upper bound) of a dynamic dimension's size.
pub fn pow2_bucket(size: i64) -> i64 {
    (size.max(1) as u64).next_power_of_two() as i64
}

/// The toolchain part of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Toolchain {
    pub cuda_version: String,
    pub cutlass_version: String,
}

impl Toolchain {
    /// The versions Bolt pins (`cutlass/pins.toml`): what the kernel library is built with.
    pub fn pinned() -> Toolchain {
        match bolt_cutlass::Pins::embedded() {
            Ok(p) => Toolchain { cuda_version: p.cuda.version, cutlass_version: p.cutlass.version },
            Err(_) => Toolchain { cuda_version: "unknown".into(), cutlass_version: "unknown".into() },
        }
    }
}

fn family_name(f: &Family) -> String {
    use bolt_codegen::spec::GroupMode;
    match f {
        Family::Gemm => "gemm".into(),
        Family::BatchedGemm => "batched_gemm".into(),
        Family::GemmSoftmax => "gemm_softmax".into(),
        Family::Conv2dFprop(c) => match c.groups {
            GroupMode::None => "conv2d_fprop".into(),
            GroupMode::SingleGroup => "conv2d_fprop_single_group".into(),
            GroupMode::MultipleGroup => "conv2d_fprop_multiple_group".into(),
            GroupMode::Depthwise => "conv2d_fprop_depthwise".into(),
        },
    }
}

fn dtypes_name(t: &Types) -> String {
    format!("{}/{}/{}", t.input.name(), t.accumulator.name(), t.output.name())
}

fn alignment_name(a: &Alignment) -> String {
    format!("{}/{}/{}", a.a, a.b, a.c)
}

fn layout_name(l: &[Layout; 3]) -> String {
    crate::workload::layouts_name(l)
}

impl Key {
    pub fn new(workload: &Workload, device: &DeviceSpec, arch: Arch, toolchain: &Toolchain) -> Key {
        Key {
            gpu: device.name.clone(),
            sm_count: device.sm_count,
            cuda_version: toolchain.cuda_version.clone(),
            cutlass_version: toolchain.cutlass_version.clone(),
            arch: format!("{arch:?}").to_ascii_lowercase(),
            family: family_name(&workload.family),
            dtypes: dtypes_name(&workload.types),
            layouts: layout_name(&workload.layouts),
            alignment: alignment_name(&workload.alignment),
            epilogue: workload.epilogue.name(),
            shape: workload.shape(),
            bucket: None,
        }
    }

    /// The key of a dynamic shape: dimension `dim` of [`Key::shape`] replaced by its
    /// power-of-two bucket.
    pub fn bucketed(mut self, dim: usize) -> Key {
        if let Some(v) = self.shape.get_mut(dim) {
            let upper = pow2_bucket(*v);
            *v = upper;
            self.bucket = Some(Bucket { dim, upper });
        }
        self
    }

    /// A stable string form (the map key in memory; also readable in the file).
    pub fn id(&self) -> String {
        let shape: Vec<String> = self.shape.iter().map(|v| v.to_string()).collect();
        let bucket = self.bucket.as_ref().map(|b| format!("|bucket{}<={}", b.dim, b.upper)).unwrap_or_default();
        format!(
            "{}|{}sm|cuda{}|cutlass{}|{}|{}|{}|{}|{}|{}|{}{}",
            self.gpu,
            self.sm_count,
            self.cuda_version,
            self.cutlass_version,
            self.arch,
            self.family,
            self.dtypes,
            self.layouts,
            self.alignment,
            self.epilogue,
            shape.join("x"),
            bucket
        )
    }
}

/// Where the best configuration came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Analytic,
    Measured,
}

/// One configuration tried.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub name: String,
    pub analytic_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_s: Option<f64>,
    /// Why it was not timed or failed (can_implement, not in the library, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// The best configuration of one key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub key: Key,
    /// Candidate name (`sm90_128x256x64_c2x1_coop_tma`).
    pub best: String,
    pub tile: TileConfig,
    pub source: Source,
    /// Estimated (analytic) or measured median seconds of the best.
    pub time_s: f64,
    /// The analytic model's estimate for the best.
    pub analytic_s: f64,
    /// The analytic top-1 (to report the gap when measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analytic_pick: Option<String>,
    pub tried: Vec<Trial>,
    /// Seconds since the Unix epoch when tuned.
    pub updated: u64,
}

pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Which of two entries of one key to keep: measured over analytic, then the newer.
fn better<'a>(a: &'a Entry, b: &'a Entry) -> &'a Entry {
    match a.source.cmp(&b.source) {
        std::cmp::Ordering::Greater => a,
        std::cmp::Ordering::Less => b,
        std::cmp::Ordering::Equal => {
            if b.updated > a.updated {
                b
            } else {
                a
            }
        }
    }
}

#[derive(Serialize, Deserialize)]
struct FileFormat {
    schema_version: u32,
    entries: Vec<Entry>,
}

#[derive(Deserialize)]
struct VersionOnly {
    schema_version: u32,
}

/// A tuning database bound to a file.
#[derive(Debug)]
pub struct Db {
    path: PathBuf,
    entries: BTreeMap<String, Entry>,
    /// Keys inserted since the last load/save: what a save contributes to the file.
    dirty: BTreeSet<String>,
}

impl Db {
    /// `$BOLT_TUNING_DB`, else `~/.cache/bolt/tuning.json` (`./.bolt-tuning.json` without HOME).
    pub fn default_path() -> PathBuf {
        if let Some(p) = std::env::var_os(DB_ENV).filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            Some(home) => PathBuf::from(home).join(".cache/bolt/tuning.json"),
            None => PathBuf::from(".bolt-tuning.json"),
        }
    }

    /// Opens (or starts) the database at `path`. A missing file is an empty database.
    pub fn open(path: &Path) -> Result<Db, DbError> {
        let entries = read_entries(path)?;
        Ok(Db { path: path.into(), entries, dirty: BTreeSet::new() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, key: &Key) -> Option<&Entry> {
        self.entries.get(&key.id())
    }

    /// The entry for a workload: its exact shape, else the power-of-two bucket of its leading
    /// (dynamic) dimension.
    pub fn lookup(
        &self,
        workload: &Workload,
        device: &DeviceSpec,
        arch: Arch,
        toolchain: &Toolchain,
    ) -> Option<&Entry> {
        let key = Key::new(workload, device, arch, toolchain);
        self.get(&key).or_else(|| self.get(&key.bucketed(0)))
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    /// Adds or replaces (by the merge rule: measured beats analytic, then newer) an entry in
    /// memory; [`Db::save`] writes it.
    pub fn insert(&mut self, entry: Entry) {
        let id = entry.key.id();
        let keep = match self.entries.get(&id) {
            Some(old) if better(old, &entry) == old && old != &entry => return,
            _ => entry,
        };
        self.entries.insert(id.clone(), keep);
        self.dirty.insert(id);
    }

    /// Writes the entries inserted since the last save into the file: under the lock, reads
    /// what is there now (other tuners' work), merges ours in, writes a temporary file and
    /// renames it into place. Afterwards this `Db` holds the merged contents.
    pub fn save(&mut self) -> Result<(), DbError> {
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let lock_path = lock_path(&self.path);
        let lock_file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        let mut lock = fd_lock::RwLock::new(lock_file);
        let _guard = lock.write().map_err(io_err(&lock_path))?;

        let mut merged = read_entries(&self.path)?;
        for id in &self.dirty {
            if let Some(ours) = self.entries.get(id) {
                let keep = match merged.get(id) {
                    Some(theirs) => better(theirs, ours).clone(),
                    None => ours.clone(),
                };
                merged.insert(id.clone(), keep);
            }
        }
        write_atomic(&self.path, &dir, &merged)?;
        self.entries = merged;
        self.dirty.clear();
        Ok(())
    }

    /// Writes every entry to `path` (a standalone file to ship with a model).
    pub fn export(&self, path: &Path) -> Result<(), DbError> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        write_atomic(path, &dir, &self.entries)
    }

    /// Merges the entries of an exported file (same schema rules as [`Db::open`]); returns
    /// how many entries it had. Call [`Db::save`] to persist.
    pub fn import(&mut self, path: &Path) -> Result<usize, DbError> {
        if !path.exists() {
            return Err(DbError::Io {
                path: path.into(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            });
        }
        let theirs = read_entries(path)?;
        let n = theirs.len();
        for (_, e) in theirs {
            self.insert(e);
        }
        Ok(n)
    }
}

fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "tuning.json".into());
    name.push(".lock");
    db.with_file_name(name)
}

fn read_entries(path: &Path) -> Result<BTreeMap<String, Entry>, DbError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(DbError::Io { path: path.into(), source: e }),
    };
    let corrupt = |reason: String| DbError::Corrupt { path: path.into(), reason };
    let version: VersionOnly = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
    if version.schema_version > SCHEMA_VERSION {
        return Err(DbError::NewerSchema { path: path.into(), found: version.schema_version });
    }
    if version.schema_version == 0 {
        return Err(corrupt("schema_version 0 does not exist".into()));
    }
    let file: FileFormat = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
    let mut out = BTreeMap::new();
    for e in file.entries {
        let id = e.key.id();
        let keep = match out.remove(&id) {
            Some(prev) => better(&prev, &e).clone(),
            None => e,
        };
        out.insert(id, keep);
    }
    Ok(out)
}

fn write_atomic(path: &Path, dir: &Path, entries: &BTreeMap<String, Entry>) -> Result<(), DbError> {
    let file = FileFormat { schema_version: SCHEMA_VERSION, entries: entries.values().cloned().collect() };
    let mut bytes = serde_json::to_vec_pretty(&file)
        .map_err(|e| DbError::Corrupt { path: path.into(), reason: format!("cannot serialise: {e}") })?;
    bytes.push(b'\n');
    let prefix = format!(".{}.", path.file_name().and_then(|n| n.to_str()).unwrap_or("tuning"));
    let mut tmp = tempfile::Builder::new().prefix(&prefix).suffix(".tmp").tempfile_in(dir).map_err(io_err(dir))?;
    let pause_ms: Option<u64> = std::env::var(TEST_PAUSE_ENV).ok().and_then(|v| v.parse().ok());
    match pause_ms {
        Some(ms) => {
            let half = bytes.len() / 2;
            tmp.write_all(&bytes[..half]).map_err(io_err(tmp.path()))?;
            tmp.flush().map_err(io_err(tmp.path()))?;
            std::thread::sleep(std::time::Duration::from_millis(ms));
            tmp.write_all(&bytes[half..]).map_err(io_err(tmp.path()))?;
        }
        None => tmp.write_all(&bytes).map_err(io_err(tmp.path()))?,
    }
    tmp.as_file().sync_all().map_err(io_err(tmp.path()))?;
    tmp.persist(path).map_err(|e| DbError::Io { path: path.into(), source: e.error })?;
    // Make the rename itself durable.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
