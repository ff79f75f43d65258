//! ONNX test cases on disk, in the layout of onnx's backend tests: `model.onnx` beside
//! `test_data_set_<k>/{input_<i>.pb, output_<i>.pb}`. The conformance suite, the real-model
//! comparisons with onnxruntime and `bolt check` all run through here.

use crate::error::{Error, Result};
use crate::import::{self, proto::TensorProto};
use crate::ir::{DType, Tensor};
use prost::Message;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// How close the reference must be to the expected output: |got - want| <= atol + rtol*|want|.
/// The defaults are the ONNX backend test runner's (rtol 1e-3, atol 1e-7); integer and bool
/// outputs must match exactly.
#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

impl Tolerance {
    pub const ONNX_BACKEND: Tolerance = Tolerance { rtol: 1e-3, atol: 1e-7 };
}

/// One output's comparison.
#[derive(Clone, Debug)]
pub struct OutputCheck {
    pub name: String,
    pub max_abs_err: f64,
    pub max_rel_err: f64,
    /// Why it failed, if it did.
    pub failure: Option<String>,
}

/// The outcome of one case (all its data sets).
#[derive(Clone, Debug)]
pub struct CaseResult {
    pub name: String,
    pub outputs: Vec<OutputCheck>,
    /// Import or execution error, if any.
    pub error: Option<String>,
    pub seconds: f64,
}

impl CaseResult {
    pub fn passed(&self) -> bool {
        self.error.is_none() && self.outputs.iter().all(|o| o.failure.is_none())
    }

    /// One-line reason for a failure.
    pub fn reason(&self) -> Option<String> {
        if let Some(e) = &self.error {
            return Some(e.clone());
        }
        self.outputs.iter().find_map(|o| o.failure.as_ref().map(|f| format!("output '{}': {f}", o.name)))
    }
}

/// Reads a serialized TensorProto (.pb).
pub fn read_tensor_pb(path: &Path) -> Result<(String, Tensor)> {
    let file_err = |reason: String| Error::File { path: path.into(), reason };
    let bytes = std::fs::read(path).map_err(|e| file_err(format!("cannot read: {e}")))?;
    let t = TensorProto::decode(bytes.as_slice()).map_err(|e| file_err(format!("not a TensorProto: {e}")))?;
    let tensor = import::decode_tensor(&t, None).map_err(file_err)?;
    Ok((t.name().to_string(), tensor))
}

/// Writes a TensorProto (.pb).
pub fn write_tensor_pb(path: &Path, name: &str, t: &Tensor) -> Result<()> {
    std::fs::write(path, import::encode_tensor(name, t).encode_to_vec())
        .map_err(|e| Error::File { path: path.into(), reason: format!("cannot write: {e}") })
}

/// The data set directories of a case, in order.
pub fn data_sets(case_dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(case_dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("test_data_set_")))
        .collect();
    v.sort();
    v
}

