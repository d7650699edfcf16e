//! `use_jemalloc!()` makes jemalloc the program's allocator, and presa
//! notices (it then turns jemalloc's background purging on). The library
//! itself installs none: its unit tests run on the system allocator
//! (`the_library_installs_no_allocator` in src/alloc.rs).

#![cfg(feature = "jemalloc")]

presa_runtime::use_jemalloc!();

#[test]
fn one_line_makes_jemalloc_the_allocator() {
    let v = vec![0u8; 1 << 20];
    assert!(presa_runtime::jemalloc_in_use(), "jemalloc counted no allocation of this thread");
    drop(v);
}
