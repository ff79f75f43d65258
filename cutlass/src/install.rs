//! Getting pinned wheels (local dir, download cache or network), verifying them and unpacking
//! them into an install directory that carries a marker only once complete.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Component as PathPart, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::error::{Error, IoContext, Result};
use crate::pins::{hex, Component, Wheel};

/// Written last into a finished install; holds the component's pin hash.
pub const MARKER: &str = ".bolt-installed";

/// State of a pinned install directory, judged by its marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallState {
    Installed,
    /// Nothing there.
    Absent,
    /// The directory exists without a marker: an install was interrupted.
    Incomplete,
    /// Installed from other pins (the marker's pin hash differs).
    Stale,
}

impl fmt::Display for InstallState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InstallState::Installed => "installed",
            InstallState::Absent => "not installed",
            InstallState::Incomplete => "incomplete (interrupted install)",
            InstallState::Stale => "stale (installed from other pins)",
        })
    }
}

pub fn install_state(dir: &Path, component: &Component) -> InstallState {
    if !dir.exists() {
        return InstallState::Absent;
    }
    match fs::read_to_string(dir.join(MARKER)) {
        Ok(m) if m.trim() == component.pin_hash() => InstallState::Installed,
        Ok(_) => InstallState::Stale,
        Err(_) => InstallState::Incomplete,
    }
}

/// Install progress, for a CLI to print (also logged with `tracing`).
#[derive(Debug, Clone)]
pub enum Progress {
    UsingWheel { path: PathBuf },
    Downloading { url: String },
    Downloaded { path: PathBuf, bytes: u64, elapsed: Duration },
    Unpacking { component: String, dest: PathBuf },
    Installed { component: String, dest: PathBuf, bytes: u64, elapsed: Duration },
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Progress::UsingWheel { path } => write!(f, "using {}", path.display()),
            Progress::Downloading { url } => write!(f, "downloading {url}"),
            Progress::Downloaded { path, bytes, elapsed } => {
                write!(f, "downloaded {} ({}, {:.1}s)", path.display(), mib(*bytes), elapsed.as_secs_f64())
            }
            Progress::Unpacking { component, dest } => {
                write!(f, "unpacking {component} into {}", dest.display())
            }
            Progress::Installed { component, dest, bytes, elapsed } => write!(
                f,
                "installed {component} at {} ({}, {:.1}s)",
                dest.display(),
                mib(*bytes),
                elapsed.as_secs_f64()
            ),
        }
    }
}

pub(crate) fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn report(progress: &mut dyn FnMut(&Progress), event: Progress) {
    tracing::info!("{event}");
    progress(&event);
}

/// Where wheels come from: an optional user directory, then the download cache, then the network.
pub(crate) struct WheelSource<'a> {
    pub local_dir: Option<&'a Path>,
    pub cache_dir: &'a Path,
}

