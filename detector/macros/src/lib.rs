//! `#[pinwatch::main]`: `#[tokio::main]` with pinwatch watching the runtime; `#[pinwatch::test]`:
//! `#[tokio::test]` that fails when a poll pins a worker.
//!
//! Both take every argument tokio's attributes take (`flavor`, `worker_threads`,
//! `start_paused`, `crate`, `unhandled_panic`, `name`), refuse what tokio's refuse with tokio's
//! messages, and hand the runtime options to tokio's own `runtime::Builder` in the generated
//! code: an option the user's tokio lacks is the same compile error as with `#[tokio::main]`.

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::{quote, ToTokens};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{ItemFn, Lit, Meta, Path, Token};

/// Drop-in for `#[tokio::main]`: its arguments (`flavor = "multi_thread" | "current_thread" |
/// "local"`, `worker_threads = N`, `start_paused`, `crate = "path::to::tokio"`,
/// `unhandled_panic = "ignore" | "shutdown_runtime"`, `name = "…"`), and `pinwatch_crate =
/// "path::to::pinwatch"` for a renamed or re-exported pinwatch.
#[proc_macro_attribute]
pub fn main(args: TokenStream, item: TokenStream) -> TokenStream {
    let item: proc_macro2::TokenStream = item.into();
    match expand(args.into(), item.clone(), false) {
        Ok(ts) => ts.into(),
        Err(e) => with_error(item, e).into(),
    }
}

/// Drop-in for `#[tokio::test]` that fails the test when a poll pins a worker (the body's own
/// polls included). Takes `#[tokio::test]`'s arguments (as [`main`]'s; `start_paused` needs
/// tokio's `test-util` feature) and pinwatch's: `threshold = "50ms"`, `allow = "cpu, sleep"`,
/// `stacks = "off" | "short" | "full"`, `pinwatch_crate = "…"`.
#[proc_macro_attribute]
pub fn test(args: TokenStream, item: TokenStream) -> TokenStream {
    let item: proc_macro2::TokenStream = item.into();
    match expand(args.into(), item.clone(), true) {
        Ok(ts) => ts.into(),
        Err(e) => with_error(item, e).into(),
    }
}

