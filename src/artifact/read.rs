//! Opening an artifact: every file checked against the manifest (size, blake3) before it is
//! parsed, so a corrupt, truncated or foreign artifact fails with the file and field at fault.

use super::format::*;
use crate::ir::{Graph, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why an artifact cannot be used: the file, the field (or "-" for the whole file) and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: field '{field}': {reason}", file.display())]
pub struct ArtifactError {
    pub file: PathBuf,
    pub field: String,
    pub reason: String,
}

fn err(file: &Path, field: impl Into<String>, reason: impl Into<String>) -> ArtifactError {
    ArtifactError { file: file.to_path_buf(), field: field.into(), reason: reason.into() }
}

/// A loaded artifact: its manifest, plan and weights (decoded), and where its library is.
#[derive(Clone, Debug)]
pub struct Artifact {
    pub dir: PathBuf,
    pub manifest: Manifest,
    pub plan: PlanFile,
    /// `weights.bin` as written (one upload for a device).
    pub weights_blob: Arc<Vec<u8>>,
    pub weights: HashMap<String, Arc<Tensor>>,
    /// The kernel library, when the plan has kernels.
    pub library: Option<PathBuf>,
}

/// serde_json's error names line and column; the path to the field comes from its message.
fn json_err(file: &Path, e: serde_json::Error) -> ArtifactError {
    let msg = e.to_string();
    // "missing field `x`" / "unknown variant `y`" name the field; otherwise point at the spot.
    let field = msg
        .split('`')
        .nth(1)
        .filter(|_| msg.contains("field") || msg.contains("variant"))
        .map(str::to_string)
        .unwrap_or_else(|| format!("line {} column {}", e.line(), e.column()));
    err(file, field, msg)
}

impl Artifact {
    pub fn open(dir: &Path) -> Result<Artifact, ArtifactError> {
        let mpath = dir.join(MANIFEST_FILE);
        let bytes = std::fs::read(&mpath).map_err(|e| err(&mpath, "-", format!("cannot read: {e}")))?;
        // Check the format fields first so another version's manifest says so, not "missing field".
        let raw: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| json_err(&mpath, e))?;
        match raw.get("format").and_then(|v| v.as_str()) {
            Some(FORMAT_NAME) => {}
            other => {
                return Err(err(&mpath, "format", format!("is {other:?}, not \"{FORMAT_NAME}\": not a Bolt artifact")))
            }
        }
        match raw.get("format_version").and_then(|v| v.as_u64()) {
            Some(v) if v == FORMAT_VERSION as u64 => {}
            other => {
                return Err(err(
                    &mpath,
                    "format_version",
                    format!("is {other:?}; this bolt reads version {FORMAT_VERSION} (rebuild with bolt compile)"),
                ))
            }
        }
        let manifest: Manifest = serde_json::from_value(raw).map_err(|e| json_err(&mpath, e))?;
        if manifest.abi_version != bolt_codegen::abi::ABI_VERSION {
            return Err(err(
                &mpath,
                "abi_version",
                format!(
                    "kernels use ABI {}, this bolt calls ABI {} (rebuild with bolt compile)",
                    manifest.abi_version,
                    bolt_codegen::abi::ABI_VERSION
                ),
            ));
        }
        let mut contents: HashMap<&str, Vec<u8>> = HashMap::new();
        for (name, entry) in &manifest.files {
            let path = dir.join(name);
            let field = format!("files.{name}");
            let data = std::fs::read(&path)
                .map_err(|e| err(&path, "-", format!("cannot read ({field} in the manifest): {e}")))?;
            if data.len() as u64 != entry.bytes {
                return Err(err(
                    &path,
                    "-",
                    format!(
                        "{} bytes, the manifest ({field}.bytes) says {}: truncated or replaced",
                        data.len(),
                        entry.bytes
                    ),
                ));
            }
            let hash = blake3::hash(&data).to_hex().to_string();
            if hash != entry.blake3 {
                return Err(err(
                    &path,
                    "-",
                    format!("blake3 {hash} differs from the manifest's {field}.blake3: corrupt"),
                ));
            }
            // Only the small files are kept in memory twice; the library is loaded by path.
            if name == PLAN_FILE || name == WEIGHTS_FILE {
                contents.insert(name.as_str(), data);
            }
        }
        let ppath = dir.join(PLAN_FILE);
        let plan_bytes = contents
            .remove(PLAN_FILE)
            .ok_or_else(|| err(&mpath, format!("files.{PLAN_FILE}"), "missing from the manifest"))?;
        let plan: PlanFile = serde_json::from_slice(&plan_bytes).map_err(|e| json_err(&ppath, e))?;

        let blob = contents
            .remove(WEIGHTS_FILE)
            .ok_or_else(|| err(&mpath, format!("files.{WEIGHTS_FILE}"), "missing from the manifest"))?;
        let mut weights = HashMap::new();
        for (i, w) in plan.weights.iter().enumerate() {
            let field = format!("weights[{i}] ('{}')", w.name);
            let range = w.offset as usize..(w.offset + w.bytes) as usize;
            let bytes = blob.get(range.clone()).ok_or_else(|| {
                err(&ppath, &field, format!("bytes {range:?} lie outside {} ({} bytes)", WEIGHTS_FILE, blob.len()))
            })?;
            let t = decode(w.dtype, &w.shape, bytes).ok_or_else(|| {
                err(
                    &ppath,
                    &field,
                    format!("{} bytes do not hold a {} tensor of shape {:?}", w.bytes, w.dtype, w.shape),
                )
            })?;
            weights.insert(w.name.clone(), Arc::new(t));
        }
        // One choice per shape bucket for every kernel and chain node.
        let kernels = plan.kernels.iter().enumerate().map(|(i, k)| (format!("kernels[{i}]"), k.buckets.len()));
        let chains = plan.chains.iter().enumerate().map(|(i, c)| (format!("chains[{i}]"), c.buckets.len()));
        for (field, n) in kernels.chain(chains) {
            if n != plan.buckets.len() {
                return Err(err(
                    &ppath,
                    format!("{field}.buckets"),
                    format!("{n} entries for {} shape buckets", plan.buckets.len()),
                ));
            }
        }
        check_kernel_operand_types(&plan).map_err(|(field, reason)| err(&ppath, field, reason))?;
        let library = manifest
            .files
            .keys()
            .find(|n| n.starts_with(&format!("{KERNELS_DIR}/")) && n.ends_with(".so"))
            .map(|n| dir.join(n));
        for (i, g) in plan.glue.iter().enumerate() {
            let want = bolt_codegen::glue::symbol_for(&g.spec);
            if g.symbol != want {
                return Err(err(
                    &ppath,
                    format!("glue[{i}].symbol"),
                    format!("is '{}', its spec's kernel is '{want}'", g.symbol),
                ));
            }
        }
        for (i, s) in plan.stitch.iter().enumerate() {
            let want = bolt_codegen::stitch::symbol_for(&s.spec);
            if s.symbol != want {
                return Err(err(
                    &ppath,
                    format!("stitch[{i}].symbol"),
                    format!("is '{}', its spec's kernel is '{want}'", s.symbol),
                ));
            }
        }
        for (i, r) in plan.recurrent.iter().enumerate() {
            let want = bolt_codegen::recurrent::symbol_for(&r.spec);
            if r.symbol != want {
                return Err(err(
                    &ppath,
                    format!("recurrent[{i}].symbol"),
                    format!("is '{}', its spec's kernel is '{want}'", r.symbol),
                ));
            }
        }
        let any_kernel = !(plan.kernels.is_empty()
            && plan.chains.is_empty()
            && plan.glue.is_empty()
            && plan.stitch.is_empty()
            && plan.attention.is_empty()
            && plan.recurrent.is_empty());
        // An artifact built for no arch is reference-only: it has no library by design.
        if any_kernel && library.is_none() && !manifest.archs.is_empty() {
            return Err(err(&mpath, "files", "the plan has kernels but the manifest lists no kernel library"));
        }
        Ok(Artifact { dir: dir.to_path_buf(), manifest, plan, weights_blob: Arc::new(blob), weights, library })
    }

    /// The planned graph with its weights, as the reference executor runs it.
    pub fn graph(&self) -> Graph {
        Graph {
            name: self.plan.name.clone(),
            opset: self.plan.opset,
            nodes: self.plan.nodes.clone(),
            types: self.plan.types.clone(),
            initializers: self.weights.clone(),
            inputs: self.plan.inputs.clone(),
            outputs: self.plan.outputs.clone(),
        }
    }
}

