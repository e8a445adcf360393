//! The `ralph` binary: everything lives in the library (see `cli`).

fn main() {
    std::process::exit(ralph::cli::main());
}
