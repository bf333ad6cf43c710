//! The test kit under its former name: the end-to-end tests (and other
//! crates' tests) import `carmi_tests::Pool` and friends; they live in
//! `carmi-testkit`.

pub use carmi_testkit::*;
