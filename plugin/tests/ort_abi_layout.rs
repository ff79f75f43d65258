//! The plugin-EP structs of `src/abi.rs` against ONNX Runtime's C header, member by member.
//!
//! The `layouts!` table below (`LAYOUTS` in messages) is the one list of what is checked: every
//! struct of `abi.rs` that has members, each member in `abi.rs`'s order with the offset and size
//! that ORT's header gives it (measured by compiling the header, LP64 Linux), and the struct's
//! API-23 size (the end of its last declared member rounded up to the struct's alignment; a
//! newer header appends members after it).
//!
//! - `layout_table_lists_every_abi_member` parses `src/abi.rs` and fails on a struct or member
//!   there that `LAYOUTS` does not list (or lists in another order), so nothing declared goes
//!   unchecked.
//! - `rust_layouts_match_the_header_offsets` compares `offset_of!` / `size_of` of the Rust
//!   structs with the recorded header numbers (no header needed).
//! - `header_layouts_match_rust` compiles ORT's header itself: it writes a C program that
//!   includes `onnxruntime_c_api.h` (which includes `onnxruntime_ep_c_api.h`) and prints
//!   `offsetof`/`sizeof` of every member in `LAYOUTS`, builds it with `$CC` (else `cc`), runs it
//!   and compares every number with the Rust structs and with `LAYOUTS`. It needs ORT's C headers,
//!   API 23 or newer (`include/` of an ONNX Runtime release archive, or
//!   `include/onnxruntime/core/session/` of its source), in `$ORT_INCLUDE_DIR`, else in
//!   `plugin/ort-include/`. The repository does not carry them (no package this project installs
//!   ships `onnxruntime_ep_c_api.h`), so the test is ignored by default; run it with
//!   `ORT_INCLUDE_DIR=<dir> cargo test --release -p bolt-plugin --test ort_abi_layout -- --include-ignored`.
//!   Without a C compiler, or without the headers, it fails and says so. A header newer than
//!   API 23 passes when abi.rs's members are a prefix of each struct (the bytes of newer members
//!   after them are reported on stdout); a member inserted, removed or reordered before them fails, by name.

use bolt_plugin::abi;
use std::collections::BTreeMap;
use std::mem::{align_of, offset_of, size_of, MaybeUninit};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One member: its name, Rust offset and size, and the header's (recorded) offset and size.
struct Member {
    name: &'static str,
    rust_offset: usize,
    rust_size: usize,
    header_offset: usize,
    header_size: usize,
}

/// One struct: its name, Rust size and alignment, recorded API-23 size, and members.
struct Layout {
    name: &'static str,
    rust_size: usize,
    rust_align: usize,
    header_size: usize,
    members: Vec<Member>,
}

/// The size of the place `p` points to (a struct member reached through `addr_of!`).
fn pointee_size<T>(_: *const T) -> usize {
    size_of::<T>()
}

macro_rules! member_size {
    ($S:ty, $f:ident) => {{
        let u = MaybeUninit::<$S>::uninit();
        // SAFETY: `addr_of!` only computes the member's address; nothing is read.
        pointee_size(unsafe { std::ptr::addr_of!((*u.as_ptr()).$f) })
    }};
}

macro_rules! layouts {
    ($($S:ident size $size:literal { $($f:ident @ $off:literal : $sz:literal),* $(,)? })*) => {
        fn layouts() -> Vec<Layout> {
            vec![$(Layout {
                name: stringify!($S),
                rust_size: size_of::<abi::$S>(),
                rust_align: align_of::<abi::$S>(),
                header_size: $size,
                members: vec![$(Member {
                    name: stringify!($f),
                    rust_offset: offset_of!(abi::$S, $f),
                    rust_size: member_size!(abi::$S, $f),
                    header_offset: $off,
                    header_size: $sz,
                }),*],
            }),*]
        }
    };
}

