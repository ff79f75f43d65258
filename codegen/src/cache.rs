//! Content-addressed cache of build products (compiled objects, linked libraries).
//!
//! Layout under the cache root (`<BOLT_CACHE_DIR or ~/.cache/bolt>/kernels` by default):
//!
//! ```text
//! objects/<key>.o          an nvcc object
//! objects/<key>.o.meta     {"key", "size", "blake3"} of that object: written last
//! objects/<key>.o.log      nvcc's output when it was built (ptxas report, warnings)
//! libs/<key>.so (+ .meta)  a linked kernel library
//! locks/<key>.lock         per-entry lock file
//! ```
//!
//! The key ([`CacheKey`]) is a blake3 hash over everything that determines the product (for
//! objects: rendered source, header, CUTLASS and CUDA versions, arch and all nvcc flags), so a
//! hit is always safe to use. An entry counts only when its `.meta` exists and the file's
//! size and blake3 match it: a truncated or otherwise damaged file is detected, logged and
//! rebuilt.
//!
//! Concurrency: products are written to a temporary file in the same directory and renamed
//! into place (atomic), the `.meta` after the file. Building an entry holds an exclusive
//! `flock` on its lock file, and the entry is checked again once the lock is held, so two
//! processes (or threads) asking for the same missing key build it once; the second one
//! finds it ready.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A blake3 hash naming a cache entry.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey(pub [u8; 32]);

impl CacheKey {
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CacheKey({})", &self.hex()[..16])
    }
}

/// Builds a [`CacheKey`] from labelled parts. Each part is length-prefixed, so no two
/// different part lists hash alike.
pub struct KeyHasher(blake3::Hasher);

impl KeyHasher {
    /// `domain` separates kinds of keys (e.g. "object", "library") and carries a format
    /// version: bump it to invalidate old entries.
    pub fn new(domain: &str) -> KeyHasher {
        let mut h = KeyHasher(blake3::Hasher::new());
        h.part("domain", domain.as_bytes());
        h
    }

    pub fn part(&mut self, label: &str, bytes: &[u8]) -> &mut Self {
        for chunk in [label.as_bytes(), bytes] {
            self.0.update(&(chunk.len() as u64).to_le_bytes());
            self.0.update(chunk);
        }
        self
    }

    pub fn str(&mut self, label: &str, s: &str) -> &mut Self {
        self.part(label, s.as_bytes())
    }

    pub fn finish(&self) -> CacheKey {
        CacheKey(*self.0.finalize().as_bytes())
    }
}

/// Which product an entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// `objects/<key>.o`
    Object,
    /// `libs/<key>.so`
    Library,
}

impl EntryKind {
    fn dir(self) -> &'static str {
        match self {
            EntryKind::Object => "objects",
            EntryKind::Library => "libs",
        }
    }

    fn extension(self) -> &'static str {
        match self {
            EntryKind::Object => "o",
            EntryKind::Library => "so",
        }
    }
}

/// What is stored next to each product, to detect damage.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryMeta {
    pub key: String,
    pub size: u64,
    pub blake3: String,
}

/// How an entry was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Found valid in the cache (possibly built by a concurrent process while waiting).
    Hit,
    /// Built now by the caller's closure.
    Built,
    /// A damaged entry (size or hash mismatch) was found and rebuilt.
    Rebuilt,
}

