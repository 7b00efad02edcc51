//! Writes our own test vectors to `core/tests/vectors/*.json`.
//!
//! Run once after changing a case in `core/tests/common/gen.rs`, then check the
//! JSON in: `cargo run --example gen_vectors -p approval-core`. The test
//! `own_vectors::checked_in_vectors_match_the_generator` fails until the files
//! and the generator agree, and the other tests in `own_vectors.rs` check every
//! case against the library.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/common/gen.rs"]
mod gen;

fn main() -> std::io::Result<()> {
    for (name, value) in gen::all_files() {
        let path = common::vector_path(name);
        std::fs::write(&path, gen::file_text(&value))?;
        let n = value.as_array().map_or(0, Vec::len);
        println!("wrote {} ({n} cases)", path.display());
    }
    Ok(())
}
