//! EP options: what a user passes to `SessionOptions.add_provider_for_devices(devices, {...})`
//! (ORT stores them in the session config as `ep.<lowercase ep name>.<key>`).

use std::fmt;

/// Where Bolt's partitions run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Device {
    /// CPU memory, planned partitions run by Bolt's reference executor (the default).
    #[default]
    Reference,
    /// CUTLASS kernels on an NVIDIA GPU (not built into this library yet).
    Cuda,
    /// Test only: host memory ORT treats as GPU memory, work queued on streams run by worker
    /// threads (see [`crate::host_gpu`]).
    HostGpu,
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Device::Reference => "reference",
            Device::Cuda => "cuda",
            Device::HostGpu => "host_gpu",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Options {
    pub device: Device,
    /// Log GetCapability / Compile decisions at WARNING through ORT's logger (else VERBOSE).
    pub verbose: bool,
    /// The device ordinal (ORT's own `device_id` key); checked against the devices that exist
    /// when the EP is created.
    pub device_id: u32,
    /// ORT's `arena.*` keys. Accepted so that options written for ORT's own EPs work, but
    /// Bolt's allocator is its own pool and never ORT's arena, so they change nothing.
    pub arena: Vec<(String, String)>,
    /// Shape ranges of symbolic dims for compiled (EPContext) artifacts, e.g. `N=1..64,S=128`
    /// (`bolt compile --dim`); unlisted symbolic dims are compiled at 1.
    pub dims: Vec<bolt::artifact::format::DimRange>,
    /// ORT's compile-once session keys (`ep.context_*`), read from the session config.
    pub context: Option<Context>,
    /// GPU archs compiled artifacts carry kernels for (`arch=sm80,sm90`); empty: the GPU of
    /// `device_id` when there is one (see `ep::build_archs`).
    pub archs: Vec<bolt_codegen::spec::Arch>,
    /// The precision of what Bolt builds (`precision=f16`); `None`: the model's own, f32 models
    /// in TF32. Inputs and outputs keep the model's types either way (cast on the device).
    pub precision: Option<bolt::artifact::Precision>,
}

/// Compile once: with ORT's `ep.context_enable=1` each fused node becomes a Bolt artifact
/// beside the saved model and an EPContext node pointing at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Context {
    /// `ep.context_file_path`: where ORT writes the compiled model (else next to the source
    /// model as `<model>_ctx.onnx`, ORT's default).
    pub file_path: Option<std::path::PathBuf>,
}

/// ORT's session keys for compile once that Bolt reads (`ep.context_enable` and friends).
pub fn context_from_session_config<'a>(
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<Option<Context>, String> {
    let (mut enable, mut file_path) = (false, None);
    for (k, v) in entries {
        match k {
            "ep.context_enable" => enable = v.trim() == "1",
            "ep.context_file_path" if !v.trim().is_empty() => file_path = Some(std::path::PathBuf::from(v.trim())),
            // Bolt's artifact is a directory of files (plan, weights, kernel library): it lives
            // beside the model and the EPContext node names it; it cannot be embedded.
            "ep.context_embed_mode" if v.trim() == "1" => {
                return Err("session option ep.context_embed_mode=1: Bolt writes its compiled artifact as a \
                            directory beside the saved model and cannot embed it; use ep.context_embed_mode=0"
                    .into())
            }
            _ => {}
        }
    }
    Ok(enable.then_some(Context { file_path }))
}

/// Bolt's own keys, and ORT's own keys Bolt accepts (`arena.*` as a prefix).
pub const KNOWN: &[&str] = &["device", "verbose", "device_id", "arena.*", "dims", "arch", "precision"];

impl Options {
    /// Parses `key=value` pairs (keys without the `ep.<name>.` prefix). Every error names the
    /// option and says what is accepted.
    pub fn parse<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Options, String> {
        let mut o = Options::default();
        for (k, v) in pairs {
            match k {
                "device" => {
                    o.device = match v.trim().to_ascii_lowercase().as_str() {
                        "reference" | "cpu" | "ref" => Device::Reference,
                        "cuda" | "gpu" => Device::Cuda,
                        "host_gpu" => Device::HostGpu,
                        _ => {
                            return Err(format!(
                                "invalid value '{v}' for EP option 'device' (expected 'reference', 'cuda' or the test device 'host_gpu')"
                            ))
                        }
                    }
                }
                "verbose" => {
                    o.verbose = match v.trim() {
                        "1" | "true" | "True" => true,
                        "0" | "false" | "False" | "" => false,
                        _ => return Err(format!("invalid value '{v}' for EP option 'verbose' (expected 0 or 1)")),
                    }
                }
                "device_id" => {
                    o.device_id = v.trim().parse().map_err(|_| {
                        format!("invalid value '{v}' for EP option 'device_id' (expected a device ordinal: 0, 1, ...)")
                    })?
                }
                "dims" => {
                    o.dims = v
                        .split([',', ';'])
                        .filter(|d| !d.trim().is_empty())
                        .map(bolt::artifact::format::DimRange::parse)
                        .collect::<Result<_, _>>()
                        .map_err(|e| format!("invalid value '{v}' for EP option 'dims' (expected e.g. N=1..64,S=128): {e}"))?
                }
                "arch" => {
                    o.archs = v
                        .split(',')
                        .filter(|a| !a.trim().is_empty())
                        .map(|a| {
                            bolt_codegen::spec::Arch::parse(a).ok_or_else(|| {
                                format!("invalid value '{v}' for EP option 'arch' (expected sm80, sm90 or both: sm80,sm90)")
                            })
                        })
                        .collect::<Result<_, _>>()?
                }
                "precision" => {
                    o.precision = Some(bolt::artifact::Precision::parse(v.trim()).ok_or_else(|| {
                        format!("invalid value '{v}' for EP option 'precision' (expected tf32, f16 or bf16)")
                    })?)
                }
                arena if arena.starts_with("arena.") => o.arena.push((arena.to_string(), v.to_string())),
                other => {
                    return Err(format!(
                        "unknown EP option '{other}' (value '{v}'); known options: {}",
                        KNOWN.join(", ")
                    ))
                }
            }
        }
        Ok(o)
    }
}

