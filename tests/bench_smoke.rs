//! A tiny run of the benchmark suite (`benches/perf.rs`): every benchmark
//! runs end to end and yields a finite ratio. No timing is asserted; the
//! figures are in docs/performance.md.

#[path = "../benches/perf.rs"]
#[allow(dead_code)]
mod perf;

/// Most the capped run may cost relative to the uncapped one here.
const CAPPED_LIMIT: f64 = 1.15;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // This binary is also the helper of its benchmarks (agent, RSS probe).
    if let Some(code) = perf::helper_mode(&args) {
        std::process::exit(code);
    }
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bench-smoke-{}", std::process::id()));
    let opts = perf::Opts {
        size: perf::Size::Tiny,
        transcript_mib: None,
        only: None,
        dir,
        keep: false,
        verbose: false,
    };
    let rows = perf::run(&opts);
    print!("{}", perf::table(&rows));
    for bench in perf::BENCHES {
        assert!(
            rows.iter().any(|r| r.bench == bench),
            "no result for {bench}"
        );
    }
    for r in &rows {
        let skipped = r.what.contains("skipped");
        assert!(
            skipped || (r.ratio.is_finite() && r.ratio > 0.0),
            "no ratio: {r:?}"
        );
    }
    // One ratio is checked even at this size: the run past its transcript
    // cap against the same run uncapped, in CPU time (what a loaded machine
    // inflates least). Cutting strings must not cost more than writing them
    // whole; when it parsed every byte on its own (before issue 20's fix) it
    // cost 1.4× at 300 MiB in a release build and more in this debug one.
    let capped = rows
        .iter()
        .find(|r| r.what.starts_with(perf::CAPPED_VS_UNCAPPED) && r.what.ends_with("(CPU time)"))
        .expect("the capped vs uncapped row");
    assert!(
        capped.ratio <= CAPPED_LIMIT,
        "past its transcript cap a run costs {:.2}× the uncapped run (limit {CAPPED_LIMIT}): {capped:?}",
        capped.ratio
    );
    println!("bench smoke: {} rows, all with ratios", rows.len());
}
