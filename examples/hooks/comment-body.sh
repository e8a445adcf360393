#!/bin/sh
# Prints the comment the example tracker hooks post, from ralph's RALPH_*
# variables (docs/hooks.md): what happened and, at a checkpoint, the WIP
# commit and the handoff itself. `--details` folds the handoff into an HTML
# <details> block (GitHub renders it collapsed).
set -eu

printf '**ralph** `%s`, iteration %s: %s\n' \
    "${RALPH_HOOK:-hook}" "${RALPH_ITERATION:-?}" "${RALPH_REASON:-}"
[ "${RALPH_HOOK:-}" = on_checkpoint ] || exit 0
printf '\nWIP commit: %s\n' "${RALPH_COMMIT:-none}"
if [ -n "${RALPH_HANDOFF:-}" ] && [ -f "$RALPH_HANDOFF" ]; then
    if [ "${1:-}" = --details ]; then
        printf '\n<details><summary>Handoff %s</summary>\n\n%s\n\n</details>\n' \
            "$RALPH_HANDOFF" "$(cat "$RALPH_HANDOFF")"
    else
        printf '\n%s\n' "$(cat "$RALPH_HANDOFF")"
    fi
fi