/// Unpacks `component` into `dest` unless it is already installed there. `check` completes and
/// checks the unpacked tree before it is marked complete (e.g. runs the unpacked nvcc).
/// Returns the unpacked size in bytes, or `None` if it was already installed.
pub(crate) fn install_component(
    name: &str,
    component: &Component,
    dest: &Path,
    wheels: &WheelSource<'_>,
    check: &dyn Fn(&Path) -> Result<()>,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Option<u64>> {
    if install_state(dest, component) == InstallState::Installed {
        return Ok(None);
    }
    let start = Instant::now();
    let files = component.wheels.iter().map(|w| obtain_wheel(w, wheels, progress)).collect::<Result<Vec<_>>>()?;

    // Unpack next to `dest` and rename into place: `dest` is never half-written, and a crash
    // leaves only a staging directory, which a later install removes.
    let parent = dest.parent().ok_or_else(|| Error::Io {
        path: dest.to_path_buf(),
        source: io::Error::new(io::ErrorKind::InvalidInput, "install directory has no parent"),
    })?;
    fs::create_dir_all(parent).at(parent)?;
    let staging_prefix = format!(".{}.staging-", dest.file_name().unwrap_or_default().to_string_lossy());
    remove_dead_leftovers(parent, &staging_prefix);
    let staging = parent.join(format!("{staging_prefix}{}", std::process::id()));
    fs::create_dir_all(&staging).at(&staging)?;

    report(progress, Progress::Unpacking { component: name.into(), dest: dest.into() });
    let unpacked = (|| {
        let mut bytes = 0;
        for file in &files {
            bytes += unpack(file, &component.strip_prefix, &staging)?;
        }
        check(&staging)?;
        fs::write(staging.join(MARKER), format!("{}\n", component.pin_hash())).at(&staging)?;
        Ok(bytes)
    })();
    let bytes = match unpacked {
        Ok(bytes) => bytes,
        Err(e) => {
            let _ = fs::remove_dir_all(&staging);
            return Err(e);
        }
    };

    // Another process may have finished the same install meanwhile: keep theirs.
    if install_state(dest, component) == InstallState::Installed {
        remove_dir_if_exists(&staging)?;
    } else {
        remove_dir_if_exists(dest)?;
        fs::rename(&staging, dest).at(dest)?;
    }
    report(
        progress,
        Progress::Installed { component: name.into(), dest: dest.into(), bytes, elapsed: start.elapsed() },
    );
    Ok(Some(bytes))
}

/// Removes `<prefix><pid>` entries left in `dir` by installs or downloads whose process died.
/// Only where /proc tells which processes are alive; elsewhere leftovers just stay.
fn remove_dead_leftovers(dir: &Path, prefix: &str) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            tracing::debug!("removing leftover {}", entry.path().display());
            let path = entry.path();
            let _ = fs::remove_dir_all(&path).or_else(|_| fs::remove_file(&path));
        }
    }
}

fn remove_dir_if_exists(dir: &Path) -> Result<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Error::Io { path: dir.into(), source: e }),
        _ => Ok(()),
    }
}

/// Returns a verified local copy of `wheel`, downloading it into the cache if needed.
fn obtain_wheel(wheel: &Wheel, source: &WheelSource<'_>, progress: &mut dyn FnMut(&Progress)) -> Result<PathBuf> {
    // A user-provided wheel must be right: a mismatch there is an error, not a reason to download.
    if let Some(dir) = source.local_dir {
        let path = dir.join(&wheel.file);
        if path.is_file() {
            verify_sha256(&path, &wheel.sha256)?;
            report(progress, Progress::UsingWheel { path: path.clone() });
            return Ok(path);
        }
    }
    let cached = source.cache_dir.join(&wheel.file);
    if cached.is_file() {
        match verify_sha256(&cached, &wheel.sha256) {
            Ok(()) => {
                report(progress, Progress::UsingWheel { path: cached.clone() });
                return Ok(cached);
            }
            Err(e @ Error::ShaMismatch { .. }) => {
                tracing::warn!("{e}; downloading it again");
                fs::remove_file(&cached).at(&cached)?;
            }
            Err(e) => return Err(e),
        }
    }
    fs::create_dir_all(source.cache_dir).at(source.cache_dir)?;
    report(progress, Progress::Downloading { url: wheel.url.clone() });
    let start = Instant::now();
    let bytes = download(&wheel.url, &cached, &wheel.sha256)?;
    report(progress, Progress::Downloaded { path: cached.clone(), bytes, elapsed: start.elapsed() });
    Ok(cached)
}