/// The kernel build cache. Cheap to clone; all state is on disk.
#[derive(Clone, Debug)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    /// `<cache>/kernels`, where `<cache>` is `$BOLT_CACHE_DIR`, else `$XDG_CACHE_HOME/bolt`,
    /// else `~/.cache/bolt` (the toolchain's cache directory).
    pub fn default_dir() -> Option<PathBuf> {
        bolt_cutlass::Config::from_env().cache_dir.map(|d| d.join("kernels"))
    }

    /// Opens (creating if needed) a cache rooted at `root`. Temporary files more than a day
    /// old (left by a build that was killed) are removed.
    pub fn open(root: impl Into<PathBuf>) -> io::Result<Cache> {
        let root = root.into();
        for sub in ["objects", "libs", "locks"] {
            fs::create_dir_all(root.join(sub))?;
        }
        for sub in ["objects", "libs"] {
            remove_stale_temporaries(&root.join(sub), std::time::Duration::from_secs(24 * 3600));
        }
        Ok(Cache { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the entry's product lives (whether or not it exists).
    pub fn path(&self, kind: EntryKind, key: &CacheKey) -> PathBuf {
        self.root.join(kind.dir()).join(format!("{}.{}", key.hex(), kind.extension()))
    }

    fn meta_path(&self, kind: EntryKind, key: &CacheKey) -> PathBuf {
        append_ext(&self.path(kind, key), "meta")
    }

    /// Where the log saved with an entry lives.
    pub fn log_path(&self, kind: EntryKind, key: &CacheKey) -> PathBuf {
        append_ext(&self.path(kind, key), "log")
    }

    /// The product's path when the entry is present and intact. Damage is logged; `None`
    /// then (the next [`Cache::get_or_build`] rebuilds it).
    pub fn get(&self, kind: EntryKind, key: &CacheKey) -> Option<PathBuf> {
        match self.check(kind, key) {
            Check::Valid(path) => Some(path),
            Check::Absent => None,
            Check::Damaged(why) => {
                tracing::warn!("cache entry {} is damaged ({why}); it will be rebuilt", self.path(kind, key).display());
                None
            }
        }
    }

    fn check(&self, kind: EntryKind, key: &CacheKey) -> Check {
        let path = self.path(kind, key);
        let meta = match fs::read(self.meta_path(kind, key)) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Check::Absent,
            Err(e) => return Check::Damaged(format!("unreadable metadata: {e}")),
        };
        let meta: EntryMeta = match serde_json::from_slice(&meta) {
            Ok(m) => m,
            Err(e) => return Check::Damaged(format!("bad metadata: {e}")),
        };
        if meta.key != key.hex() {
            return Check::Damaged(format!("metadata names key {}", meta.key));
        }
        match fs::metadata(&path) {
            Ok(m) if m.len() != meta.size => {
                return Check::Damaged(format!("{} bytes, expected {}", m.len(), meta.size));
            }
            Ok(_) => {}
            Err(e) => return Check::Damaged(format!("product missing: {e}")),
        }
        match hash_file(&path) {
            Ok((_, hash)) if hash == meta.blake3 => Check::Valid(path),
            Ok(_) => Check::Damaged("content hash mismatch".into()),
            Err(e) => Check::Damaged(format!("unreadable: {e}")),
        }
    }

    /// Returns the entry's product, building it with `build` when absent or damaged.
    ///
    /// `build(tmp)` must write the product to `tmp` (a fresh path in the entry's directory)
    /// and may return a log to keep with the entry. It runs while this entry's lock is held,
    /// after a second look at the cache, so concurrent callers build a key once.
    pub fn get_or_build<E>(
        &self,
        kind: EntryKind,
        key: &CacheKey,
        build: impl FnOnce(&Path) -> Result<Option<String>, E>,
    ) -> Result<(PathBuf, Outcome), CacheError<E>> {
        if let Check::Valid(path) = self.check(kind, key) {
            return Ok((path, Outcome::Hit));
        }
        let lock_path = self.root.join("locks").join(format!("{}.lock", key.hex()));
        let lock_file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| CacheError::io(&lock_path, e))?;
        let mut lock = fd_lock::RwLock::new(lock_file);
        let _guard = lock.write().map_err(|e| CacheError::io(&lock_path, e))?;

        let outcome = match self.check(kind, key) {
            Check::Valid(path) => return Ok((path, Outcome::Hit)),
            Check::Absent => Outcome::Built,
            Check::Damaged(why) => {
                tracing::warn!("cache entry {} is damaged ({why}); rebuilding", self.path(kind, key).display());
                Outcome::Rebuilt
            }
        };
        let dest = self.path(kind, key);
        let dir = dest.parent().expect("entries live in a subdirectory");
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".tmp-{}-", &key.hex()[..16]))
            .suffix(&format!(".{}", kind.extension()))
            .tempfile_in(dir)
            .map_err(|e| CacheError::io(dir, e))?
            .into_temp_path();
        let log = build(&tmp).map_err(CacheError::Build)?;
        let (size, blake3) = hash_file(&tmp).map_err(|e| CacheError::io(&tmp, e))?;
        if size == 0 {
            return Err(CacheError::io(&tmp, io::Error::other("the build produced an empty file")));
        }
        // The meta is removed first and written last: a reader never pairs a new product with
        // an old meta, or the reverse.
        let meta_path = self.meta_path(kind, key);
        let _ = fs::remove_file(&meta_path);
        if let Some(log) = log {
            let log_path = self.log_path(kind, key);
            write_atomic(&log_path, log.as_bytes()).map_err(|e| CacheError::io(&log_path, e))?;
        }
        let mode = if kind == EntryKind::Library { 0o755 } else { 0o644 };
        set_mode(&tmp, mode).map_err(|e| CacheError::io(&tmp, e))?;
        tmp.persist(&dest).map_err(|e| CacheError::io(&dest, e.error))?;
        let meta = EntryMeta { key: key.hex(), size, blake3 };
        let json = serde_json::to_vec_pretty(&meta).expect("serialisable");
        write_atomic(&meta_path, &json).map_err(|e| CacheError::io(&meta_path, e))?;
        Ok((dest, outcome))
    }
}

enum Check {
    Valid(PathBuf),
    Absent,
    Damaged(String),
}

