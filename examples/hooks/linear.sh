#!/bin/sh
# ralph hook: comment on the Linear issue named in the plan item ralph works
# on, e.g. "- [ ] Fix quoting in the parser (ENG-123)", through Linear's
# GraphQL API with curl. See docs/hooks.md.
#
#   [hooks]
#   on_checkpoint = ["sh examples/hooks/linear.sh"]
#   on_exit = ["sh examples/hooks/linear.sh"]
#
# Needs LINEAR_API_KEY (a personal API key: Linear → Settings → Security &
# access). The comment (comment-body.sh, next to this script) holds the
# handoff at a checkpoint.
# RALPH_HOOK_DRY_RUN=1 prints the request instead of sending it (the key is
# shown as $LINEAR_API_KEY, never its value).
set -eu

url=https://api.linear.app/graphql
issue=$(printf '%s\n' "${RALPH_ITEM:-}" |
    awk 'match($0, /[A-Z][A-Z0-9]*-[0-9]+/) { print substr($0, RSTART, RLENGTH); exit }')
if [ -z "$issue" ]; then
    echo "no issue key (like ENG-123) in the plan item: nothing to comment on"
    exit 0
fi

body=$(sh "$(dirname "$0")/comment-body.sh")

# A JSON string: backslashes, quotes and tabs escaped, lines joined with \n,
# other control characters dropped.
json_string() {
    printf '%s' "$1" | tr -d '\000-\010\013-\037' |
        sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/	/\\t/g' |
        awk 'BEGIN { ORS = ""; print "\"" } NR > 1 { print "\\n" } { print } END { print "\"" }'
}

query='mutation($input: CommentCreateInput!) { commentCreate(input: $input) { success comment { url } } }'
request=$(printf '{"query":%s,"variables":{"input":{"issueId":%s,"body":%s}}}' \
    "$(json_string "$query")" "$(json_string "$issue")" "$(json_string "$body")")

if [ "${RALPH_HOOK_DRY_RUN:-}" = 1 ]; then
    printf '%s\n' "curl -sS -X POST $url -H 'Content-Type: application/json' -H \"Authorization: \$LINEAR_API_KEY\" --data-binary @- <<'RALPH_BODY'"
    printf '%s\nRALPH_BODY\n' "$request"
    exit 0
fi
: "${LINEAR_API_KEY:?set LINEAR_API_KEY to a Linear personal API key}"
response=$(printf '%s\n' "$request" |
    curl -sS -X POST "$url" -H 'Content-Type: application/json' \
        -H "Authorization: $LINEAR_API_KEY" --data-binary @-)
case $response in
*'"success":true'*)
    # The new comment's URL becomes the hook event's detail.
    printf '%s\n' "$response" | sed -n 's/.*"url":"\([^"]*\)".*/\1/p'
    ;;
*)
    echo "Linear refused the comment: $response" >&2
    exit 1
    ;;
esac
