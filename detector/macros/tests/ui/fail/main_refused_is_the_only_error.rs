//! A refused argument on `main` is the only error: the function is still there (no "`main`
//! function not found"), and so is a refused function that other code calls.

#[pinwatch::test(flavor = "fast")]
async fn helper_refused() -> u32 {
    7
}

#[pinwatch::main(flavor = "fast")]
async fn main() {
    let _ = helper_refused;
}