// The header's numbers (x86_64 and aarch64 Linux), as `header_layouts_match_rust` measures them.
layouts! {
    OrtDataTransferImpl size 32 {
        ort_version_supported @ 0: 4,
        Release @ 8: 8,
        CanCopy @ 16: 8,
        CopyTensors @ 24: 8,
    }
    OrtSyncNotificationImpl size 40 {
        ort_version_supported @ 0: 4,
        Release @ 8: 8,
        Activate @ 16: 8,
        WaitOnDevice @ 24: 8,
        WaitOnHost @ 32: 8,
    }
    OrtSyncStreamImpl size 48 {
        ort_version_supported @ 0: 4,
        Release @ 8: 8,
        GetHandle @ 16: 8,
        CreateNotification @ 24: 8,
        Flush @ 32: 8,
        OnSessionRunEnd @ 40: 8,
    }
    OrtNodeFusionOptions size 8 {
        ort_version_supported @ 0: 4,
        drop_constant_initializers @ 4: 1,
    }
    OrtNodeComputeInfo size 32 {
        ort_version_supported @ 0: 4,
        CreateState @ 8: 8,
        Compute @ 16: 8,
        ReleaseState @ 24: 8,
    }
    OrtEpApi size 128 {
        CreateEpDevice @ 0: 8,
        ReleaseEpDevice @ 8: 8,
        EpGraphSupportInfo_AddNodesToFuse @ 16: 8,
        EpGraphSupportInfo_AddSingleNode @ 24: 8,
        NodeComputeContext_NodeName @ 32: 8,
        EpDevice_AddAllocatorInfo @ 40: 8,
        MemoryInfo_GetMemoryDevice @ 48: 8,
        Value_GetMemoryDevice @ 56: 8,
        MemoryDevice_AreEqual @ 64: 8,
        MemoryDevice_GetDeviceType @ 72: 8,
        MemoryDevice_GetMemoryType @ 80: 8,
        MemoryDevice_GetVendorId @ 88: 8,
        MemoryDevice_GetDeviceId @ 96: 8,
        SyncStream_GetImpl @ 104: 8,
        SyncStream_GetSyncId @ 112: 8,
        GetSyncIdForLastWaitOnSyncStream @ 120: 8,
    }
    OrtEp size 104 {
        ort_version_supported @ 0: 4,
        GetName @ 8: 8,
        GetCapability @ 16: 8,
        Compile @ 24: 8,
        ReleaseNodeComputeInfos @ 32: 8,
        GetPreferredDataLayout @ 40: 8,
        ShouldConvertDataLayoutForOp @ 48: 8,
        SetDynamicOptions @ 56: 8,
        OnRunStart @ 64: 8,
        OnRunEnd @ 72: 8,
        CreateAllocator @ 80: 8,
        CreateSyncStreamForDevice @ 88: 8,
        GetCompiledModelCompatibilityInfo @ 96: 8,
    }
    OrtEpFactory size 112 {
        ort_version_supported @ 0: 4,
        GetName @ 8: 8,
        GetVendor @ 16: 8,
        GetSupportedDevices @ 24: 8,
        CreateEp @ 32: 8,
        ReleaseEp @ 40: 8,
        GetVendorId @ 48: 8,
        GetVersion @ 56: 8,
        ValidateCompiledModelCompatibilityInfo @ 64: 8,
        CreateAllocator @ 72: 8,
        ReleaseAllocator @ 80: 8,
        CreateDataTransfer @ 88: 8,
        IsStreamAware @ 96: 8,
        CreateSyncStreamForDevice @ 104: 8,
    }
}

fn round_up(n: usize, align: usize) -> usize {
    n.div_ceil(align) * align
}

fn plugin_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `pub struct` of `src/abi.rs` with `pub` members, and those members in order (the
/// opaque classes, whose only member is a private `_p`, have none and are left out).
fn abi_rs_structs() -> Vec<(String, Vec<String>)> {
    let path = plugin_dir().join("src/abi.rs");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.trim().strip_prefix("pub struct ") else { continue };
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if !rest[name.len()..].trim_start().starts_with('{') {
            continue; // a unit or tuple struct
        }
        let mut depth = line.matches('{').count() as i64 - line.matches('}').count() as i64;
        let mut members = Vec::new();
        while depth > 0 {
            let Some(body) = lines.next() else { panic!("{}: struct {name} is not closed", path.display()) };
            if depth == 1 {
                if let Some(decl) = body.trim().strip_prefix("pub ") {
                    let member: String = decl.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if !member.is_empty() && decl[member.len()..].trim_start().starts_with(':') {
                        members.push(member);
                    }
                }
            }
            depth += body.matches('{').count() as i64 - body.matches('}').count() as i64;
        }
        if !members.is_empty() {
            out.push((name, members));
        }
    }
    out
}