/// Picks the EP's options out of a session's config entries: keys `ep.<ep_name>.<option>`, the
/// EP name compared case-insensitively.
pub fn from_session_config<'a>(
    ep_name: &str,
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<Options, String> {
    let prefix = format!("ep.{}.", ep_name.to_ascii_lowercase());
    let mine: Vec<(&str, &str)> = entries
        .into_iter()
        .filter(|(k, _)| k.len() > prefix.len() && k.is_char_boundary(prefix.len()))
        .filter(|(k, _)| k[..prefix.len()].eq_ignore_ascii_case(&prefix))
        .map(|(k, v)| (&k[prefix.len()..], v))
        .collect();
    Options::parse(mine)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_values() {
        assert_eq!(Options::parse([]).unwrap(), Options::default());
        let o = Options::parse([("device", "cuda"), ("verbose", "1")]).unwrap();
        assert_eq!(o, Options { device: Device::Cuda, verbose: true, ..Options::default() });
        // ORT's own keys, as written for its CUDA EP, are accepted.
        let o = Options::parse([("device_id", "1"), ("arena.extend_strategy", "kSameAsRequested")]).unwrap();
        assert_eq!(o.device_id, 1);
        assert_eq!(o.arena, vec![("arena.extend_strategy".to_string(), "kSameAsRequested".to_string())]);
    }

    #[test]
    fn errors_name_the_option() {
        let e = Options::parse([("device", "tpu")]).unwrap_err();
        assert!(e.contains("'device'") && e.contains("tpu"), "{e}");
        let e = Options::parse([("fast", "1")]).unwrap_err();
        assert!(e.contains("unknown EP option 'fast'"), "{e}");
        let e = Options::parse([("device_id", "-1")]).unwrap_err();
        assert!(e.contains("'device_id'") && e.contains("-1"), "{e}");
        let e = Options::parse([("verbose", "maybe")]).unwrap_err();
        assert!(e.contains("'verbose'"), "{e}");
        let e = Options::parse([("arch", "sm75")]).unwrap_err();
        assert!(e.contains("'arch'") && e.contains("sm80,sm90"), "{e}");
        let e = Options::parse([("dims", "N=0..4")]).unwrap_err();
        assert!(e.contains("'dims'") && e.contains("1 <= MIN <= MAX"), "{e}");
    }

    #[test]
    fn dims_and_compile_once_keys() {
        let o = Options::parse([("arch", "sm90, sm80")]).unwrap();
        assert_eq!(o.archs, [bolt_codegen::spec::Arch::Sm90, bolt_codegen::spec::Arch::Sm80]);
        let o = Options::parse([("dims", "N=1..64, S=128")]).unwrap();
        assert_eq!(
            o.dims.iter().map(|d| (d.name.as_str(), d.min, d.max)).collect::<Vec<_>>(),
            [("N", 1, 64), ("S", 128, 128)]
        );
        assert_eq!(context_from_session_config([("ep.context_enable", "0")]).unwrap(), None);
        let c = context_from_session_config([("ep.context_enable", "1"), ("ep.context_file_path", "/m/x_ctx.onnx")]);
        assert_eq!(c.unwrap().unwrap().file_path.as_deref(), Some(std::path::Path::new("/m/x_ctx.onnx")));
        let e = context_from_session_config([("ep.context_enable", "1"), ("ep.context_embed_mode", "1")]).unwrap_err();
        assert!(e.contains("ep.context_embed_mode=1"), "{e}");
    }

    #[test]
    fn session_config_prefix() {
        let entries = [
            ("session.record_ep_graph_assignment_info", "1"),
            ("ep.boltexecutionprovider.device", "reference"),
            ("ep.otherep.device", "whatever"),
        ];
        let o = from_session_config("BoltExecutionProvider", entries).unwrap();
        assert_eq!(o.device, Device::Reference);
        let e = from_session_config("BoltExecutionProvider", [("ep.BoltExecutionProvider.bogus", "x")]).unwrap_err();
        assert!(e.contains("'bogus'"), "{e}");
    }
}
