//! Recurrent scan kernels: the sequential part of an RNN, GRU or LSTM layer once its input
//! projections X·Wᵀ + Wb are made by a GEMM (cuDNN's split). One thread block per (batch row,
//! direction) walks the sequence; each step every thread computes the gate sums of its hidden
//! units from the state in shared memory (`H·Rᵀ`, R stored transposed so that neighbouring
//! threads read neighbouring units' weights), synchronises, and updates the state. One typed
//! spec, one template (`templates/recurrent.cu.tera`), the same C ABI as every kernel
//! (`BoltRecurrentProblem`, `BoltRecurrentArgs`; no workspace).
//!
//! The kernel's body is a template on its thread: the tests run the operator's own launch on
//! the host's emulation (`bolt_host_launch.h`: a thread per unit, the block's barriers real,
//! built with ThreadSanitizer) against the reference executor's recurrence.

use ordered_float::OrderedFloat;
use serde::{Deserialize, Serialize};

use crate::abi::BoltRecurrentProblem;
use crate::epilogue::Activation;
use crate::render::RenderError;
use crate::spec::Element;
use crate::stitch::UnaryFn;

/// The cell, with its variant attributes (ONNX's gate orders: RNN one gate; GRU z, r, h;
/// LSTM i, o, f, c with peepholes i, o, f).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecurrentCell {
    Rnn,
    Gru { linear_before_reset: bool },
    Lstm { input_forget: bool },
}

impl RecurrentCell {
    pub fn gates(self) -> i64 {
        match self {
            RecurrentCell::Rnn => 1,
            RecurrentCell::Gru { .. } => 3,
            RecurrentCell::Lstm { .. } => 4,
        }
    }
}

/// Which way the scan walks; bidirectional runs both, direction 1 backwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScanDirection {
    Forward,
    Reverse,
    Bidirectional,
}

impl ScanDirection {
    pub fn count(self) -> i64 {
        if self == ScanDirection::Bidirectional {
            2
        } else {
            1
        }
    }
}

/// One recurrent scan kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RecurrentSpec {
    pub cell: RecurrentCell,
    pub direction: ScanDirection,
    /// f, g, h of the cell (ONNX's order; a cell uses the first 1, 2 or 3). Both directions
    /// use the same ones.
    pub activations: [Activation; 3],
    /// Gate pre-activations clipped to [-clip, clip].
    #[serde(default)]
    pub clip: Option<OrderedFloat<f32>>,
    /// XW, Y `[batch, seq, ..]` and the states `[batch, D, H]` (ONNX layout 1).
    pub batch_major: bool,
    /// XW, Rᵀ, B, the states, P and the outputs; compute is f32.
    pub element: Element,
}

/// Units of the hidden state one block holds: one thread each at most.
pub const MAX_HIDDEN: i64 = 1024;

/// Kernels per compilation unit.
pub const KERNELS_PER_UNIT: usize = 8;

/// Why a recurrent spec or problem is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecurrentRejection {
    #[error("clip {0}: must be positive")]
    Clip(OrderedFloat<f32>),
    #[error("hidden size {0}: scan kernels hold 1..={MAX_HIDDEN} units per block")]
    Hidden(i64),
    #[error("{what} {value}: must be positive")]
    Extent { what: &'static str, value: i64 },
    #[error("batch {0}: above the launch grid's 65535 blocks")]
    Grid(i64),
}

pub fn validate(spec: &RecurrentSpec) -> Result<(), RecurrentRejection> {
    match spec.clip {
        Some(c) if !(c.0 > 0.0) => Err(RecurrentRejection::Clip(c)),
        _ => Ok(()),
    }
}

/// What the kernel's `can_implement` answers, on the host: a positive sequence, batch and
/// hidden size (at most [`MAX_HIDDEN`]), the batch within the grid.
pub fn check(problem: &BoltRecurrentProblem) -> Result<(), RecurrentRejection> {
    for (what, value) in [("seq", problem.seq), ("batch", problem.batch), ("hidden", problem.hidden)] {
        if value <= 0 {
            return Err(RecurrentRejection::Extent { what, value });
        }
    }
    if problem.hidden > MAX_HIDDEN {
        return Err(RecurrentRejection::Hidden(problem.hidden));
    }
    if problem.batch > 65535 {
        return Err(RecurrentRejection::Grid(problem.batch));
    }
    Ok(())
}

/// Shared memory a block uses for `hidden` units: the state h and c, every gate's sum and
/// the reset-scaled state (f32 each).
pub fn shared_bytes(spec: &RecurrentSpec, hidden: i64) -> i64 {
    (3 + spec.cell.gates()) * hidden * 4
}

fn activation_name(a: Activation) -> String {
    let f = |v: f32| format!("{:08x}", v.to_bits());
    match a {
        Activation::HardSigmoid { alpha, beta } => format!("hardsigmoid{}x{}", f(alpha.0), f(beta.0)),
        Activation::LeakyRelu { alpha } => format!("leakyrelu{}", f(alpha.0)),
        Activation::Clip { min, max } => format!("clip{}x{}", f(min.0), f(max.0)),
        a => a.name().replace('_', ""),
    }
}

