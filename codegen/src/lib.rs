//! Bolt's kernel generator: typed kernel specs ([`spec`]) with epilogue trees ([`epilogue`]),
//! rendered through Tera templates into CUTLASS C++ and built with nvcc behind a C ABI.

pub mod abi;
pub mod attention;
pub mod b2b;
pub mod builder;
pub mod cache;
pub mod candidates;
pub mod depthwise;
pub mod epilogue;
pub mod glue;
pub mod json_float;
pub mod loader;
pub mod manifest;
pub mod recurrent;
pub mod render;
pub mod sm80;
pub mod sm90;
pub mod spec;
pub mod stitch;
pub mod validate;