/// Downloads `url` to `dest` through a temporary file in the same directory, verifying the
/// sha256 before the atomic rename, so `dest` only ever holds a complete, verified file.
fn download(url: &str, dest: &Path, expected_sha256: &str) -> Result<u64> {
    let download_err = |e: ureq::Error| Error::Download { url: url.into(), source: Box::new(e) };
    let response = http_agent().get(url).call().map_err(download_err)?;
    let mut body = response.into_body().into_reader();

    let part_prefix = format!("{}.part-", dest.file_name().unwrap_or_default().to_string_lossy());
    if let Some(dir) = dest.parent() {
        remove_dead_leftovers(dir, &part_prefix);
    }
    let tmp = dest.with_file_name(format!("{part_prefix}{}", std::process::id()));
    let result = (|| {
        let mut out = File::create(&tmp).at(&tmp)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            let n = body.read(&mut buf).map_err(|e| download_err(e.into()))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n]).at(&tmp)?;
            total += n as u64;
        }
        out.sync_all().at(&tmp)?;
        check_digest(dest, expected_sha256, &hex(&hasher.finalize()))?;
        fs::rename(&tmp, dest).at(dest)?;
        Ok(total)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// An HTTPS agent trusting the system's CA store (SSL_CERT_FILE / SSL_CERT_DIR honoured), so
/// TLS-intercepting proxies with a locally installed CA work, and proxying through
/// HTTPS_PROXY / ALL_PROXY (ureq reads those by default).
fn http_agent() -> ureq::Agent {
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::debug!("skipping unreadable system certificate: {e}");
    }
    let roots = if native.certs.is_empty() {
        tracing::warn!("no system CA certificates found; falling back to the bundled Mozilla roots");
        ureq::tls::RootCerts::WebPki
    } else {
        let certs = native.certs.iter().map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned()).collect();
        ureq::tls::RootCerts::Specific(Arc::new(certs))
    };
    ureq::Agent::config_builder()
        .tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build())
        .timeout_connect(Some(Duration::from_secs(30)))
        .build()
        .new_agent()
}

pub(crate) fn verify_sha256(path: &Path, expected: &str) -> Result<()> {
    let mut file = File::open(path).at(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf).at(path)? {
            0 => break,
            n => hasher.update(&buf[..n]),
        }
    }
    check_digest(path, expected, &hex(&hasher.finalize()))
}

fn check_digest(path: &Path, expected: &str, actual: &str) -> Result<()> {
    if actual == expected {
        Ok(())
    } else {
        Err(Error::ShaMismatch { path: path.into(), expected: expected.into(), actual: actual.into() })
    }
}

/// Unpacks the entries of `wheel` under `strip_prefix` into `dest` (prefix removed) and returns
/// the bytes written. Zip permission bits are applied, so executables (nvcc, ptxas, cicc...)
/// stay executable.
pub(crate) fn unpack(wheel: &Path, strip_prefix: &str, dest: &Path) -> Result<u64> {
    let bad_wheel = |source| Error::BadWheel { path: wheel.into(), source };
    let file = File::open(wheel).at(wheel)?;
    let mut archive = zip::ZipArchive::new(io::BufReader::new(file)).map_err(bad_wheel)?;
    let mut total = 0;
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(bad_wheel)?;
        let unsafe_entry =
            || Error::UnsafeWheelEntry { path: wheel.into(), entry: String::from_utf8_lossy(entry.name_raw()).into() };
        // enclosed_name rejects absolute paths and `..` escapes.
        let name = entry.enclosed_name().ok_or_else(unsafe_entry)?;
        let Ok(relative) = name.strip_prefix(strip_prefix) else {
            continue;
        };
        if relative.as_os_str().is_empty() {
            continue;
        }
        if entry.is_symlink() || relative.components().any(|c| !matches!(c, PathPart::Normal(_))) {
            return Err(unsafe_entry());
        }
        let target = dest.join(relative);
        if entry.is_dir() {
            fs::create_dir_all(&target).at(&target)?;
            continue;
        }
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).at(parent)?;
        }
        let mut out = File::create(&target).at(&target)?;
        total += io::copy(&mut entry, &mut out).map_err(|e| match e.kind() {
            // Decompression and CRC failures surface as InvalidData: a corrupt wheel.
            io::ErrorKind::InvalidData => bad_wheel(e.into()),
            _ => Error::Io { path: target.clone(), source: e },
        })?;
        set_mode(&target, entry.unix_mode())?;
    }
    Ok(total)
}

