//! Built-in models: what `bolt compile` runs when no model is given.

mod default;

pub use default::{default_model, DEFAULT_MODEL_NAME};
