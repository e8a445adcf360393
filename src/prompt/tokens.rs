//! Estimating how many tokens a text costs the model, without its
//! tokenizer: one pass over the text, counting words, number groups,
//! punctuation runs, line breaks and non-ASCII characters, each with a
//! weight fitted against a real BPE tokenizer on ralph's own code, docs,
//! transcripts and prompts (docs/prompt-budget.md gives the measured error).
//!
//! Bytes / 4 is off by a third on code (punctuation and short identifiers
//! are a token each) and by the other way on long English words, so the
//! estimate counts the things tokenizers split on instead.

/// A word of ASCII letters is about one token, whatever its length:
/// BPE vocabularies hold most English words and identifier parts whole.
const WORD: f64 = 1.13;
/// Each inner capital (camelCase, `HashMap`) usually starts a new token.
const INNER_CAPITAL: f64 = 0.29;
/// A run of punctuation (`::`, `->`, `");`) is about one token, plus a
/// little for each further character.
const PUNCT_RUN: f64 = 1.04;
const PUNCT_EXTRA: f64 = 0.05;
/// A run of line breaks; indentation and spaces mostly merge with the next
/// token, but long runs of blanks do not.
const NEWLINE_RUN: f64 = 0.92;
const BLANK_RUN: f64 = 0.08;
/// Digits are grouped about three to a token.
const DIGITS_PER_TOKEN: usize = 3;
/// An accented Latin letter inside a word splits it (`syst|è|me`).
const LATIN_ACCENT: f64 = 1.2;
/// Cyrillic, Greek, Arabic, Hebrew… letters: about two to a token.
const OTHER_LETTER: f64 = 0.45;
/// CJK ideographs, kana and hangul: nearly one token each.
const CJK: f64 = 0.85;
/// Symbols and emoji outside ASCII (`→`, `—`, `✓`): a token or more each.
const SYMBOL: f64 = 1.0;

/// The estimated number of tokens of `text` (never 0 for a non-empty text).
pub fn estimate(text: &str) -> usize {
    let mut total = 0.0;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_alphabetic() || (is_letter(c) && !c.is_ascii()) {
            // A word: ASCII letters and the non-ASCII letters inside it.
            let mut cost = letter_cost(c);
            let mut ascii_run = c.is_ascii_alphabetic();
            let mut prev_lower = c.is_ascii_lowercase();
            while let Some(&n) = chars.peek() {
                if n.is_ascii_alphabetic() {
                    if !ascii_run {
                        cost += WORD;
                        ascii_run = true;
                    } else if n.is_ascii_uppercase() && prev_lower {
                        cost += INNER_CAPITAL;
                    }
                    prev_lower = n.is_ascii_lowercase();
                } else if is_letter(n) && !n.is_ascii() {
                    cost += letter_cost(n);
                    ascii_run = false;
                    prev_lower = false;
                } else {
                    break;
                }
                chars.next();
            }
            total += cost;
        } else if c.is_ascii_digit() {
            let mut n: usize = 1;
            while chars.next_if(char::is_ascii_digit).is_some() {
                n += 1;
            }
            total += n.div_ceil(DIGITS_PER_TOKEN) as f64;
        } else if c == '\n' || c == '\r' {
            while chars.next_if(|&n| n == '\n' || n == '\r').is_some() {}
            total += NEWLINE_RUN;
        } else if c == ' ' || c == '\t' {
            let mut n = 1;
            while chars.next_if(|&n| n == ' ' || n == '\t').is_some() {
                n += 1;
            }
            if n > 1 {
                total += BLANK_RUN;
            }
        } else if c.is_ascii_punctuation() {
            let mut cost = PUNCT_RUN;
            while chars.next_if(char::is_ascii_punctuation).is_some() {
                cost += PUNCT_EXTRA;
            }
            total += cost;
        } else if c.is_ascii() {
            // Other control characters.
            total += 1.0;
        } else {
            total += SYMBOL;
        }
    }
    let n = total.ceil() as usize;
    if n == 0 && !text.is_empty() { 1 } else { n }
}

fn is_letter(c: char) -> bool {
    c.is_alphabetic()
}

/// The cost of a word's first letter, or of a non-ASCII letter inside it.
fn letter_cost(c: char) -> f64 {
    match c as u32 {
        _ if c.is_ascii() => WORD,
        0x80..=0x24F => LATIN_ACCENT,
        0x2E80..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF | 0x20000..=0x2FFFF => CJK,
        _ => OTHER_LETTER,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_tiny_texts() {
        assert_eq!(estimate(""), 0);
        assert_eq!(estimate(" "), 1);
        assert_eq!(estimate("a"), 2);
    }

    #[test]
    fn code_costs_more_per_byte_than_prose() {
        let prose = "The supervisor watches the context window and saves the work before it fills.";
        let code = "fn f(x: &mut Vec<u8>) -> Option<(u8, u8)> { x.pop().zip(x.pop()) }";
        let per_byte = |t: &str| estimate(t) as f64 / t.len() as f64;
        assert!(
            per_byte(code) > per_byte(prose) * 1.4,
            "{} vs {}",
            per_byte(code),
            per_byte(prose)
        );
    }
}
