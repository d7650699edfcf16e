#!/usr/bin/env bash
# The Dockerfile's dependency-cache stage (deploy/skeleton.sh) survives a new
# workspace member. On a copy of the repository it adds two members, one under
# an existing glob (tools/extra-tool, a binary) and one under a new top-level
# glob (plugins/*, a library with a test), then checks that the skeleton of
# that workspace:
#   - holds every member's manifest and a stub for every target root;
#   - resolves with `cargo metadata --locked` (what the old stage failed at:
#     "failed to load manifest for workspace member tools/*");
#   - builds with `cargo build --workspace --all-targets --locked --offline`, as
#     the Dockerfile's dependency layer does (CARGO_TARGET_DIR is shared with the
#     caller's build, so only the stub crates compile);
# and that the skeleton's content does not change when a source file does.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$(mktemp -d -t presa-skeleton.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}

# A copy of the tracked files (what a build context holds).
mkdir -p "$WORK/repo"
git -C "$REPO" ls-files -z | (cd "$REPO" && xargs -0 tar -cf - --no-recursion) | tar -C "$WORK/repo" -xf -
cd "$WORK/repo"

mkdir -p tools/extra-tool/src plugins/extra-plugin/src plugins/extra-plugin/tests
cat >tools/extra-tool/Cargo.toml <<'EOF'
[package]
name = "extra-tool"
version = "0.1.0"
edition = "2024"
publish = false
[dependencies]
serde_json = { workspace = true }
EOF
echo 'fn main() { println!("{}", serde_json::json!({"extra": true})); }' >tools/extra-tool/src/main.rs
cat >plugins/extra-plugin/Cargo.toml <<'EOF'
[package]
name = "extra-plugin"
version = "0.1.0"
edition = "2024"
publish = false
[[test]]
name = "named"
[dependencies]
presa-protocol = { workspace = true }
EOF
echo 'pub fn answer() -> u8 { 42 }' >plugins/extra-plugin/src/lib.rs
echo '#[test] fn named() { assert_eq!(extra_plugin::answer(), 42); }' >plugins/extra-plugin/tests/named.rs
sed -i 's|^members = \[\(.*\)\]|members = [\1, "plugins/*"]|' Cargo.toml
grep -q '"plugins/\*"' Cargo.toml || { echo "could not add plugins/* to the workspace" >&2; exit 1; }
# The lockfile learns the two path members (nothing else changes: --offline).
cargo update --workspace --offline --quiet

sh deploy/skeleton.sh . "$WORK/skeleton"
for f in tools/extra-tool/Cargo.toml tools/extra-tool/src/main.rs plugins/extra-plugin/Cargo.toml \
  plugins/extra-plugin/src/lib.rs plugins/extra-plugin/tests/named.rs services/build.rs Cargo.lock; do
  [ -f "$WORK/skeleton/$f" ] || { echo "the skeleton lacks $f" >&2; exit 1; }
done
grep -q answer "$WORK/skeleton/plugins/extra-plugin/src/lib.rs" && { echo "the skeleton kept a real source file" >&2; exit 1; }
(cd "$WORK/skeleton" && cargo metadata --locked --offline --format-version 1 \
  --filter-platform "$(rustc -vV | sed -n 's/^host: //p')" >/dev/null)
echo "skeleton: cargo metadata --locked resolves with tools/extra-tool and plugins/* added"
(cd "$WORK/skeleton" && cargo build -q --workspace --all-targets --locked --offline)
echo "skeleton: cargo build --workspace --all-targets --locked builds it"

# A source change does not change the skeleton (the cached dependency layer stays valid).
before=$(cd "$WORK/skeleton" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
echo '// an edit' >>crates/protocol/src/lib.rs
echo 'pub fn more() {}' >>plugins/extra-plugin/src/lib.rs
rm -rf "$WORK/skeleton2" && sh deploy/skeleton.sh . "$WORK/skeleton2"
after=$(cd "$WORK/skeleton2" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
[ "$before" = "$after" ] || { echo "a source edit changed the skeleton" >&2; exit 1; }
echo "skeleton: unchanged by source edits"
