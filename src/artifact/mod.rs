//! The artifact: what `bolt compile` writes and the runtime loads. A directory with a manifest
//! (format and ABI versions, toolchain, archs, precision, blake3 of every file), the plan, the
//! weights in kernel layout and one kernel library. The format is documented in
//! docs/artifact.md.

pub mod bundle;
pub mod format;
mod read;
mod write;

pub use format::{Manifest, PlanFile, Precision};
pub use read::{Artifact, ArtifactError};
pub use write::{
    buckets, compile, kernel_workloads, resolve_precision, CompileOptions, CompileReport, IoTypes, Source,
};