#[test]
fn layout_table_lists_every_abi_member() {
    let declared = abi_rs_structs();
    assert!(
        declared.len() >= 8,
        "found only {} structs with members in src/abi.rs: is the parser broken?",
        declared.len()
    );
    let table: BTreeMap<&str, Vec<&str>> =
        layouts().iter().map(|l| (l.name, l.members.iter().map(|m| m.name).collect())).collect();
    let mut problems = Vec::new();
    for (name, members) in &declared {
        match table.get(name.as_str()) {
            None => problems.push(format!("struct {name} of src/abi.rs is not in LAYOUTS")),
            Some(listed) if listed != members => problems.push(format!(
                "{name}: src/abi.rs declares [{}], LAYOUTS lists [{}]",
                members.join(", "),
                listed.join(", ")
            )),
            Some(_) => {}
        }
    }
    for name in table.keys() {
        if !declared.iter().any(|(d, _)| d == name) {
            problems.push(format!("LAYOUTS lists {name}, which src/abi.rs does not declare with members"));
        }
    }
    assert!(problems.is_empty(), "LAYOUTS does not cover src/abi.rs:\n  {}", problems.join("\n  "));
}

#[test]
#[cfg(target_pointer_width = "64")]
fn rust_layouts_match_the_header_offsets() {
    let mut problems = Vec::new();
    for l in layouts() {
        for m in &l.members {
            if (m.rust_offset, m.rust_size) != (m.header_offset, m.header_size) {
                problems.push(format!(
                    "{}.{}: header offset {} (size {}), Rust offset {} (size {})",
                    l.name, m.name, m.header_offset, m.header_size, m.rust_offset, m.rust_size
                ));
            }
        }
        if l.rust_size != l.header_size {
            problems.push(format!("{}: header API-23 size {}, Rust size {}", l.name, l.header_size, l.rust_size));
        }
    }
    assert!(problems.is_empty(), "src/abi.rs differs from ORT's header:\n  {}", problems.join("\n  "));
}

/// The directory holding `onnxruntime_c_api.h` and `onnxruntime_ep_c_api.h`.
fn ort_include_dir() -> PathBuf {
    let candidates: Vec<PathBuf> = std::env::var_os("ORT_INCLUDE_DIR")
        .map(PathBuf::from)
        .into_iter()
        .chain([plugin_dir().join("ort-include")])
        .collect();
    for dir in &candidates {
        if dir.join("onnxruntime_c_api.h").is_file() && dir.join("onnxruntime_ep_c_api.h").is_file() {
            return dir.clone();
        }
    }
    panic!(
        "ONNX Runtime's C headers (onnxruntime_c_api.h and onnxruntime_ep_c_api.h, from \
         include/onnxruntime/core/session/ of an ONNX Runtime release) are in none of: {}. \
         Set ORT_INCLUDE_DIR to their directory.",
        candidates.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
    );
}

/// The C program printing the header's layout of every struct and member in `LAYOUTS`.
fn c_program(layouts: &[Layout]) -> String {
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"onnxruntime_c_api.h\"\n\
         #define MEMBER(S, F) printf(\"member %s %s %zu %zu\\n\", #S, #F, offsetof(struct S, F), sizeof(((struct S*)0)->F));\n\
         #define STRUCT(S) printf(\"struct %s %zu %zu\\n\", #S, sizeof(struct S), _Alignof(struct S));\n\
         int main(void) {\n  printf(\"api_version %d\\n\", (int)ORT_API_VERSION);\n\
         printf(\"data_layout %zu %d\\n\", sizeof(OrtEpDataLayout), (int)OrtEpDataLayout_NCHW);\n",
    );
    for l in layouts {
        c += &format!("  STRUCT({})\n", l.name);
        for m in &l.members {
            c += &format!("  MEMBER({}, {})\n", l.name, m.name);
        }
    }
    c += "  return 0;\n}\n";
    c
}

/// Compiles and runs the C program; its stdout.
fn run_c_program(source: &str, include_dir: &Path) -> String {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ort_abi_layout");
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&src, source).unwrap();
    let cc = std::env::var("CC").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "cc".into());
    let mut words = cc.split_whitespace();
    let mut cmd = Command::new(words.next().unwrap());
    cmd.args(words).arg("-std=gnu11").arg("-I").arg(include_dir).arg(&src).arg("-o").arg(&exe);
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("no C compiler: running `{cc}` failed ({e}). Install one (cc/gcc/clang) or set CC.")
    });
    assert!(
        out.status.success(),
        "`{cc}` could not compile {} against {} ({}):\n{}",
        src.display(),
        include_dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
    assert!(run.status.success(), "{} failed: {}", exe.display(), run.status);
    String::from_utf8(run.stdout).unwrap()
}

