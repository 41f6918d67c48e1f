//! Link settings for the daemon's own binary (not its tests).
//!
//! On x86_64 Linux, rustc links with its bundled LLD, which can fold
//! functions whose machine code is identical (`--icf=all`): generic code
//! instantiated for types of the same layout compiles to the same bytes
//! many times over. Folding them took about 0.6 MB off the stripped daemon,
//! which a board downloads and keeps. Only the `oapd` binary gets it, so the
//! test binaries link as fast as before. Other targets link with the
//! system's GNU ld (the aarch64 cross linker), which has no such option.
//! Rust makes no promise that two functions have distinct addresses, so
//! folding them is sound.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=OAPD_NO_ICF");
    let target = std::env::var("TARGET").unwrap_or_default();
    // OAPD_NO_ICF=1 for a linker without the option (a custom `linker`
    // or `-C linker-features=-lld`).
    let opted_out = std::env::var_os("OAPD_NO_ICF").is_some_and(|v| v == "1");
    if target == "x86_64-unknown-linux-gnu" && !opted_out {
        println!("cargo:rustc-link-arg-bin=oapd=-Wl,--icf=all");
    }
}