/// A failed [`Cache::get_or_build`]: the caller's build failed, or the cache's own I/O did.
#[derive(Debug)]
pub enum CacheError<E> {
    Build(E),
    Io { path: PathBuf, source: io::Error },
}

impl<E> CacheError<E> {
    fn io(path: &Path, source: io::Error) -> Self {
        CacheError::Io { path: path.into(), source }
    }
}

fn remove_stale_temporaries(dir: &Path, age: std::time::Duration) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let stale = entry.file_name().to_string_lossy().starts_with(".tmp-")
            && entry.metadata().and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().is_ok_and(|e| e > age));
        if stale {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Size and blake3 (hex) of a file's content.
pub fn hash_file(path: &Path) -> io::Result<(u64, String)> {
    let mut file = File::open(path)?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok((size, hasher.finalize().to_hex().to_string()))
}

/// Writes `bytes` to a temporary file next to `path`, then renames it over `path`: readers
/// see the old content or the new, never a part (and a library mapped from the old file
/// stays intact).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_data()?;
    set_mode(tmp.path(), 0o644)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Copies `from` to `to` through a temporary file and a rename (see [`write_atomic`]). The
/// copy is readable and executable by everyone (a shared library).
pub fn copy_atomic(from: &Path, to: &Path) -> io::Result<()> {
    let dir = to.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir)?.into_temp_path();
    fs::copy(from, &tmp)?;
    set_mode(&tmp, 0o755)?;
    tmp.persist(to).map_err(|e| e.error)?;
    Ok(())
}

/// Temporary files are created private (0600); finished products get the usual modes.
fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    }
    #[cfg(not(unix))]
    let _ = (path, mode);
    Ok(())
}

fn append_ext(path: &Path, ext: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    s.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn key(s: &str) -> CacheKey {
        KeyHasher::new("test").str("s", s).finish()
    }

    #[test]
    fn keys_separate_parts() {
        let a = KeyHasher::new("d").str("x", "ab").str("y", "c").finish();
        let b = KeyHasher::new("d").str("x", "a").str("y", "bc").finish();
        assert_ne!(a, b);
        assert_eq!(a, KeyHasher::new("d").str("x", "ab").str("y", "c").finish());
        assert_eq!(a.hex().len(), 64);
    }

    #[test]
    fn builds_once_then_hits_and_repairs_damage() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let k = key("one");
        assert!(cache.get(EntryKind::Object, &k).is_none());
        let build = |p: &Path| -> Result<Option<String>, ()> {
            fs::write(p, b"object bytes").unwrap();
            Ok(Some("log".into()))
        };
        let (path, outcome) = cache.get_or_build(EntryKind::Object, &k, build).unwrap();
        assert_eq!(outcome, Outcome::Built);
        assert_eq!(fs::read(&path).unwrap(), b"object bytes");
        assert_eq!(fs::read_to_string(cache.log_path(EntryKind::Object, &k)).unwrap(), "log");
        let (_, outcome) =
            cache.get_or_build(EntryKind::Object, &k, |_| -> Result<_, ()> { panic!("must not build") }).unwrap();
        assert_eq!(outcome, Outcome::Hit);

        // Truncation and same-size corruption are both caught.
        fs::write(&path, b"object").unwrap();
        assert!(cache.get(EntryKind::Object, &k).is_none());
        let (_, outcome) = cache.get_or_build(EntryKind::Object, &k, build).unwrap();
        assert_eq!(outcome, Outcome::Rebuilt);
        fs::write(&path, b"OBJECT bytes").unwrap();
        assert!(cache.get(EntryKind::Object, &k).is_none());
        cache.get_or_build(EntryKind::Object, &k, build).unwrap();
        assert!(cache.get(EntryKind::Object, &k).is_some());

        // A failed build leaves no entry and no temporary files.
        let k2 = key("two");
        let err = cache.get_or_build(EntryKind::Object, &k2, |_| Err::<Option<String>, _>("boom")).unwrap_err();
        assert!(matches!(err, CacheError::Build("boom")));
        assert!(cache.get(EntryKind::Object, &k2).is_none());
        let leftovers: Vec<_> = fs::read_dir(dir.path().join("objects"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn concurrent_builders_of_one_key_build_once() {
        let dir = tempfile::tempdir().unwrap();
        let builds = Arc::new(AtomicUsize::new(0));
        let k = key("shared");
        std::thread::scope(|s| {
            for _ in 0..4 {
                // Separate Cache values and lock-file handles, as separate processes have.
                let cache = Cache::open(dir.path()).unwrap();
                let builds = builds.clone();
                s.spawn(move || {
                    cache
                        .get_or_build(EntryKind::Library, &k, |p| -> Result<_, ()> {
                            builds.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(200));
                            fs::write(p, b"lib").unwrap();
                            Ok(None)
                        })
                        .unwrap();
                });
            }
        });
        assert_eq!(builds.load(Ordering::SeqCst), 1);
    }
}
