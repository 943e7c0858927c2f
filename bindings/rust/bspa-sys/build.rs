//! Generates the raw bindings from bspa.h and links libbspa.
//!
//! Where the library is found, first match wins:
//!  1. BSPA_INCLUDE_DIR / BSPA_LIB_DIR;
//!  2. pkg-config's `bspa` (PKG_CONFIG_PATH=<prefix>/lib/pkgconfig);
//!  3. this repository's capi/include, with the library left to the linker's default path.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn pkg_config(flag: &str) -> Option<Vec<String>> {
    let output = Command::new("pkg-config").args([flag, "bspa"]).output().ok()?;
    if !output.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&output.stdout).split_whitespace().map(str::to_owned).collect())
}

fn main() {
    for var in ["BSPA_INCLUDE_DIR", "BSPA_LIB_DIR", "PKG_CONFIG_PATH"] {
        println!("cargo:rerun-if-env-changed={}", var);
    }
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());

    let include_dir = env::var("BSPA_INCLUDE_DIR").ok().map(PathBuf::from).or_else(|| {
        pkg_config("--cflags-only-I")
            .and_then(|flags| flags.into_iter().find_map(|f| f.strip_prefix("-I").map(PathBuf::from)))
    });
    let include_dir = include_dir.unwrap_or_else(|| manifest.join("../../../capi/include"));
    let lib_dir = env::var("BSPA_LIB_DIR").ok().map(PathBuf::from).or_else(|| {
        pkg_config("--libs-only-L")
            .and_then(|flags| flags.into_iter().find_map(|f| f.strip_prefix("-L").map(PathBuf::from)))
    });

    let header = include_dir.join("bspa/bspa.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let bindings = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .clang_arg(format!("-I{}", include_dir.display()))
        .allowlist_function("bspa_.*")
        .allowlist_type("bspa_.*|DL.*")
        .allowlist_var("BSPA_.*|kDL.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .size_t_is_usize(true)
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed on {}: {:?}", header.display(), e));
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs");
    bindings.write_to_file(&out).expect("writing bindings.rs");

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
