#!/usr/bin/env bash
# The install as a user runs it (docs/install.md): dist builds this
# machine's release archive (the static musl binary) and the shell
# installer with the release's own configuration, a web server on
# 127.0.0.1 serves them as GitHub Releases would, the installer runs in a
# clean $HOME with nothing else in its environment, and the installed
# `ralph --version`, `ralph doctor` and `ralph demo` must pass.
#
# Fast: the archive is built at opt-level 0 (CARGO_PROFILE_DIST_*), as this
# tests the packaging and the install, not the optimizer; the release
# builds the `dist` profile as it is. The archives stay in target/distrib
# for scripts/test-image.sh.
#
# Exit status: 0 passed · 1 failed · 3 skipped (no dist: python3 or PyPI
# missing; no musl target or C compiler for it), said on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
say() { printf 'test-install: %s\n' "$*" >&2; }

status=0
dist="$(scripts/install-dist.sh)" || status=$?
if [ "$status" -ne 0 ]; then
    [ "$status" -eq 3 ] && exit 3
    exit 1
fi
target="$(uname -m)-unknown-linux-musl"
if ! rustup target list --installed 2>/dev/null | grep -qx "$target" \
    && ! rustup target add "$target" >/dev/null 2>&1; then
    say "skipped: the Rust target $target cannot be installed here"
    exit 3
fi
if ! command -v musl-gcc >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends musl-tools >/dev/null 2>&1 || true
fi
if ! command -v musl-gcc >/dev/null 2>&1; then
    say "skipped: no C compiler for $target (Debian's musl-tools)"
    exit 3
fi

say "dist build --target $target (opt-level 0)"
rm -rf target/distrib
CARGO_PROFILE_DIST_OPT_LEVEL=0 CARGO_PROFILE_DIST_LTO=false CARGO_PROFILE_DIST_CODEGEN_UNITS=256 \
    CARGO_PROFILE_DIST_DEBUG=false \
    "$dist" build --allow-dirty --target "$target" --artifacts=all --output-format=json >target/distrib.json
installer=target/distrib/ralph-loop-installer.sh
archive="target/distrib/ralph-loop-$target.tar.xz"
for f in "$installer" "$archive" "$archive.sha256" target/distrib/ralph.rb; do
    [ -f "$f" ] || { say "error: dist did not make $f"; exit 1; }
done
(cd target/distrib && sha256sum -c "ralph-loop-$target.tar.xz.sha256" >/dev/null)
if ! command -v ruby >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ruby >/dev/null 2>&1 || true
fi
if command -v ruby >/dev/null 2>&1; then
    ruby -c target/distrib/ralph.rb >/dev/null
    say "Homebrew formula: valid Ruby"
else
    say "skipped: the Homebrew formula's syntax check (no ruby here)"
fi

work="$(mktemp -d)"
server=""
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
# The release's download folder, as GitHub serves it:
# <base>/<owner>/<repo>/releases/download/v<version>/<file>.
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
repository="$(sed -n 's|^repository = "https://github.com/\(.*\)"$|\1|p' Cargo.toml | head -n 1)"
release="$work/www/$repository/releases/download/v$version"
mkdir -p "$release" "$work/home"
find target/distrib -maxdepth 1 -type f -exec cp {} "$release/" \;
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
python3 -m http.server --bind 127.0.0.1 --directory "$work/www" "$port" >"$work/server.log" 2>&1 &
server=$!
for _ in $(seq 50); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/')" 2>/dev/null && break
    sleep 0.1
done

# A clean $HOME and nothing of this machine's environment but a plain PATH:
# the installer from the loopback server, as `curl … | sh` runs it.
home="$work/home"
clean=(env -i "HOME=$home" "PATH=/usr/local/bin:/usr/bin:/bin" "LANG=C.UTF-8")
say "the installer from http://127.0.0.1:$port in a clean \$HOME"
"${clean[@]}" RALPH_LOOP_INSTALLER_GITHUB_BASE_URL="http://127.0.0.1:$port" \
    sh -c "curl --proto '=http' -sSf http://127.0.0.1:$port/$repository/releases/download/v$version/ralph-loop-installer.sh | sh" \
    >"$work/install.log" 2>&1 || { cat "$work/install.log" >&2; say "error: the installer failed"; exit 1; }
[ -x "$home/.cargo/bin/ralph" ] || { cat "$work/install.log" >&2; say "error: no ralph in ~/.cargo/bin"; exit 1; }
grep -q "$target" "$work/server.log" || { say "error: the archive was not fetched from the loopback server"; exit 1; }

# As the user's next shell has it: the PATH the installer set up.
run() { "${clean[@]}" sh -c ". \"\$HOME/.cargo/env\" && cd \"\$HOME/project\" && $1"; }
mkdir -p "$home/project"
out="$(run 'ralph --version')"
say "installed: $out"
case "$out" in
    "ralph $version ("*", $target)") ;;
    *) say "error: ralph --version says '$out', not version $version on $target"; exit 1 ;;
esac
# A project as after `ralph init`, with the demo's simulated agent (no
# Claude Code here): `ralph doctor` must find nothing to fix.
run 'git init -q && ralph init >/dev/null' || { say "error: ralph init failed"; exit 1; }
cp examples/demo/ralph.toml examples/demo/scenario.toml "$home/project/"
run 'git add -A && git -c user.name=u -c user.email=u@localhost commit -qm start' >/dev/null
run 'ralph doctor' >"$work/doctor.log" 2>&1 || { cat "$work/doctor.log" >&2; say "error: ralph doctor failed"; exit 1; }
say "ralph doctor: $(tail -n 1 "$work/doctor.log")"
run 'ralph demo "$HOME/demo"' >"$work/demo.log" 2>&1 || { tail -n 20 "$work/demo.log" >&2; say "error: ralph demo failed"; exit 1; }
say "ralph demo: $(grep 'run ended' "$work/demo.log" | tail -n 1)"
say "passed"
