#!/bin/sh
# ralph hook: comment on the GitHub issue named in the plan item ralph works
# on, e.g. "- [ ] Fix quoting in the parser (#123)". See docs/hooks.md.
#
#   [hooks]
#   on_checkpoint = ["sh examples/hooks/github.sh"]
#   on_exit = ["sh examples/hooks/github.sh"]
#
# Needs the GitHub CLI, logged in (`gh auth login`, or GH_TOKEN). The issue
# is looked up in the repository of the working directory (GH_REPO=owner/name
# picks another). The comment (comment-body.sh, next to this script) holds
# the handoff at a checkpoint.
# RALPH_HOOK_DRY_RUN=1 prints the command instead of running it.
set -eu

issue=$(printf '%s\n' "${RALPH_ITEM:-}" |
    awk 'match($0, /#[0-9]+/) { print substr($0, RSTART + 1, RLENGTH - 1); exit }')
if [ -z "$issue" ]; then
    echo "no #number in the plan item: nothing to comment on"
    exit 0
fi

body=$(sh "$(dirname "$0")/comment-body.sh" --details)

if [ "${RALPH_HOOK_DRY_RUN:-}" = 1 ]; then
    printf "gh issue comment %s --body-file - <<'RALPH_BODY'\n%s\nRALPH_BODY\n" "$issue" "$body"
    exit 0
fi
# gh prints the new comment's URL: it becomes the hook event's detail.
printf '%s\n' "$body" | gh issue comment "$issue" --body-file -
