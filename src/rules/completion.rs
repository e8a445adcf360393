//! The completion rule: the exact `<promise>TEXT</promise>` in the agent's
//! own final result text, not inside quotes, code or instructions.

use std::sync::LazyLock;

use regex::Regex;

static TAG: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?s)<promise>(.*?)</promise>").expect("promise regex"));
static FENCE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?s)(```|~~~).*?(```|~~~|\z)").expect("fence regex"));
static CODE_SPAN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"`[^`\n]*`").expect("code span regex"));
/// Words that make a line an instruction about the tag rather than the tag
/// itself, when they are in the sentence the tag ends: "Output done." in an
/// earlier sentence of the agent's own summary does not disown its tag.
static INSTRUCTION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(output|outputs|print|emit|respond with|reply with|write)\b[^<.!?]*$")
        .expect("instruction regex")
});

fn normalise(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// True when `result_text` carries the promise as the agent's own claim.
pub(crate) fn promise_in(result_text: &str, promise: &str) -> bool {
    let want = normalise(promise);
    let text = FENCE.replace_all(result_text, "");
    let text = CODE_SPAN.replace_all(&text, "");
    for m in TAG.captures_iter(&text) {
        let whole = m.get(0).expect("match");
        // The line the tag starts on, up to the tag, and what follows it.
        let line_start = text[..whole.start()].rfind('\n').map_or(0, |i| i + 1);
        let before = &text[line_start..whole.start()];
        let after = text[whole.end()..].lines().next().unwrap_or("");
        if before.trim_start().starts_with('>') {
            continue; // a quoted passage
        }
        let quoted = before.trim_end().ends_with(['"', '\'', '“', '‘'])
            && after.trim_start().starts_with(['"', '\'', '”', '’']);
        if quoted || INSTRUCTION.is_match(before) {
            continue;
        }
        if normalise(&m[1]) == want {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_own_tag_counts() {
        assert!(promise_in(
            "All items are done.\n\n<promise>COMPLETE</promise>",
            "COMPLETE"
        ));
        assert!(promise_in(
            "Done. <promise> COMPLETE\n</promise>",
            "COMPLETE"
        ));
        assert!(promise_in(
            "<promise>ALL  TESTS GREEN</promise>",
            "ALL TESTS\tGREEN"
        ));
    }

    #[test]
    fn other_text_does_not() {
        assert!(!promise_in("<promise>COMPLETED</promise>", "COMPLETE"));
        assert!(!promise_in("<promise>complete</promise>", "COMPLETE"));
        assert!(!promise_in("COMPLETE", "COMPLETE"));
        assert!(!promise_in("<promise>COMPLETE", "COMPLETE"));
    }

    #[test]
    fn instruction_words_in_an_earlier_sentence_do_not_hide_the_tag() {
        for text in [
            "Output matches the spec now. <promise>COMPLETE</promise>",
            "I wrote the tests and they print green. <promise>COMPLETE</promise>",
            "Write-up is in NOTES.md! <promise>COMPLETE</promise>",
            "I was told to output <promise>COMPLETE</promise> when done.\nEverything is done.\n<promise>COMPLETE</promise>",
        ] {
            assert!(promise_in(text, "COMPLETE"), "{text}");
        }
    }

    #[test]
    fn quoted_instructions_and_code_do_not_count() {
        for text in [
            "The prompt says: \"<promise>COMPLETE</promise>\" once everything is done.",
            "I will output <promise>COMPLETE</promise> when all items are checked.",
            "When the plan is done, print <promise>COMPLETE</promise>.",
            "Use `<promise>COMPLETE</promise>` to finish.",
            "```\necho '<promise>COMPLETE</promise>'\n```",
            "> Output <promise>COMPLETE</promise> when done\n\nStill working on item 2.",
            "> <promise>COMPLETE</promise>",
            "Output this: <promise>COMPLETE</promise>",
            "Reply with the tag <promise>COMPLETE</promise> at the end.",
        ] {
            assert!(!promise_in(text, "COMPLETE"), "{text}");
        }
    }
}
