#!/bin/sh
# Usage: deploy/skeleton.sh SRC DEST
#
# The Dockerfile's dependency cache: copy SRC's Cargo workspace to DEST reduced
# to what decides the dependency build (the root manifest and lockfile, every
# package manifest, rust-toolchain files) plus a stub for every target root a
# manifest can name or cargo discovers (src/lib.rs, src/main.rs, src/bin/*,
# tests/*, benches/*, examples/*, build scripts and any `path = "….rs"` or
# `build = "….rs"` a manifest sets). DEST's contents change only when a
# manifest or the set of targets does, so the image build's `cargo build` of
# every dependency stays a cached layer while presa's sources change.
#
# Generic on purpose: every directory holding a Cargo.toml is copied, whatever
# the workspace's members are, so adding a member (crates/*, services/*,
# tools/*, examples/* or a new folder) cannot break the cache stage.
# tests/image/skeleton-test.sh checks that with a member added.
#
# POSIX sh, find, grep and sed only: the Rust build image has no Python or jq.
set -eu

SRC=${1:?usage: deploy/skeleton.sh SRC DEST}
DEST=${2:?usage: deploy/skeleton.sh SRC DEST}
cd "$SRC"
mkdir -p "$DEST"

stub() { # stub FILE: a library root with only its doc (lints want one) or a `main` for anything else
  mkdir -p "$DEST/$(dirname "$1")"
  case "$1" in
    */src/lib.rs | src/lib.rs) echo '//! A dependency-cache stub (deploy/skeleton.sh).' >"$DEST/$1" ;;
    *) printf '//! A dependency-cache stub (deploy/skeleton.sh).\nfn main() {}\n' >"$DEST/$1" ;;
  esac
}

for f in Cargo.lock rust-toolchain rust-toolchain.toml .cargo/config.toml; do
  if [ -f "$f" ]; then mkdir -p "$DEST/$(dirname "$f")"; cp "$f" "$DEST/$f"; fi
done

# Every manifest outside build output and dependency folders.
find . \( -name target -o -name 'target-*' -o -name node_modules -o -name .git \) -prune -o \
  -name Cargo.toml -type f -print | sed 's|^\./||' | while read -r manifest; do
  dir=$(dirname "$manifest")
  mkdir -p "$DEST/$dir"
  cp "$manifest" "$DEST/$manifest"
  # Targets cargo discovers by convention.
  for root in src/lib.rs src/main.rs build.rs; do
    [ -f "$dir/$root" ] && stub "$dir/$root"
  done
  # (tests, benches and examples too: a `[[test]] name = "x"` without a path needs its file).
  for sub in src/bin tests benches examples; do
    [ -d "$dir/$sub" ] || continue
    find "$dir/$sub" -maxdepth 1 -name '*.rs' -type f | while read -r f; do stub "${f#./}"; done
    find "$dir/$sub" -mindepth 2 -maxdepth 2 -name main.rs -type f | while read -r f; do stub "${f#./}"; done
  done
  # Targets and build scripts a manifest names by path (`path = "…"`, `build = "…"`).
  grep -E '^[[:space:]]*(path|build)[[:space:]]*=[[:space:]]*"[^"]+\.rs"' "$manifest" |
    sed -E 's/^[^"]*"([^"]+)".*/\1/' | while read -r rel; do
      # Normalise DIR/REL (REL may climb out of DIR, e.g. build = "../build.rs").
      path=$(realpath -m --relative-to=. "$dir/$rel")
      [ -f "$path" ] && stub "$path"
    done
done
