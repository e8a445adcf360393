//! A tiny run of the benchmark suite (`benches/perf.rs`): every benchmark
//! runs end to end and yields a finite ratio. No timing is asserted; the
//! figures are in docs/performance.md.

#[path = "../benches/perf.rs"]
#[allow(dead_code)]
mod perf;

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
    println!("bench smoke: {} rows, all with ratios", rows.len());
}
