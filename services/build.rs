//! Build script of presa-api and presa-worker (both manifests say `build =
//! "../build.rs"`): lay out first, in the binary's code, the functions a pod
//! runs from start-up through its first requests.
//!
//! Why: Linux maps an executable's code into a process in 64 KiB windows
//! around each page it touches (fault-around). Start-up code scattered over the
//! ~12 MiB of text kept ~7 MiB of it resident in an idle pod; packed together
//! at the front it keeps ~2 MiB (presa-bench's idle RSS row). The layout does
//! not change what the code does.
//!
//! `link-order.txt` beside each manifest lists those functions (mangled names,
//! first run first), recorded with callgrind by `tools/link-order.sh` from a
//! `cargo build --profile dist -p presa-api -p presa-worker -p presa-gateway
//! -p presa-cli`, as the Dockerfile builds. A name the build no longer has is
//! skipped, so a stale list costs memory, never correctness. Names survive
//! edits of presa's sources (checked: 0 of 2,144 lost after one), not a
//! dependency update nor a build that selects other packages (`--workspace`,
//! `-p presa-bench`, or api and worker alone: cargo unifies the selected
//! packages' dependencies' features, which renames the symbols of generic
//! code): run the script again after a `Cargo.lock` change.
//!
//! Only for release-based profiles (`release`, `dist`) on
//! x86_64-unknown-linux-gnu, where rustc links with its bundled LLD (the
//! option is LLD's); `PRESA_LINK_ORDER=0` turns it off, for a build that
//! swaps in another linker.

use std::{env, path::Path};

fn main() {
    println!("cargo:rerun-if-changed=link-order.txt");
    println!("cargo:rerun-if-env-changed=PRESA_LINK_ORDER");
    let dir = env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let list = Path::new(&dir).join("link-order.txt");
    let lld = env::var("TARGET").is_ok_and(|t| t == "x86_64-unknown-linux-gnu");
    let release = env::var("PROFILE").is_ok_and(|p| p == "release");
    let off = env::var("PRESA_LINK_ORDER").is_ok_and(|v| v == "0");
    if lld && release && !off && list.is_file() {
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", list.display());
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
