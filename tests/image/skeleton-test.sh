#!/usr/bin/env bash
# The Dockerfile's dependency-cache stage (deploy/skeleton.sh) survives a new
# workspace member. On a copy of the repository it adds two members, one under
# an existing glob (tools/extra-tool, a binary) and one under a new top-level
# glob (plugins/*, a library with a test), then checks that the skeleton of
# that workspace:
#   - holds every member's manifest and a stub for every target root (and
#     for a build script outside its package, `build = "../../tests/…"`);
#   - resolves with `cargo metadata --locked` (what the old stage failed at:
#     "failed to load manifest for workspace member tools/*");
#   - has a stub for every target cargo plans for (each target's source file of
#     the real workspace, from `cargo metadata`), which `cargo build` needs;
# and that the skeleton's content does not change when a source file does.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$(mktemp -d -t presa-skeleton.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

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
build = "../../tests/extra-build.rs"
[dependencies]
serde_json = { workspace = true }
EOF
echo 'fn main() { println!("{}", serde_json::json!({"extra": true})); }' >tools/extra-tool/src/main.rs
# A build script outside its package (`build = "../…"`), which the skeleton must normalise and keep.
echo 'fn main() {}' >tests/extra-build.rs
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
  plugins/extra-plugin/src/lib.rs plugins/extra-plugin/tests/named.rs tests/extra-build.rs Cargo.lock; do
  [ -f "$WORK/skeleton/$f" ] || { echo "the skeleton lacks $f" >&2; exit 1; }
done
grep -q answer "$WORK/skeleton/plugins/extra-plugin/src/lib.rs" && { echo "the skeleton kept a real source file" >&2; exit 1; }
(cd "$WORK/skeleton" && cargo metadata --locked --offline --format-version 1 \
  --filter-platform "$(rustc -vV | sed -n 's/^host: //p')" >/dev/null)
echo "skeleton: cargo metadata --locked resolves with tools/extra-tool and plugins/* added"
# Every target cargo plans for (what `cargo build` fails on when its file is missing, e.g.
# "can't find `x` test"): each target's source file of the real workspace has its stub.
# (Not a build of the skeleton: its crates have the same relative paths, so cargo gives their
# stub artifacts the real crates' names and, in a shared target dir, would replace them.
# The image build in CI builds the skeleton for real.)
cargo metadata --no-deps --offline --format-version 1 | python3 -c '
import json, os, sys
meta, root, skel = json.load(sys.stdin), os.getcwd(), sys.argv[1]
missing, n = [], 0
for pkg in meta["packages"]:
    for t in pkg["targets"]:
        n += 1
        rel = os.path.relpath(t["src_path"], root)
        if not os.path.isfile(os.path.join(skel, rel)):
            missing.append(" ".join([pkg["name"], t["kind"][0], t["name"] + ":", rel]))
if missing:
    sys.exit("the skeleton lacks target files:\n  " + "\n  ".join(missing))
print("skeleton: all %d targets of %d packages have their stub" % (n, len(meta["packages"])))
' "$WORK/skeleton"

# A source change does not change the skeleton (the cached dependency layer stays valid).
before=$(cd "$WORK/skeleton" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
echo '// an edit' >>crates/protocol/src/lib.rs
echo 'pub fn more() {}' >>plugins/extra-plugin/src/lib.rs
rm -rf "$WORK/skeleton2" && sh deploy/skeleton.sh . "$WORK/skeleton2"
after=$(cd "$WORK/skeleton2" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
[ "$before" = "$after" ] || { echo "a source edit changed the skeleton" >&2; exit 1; }
echo "skeleton: unchanged by source edits"