fn numbered(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<(usize, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            let k = n.strip_prefix(prefix)?.strip_suffix(".pb")?.parse().ok()?;
            Some((k, e.path()))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

/// Runs a case with the reference executor and compares every output of every data set.
pub fn run_case(case_dir: &Path, tol: Tolerance) -> CaseResult {
    run_case_as(case_dir, tol, false)
}

/// Runs a case's planned graph (fused kernels, NHWC, padding, back-to-back chains) with the
/// reference executor and compares it with the case's expected outputs: the plan checked
/// against outputs Bolt did not compute.
pub fn run_planned_case(case_dir: &Path, tol: Tolerance) -> CaseResult {
    run_case_as(case_dir, tol, true)
}

fn run_case_as(case_dir: &Path, tol: Tolerance, planned: bool) -> CaseResult {
    let name = case_dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let start = std::time::Instant::now();
    let mut result = CaseResult { name, outputs: Vec::new(), error: None, seconds: 0.0 };
    if let Err(e) = run_case_inner(case_dir, tol, planned, &mut result.outputs) {
        result.error = Some(e.to_string());
    }
    result.seconds = start.elapsed().as_secs_f64();
    result
}

fn run_case_inner(case_dir: &Path, tol: Tolerance, planned: bool, checks: &mut Vec<OutputCheck>) -> Result<()> {
    let model = import::load(&case_dir.join("model.onnx"))?;
    let g = &model.graph;
    let plan = if planned { Some(crate::plan::plan(g)?) } else { None };
    let sets = data_sets(case_dir);
    if sets.is_empty() {
        return Err(Error::File { path: case_dir.into(), reason: "no test_data_set_* directories".into() });
    }
    for set in sets {
        let mut inputs = HashMap::new();
        // Inputs are positional over the graph's declared inputs (initializers excluded).
        for (i, p) in numbered(&set, "input_").iter().enumerate() {
            let (_, t) = read_tensor_pb(p)?;
            let name = g.inputs.get(i).ok_or_else(|| Error::File {
                path: p.clone(),
                reason: format!("data set has more inputs than the graph's {}", g.inputs.len()),
            })?;
            inputs.insert(name.clone(), t);
        }
        let outs = crate::reference::run(plan.as_ref().map_or(g, |p| &p.graph), &inputs)?;
        for (i, p) in numbered(&set, "output_").iter().enumerate() {
            let (_, want) = read_tensor_pb(p)?;
            let out_name = g.outputs.get(i).ok_or_else(|| Error::File {
                path: p.clone(),
                reason: "data set has more outputs than the graph".into(),
            })?;
            let got = &outs[out_name];
            checks.push(compare(out_name, got, &want, tol));
        }
    }
    Ok(())
}

/// Compares a computed tensor with the expected one.
pub fn compare(name: &str, got: &Tensor, want: &Tensor, tol: Tolerance) -> OutputCheck {
    let mut check = OutputCheck { name: name.to_string(), max_abs_err: 0.0, max_rel_err: 0.0, failure: None };
    if got.dtype() != want.dtype() {
        check.failure = Some(format!("dtype {} but expected {}", got.dtype(), want.dtype()));
        return check;
    }
    if got.shape != want.shape {
        check.failure = Some(format!("shape {:?} but expected {:?}", got.shape, want.shape));
        return check;
    }
    let exact = !got.dtype().is_float() || matches!(got.dtype(), DType::Other(_));
    // Expected outputs of a 16-bit type were rounded to it at every step (onnx's reference
    // computes in the type), Bolt's reference rounds once: a few units in the last place
    // apart is the same answer (bf16 keeps 8 significant bits, f16 11).
    let rtol = match got.dtype() {
        DType::BF16 => tol.rtol.max(2f64.powi(-6)),
        DType::F16 => tol.rtol.max(2f64.powi(-9)),
        _ => tol.rtol,
    };
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    let mut worst: Option<(usize, f64, f64)> = None;
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        if a.is_nan() && b.is_nan() || a == b {
            continue;
        }
        let abs = (a - b).abs();
        let rel = abs / b.abs().max(f64::MIN_POSITIVE);
        if abs.is_finite() {
            check.max_abs_err = check.max_abs_err.max(abs);
            check.max_rel_err = check.max_rel_err.max(rel);
        }
        // Written negated so a NaN error (NaN vs a number) counts as bad.
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        let bad = exact || !(abs <= tol.atol + rtol * b.abs());
        if bad && worst.is_none_or(|(_, wa, _)| abs > wa || abs.is_nan()) {
            worst = Some((i, abs, b));
        }
    }
    if let Some((i, abs, b)) = worst {
        check.failure = Some(format!("element {i}: got {} expected {b} (abs err {abs:.3e})", g[i]));
    }
    check
}

/// Lists case directories (those holding a model.onnx) under `root`, sorted by name.
pub fn find_cases(root: &Path) -> Vec<PathBuf> {
    if root.join("model.onnx").exists() {
        return vec![root.to_path_buf()];
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("model.onnx").exists())
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_applies_tolerance_and_exactness() {
        let t = |v: Vec<f32>| Tensor::from_f32(vec![v.len()], v);
        let tol = Tolerance { rtol: 1e-3, atol: 1e-6 };
        assert!(compare("y", &t(vec![1.0, 2.0005]), &t(vec![1.0, 2.0]), tol).failure.is_none());
        assert!(compare("y", &t(vec![1.0, 2.01]), &t(vec![1.0, 2.0]), tol).failure.is_some());
        assert!(compare("y", &t(vec![f32::NAN]), &t(vec![f32::NAN]), tol).failure.is_none());
        assert!(compare("y", &t(vec![f32::NAN]), &t(vec![1.0]), tol).failure.is_some());
        let i = |v: Vec<i64>| Tensor::from_i64(vec![v.len()], v);
        assert!(compare("y", &i(vec![3]), &i(vec![4]), tol).failure.is_some());
        assert!(compare("y", &t(vec![1.0]), &t(vec![1.0, 2.0]), tol).failure.unwrap().contains("shape"));
    }
}

/// Cases known to fail, each with the written reason. One entry per line:
/// `<case name or glob with *>  <reason>`; `#` starts a comment.
#[derive(Debug, Default)]
pub struct ExpectedFailures {
    entries: Vec<(String, String)>,
}

impl ExpectedFailures {
    pub fn parse(text: &str) -> Result<ExpectedFailures, String> {
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (pat, reason) = line
                .split_once(char::is_whitespace)
                .ok_or_else(|| format!("line {}: expected '<case> <reason>'", i + 1))?;
            entries.push((pat.to_string(), reason.trim().to_string()));
        }
        Ok(ExpectedFailures { entries })
    }

    /// The pattern and reason covering `case`, if any.
    pub fn lookup(&self, case: &str) -> Option<(&str, &str)> {
        self.entries.iter().find(|(p, _)| glob_match(p, case)).map(|(p, r)| (p.as_str(), r.as_str()))
    }

    pub fn patterns(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(p, _)| p.as_str())
    }
}

