//! Tests and examples of this crate find libbspa where bspa-sys found it (an RPATH), so
//! they run without LD_LIBRARY_PATH. Programs of other crates set their own.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_BSPA_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_BSPA_LIB_DIR") {
        // Applies to this package's tests, examples and doctests, not to the rlib.
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    }
}
