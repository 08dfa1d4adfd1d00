//! `#[pinwatch::main]`: `#[tokio::main]` with pinwatch watching the runtime; `#[pinwatch::test]`:
//! `#[tokio::test]` that fails when a poll pins a worker.

use proc_macro::TokenStream;
use quote::quote;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, ItemFn, Lit, MetaNameValue, Token};

/// Drop-in for `#[tokio::main]`. Accepts `flavor = "multi_thread" | "current_thread"` and
/// `worker_threads = N`.
#[proc_macro_attribute]
pub fn main(args: TokenStream, item: TokenStream) -> TokenStream {
    match expand(args.into(), item.into()) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> syn::Result<proc_macro2::TokenStream> {
    let (mut func, args, mut flavor) = parse(args, item, true)?;
    for arg in &args {
        if !flavor.take(arg)? {
            return Err(syn::Error::new_spanned(
                &arg.path,
                "unknown argument; #[pinwatch::main] takes `flavor` and `worker_threads`",
            ));
        }
    }
    flavor.check()?;
    take_async(&mut func, "#[pinwatch::main]")?;
    let current_thread = !flavor.multi_thread;
    let worker_threads = flavor.worker_threads;
    let body = &func.block;
    let workers = match worker_threads {
        Some(n) => quote!(::core::option::Option::Some(#n)),
        None => quote!(::core::option::Option::None),
    };
    let attrs = &func.attrs;
    let vis = &func.vis;
    let sig = &func.sig;
    Ok(quote! {
        #(#attrs)*
        #vis #sig {
            let body = async #body;
            let (runtime, detector) = ::pinwatch::__private::main_runtime(#current_thread, #workers);
            // The body is the runtime's `block_on` future, which tokio's task hooks never see:
            // watched on its own.
            let output = runtime.block_on(detector.watch_block_on(body));
            // The runtime first, so that a poll still running at shutdown is completed; then the
            // detector: a last scan, the sinks flushed.
            ::core::mem::drop(runtime);
            ::core::mem::drop(detector);
            output
        }
    })
}

/// The function and the `name = value` arguments of either attribute, and the flavor they
/// start from: multi-thread for `main`, current-thread for `test`, as tokio's.
fn parse(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
    multi_thread: bool,
) -> syn::Result<(ItemFn, Punctuated<MetaNameValue, Token![,]>, Flavor)> {
    let func: ItemFn = syn::parse2(item)?;
    let args = Punctuated::<MetaNameValue, Token![,]>::parse_terminated.parse2(args)?;
    let flavor = Flavor {
        multi_thread,
        worker_threads: None,
    };
    Ok((func, args, flavor))
}

/// `flavor` and `worker_threads`, as `#[tokio::main]` and `#[tokio::test]` take them.
struct Flavor {
    multi_thread: bool,
    worker_threads: Option<usize>,
}

impl Flavor {
    /// Takes `arg` if it is one of these two; `false` if it is not.
    fn take(&mut self, arg: &MetaNameValue) -> syn::Result<bool> {
        match arg.path.get_ident().map(|i| i.to_string()).as_deref() {
            Some("flavor") => match lit(&arg.value) {
                Some(Lit::Str(s)) if s.value() == "current_thread" => self.multi_thread = false,
                Some(Lit::Str(s)) if s.value() == "multi_thread" => self.multi_thread = true,
                _ => {
                    return Err(syn::Error::new_spanned(
                        &arg.value,
                        "flavor must be \"multi_thread\" or \"current_thread\"",
                    ))
                }
            },
            Some("worker_threads") => match lit(&arg.value) {
                Some(Lit::Int(i)) if i.base10_parse::<usize>()? > 0 => {
                    self.worker_threads = Some(i.base10_parse()?)
                }
                _ => {
                    return Err(syn::Error::new_spanned(
                        &arg.value,
                        "worker_threads must be an integer of at least 1",
                    ))
                }
            },
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn check(&self) -> syn::Result<()> {
        if !self.multi_thread && self.worker_threads.is_some() {
            return Err(syn::Error::new(
                proc_macro2::Span::call_site(),
                "worker_threads needs flavor = \"multi_thread\"",
            ));
        }
        Ok(())
    }
}

/// Makes `func` synchronous; an error if it was not `async`.
fn take_async(func: &mut ItemFn, what: &str) -> syn::Result<()> {
    if func.sig.asyncness.take().is_none() {
        return Err(syn::Error::new_spanned(
            func.sig.fn_token,
            format!("{what} goes on an `async fn`"),
        ));
    }
    Ok(())
}

fn lit(e: &Expr) -> Option<&Lit> {
    match e {
        Expr::Lit(ExprLit { lit, .. }) => Some(lit),
        _ => None,
    }
}

/// Drop-in for `#[tokio::test]` that fails the test when a poll pins a worker (the body's own
/// polls included). Accepts `flavor`, `worker_threads`, `start_paused` (as `#[tokio::test]`;
/// `start_paused` needs tokio's `test-util` feature), `threshold = "50ms"`, `allow = "cpu, sleep"`
/// and `stacks = "off" | "short" | "full"`.
#[proc_macro_attribute]
pub fn test(args: TokenStream, item: TokenStream) -> TokenStream {
    match expand_test(args.into(), item.into()) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

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

fn str_arg(arg: &MetaNameValue, what: &str) -> syn::Result<syn::LitStr> {
    match lit(&arg.value) {
        Some(Lit::Str(s)) => Ok(s.clone()),
        _ => Err(syn::Error::new_spanned(
            &arg.value,
            format!("{what} takes a string"),
        )),
    }
}

fn expand_test(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> syn::Result<proc_macro2::TokenStream> {
    let (mut func, args, mut flavor) = parse(args, item, false)?;
    let mut settings = Vec::new();
    for arg in &args {
        if flavor.take(arg)? {
            continue;
        }
        let name = arg
            .path
            .get_ident()
            .map(|i| i.to_string())
            .unwrap_or_default();
        match name.as_str() {
            "start_paused" => match lit(&arg.value) {
                Some(Lit::Bool(b)) if b.value => settings.push(quote!(
                    .tokio(|b| { b.start_paused(true); })
                )),
                Some(Lit::Bool(_)) => {}
                _ => {
                    return Err(syn::Error::new_spanned(
                        &arg.value,
                        "start_paused must be true or false",
                    ))
                }
            },
            "threshold" => {
                let s = str_arg(arg, "threshold")?;
                let d = humantime::parse_duration(s.value().trim()).map_err(|e| {
                    syn::Error::new_spanned(
                        &s,
                        format!("threshold is not a duration ({e}); write it like \"50ms\""),
                    )
                })?;
                if d.is_zero() {
                    return Err(syn::Error::new_spanned(
                        &s,
                        "threshold must be more than zero",
                    ));
                }
                let nanos = d.as_nanos() as u64;
                settings.push(quote!(.threshold(::core::time::Duration::from_nanos(#nanos))));
            }
            "allow" => {
                let s = str_arg(arg, "allow")?;
                for reason in s
                    .value()
                    .split(',')
                    .map(str::trim)
                    .filter(|r| !r.is_empty())
                {
                    let Some((_, variant)) = REASONS.iter().find(|(n, _)| *n == reason) else {
                        return Err(syn::Error::new_spanned(
                            &s,
                            format!(
                                "unknown reason {reason:?}; the reasons: {}",
                                REASONS.map(|(n, _)| n).join(", ")
                            ),
                        ));
                    };
                    let v = syn::Ident::new(variant, s.span());
                    settings.push(quote!(.allow(::pinwatch::Reason::#v)));
                }
            }
            "stacks" => {
                let s = str_arg(arg, "stacks")?;
                let v = match s.value().as_str() {
                    "off" => "Off",
                    "short" => "Short",
                    "full" => "Full",
                    _ => {
                        return Err(syn::Error::new_spanned(
                            &s,
                            "stacks must be \"off\", \"short\" or \"full\"",
                        ))
                    }
                };
                let v = syn::Ident::new(v, s.span());
                settings.push(quote!(.stacks(::pinwatch::Stacks::#v)));
            }
            _ => {
                return Err(syn::Error::new_spanned(
                    &arg.path,
                    "unknown argument; #[pinwatch::test] takes `flavor`, `worker_threads`, \
                     `start_paused`, `threshold`, `allow` and `stacks`",
                ))
            }
        }
    }
    flavor.check()?;
    take_async(&mut func, "#[pinwatch::test]")?;
    if !func.sig.inputs.is_empty() {
        return Err(syn::Error::new_spanned(
            &func.sig.inputs,
            "a test function takes no arguments",
        ));
    }
    if flavor.multi_thread {
        let workers = match flavor.worker_threads {
            Some(n) => quote!(::core::option::Option::Some(#n)),
            None => quote!(::core::option::Option::None),
        };
        settings.insert(0, quote!(.multi_thread(#workers)));
    }
    let body = &func.block;
    let attrs = &func.attrs;
    let vis = &func.vis;
    let sig = &func.sig;
    Ok(quote! {
        #[::core::prelude::v1::test]
        #(#attrs)*
        #vis #sig {
            let body = async #body;
            ::pinwatch::__private::test_main(
                ::pinwatch::testing::Check::new() #(#settings)*,
                body,
            )
        }
    })
}
