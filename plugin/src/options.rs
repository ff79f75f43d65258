//! EP options: what a user passes to `SessionOptions.add_provider_for_devices(devices, {...})`
//! (ORT stores them in the session config as `ep.<lowercase ep name>.<key>`).

use std::fmt;

/// Where Bolt's partitions run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// CPU memory, planned partitions run by Bolt's reference executor (the default).
    Reference,
    /// CUTLASS kernels on an NVIDIA GPU (not built into this library yet).
    Cuda,
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Device::Reference => "reference",
            Device::Cuda => "cuda",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub device: Device,
    /// Log GetCapability / Compile decisions to stderr.
    pub verbose: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options { device: Device::Reference, verbose: false }
    }
}

pub const KNOWN: &[&str] = &["device", "verbose"];

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
                        _ => {
                            return Err(format!(
                                "invalid value '{v}' for EP option 'device' (expected 'reference' or 'cuda')"
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
        assert_eq!(o, Options { device: Device::Cuda, verbose: true });
    }

    #[test]
    fn errors_name_the_option() {
        let e = Options::parse([("device", "tpu")]).unwrap_err();
        assert!(e.contains("'device'") && e.contains("tpu"), "{e}");
        let e = Options::parse([("fast", "1")]).unwrap_err();
        assert!(e.contains("unknown EP option 'fast'"), "{e}");
        let e = Options::parse([("verbose", "maybe")]).unwrap_err();
        assert!(e.contains("'verbose'"), "{e}");
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