#[test]
#[ignore = "needs ONNX Runtime's C headers: ORT_INCLUDE_DIR=<dir> cargo test -p bolt-plugin --test ort_abi_layout -- --include-ignored"]
fn header_layouts_match_rust() {
    let include_dir = ort_include_dir();
    let layouts = layouts();
    let output = run_c_program(&c_program(&layouts), &include_dir);

    let mut api_version = None;
    let mut data_layout = None;
    let mut structs = BTreeMap::new();
    let mut members = BTreeMap::new();
    for line in output.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize| w[i].parse::<usize>().unwrap();
        match w[0] {
            "api_version" => api_version = Some(n(1)),
            "data_layout" => data_layout = Some((n(1), w[2].parse::<i32>().unwrap())),
            "struct" => drop(structs.insert(w[1].to_string(), (n(2), n(3)))),
            "member" => drop(members.insert((w[1].to_string(), w[2].to_string()), (n(3), n(4)))),
            _ => panic!("unexpected line from the C program: {line}"),
        }
    }
    let api_version = api_version.expect("the C program printed no ORT_API_VERSION");
    println!("ORT header in {}: ORT_API_VERSION {api_version}", include_dir.display());

    let mut problems = Vec::new();
    if api_version < abi::EP_API_VERSION as usize {
        problems.push(format!(
            "the header's ORT_API_VERSION {api_version} is older than abi.rs's EP_API_VERSION {}",
            abi::EP_API_VERSION
        ));
    }
    let (layout_size, nchw) = data_layout.unwrap();
    if (layout_size, nchw) != (size_of::<i32>(), abi::ORT_EP_DATA_LAYOUT_NCHW) {
        problems.push(format!(
            "OrtEpDataLayout: header size {layout_size}, NCHW = {nchw}; abi.rs passes it as i32 with NCHW = {}",
            abi::ORT_EP_DATA_LAYOUT_NCHW
        ));
    }
    for l in &layouts {
        let (header_total, header_align) = structs[l.name];
        for m in &l.members {
            let (off, size) = members[&(l.name.to_string(), m.name.to_string())];
            if off != m.rust_offset {
                problems.push(format!("{}.{}: header offset {off}, Rust offset {}", l.name, m.name, m.rust_offset));
            }
            if size != m.rust_size {
                problems.push(format!("{}.{}: header size {size}, Rust size {}", l.name, m.name, m.rust_size));
            }
            if (off, size) != (m.header_offset, m.header_size) {
                problems.push(format!(
                    "{}.{}: header offset {off} (size {size}), LAYOUTS records {} (size {})",
                    l.name, m.name, m.header_offset, m.header_size
                ));
            }
        }
        // The declared members are a prefix of the header's struct: the header's next member (if any)
        // starts where the last declared one ends, rounded up to the struct's alignment, and that is
        // the Rust struct's size.
        let last = l.members.last().unwrap();
        let (last_off, last_size) = members[&(l.name.to_string(), last.name.to_string())];
        let prefix_size = round_up(last_off + last_size, header_align);
        if header_align != l.rust_align {
            problems.push(format!("{}: header alignment {header_align}, Rust alignment {}", l.name, l.rust_align));
        }
        if prefix_size != l.rust_size {
            problems.push(format!(
                "{}: the header's members up to {} end at {prefix_size}, the Rust struct's size is {}",
                l.name, last.name, l.rust_size
            ));
        }
        if prefix_size != l.header_size {
            problems.push(format!("{}: header API-23 size {prefix_size}, LAYOUTS records {}", l.name, l.header_size));
        }
        if header_total < prefix_size {
            problems.push(format!("{}: header size {header_total} < the declared members' end {prefix_size}", l.name));
        } else if header_total > prefix_size {
            println!(
                "{}: the header declares {} more bytes after {} (members newer than API {}); abi.rs declares its prefix",
                l.name,
                header_total - prefix_size,
                last.name,
                abi::EP_API_VERSION
            );
        }
    }
    assert!(
        problems.is_empty(),
        "src/abi.rs differs from ORT's header in {}:\n  {}",
        include_dir.display(),
        problems.join("\n  ")
    );
}
