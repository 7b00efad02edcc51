//! Fixtures shared by the fuzz targets: a fixed keyring, a fixed policy and a
//! fixed preview frame (see `fixtures.rs`, which `seedgen` compiles too).

mod fixtures;
pub use fixtures::*;
