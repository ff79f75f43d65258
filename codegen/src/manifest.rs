//! The manifest of a built kernel library: which symbols it exports and what each one is —
//! CUTLASS GEMM/conv kernels, back-to-back chains, glue, stitched and attention kernels.
//! Written next to the library as `<library stem>.manifest.json` (e.g. `libbolt_kernels.so`
//! -> `libbolt_kernels.manifest.json`); the loader reads it to find and type the kernels.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::abi::ProblemKind;
use crate::spec::{Arch, Family, KernelSpec};

/// Version of the manifest format itself (not of the kernel ABI).
pub const MANIFEST_FORMAT: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`] of the writer.
    pub format: u32,
    /// `BOLT_ABI_VERSION` the kernels were generated against ([`crate::abi::ABI_VERSION`]).
    pub abi_version: u32,
    /// File name of the library (in the manifest's directory).
    pub library: String,
    /// Size and blake3 of the library file, checked on load.
    pub library_size: u64,
    pub library_blake3: String,
    /// `nvcc --version` of the compiler that built it.
    pub cuda_version: String,
    /// CUTLASS version of the headers it was built with.
    pub cutlass_version: String,
    /// nvcc arguments used for each arch's translation units (source, output and the
    /// build-directory include path shown as placeholders).
    pub nvcc_flags: BTreeMap<String, Vec<String>>,
    /// nvcc arguments of the link (objects and output left out).
    pub link_flags: Vec<String>,
    /// The translation units, in build order.
    pub units: Vec<UnitEntry>,
    /// Every kernel, sorted by symbol.
    pub kernels: Vec<KernelEntry>,
    /// Back-to-back chain kernels, sorted by symbol; their functions take a
    /// `BoltB2bGemmProblem` / `BoltB2bConv2dProblem` (by the spec's family) and `BoltB2bArgs`.
    #[serde(default)]
    pub b2b: Vec<B2bEntry>,
    /// Glue kernels (transposes, padding, casts), sorted by symbol; their functions take a
    /// `BoltGlueProblem` and `BoltGlueArgs`.
    #[serde(default)]
    pub glue: Vec<GlueEntry>,
    /// Stitched kernels (memory-intensive regions), sorted by symbol; their functions take a
    /// `BoltStitchProblem` and `BoltStitchArgs`.
    #[serde(default)]
    pub stitch: Vec<StitchEntry>,
    /// Fused attention kernels, sorted by symbol; their functions take a
    /// `BoltAttentionProblem` and `BoltAttentionArgs` (output layout in the spec).
    #[serde(default)]
    pub attention: Vec<AttentionEntry>,
    /// Recurrent scan kernels, sorted by symbol; their functions take a
    /// `BoltRecurrentProblem` and `BoltRecurrentArgs`.
    #[serde(default)]
    pub recurrent: Vec<RecurrentEntry>,
}

/// One back-to-back chain kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct B2bEntry {
    pub symbol: String,
    /// Index into [`Manifest::units`].
    pub unit: usize,
    pub spec: crate::b2b::B2bSpec,
}

/// One glue kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlueEntry {
    pub symbol: String,
    /// Index into [`Manifest::units`].
    pub unit: usize,
    pub spec: crate::glue::GlueSpec,
}

/// One stitched kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StitchEntry {
    pub symbol: String,
    /// Index into [`Manifest::units`].
    pub unit: usize,
    pub spec: crate::stitch::StitchSpec,
}

/// One fused attention kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttentionEntry {
    pub symbol: String,
    /// Index into [`Manifest::units`].
    pub unit: usize,
    pub spec: crate::attention::AttentionSpec,
}

/// One recurrent scan kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecurrentEntry {
    pub symbol: String,
    /// Index into [`Manifest::units`].
    pub unit: usize,
    pub spec: crate::recurrent::RecurrentSpec,
}

/// One translation unit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitEntry {
    /// File name of the rendered source (in the build directory's `src/`).
    pub source: String,
    /// nvcc architecture, e.g. `sm_90a`.
    pub nvcc_arch: String,
    /// blake3 of the rendered source.
    pub source_hash: String,
    /// Cache key of the object (hash of source, header, versions and flags).
    pub object_key: String,
    /// Symbols defined in this unit.
    pub symbols: Vec<String>,
}

/// One kernel: it exports bolt_kernel.h's functions (`<symbol>_can_implement`,
/// `<symbol>_workspace_size`, `<symbol>_params_size`, `<symbol>_initialize`, `<symbol>_update`,
/// `<symbol>_launch`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelEntry {
    pub symbol: String,
    /// `gemm`, `batched_gemm` or `conv2d_fprop` (the full family is in `spec`).
    pub family: String,
    pub arch: Arch,
    /// nvcc architecture it was compiled for, e.g. `sm_80`, `sm_90a`.
    pub nvcc_arch: String,
    /// The problem struct its functions take.
    pub problem: ProblemKind,
    /// Index into [`Manifest::units`].
    pub unit: usize,
    /// blake3 of the rendered source of its unit.
    pub source_hash: String,
    pub spec: KernelSpec,
}

/// Short family name used in manifests and reports.
pub fn family_name(family: &Family) -> &'static str {
    match family {
        Family::Gemm => "gemm",
        Family::BatchedGemm => "batched_gemm",
        Family::GemmSoftmax => "gemm_softmax",
        Family::Conv2dFprop(_) => "conv2d_fprop",
    }
}

impl Manifest {
    /// The manifest path for a library path: the extension replaced by `manifest.json`.
    pub fn path_for(library: &Path) -> PathBuf {
        library.with_extension("manifest.json")
    }

    pub fn read(path: &Path) -> Result<Manifest, ManifestError> {
        let bytes = std::fs::read(path).map_err(|source| ManifestError::Io { path: path.into(), source })?;
        let manifest: Manifest =
            serde_json::from_slice(&bytes).map_err(|source| ManifestError::Parse { path: path.into(), source })?;
        if manifest.format != MANIFEST_FORMAT {
            return Err(ManifestError::Format { path: path.into(), found: manifest.format });
        }
        Ok(manifest)
    }

    /// Writes the manifest atomically (temporary file + rename).
    pub fn write(&self, path: &Path) -> io::Result<()> {
        let mut json = serde_json::to_vec_pretty(self).expect("manifest serialises");
        json.push(b'\n');
        crate::cache::write_atomic(path, &json)
    }

    pub fn kernel(&self, symbol: &str) -> Option<&KernelEntry> {
        self.kernels.binary_search_by(|k| k.symbol.as_str().cmp(symbol)).ok().map(|i| &self.kernels[i])
    }
}

#[derive(Debug)]
pub enum ManifestError {
    Io { path: PathBuf, source: io::Error },
    Parse { path: PathBuf, source: serde_json::Error },
    Format { path: PathBuf, found: u32 },
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManifestError::Io { path, source } => write!(f, "cannot read manifest {}: {source}", path.display()),
            ManifestError::Parse { path, source } => write!(f, "manifest {} is not valid: {source}", path.display()),
            ManifestError::Format { path, found } => write!(
                f,
                "manifest {} has format {found}, this Bolt reads format {MANIFEST_FORMAT}: rebuild the library",
                path.display()
            ),
        }
    }
}

impl std::error::Error for ManifestError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ManifestError::Io { source, .. } => Some(source),
            ManifestError::Parse { source, .. } => Some(source),
            ManifestError::Format { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_path_replaces_the_extension() {
        assert_eq!(
            Manifest::path_for(Path::new("/x/libbolt_kernels.so")),
            PathBuf::from("/x/libbolt_kernels.manifest.json")
        );
    }
}
