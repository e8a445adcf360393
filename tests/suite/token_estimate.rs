//! The token estimator against a real BPE tokenizer: the reference counts
//! in tests/fixtures/tokens/reference.tsv were made with Anthropic's
//! published tokenizer (npm `@anthropic-ai/tokenizer` 0.0.4) on samples of
//! every kind of text ralph puts in a prompt or handoff (docs/prompt-budget.md).

use std::path::Path;

#[test]
fn estimate_is_within_ten_percent_of_the_reference_tokenizer() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokens");
    let table = std::fs::read_to_string(dir.join("reference.tsv")).unwrap();
    let mut checked = 0;
    for line in table.lines().filter(|l| !l.starts_with('#')) {
        let cols: Vec<&str> = line.split('\t').collect();
        let text = std::fs::read_to_string(dir.join(cols[0])).unwrap();
        let reference: f64 = cols[2].parse().unwrap();
        let estimate = ralph::prompt::tokens::estimate(&text) as f64;
        let bytes_over_4 = text.len() as f64 / 4.0;
        let err = estimate / reference - 1.0;
        println!(
            "{:24} reference {reference:>6} estimate {estimate:>6} ({:+.1}%)  bytes/4 {:+.1}%",
            cols[0],
            err * 100.0,
            (bytes_over_4 / reference - 1.0) * 100.0
        );
        assert!(err.abs() <= 0.10, "{}: {:+.1}%", cols[0], err * 100.0);
        checked += 1;
    }
    assert!(checked >= 7);
}
