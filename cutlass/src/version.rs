use std::fmt;

/// `major.minor.patch` of CUDA (from `nvcc --version`) or CUTLASS (from cutlass/version.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl Version {
    /// Parses `13.5.37` or `13.5` (patch 0).
    pub fn parse(s: &str) -> Option<Version> {
        let mut parts = s.trim().split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let patch = match parts.next() {
            Some(p) => p.parse().ok()?,
            None => 0,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Version { major, minor, patch })
    }

    /// Parses the output of `nvcc --version`, whose last lines read
    /// `Cuda compilation tools, release 13.5, V13.5.37`.
    pub fn from_nvcc_output(output: &str) -> Option<Version> {
        let line = output.lines().find(|l| l.contains("Cuda compilation tools"))?;
        let full = line.split([',', ' ']).find_map(|w| w.strip_prefix('V').and_then(Version::parse));
        full.or_else(|| {
            let release = line.split("release ").nth(1)?;
            Version::parse(release.split(',').next()?)
        })
    }

    /// Parses `#define CUTLASS_MAJOR 4` (and MINOR, PATCH) from include/cutlass/version.h.
    pub fn from_cutlass_version_h(header: &str) -> Option<Version> {
        let define = |name: &str| {
            header.lines().find_map(|l| {
                let mut words = l.split_whitespace();
                (words.next() == Some("#define") && words.next() == Some(name))
                    .then(|| words.next()?.parse().ok())
                    .flatten()
            })
        };
        Some(Version {
            major: define("CUTLASS_MAJOR")?,
            minor: define("CUTLASS_MINOR")?,
            patch: define("CUTLASS_PATCH")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NVCC_13: &str = "nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2026 NVIDIA Corporation
Built on Mon_Oct_12_19:25:48_PDT_2026
Cuda compilation tools, release 13.5, V13.5.37
Build cuda_13.5.r13.5/compiler.39125733_0
";

    #[test]
    fn nvcc_version() {
        let v = Version::from_nvcc_output(NVCC_13).unwrap();
        assert_eq!(v, Version { major: 13, minor: 5, patch: 37 });
        assert_eq!(v.to_string(), "13.5.37");
        let old = "Cuda compilation tools, release 11.8, V11.8.89\nBuild cuda_11.8.r11.8/compiler.31833905_0";
        assert_eq!(Version::from_nvcc_output(old).unwrap().major, 11);
        // No V-number: fall back to the release number.
        let release_only = "Cuda compilation tools, release 12.4";
        assert_eq!(Version::from_nvcc_output(release_only), Some(Version { major: 12, minor: 4, patch: 0 }));
        assert_eq!(Version::from_nvcc_output("gcc (Debian 12.2.0) 12.2.0"), None);
        assert_eq!(Version::from_nvcc_output(""), None);
    }

    #[test]
    fn cutlass_version_h() {
        let h = "#pragma once\n#define CUTLASS_MAJOR 4\n#define CUTLASS_MINOR 2\n#define CUTLASS_PATCH 0 \n";
        assert_eq!(Version::from_cutlass_version_h(h), Some(Version { major: 4, minor: 2, patch: 0 }));
        assert_eq!(Version::from_cutlass_version_h("#define CUTLASS_MAJOR 4\n"), None);
    }

    #[test]
    fn plain_versions() {
        assert_eq!(Version::parse("4.2.0"), Some(Version { major: 4, minor: 2, patch: 0 }));
        assert_eq!(Version::parse("13.5"), Some(Version { major: 13, minor: 5, patch: 0 }));
        assert_eq!(Version::parse("1.2.3.4"), None);
        assert_eq!(Version::parse("x.1"), None);
    }
}