#[cfg(unix)]
fn set_mode(path: &Path, zip_mode: Option<u32>) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let executable = zip_mode.is_some_and(|m| m & 0o111 != 0);
    let mode = if executable { 0o755 } else { 0o644 };
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).at(path)
}

#[cfg(not(unix))]
fn set_mode(_path: &Path, _zip_mode: Option<u32>) -> Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pins::Pins;
    use zip::write::SimpleFileOptions;

    const TINY_SHA256: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"; // "hello"

    #[test]
    fn sha256_verification() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.whl");
        fs::write(&path, "hello").unwrap();
        verify_sha256(&path, TINY_SHA256).unwrap();

        fs::write(&path, "hellO").unwrap();
        let err = verify_sha256(&path, TINY_SHA256).unwrap_err();
        match &err {
            Error::ShaMismatch { expected, actual, .. } => {
                assert_eq!(expected, TINY_SHA256);
                assert_ne!(actual, TINY_SHA256);
            }
            other => panic!("expected ShaMismatch, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.starts_with("sha256 mismatch for ") && msg.contains("tiny.whl"), "{msg}");
    }

    fn fake_wheel(dir: &Path, name: &str, entries: &[(&str, &[u8], u32)]) -> PathBuf {
        let path = dir.join(name);
        let mut zip = zip::ZipWriter::new(File::create(&path).unwrap());
        for (entry, data, mode) in entries {
            zip.start_file(*entry, SimpleFileOptions::default().unix_permissions(*mode)).unwrap();
            zip.write_all(data).unwrap();
        }
        zip.finish().unwrap();
        path
    }

    fn sha256_of(path: &Path) -> String {
        hex(&Sha256::digest(fs::read(path).unwrap()))
    }

    fn component(wheel: &Path) -> Component {
        let mut c = Pins::embedded().unwrap().cutlass;
        c.strip_prefix = "pkg/root/".into();
        c.wheels[0].file = wheel.file_name().unwrap().to_string_lossy().into();
        c.wheels[0].sha256 = sha256_of(wheel);
        c
    }

    #[test]
    fn unpack_strips_prefix_and_keeps_exec_bits() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = fake_wheel(
            dir.path(),
            "w.whl",
            &[
                ("pkg/root/bin/tool", b"#!/bin/sh\n", 0o744),
                ("pkg/root/include/a.h", b"int a;", 0o644),
                ("pkg/other.py", b"skipped", 0o644),
                ("pkg-1.0.dist-info/RECORD", b"skipped", 0o644),
            ],
        );
        let out = dir.path().join("out");
        assert_eq!(unpack(&wheel, "pkg/root/", &out).unwrap(), 16);
        assert_eq!(fs::read_to_string(out.join("include/a.h")).unwrap(), "int a;");
        assert!(!out.join("other.py").exists() && !out.join("pkg").exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &str| fs::metadata(out.join(p)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode("bin/tool"), 0o755);
            assert_eq!(mode("include/a.h"), 0o644);
        }
    }

    #[test]
    fn unpack_rejects_escaping_entries_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = fake_wheel(dir.path(), "evil.whl", &[("pkg/root/../../../etc/x", b"x", 0o644)]);
        let err = unpack(&wheel, "pkg/root/", &dir.path().join("out")).unwrap_err();
        assert!(matches!(err, Error::UnsafeWheelEntry { .. }), "{err:?}");

        let junk = dir.path().join("junk.whl");
        fs::write(&junk, "not a zip").unwrap();
        let err = unpack(&junk, "", &dir.path().join("out")).unwrap_err();
        assert!(matches!(err, Error::BadWheel { .. }), "{err:?}");
    }

    #[test]
    fn marker_detects_incomplete_and_stale_installs() {
        let dir = tempfile::tempdir().unwrap();
        let wheels = dir.path().join("wheels");
        fs::create_dir(&wheels).unwrap();
        let wheel = fake_wheel(&wheels, "w.whl", &[("pkg/root/include/a.h", b"int a;", 0o644)]);
        let comp = component(&wheel);
        let dest = dir.path().join("install");
        assert_eq!(install_state(&dest, &comp), InstallState::Absent);

        // An interrupted install: files but no marker.
        fs::create_dir_all(dest.join("include")).unwrap();
        fs::write(dest.join("include/partial.h"), "").unwrap();
        assert_eq!(install_state(&dest, &comp), InstallState::Incomplete);

        let source = WheelSource { local_dir: Some(&wheels), cache_dir: &dir.path().join("cache") };
        let mut events = Vec::new();
        let installed =
            install_component("fake", &comp, &dest, &source, &|_| Ok(()), &mut |p| events.push(p.clone())).unwrap();
        assert_eq!(installed, Some(6));
        assert_eq!(install_state(&dest, &comp), InstallState::Installed);
        assert!(dest.join("include/a.h").is_file());
        assert!(!dest.join("include/partial.h").exists(), "the incomplete install was replaced");
        assert!(matches!(events[0], Progress::UsingWheel { .. }));
        assert!(!dir.path().join("cache").exists(), "a local wheel needs no download cache");

        // Second run: nothing to do, nothing read.
        let again = install_component("fake", &comp, &dest, &source, &|_| unreachable!(), &mut |_| unreachable!());
        assert_eq!(again.unwrap(), None);

        // Pins moved: the old install is stale.
        let mut moved = comp.clone();
        moved.version = "9.9.9".into();
        assert_eq!(install_state(&dest, &moved), InstallState::Stale);
    }

    #[test]
    fn removes_leftovers_of_dead_processes_only() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dir.path().join(".x.staging-4294967295");
        let alive = dir.path().join(format!(".x.staging-{}", std::process::id()));
        let part = dir.path().join("w.whl.part-4294967295");
        fs::create_dir(&dead).unwrap();
        fs::create_dir(&alive).unwrap();
        fs::write(&part, "partial").unwrap();
        remove_dead_leftovers(dir.path(), ".x.staging-");
        remove_dead_leftovers(dir.path(), "w.whl.part-");
        if Path::new("/proc/self").exists() {
            assert!(!dead.exists() && !part.exists());
        }
        assert!(alive.exists());
    }

    #[test]
    fn failed_check_leaves_no_marker() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = fake_wheel(dir.path(), "w.whl", &[("pkg/root/a", b"a", 0o644)]);
        let comp = component(&wheel);
        let dest = dir.path().join("install");
        let source = WheelSource { local_dir: Some(dir.path()), cache_dir: &dir.path().join("cache") };
        let check = |_: &Path| Err(Error::InvalidCompile("broken".into()));
        assert!(install_component("fake", &comp, &dest, &source, &check, &mut |_| {}).is_err());
        assert_eq!(install_state(&dest, &comp), InstallState::Absent);
        let leftovers: Vec<_> = fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(leftovers.len(), 1, "staging directory removed: {leftovers:?}");
    }

    #[test]
    fn local_wheel_with_wrong_hash_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = fake_wheel(dir.path(), "w.whl", &[("pkg/root/a", b"a", 0o644)]);
        let mut comp = component(&wheel);
        comp.wheels[0].sha256 = TINY_SHA256.into();
        let source = WheelSource { local_dir: Some(dir.path()), cache_dir: &dir.path().join("cache") };
        let err =
            install_component("fake", &comp, &dir.path().join("i"), &source, &|_| Ok(()), &mut |_| {}).unwrap_err();
        assert!(matches!(err, Error::ShaMismatch { .. }), "{err:?}");
    }
}
