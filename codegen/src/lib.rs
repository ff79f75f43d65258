//! Bolt's kernel generator: typed kernel specs ([`spec`]) with epilogue trees ([`epilogue`]),
//! rendered through Tera templates into CUTLASS C++ and built with nvcc behind a C ABI.

pub mod epilogue;
pub mod spec;
