#!/bin/sh
# The rehearsal's hands: what an agent would do to the files, item by item.
# `ralph demo --plan` copies your plan here as fix_plan.md; scenario.toml
# (played by `ralph sim`) runs this with `next`, `work` or `check`.
#
# A parallel run's worker gets its unit as .ralph/worker-plan.md; a single
# loop works fix_plan.md. An open item is a checkbox `[ ]` or `[~]` after
# `-`, `*`, `+`, `1.` or `1)`, outside fenced code, as ralph reads plans.
set -eu
plan=.ralph/worker-plan.md
[ -f "$plan" ] || plan=fix_plan.md

# The text of the first open item (empty when none is left).
first_open() {
    awk '
        /^[ \t]*(```|~~~)/ { code = !code; next }
        !code && /^[ \t]*([-*+]|[0-9]+[.)])[ \t]+\[[ ~]\][ \t]*[^ \t]/ {
            sub(/^[^]]*\][ \t]*/, ""); print; exit
        }' "$plan"
}

item="$(first_open)"
case "${1:-}" in
next)
    printf 'The first open item of %s: %s\n' "$plan" "${item:-none}"
    ;;
work)
    # One file per item, named by its checksum: workers never write the same file.
    [ -n "$item" ] || exit 0
    sum="$(printf '%s' "$item" | cksum | cut -d ' ' -f 1)"
    mkdir -p rehearsal
    printf '# %s\n\nRehearsed by `ralph demo --plan`: ralph sim played the agent, nothing was spent.\n' \
        "$item" >"rehearsal/item-$sum.md"
    printf 'Wrote rehearsal/item-%s.md\n' "$sum"
    ;;
check)
    # Check the first open item off, then say what the session ends with:
    # the promise only once the plan has no open item left.
    [ -n "$item" ] || exit 0
    awk '
        /^[ \t]*(```|~~~)/ { code = !code }
        !done && !code && /^[ \t]*([-*+]|[0-9]+[.)])[ \t]+\[[ ~]\][ \t]*[^ \t]/ {
            sub(/\[[ ~]\]/, "[x]"); done = 1
        }
        { print }' "$plan" >"$plan.tmp"
    mv "$plan.tmp" "$plan"
    rest="$(first_open)"
    if [ -n "$rest" ]; then
        printf 'Done: %s\nNext: %s\n' "$item" "$rest" >.rehearsal-said
    else
        printf 'Done: %s\nEvery item of the plan is done.\n\n<promise>COMPLETE</promise>\n' "$item" >.rehearsal-said
    fi
    printf 'Checked off: %s\n' "$item"
    ;;
*)
    echo "usage: sh agent.sh next|work|check" >&2
    exit 2
    ;;
esac