/// A refusal, and the function still defined, never run: the refusal is then the only error,
/// not joined by "`main` function not found" or every call of a function that vanished. A
/// `main` is left neither `async` nor taking arguments, its body `loop {}` (rustc refuses an
/// `async` or an argument-taking `main`); any other function is left as written (an `async fn`
/// is Rust), without its attributes (a second `#[test]`): a `loop {}` body would not do for an
/// `-> impl Trait` return, nor a function no longer `async` for its callers' `.await`.
fn with_error(item: proc_macro2::TokenStream, e: syn::Error) -> proc_macro2::TokenStream {
    let error = e.to_compile_error();
    let Ok(mut func) = syn::parse2::<ItemFn>(item) else {
        return error;
    };
    func.attrs.clear();
    if func.sig.ident != "main" {
        return quote! {
            #error
            #[allow(dead_code)]
            #func
        };
    }
    func.sig.asyncness = None;
    func.sig.inputs.clear();
    let (vis, sig) = (&func.vis, &func.sig);
    quote! {
        #error
        #[allow(unreachable_code, clippy::empty_loop)]
        #vis #sig { loop {} }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Flavor {
    CurrentThread,
    MultiThread,
    Local,
}

/// The arguments of either attribute, each at most once, with the span to blame.
#[derive(Default)]
struct Args {
    flavor: Option<Flavor>,
    worker_threads: Option<(usize, Span)>,
    start_paused: Option<(bool, Span)>,
    tokio: Option<Path>,
    /// `true`: shut the runtime down.
    unhandled_panic: Option<(bool, Span)>,
    name: Option<String>,
    pinwatch: Option<Path>,
    // #[pinwatch::test] only.
    threshold: Option<u64>,
    allow: Vec<syn::Ident>,
    stacks: Option<syn::Ident>,
    /// `#[pinwatch::test]`: current-thread by default, as `#[tokio::test]`.
    is_test: bool,
}

const TOKIO_ARGS: &str =
    "`flavor`, `worker_threads`, `start_paused`, `crate`, `unhandled_panic`, `name`";

const REASONS: [(&str, &str); 9] = [
    ("cpu", "Cpu"),
    ("sleep", "Sleep"),
    ("io", "Io"),
    ("dns", "Dns"),
    ("lock_wait", "LockWait"),
    ("lock_held", "LockHeld"),
    ("once_init", "OnceInit"),
    ("once_wait", "OnceWait"),
    ("other", "Other"),
];

fn err<T>(span: Span, msg: impl std::fmt::Display) -> syn::Result<T> {
    Err(syn::Error::new(span, msg))
}

fn string(lit: &Lit, field: &str) -> syn::Result<String> {
    match lit {
        Lit::Str(s) => Ok(s.value()),
        Lit::Verbatim(s) => Ok(s.to_string()),
        _ => err(
            lit.span(),
            format!("Failed to parse value of `{field}` as string."),
        ),
    }
}

fn path(lit: &Lit, field: &str) -> syn::Result<Path> {
    match lit {
        Lit::Str(s) => s.parse::<Path>().or_else(|_| {
            err(
                lit.span(),
                format!(
                    "Failed to parse value of `{field}` as path: \"{}\"",
                    s.value()
                ),
            )
        }),
        _ => err(
            lit.span(),
            format!("Failed to parse value of `{field}` as path."),
        ),
    }
}

impl Args {
    fn parse(args: proc_macro2::TokenStream, is_test: bool) -> syn::Result<Args> {
        let macro_name = macro_name(is_test);
        let expected = if is_test {
            format!("{TOKIO_ARGS}, `threshold`, `allow`, `stacks`, `pinwatch_crate`")
        } else {
            format!("{TOKIO_ARGS}, `pinwatch_crate`")
        };
        let mut a = Args {
            is_test,
            ..Args::default()
        };
        for meta in Punctuated::<Meta, Token![,]>::parse_terminated.parse2(args)? {
            let nv = match meta {
                Meta::NameValue(nv) => nv,
                Meta::Path(p) => {
                    let Some(ident) = p.get_ident() else {
                        return Err(syn::Error::new_spanned(&p, "Must have specified ident"));
                    };
                    let name = ident.to_string().to_lowercase();
                    let msg = match name.as_str() {
                        "threaded_scheduler" | "multi_thread" => format!(
                            "Set the runtime flavor with #[{macro_name}(flavor = \"multi_thread\")]."
                        ),
                        "basic_scheduler" | "current_thread" | "single_threaded" => format!(
                            "Set the runtime flavor with #[{macro_name}(flavor = \"current_thread\")]."
                        ),
                        "flavor" | "worker_threads" | "start_paused" | "crate"
                        | "unhandled_panic" | "name" | "pinwatch_crate" => {
                            format!("The `{name}` attribute requires an argument.")
                        }
                        "threshold" | "allow" | "stacks" if is_test => {
                            format!("The `{name}` attribute requires an argument.")
                        }
                        _ => format!(
                            "Unknown attribute {name} is specified; expected one of: {expected}."
                        ),
                    };
                    return Err(syn::Error::new_spanned(&p, msg));
                }
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "Unknown attribute inside the macro",
                    ))
                }
            };
            let Some(ident) = nv.path.get_ident() else {
                return Err(syn::Error::new_spanned(&nv, "Must have specified ident"));
            };
            let name = ident.to_string().to_lowercase();
            let lit = match &nv.value {
                syn::Expr::Lit(syn::ExprLit { lit, .. }) => lit,
                expr => return Err(syn::Error::new_spanned(expr, "Must be a literal")),
            };
            let span = lit.span();
            let twice = |set: bool| -> syn::Result<()> {
                if set {
                    return err(span, format!("`{name}` set multiple times."));
                }
                Ok(())
            };
            match name.as_str() {
                "flavor" => {
                    twice(a.flavor.is_some())?;
                    a.flavor = Some(match string(lit, "flavor")?.as_str() {
                        "current_thread" => Flavor::CurrentThread,
                        "multi_thread" => Flavor::MultiThread,
                        "local" => Flavor::Local,
                        "single_thread" => {
                            return err(
                                span,
                                "The single threaded runtime flavor is called `current_thread`.",
                            )
                        }
                        "basic_scheduler" => return err(
                            span,
                            "The `basic_scheduler` runtime flavor has been renamed to `current_thread`.",
                        ),
                        "threaded_scheduler" => return err(
                            span,
                            "The `threaded_scheduler` runtime flavor has been renamed to `multi_thread`.",
                        ),
                        s => return err(
                            span,
                            format!("No such runtime flavor `{s}`. The runtime flavors are `current_thread`, `local`, and `multi_thread`."),
                        ),
                    });
                }
                "worker_threads" => {
                    twice(a.worker_threads.is_some())?;
                    let n = match lit {
                        Lit::Int(i) => i.base10_parse::<usize>().or_else(|e| {
                            err(
                                span,
                                format!(
                                    "Failed to parse value of `worker_threads` as integer: {e}"
                                ),
                            )
                        })?,
                        _ => {
                            return err(
                                span,
                                "Failed to parse value of `worker_threads` as integer.",
                            )
                        }
                    };
                    if n == 0 {
                        return err(span, "`worker_threads` may not be 0.");
                    }
                    a.worker_threads = Some((n, span));
                }
                "start_paused" => {
                    twice(a.start_paused.is_some())?;
                    let Lit::Bool(b) = lit else {
                        return err(span, "Failed to parse value of `start_paused` as bool.");
                    };
                    a.start_paused = Some((b.value, span));
                }
                "crate" => {
                    twice(a.tokio.is_some())?;
                    a.tokio = Some(path(lit, "crate")?);
                }
                "pinwatch_crate" => {
                    twice(a.pinwatch.is_some())?;
                    a.pinwatch = Some(path(lit, "pinwatch_crate")?);
                }
                "unhandled_panic" => {
                    twice(a.unhandled_panic.is_some())?;
                    let shutdown = match string(lit, "unhandled_panic")?.as_str() {
                        "ignore" => false,
                        "shutdown_runtime" => true,
                        s => return err(
                            span,
                            format!("No such unhandled panic behavior `{s}`. The unhandled panic behaviors are `ignore` and `shutdown_runtime`."),
                        ),
                    };
                    a.unhandled_panic = Some((shutdown, span));
                }
                "name" => {
                    twice(a.name.is_some())?;
                    a.name = Some(string(lit, "name")?);
                }
                "core_threads" => {
                    return Err(syn::Error::new_spanned(
                        &nv,
                        "Attribute `core_threads` is renamed to `worker_threads`",
                    ))
                }
                "threshold" if is_test => {
                    twice(a.threshold.is_some())?;
                    let s = string(lit, "threshold")?;
                    let d = humantime::parse_duration(s.trim()).or_else(|e| {
                        err(
                            span,
                            format!("threshold is not a duration ({e}); write it like \"50ms\""),
                        )
                    })?;
                    if d.is_zero() {
                        return err(span, "threshold must be more than zero");
                    }
                    a.threshold = Some(d.as_nanos().min(u64::MAX as u128) as u64);
                }
                "allow" if is_test => {
                    let s = string(lit, "allow")?;
                    for reason in s.split(',').map(str::trim).filter(|r| !r.is_empty()) {
                        let Some((_, variant)) = REASONS.iter().find(|(n, _)| *n == reason) else {
                            return err(
                                span,
                                format!(
                                    "unknown reason {reason:?}; the reasons: {}",
                                    REASONS.map(|(n, _)| n).join(", ")
                                ),
                            );
                        };
                        a.allow.push(syn::Ident::new(variant, span));
                    }
                }
                "stacks" if is_test => {
                    twice(a.stacks.is_some())?;
                    let v = match string(lit, "stacks")?.as_str() {
                        "off" => "Off",
                        "short" => "Short",
                        "full" => "Full",
                        _ => return err(span, "stacks must be \"off\", \"short\" or \"full\""),
                    };
                    a.stacks = Some(syn::Ident::new(v, span));
                }
                _ => {
                    return Err(syn::Error::new_spanned(
                        &nv,
                        format!(
                            "Unknown attribute {name} is specified; expected one of: {expected}."
                        ),
                    ))
                }
            }
        }
        a.check(is_test)?;
        Ok(a)
    }

    /// What tokio's attributes refuse once every argument is read, in tokio's words.
    fn check(&self, is_test: bool) -> syn::Result<()> {
        let macro_name = macro_name(is_test);
        let flavor = self.flavor();
        if let (Flavor::CurrentThread | Flavor::Local, Some((_, span))) =
            (flavor, self.worker_threads)
        {
            return err(
                span,
                format!("The `worker_threads` option requires the `multi_thread` runtime flavor. Use `#[{macro_name}(flavor = \"multi_thread\")]`"),
            );
        }
        if flavor == Flavor::MultiThread {
            for (option, set) in [
                ("start_paused", self.start_paused.map(|(_, s)| s)),
                ("unhandled_panic", self.unhandled_panic.map(|(_, s)| s)),
            ] {
                if let Some(span) = set {
                    return err(
                        span,
                        format!("The `{option}` option requires the `current_thread` runtime flavor. Use `#[{macro_name}(flavor = \"current_thread\")]`"),
                    );
                }
            }
        }
        Ok(())
    }

    fn flavor(&self) -> Flavor {
        self.flavor.unwrap_or(if self.is_test {
            Flavor::CurrentThread
        } else {
            Flavor::MultiThread
        })
    }

    /// The statements that configure tokio's builder `b`, after pinwatch has made it for the
    /// flavor (`#tokio::runtime::Builder`, so that a renamed tokio is the one named).
    fn tokio_options(&self, tokio: &proc_macro2::TokenStream) -> proc_macro2::TokenStream {
        let mut stmts = Vec::new();
        if let Some((n, _)) = self.worker_threads {
            stmts.push(quote!(b.worker_threads(#n);));
        }
        if let Some((paused, _)) = self.start_paused {
            stmts.push(quote!(b.start_paused(#paused);));
        }
        if let Some((shutdown, _)) = self.unhandled_panic {
            let v = if shutdown {
                quote!(ShutdownRuntime)
            } else {
                quote!(Ignore)
            };
            stmts.push(quote!(b.unhandled_panic(#tokio::runtime::UnhandledPanic::#v);));
        }
        if let Some(name) = &self.name {
            stmts.push(quote!(b.name(#name);));
        }
        if stmts.is_empty() {
            quote!(|_: &mut #tokio::runtime::Builder| {})
        } else {
            quote!(|b: &mut #tokio::runtime::Builder| { #(#stmts)* })
        }
    }
}

fn macro_name(is_test: bool) -> &'static str {
    if is_test {
        "pinwatch::test"
    } else {
        "pinwatch::main"
    }
}

fn expand(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
    is_test: bool,
) -> syn::Result<proc_macro2::TokenStream> {
    let mut func: ItemFn = syn::parse2(item)?;
    if func.sig.asyncness.is_none() {
        return err(
            func.sig.fn_token.span,
            "the `async` keyword is missing from the function declaration",
        );
    }
    if is_test {
        if let Some(attr) = func.attrs.iter().find(|a| is_test_attribute(a)) {
            return Err(syn::Error::new_spanned(
                attr,
                "second test attribute is supplied, consider removing or changing the order of your test attributes",
            ));
        }
        if !func.sig.inputs.is_empty() {
            return Err(syn::Error::new_spanned(
                &func.sig.inputs,
                "a test function takes no arguments",
            ));
        }
    } else if func.sig.ident == "main" && !func.sig.inputs.is_empty() {
        return Err(syn::Error::new_spanned(
            &func.sig.ident,
            "the main function cannot accept arguments",
        ));
    }
    let args = Args::parse(args, is_test)?;
    func.sig.asyncness = None;
    // syn keeps the body's inner attributes (`#![allow(…)]`) with the outer ones, and the
    // body's block prints without them: put them in front of the function, as tokio does.
    for attr in &mut func.attrs {
        attr.style = syn::AttrStyle::Outer;
    }

    let pinwatch = args
        .pinwatch
        .as_ref()
        .map_or_else(|| quote!(::pinwatch), ToTokens::to_token_stream);
    // Without `crate`, pinwatch's own tokio: the user's crate need not call it `tokio`.
    let tokio = args.tokio.as_ref().map_or_else(
        || quote!(#pinwatch::__private::tokio),
        ToTokens::to_token_stream,
    );
    let flavor = match args.flavor() {
        Flavor::CurrentThread => quote!(CurrentThread),
        Flavor::MultiThread => quote!(MultiThread),
        Flavor::Local => quote!(Local),
    };
    let options = args.tokio_options(&tokio);
    let body = &func.block;
    let attrs = &func.attrs;
    let vis = &func.vis;
    let sig = &func.sig;
    if !is_test {
        return Ok(quote! {
            #(#attrs)*
            #vis #sig {
                let body = async #body;
                #pinwatch::__private::main(#pinwatch::__private::Flavor::#flavor, #options, body)
            }
        });
    }
    let mut settings = Vec::new();
    match args.flavor() {
        Flavor::CurrentThread => {}
        Flavor::MultiThread => settings.push(quote!(.multi_thread(::core::option::Option::None))),
        Flavor::Local => settings.push(quote!(.local())),
    }
    if let Some(nanos) = args.threshold {
        settings.push(quote!(.threshold(::core::time::Duration::from_nanos(#nanos))));
    }
    for v in &args.allow {
        settings.push(quote!(.allow(#pinwatch::Reason::#v)));
    }
    if let Some(v) = &args.stacks {
        settings.push(quote!(.stacks(#pinwatch::Stacks::#v)));
    }
    // A `#[should_panic]` test passes on any panic, the pin's failure included: a pin must fail
    // it another way.
    let should_panic = func
        .attrs
        .iter()
        .find(|a| a.path().is_ident("should_panic"));
    let (main, expected) = match should_panic {
        None => (quote!(test_main), quote!()),
        Some(attr) => {
            let expected = match should_panic_expected(attr) {
                Some(s) => quote!(::core::option::Option::Some(#s),),
                None => quote!(::core::option::Option::None,),
            };
            (quote!(test_main_should_panic), expected)
        }
    };
    Ok(quote! {
        #[::core::prelude::v1::test]
        #(#attrs)*
        #vis #sig {
            let body = async #body;
            #pinwatch::__private::#main(
                #pinwatch::testing::Check::new()
                    #(#settings)*
                    .tokio(#options),
                #expected
                body,
            )
        }
    })
}

/// The `expected` string of `#[should_panic(expected = "…")]` or `#[should_panic = "…"]`.
fn should_panic_expected(attr: &syn::Attribute) -> Option<syn::LitStr> {
    let lit = |e: &syn::Expr| match e {
        syn::Expr::Lit(syn::ExprLit {
            lit: Lit::Str(s), ..
        }) => Some(s.clone()),
        _ => None,
    };
    match &attr.meta {
        Meta::NameValue(nv) => lit(&nv.value),
        Meta::List(_) => {
            let mut found = None;
            let _ = attr.parse_nested_meta(|m| {
                if m.path.is_ident("expected") {
                    found = lit(&m.value()?.parse()?);
                }
                Ok(())
            });
            found
        }
        Meta::Path(_) => None,
    }
}

/// `#[test]`, `#[core::prelude::*::test]` or `#[std::prelude::*::test]`, with or without the
/// leading `::` (what tokio recognizes as a second test attribute).
fn is_test_attribute(attr: &syn::Attribute) -> bool {
    let Meta::Path(path) = &attr.meta else {
        return false;
    };
    let segments: Vec<String> = path
        .segments
        .iter()
        .filter(|s| s.arguments.is_none())
        .map(|s| s.ident.to_string())
        .collect();
    if segments.len() != path.segments.len() {
        return false;
    }
    match segments.as_slice() {
        [one] => path.leading_colon.is_none() && one == "test",
        [root, prelude, _, test] => {
            (root == "core" || root == "std") && prelude == "prelude" && test == "test"
        }
        _ => false,
    }
}
