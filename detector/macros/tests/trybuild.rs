//! What `#[pinwatch::main]` and `#[pinwatch::test]` refuse at compile time, as
//! `#[tokio::main]` / `#[tokio::test]` do: each `ui/fail` file fails to build with the errors in
//! its `.stderr` (tokio's wording). `TRYBUILD=overwrite` rewrites the `.stderr` files. What they
//! accept is built and run by `attrs.rs` (with only compile-fail cases, trybuild checks them
//! with `cargo check`: no second build of the dependencies to link).

#[test]
fn the_attributes_accept_what_tokio_s_accept_and_refuse_what_they_refuse() {
    // trybuild builds with rustflags of its own, replacing `.cargo/config.toml`'s; pinwatch
    // needs `--cfg tokio_unstable` (tokio's poll hooks), and cargo lets this variable win over
    // any configured rustflags. trybuild's own: `--cfg trybuild`, dead code allowed.
    std::env::set_var(
        "CARGO_ENCODED_RUSTFLAGS",
        [
            "--cfg",
            "tokio_unstable",
            "--cfg",
            "trybuild",
            "-A",
            "dead_code",
        ]
        .join("\x1f"),
    );
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
}
