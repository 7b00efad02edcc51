//! The real `approval-bench` binary answers `--help` with every scenario. (Having an
//! integration test also makes `cargo test --workspace` build the binary that CI's smoke
//! run uses.)

#[test]
fn help_lists_every_scenario() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_approval-bench"))
        .arg("--help")
        .output()
        .expect("run approval-bench --help");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for scenario in [
        "status",
        "prepare",
        "decide",
        "round-trip",
        "stdio",
        "scale",
        "peers",
        "http-pair",
        "--smoke",
    ] {
        assert!(
            text.contains(scenario),
            "--help does not mention {scenario}:\n{text}"
        );
    }
}
