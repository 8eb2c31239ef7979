//! The evidence generator on two hand-made results directories (a simulated scenario of two
//! loads over three repetitions, one with a report-reading contender at a report delay that the
//! others join, and a lab scenario of one repetition), against a golden output.

use std::path::Path;

#[test]
fn the_table_is_the_golden_one() {
    let dirs = ["tests/evidence/sim-a", "tests/evidence/lab-b"];
    let sources: Vec<lab::evidence::Source> = dirs
        .iter()
        .map(|d| lab::evidence::read(Path::new(d)).unwrap())
        .collect();
    let doc = lab::evidence::markdown(&sources, Path::new("docs/evidence.md"));
    let golden = Path::new("tests/evidence/expected.md");
    if std::env::var_os("FULCRUM_BLESS").is_some() {
        std::fs::write(golden, &doc).unwrap();
    }
    let expected = std::fs::read_to_string(golden).unwrap();
    assert_eq!(
        doc, expected,
        "rerun with FULCRUM_BLESS=1 to accept:\n{doc}"
    );
}

#[test]
fn a_directory_without_provenance_is_named() {
    let e = lab::evidence::read(Path::new("tests/evidence/none")).unwrap_err();
    assert!(
        e.contains("tests/evidence/none/provenance.toml") && e.contains("run the scenario again"),
        "{e}"
    );
}