/// `*` matches any run of characters; everything else is literal.
fn glob_match(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == s;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !s.starts_with(first) || !s[first.len()..].ends_with(last) || s.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &s[first.len()..s.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(k) => rest = &rest[k + mid.len()..],
            None => return false,
        }
    }
    true
}

/// Results of a suite judged against the expected failures.
#[derive(Debug, Default)]
pub struct Verdict {
    pub passed: Vec<String>,
    /// Failed and listed: (case, written reason, actual error).
    pub expected: Vec<(String, String, String)>,
    /// Failed and not listed: (case, error).
    pub unexpected: Vec<(String, String)>,
    /// Listed (by exact name) but passed: the list is stale.
    pub stale: Vec<String>,
}

impl Verdict {
    pub fn judge(results: &[CaseResult], expected: &ExpectedFailures) -> Verdict {
        let mut v = Verdict::default();
        for r in results {
            match (r.passed(), expected.lookup(&r.name)) {
                (true, Some((pat, _))) if !pat.contains('*') => v.stale.push(r.name.clone()),
                (true, _) => v.passed.push(r.name.clone()),
                (false, Some((_, why))) => {
                    v.expected.push((r.name.clone(), why.to_string(), r.reason().unwrap_or_default()))
                }
                (false, None) => v.unexpected.push((r.name.clone(), r.reason().unwrap_or_default())),
            }
        }
        v
    }

    pub fn ok(&self) -> bool {
        self.unexpected.is_empty() && self.stale.is_empty()
    }
}

#[cfg(test)]
mod expectation_tests {
    use super::*;

    #[test]
    fn globs_and_staleness() {
        assert!(glob_match("test_cast_*FLOAT8*", "test_cast_FLOAT_to_FLOAT8E4M3FN"));
        assert!(!glob_match("test_cast_*FLOAT8*", "test_cast_FLOAT_to_FLOAT16"));
        assert!(glob_match("exact", "exact") && !glob_match("exact", "exact2"));
        let ef = ExpectedFailures::parse("# c\ntest_a  reason a\ntest_b*  reason b\n").unwrap();
        let mk = |n: &str, ok: bool| CaseResult {
            name: n.into(),
            outputs: vec![],
            error: if ok { None } else { Some("boom".into()) },
            seconds: 0.0,
        };
        let v =
            Verdict::judge(&[mk("test_a", true), mk("test_b1", false), mk("test_c", false), mk("test_b2", true)], &ef);
        assert_eq!(v.stale, vec!["test_a"]);
        assert_eq!(v.expected.len(), 1);
        assert_eq!(v.unexpected, vec![("test_c".to_string(), "boom".to_string())]);
        assert_eq!(v.passed, vec!["test_b2"]);
        assert!(!v.ok());
    }
}
