//! The `ralph` binary: everything lives in the library (see `app`).

fn main() {
    std::process::exit(ralph::app::main());
}
