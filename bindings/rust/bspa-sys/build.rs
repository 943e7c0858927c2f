//! Links libbspa and, with the `bindgen` feature only, regenerates the raw bindings.
//!
//! By default the crate uses `src/bindings.rs`, generated from `bspa.h` and committed, so
//! building it needs neither bindgen nor libclang. With `--features bindgen` this script runs
//! the bindgen command-line tool (Debian's `bindgen` package; `BINDGEN` names another
//! executable) on the header found below and the crate uses that output instead. The tool,
//! not the bindgen crate: a build dependency, even an optional one, would have to be
//! resolvable in every offline build of this workspace (Cargo.lock lists the optional
//! dependencies of workspace members), which is what the committed file is there to avoid.
//!
//! Where the library (and, for `bindgen`, the header) is found, first match wins:
//!  1. BSPA_INCLUDE_DIR / BSPA_LIB_DIR;
//!  2. pkg-config's `bspa` (PKG_CONFIG_PATH=<prefix>/lib/pkgconfig);
//!  3. this repository's capi/include, with the library left to the linker's default path.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn pkg_config(flag: &str) -> Option<Vec<String>> {
    let output = Command::new("pkg-config")
        .args([flag, "bspa"])
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&output.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
    )
}

/// The options that made `src/bindings.rs`; `bindings/rust/regen_bindings.sh` checks that
/// they still reproduce it from the repository's header.
const BINDGEN_ARGS: &[&str] = &[
    "--allowlist-function",
    "bspa_.*",
    "--allowlist-type",
    "bspa_.*|DL.*",
    "--allowlist-var",
    "BSPA_.*|kDL.*",
    "--default-enum-style",
    "consts",
    "--no-prepend-enum-name",
    "--size_t-is-usize",
];

fn generate(include_dir: &Path, out: &Path) {
    let header = include_dir.join("bspa/bspa.h");
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:rerun-if-env-changed=BINDGEN");
    let tool = env::var("BINDGEN").unwrap_or_else(|_| "bindgen".to_owned());
    let status = Command::new(&tool)
        .arg(&header)
        .arg("-o")
        .arg(out)
        .args(BINDGEN_ARGS)
        .arg("--")
        .arg(format!("-I{}", include_dir.display()))
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "the `bindgen` feature runs the bindgen tool, and `{}` could not be started: {} \
                 (apt-get install bindgen, or set BINDGEN; without the feature the committed \
                 src/bindings.rs is used)",
                tool, e
            )
        });
    if !status.success() {
        panic!("`{}` failed on {} ({})", tool, header.display(), status);
    }
}

fn main() {
    for var in ["BSPA_INCLUDE_DIR", "BSPA_LIB_DIR", "PKG_CONFIG_PATH"] {
        println!("cargo:rerun-if-env-changed={}", var);
    }
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());

    let include_dir = env::var("BSPA_INCLUDE_DIR")
        .ok()
        .map(PathBuf::from)
        .or_else(|| {
            pkg_config("--cflags-only-I").and_then(|flags| {
                flags
                    .into_iter()
                    .find_map(|f| f.strip_prefix("-I").map(PathBuf::from))
            })
        });
    let include_dir = include_dir.unwrap_or_else(|| manifest.join("../../../capi/include"));
    let lib_dir = env::var("BSPA_LIB_DIR")
        .ok()
        .map(PathBuf::from)
        .or_else(|| {
            pkg_config("--libs-only-L").and_then(|flags| {
                flags
                    .into_iter()
                    .find_map(|f| f.strip_prefix("-L").map(PathBuf::from))
            })
        });

    if env::var_os("CARGO_FEATURE_BINDGEN").is_some() {
        generate(
            &include_dir,
            &PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs"),
        );
    }

    if let Some(dir) = &lib_dir {
        println!("cargo:rustc-link-search=native={}", dir.display());
        // For dependents' build scripts (DEP_BSPA_LIB_DIR), e.g. to set an rpath.
        println!("cargo:lib_dir={}", dir.display());
        // This package's own tests find it there; not passed on to dependents.
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    }
    println!("cargo:include={}", include_dir.display());
    println!("cargo:rustc-link-lib=dylib=bspa");
}
