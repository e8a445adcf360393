# Shared by scripts/install-opencode.sh and scripts/install-gemini.sh:
# install one agent CLI at a pinned version from the npm registry into
# $RALPH_E2E_DIR (default <repo>/target/<name>-e2e/<version>) and print the
# path of its binary, with the conventions and exit statuses of
# scripts/install-claude.sh:
#
#   0 installed (or already there) · 2 npm/node missing · 3 the registry
#   cannot be reached · 4 the install failed or the binary does not run here.
#
# The caller sets: name (for messages and the directory), product, package,
# version, and a function candidates() printing, one a line, the paths
# (relative to the install directory) where the binary may be, best first.
# The first that runs and prints a --version containing $version wins.

say() { printf 'install-%s: %s\n' "$name" "$*" >&2; }

find_binary() {
    local candidate out
    while IFS= read -r candidate; do
        candidate="$dir/$candidate"
        [ -x "$candidate" ] || continue
        if out="$(timeout 60 "$candidate" --version 2>/dev/null)" && [[ "$out" == *"$version"* ]]; then
            printf '%s\n' "$candidate"
            return 0
        fi
    done < <(candidates)
    return 1
}

install_npm_cli() {
    dir="${RALPH_E2E_DIR:-$repo/target/$name-e2e/$version}"
    local bin
    if bin="$(find_binary)"; then
        say "$product $version is already installed in $dir"
        printf '%s\n' "$bin"
        exit 0
    fi
    if ! command -v npm > /dev/null 2>&1; then
        say "npm is not installed: cannot install $product $version"
        exit 2
    fi
    # One cheap request first, so that an unreachable registry is told apart
    # from a broken install.
    if ! timeout 60 npm view --fetch-retries=1 --fetch-timeout=20000 "$package@$version" version > /dev/null 2>&1; then
        say "the npm registry cannot be reached (or has no $package@$version)"
        exit 3
    fi
    say "installing $package@$version into $dir"
    mkdir -p "$dir"
    if ! timeout 600 npm install --prefix "$dir" --no-save --no-package-lock --no-audit --no-fund \
            --loglevel=error --fetch-retries=2 --fetch-timeout=60000 \
            "$package@$version" >&2; then
        say "npm install $package@$version failed"
        exit 4
    fi
    if bin="$(find_binary)"; then
        say "installed: $bin"
        printf '%s\n' "$bin"
        exit 0
    fi
    say "installed, but no $name binary of version $version runs here (platform $(uname -sm))"
    exit 4
}
