//! A refusal is the only error whatever the function: a refused test returning `impl Trait`, or
//! called with `.await`, is left as written (a body of `loop {}` is no iterator, a function no
//! longer `async` no future); a `main` refused for taking arguments is left taking none (rustc
//! refuses one that does: "`main` function has wrong type").

#[pinwatch::test(flavor = "fast")]
async fn returns_impl_trait() -> impl Iterator<Item = u8> {
    std::iter::empty()
}

#[pinwatch::test(flavor = "fast")]
async fn awaited() -> u8 {
    1
}

async fn caller() -> u8 {
    awaited().await
}

#[pinwatch::main]
async fn main(args: i32) {
    let _ = (args, caller, returns_impl_trait);
}