/// A readable unique symbol, e.g. `bolt_recurrent_lstm_fwd_sigmoid_tanh_tanh_f32`.
pub fn symbol_for(spec: &RecurrentSpec) -> String {
    let cell = match spec.cell {
        RecurrentCell::Rnn => "rnn".to_string(),
        RecurrentCell::Gru { linear_before_reset } => format!("gru{}", if linear_before_reset { "_lbr" } else { "" }),
        RecurrentCell::Lstm { input_forget } => format!("lstm{}", if input_forget { "_coupled" } else { "" }),
    };
    let direction = match spec.direction {
        ScanDirection::Forward => "fwd",
        ScanDirection::Reverse => "rev",
        ScanDirection::Bidirectional => "bi",
    };
    let used = match spec.cell {
        RecurrentCell::Rnn => 1,
        RecurrentCell::Gru { .. } => 2,
        RecurrentCell::Lstm { .. } => 3,
    };
    let acts: Vec<String> = spec.activations[..used].iter().map(|&a| activation_name(a)).collect();
    let clip = spec.clip.map_or(String::new(), |c| format!("_clip{:08x}", c.0.to_bits()));
    let major = if spec.batch_major { "_bm" } else { "" };
    format!("bolt_recurrent_{cell}_{direction}_{}{clip}{major}_{}", acts.join("_"), spec.element.name())
}

#[derive(Serialize)]
struct Context<'a> {
    symbol: &'a str,
    summary: String,
    element: &'static str,
    gates: i64,
    directions: i64,
    reverse: bool,
    batch_major: bool,
    /// "rnn", "gru" or "lstm".
    cell: &'static str,
    linear_before_reset: bool,
    input_forget: bool,
    /// C++ expressions of `x` for f, g, h.
    f: String,
    g: String,
    h: String,
    /// "" when the cell does not clip, else the bound as a C++ literal.
    clip: String,
}

pub const TEMPLATE: &str = "recurrent.cu.tera";

/// One recurrent kernel's block (relies on the unit prologue, like [`crate::render::render`]).
pub fn render(spec: &RecurrentSpec, symbol: &str) -> Result<String, RenderError> {
    crate::render::check_symbol(symbol)?;
    validate(spec).map_err(|r| RenderError::Unsupported { field: "recurrent", reason: r.to_string() })?;
    let act = |a: Activation| UnaryFn::Activation(a).cpp("x");
    let (cell, linear_before_reset, input_forget) = match spec.cell {
        RecurrentCell::Rnn => ("rnn", false, false),
        RecurrentCell::Gru { linear_before_reset } => ("gru", linear_before_reset, false),
        RecurrentCell::Lstm { input_forget } => ("lstm", false, input_forget),
    };
    let context = Context {
        symbol,
        summary: serde_json::to_string(spec).expect("recurrent spec serialises"),
        element: spec.element.cpp(),
        gates: spec.cell.gates(),
        directions: spec.direction.count(),
        reverse: spec.direction == ScanDirection::Reverse,
        batch_major: spec.batch_major,
        cell,
        linear_before_reset,
        input_forget,
        f: act(spec.activations[0]),
        g: act(spec.activations[1]),
        h: act(spec.activations[2]),
        clip: spec.clip.map_or(String::new(), |c| format!("{:e}f", c.0)),
    };
    crate::render::render_template(TEMPLATE, &crate::render::to_context(&context)?)
}

/// Recurrent kernels as one `.cu` unit: the shared prologue, then each block.
pub fn render_unit(kernels: &[(&RecurrentSpec, &str)]) -> Result<String, RenderError> {
    crate::render::assemble_unit(kernels, &includes(), render)
}

/// Headers a unit with recurrent kernels needs (the element types and `cutlass::Status`).
pub fn includes() -> [&'static str; 3] {
    ["cutlass/cutlass.h", "cutlass/half.h", "cutlass/bfloat16.h"]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lstm() -> RecurrentSpec {
        RecurrentSpec {
            cell: RecurrentCell::Lstm { input_forget: false },
            direction: ScanDirection::Forward,
            activations: [Activation::Sigmoid, Activation::Tanh, Activation::Tanh],
            clip: None,
            batch_major: false,
            element: Element::F32,
        }
    }

    #[test]
    fn symbols_name_what_changes_the_code_and_problems_are_checked() {
        let s = lstm();
        assert_eq!(symbol_for(&s), "bolt_recurrent_lstm_fwd_sigmoid_tanh_tanh_f32");
        let gru = RecurrentSpec {
            cell: RecurrentCell::Gru { linear_before_reset: true },
            direction: ScanDirection::Bidirectional,
            clip: Some(OrderedFloat(2.0)),
            batch_major: true,
            ..s
        };
        assert_ne!(symbol_for(&gru), symbol_for(&RecurrentSpec { clip: None, ..gru }));
        assert_ne!(symbol_for(&gru), symbol_for(&RecurrentSpec { batch_major: false, ..gru }));
        let ok = BoltRecurrentProblem { seq: 5, batch: 2, hidden: 64 };
        assert_eq!(check(&ok), Ok(()));
        assert_eq!(check(&BoltRecurrentProblem { hidden: 1025, ..ok }), Err(RecurrentRejection::Hidden(1025)));
        assert!(matches!(check(&BoltRecurrentProblem { seq: 0, ..ok }), Err(RecurrentRejection::Extent { .. })));
        assert_eq!(
            validate(&RecurrentSpec { clip: Some(OrderedFloat(-1.0)), ..s }),
            Err(RecurrentRejection::Clip(OrderedFloat(-1.0)))
        );
    }
}