/// Every GEMM/conv kernel reads its operands as the bytes of its spec's types: A and the
/// weights of the input type; the bias, C and D of the output type (CUTLASS's ElementC is
/// ElementD). A plan whose tensors disagree would run and give a wrong answer (an f16 bias
/// read as f32 made ResNet-50's logits 1e8 on an H100), so opening it fails, naming the node.
fn check_kernel_operand_types(plan: &PlanFile) -> Result<(), (String, String)> {
    let dtype = |t: &str| plan.types.get(t).map(|t| t.dtype);
    for (i, k) in plan.kernels.iter().enumerate() {
        let node = plan
            .nodes
            .iter()
            .find(|n| n.name == k.node)
            .ok_or_else(|| (format!("kernels[{i}].node"), format!("'{}' is no node of the plan", k.node)))?;
        let roles = [(node.input(0), "A", true), (node.input(1), "weights", true), (node.input(2), "bias", false)]
            .into_iter()
            .chain([(node.input(3), "C", false), (node.outputs.first().map(String::as_str), "D", false)]);
        for (tensor, role, of_input) in roles {
            let Some(tensor) = tensor else { continue };
            let have = dtype(tensor).and_then(crate::plan::lower::element);
            for (b, choices) in k.buckets.iter().enumerate() {
                for c in choices {
                    let want = if of_input { c.spec.types.input } else { c.spec.types.output };
                    if have != Some(want) {
                        return Err((
                            format!("kernels[{i}].buckets[{b}]"),
                            format!(
                                "node '{}': {role} '{tensor}' is {}, its kernel {} reads {want:?}: rebuild with bolt compile",
                                k.node,
                                dtype(tensor).map_or("untyped".to_string(), |d| d.to_string()),
                                c.symbol
                            ),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}
