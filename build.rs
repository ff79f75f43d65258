//! Compiles the vendored ONNX protobuf schema (proto/onnx.proto, from the onnx 1.23.0 wheel)
//! into Rust types with prost. protox is a pure-Rust protobuf compiler, so no protoc binary is
//! needed on the build machine.
fn main() {
    let proto = "proto/onnx.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"]).expect("proto/onnx.proto must parse");
    prost_build::Config::new().compile_fds(fds).expect("prost code generation for onnx.proto");
}
