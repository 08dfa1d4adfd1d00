//! `#[pinwatch::main]`: `#[tokio::main]` with pinwatch watching the runtime.

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
    let mut func: ItemFn = syn::parse2(item)?;
    let args = Punctuated::<MetaNameValue, Token![,]>::parse_terminated.parse2(args)?;
    let mut current_thread = false;
    let mut worker_threads: Option<usize> = None;
    for arg in args {
        let name = arg
            .path
            .get_ident()
            .map(|i| i.to_string())
            .unwrap_or_default();
        match name.as_str() {
            "flavor" => match lit(&arg.value) {
                Some(Lit::Str(s)) if s.value() == "current_thread" => current_thread = true,
                Some(Lit::Str(s)) if s.value() == "multi_thread" => current_thread = false,
                _ => {
                    return Err(syn::Error::new_spanned(
                        &arg.value,
                        "flavor must be \"multi_thread\" or \"current_thread\"",
                    ))
                }
            },
            "worker_threads" => match lit(&arg.value) {
                Some(Lit::Int(i)) => {
                    let n: usize = i.base10_parse()?;
                    if n == 0 {
                        return Err(syn::Error::new_spanned(
                            i,
                            "worker_threads must be at least 1",
                        ));
                    }
                    worker_threads = Some(n);
                }
                _ => {
                    return Err(syn::Error::new_spanned(
                        &arg.value,
                        "worker_threads must be an integer",
                    ))
                }
            },
            _ => {
                return Err(syn::Error::new_spanned(
                    &arg.path,
                    "unknown argument; #[pinwatch::main] takes `flavor` and `worker_threads`",
                ))
            }
        }
    }
    if current_thread && worker_threads.is_some() {
        return Err(syn::Error::new(
            proc_macro2::Span::call_site(),
            "worker_threads cannot be set with flavor = \"current_thread\"",
        ));
    }
    if func.sig.asyncness.take().is_none() {
        return Err(syn::Error::new_spanned(
            func.sig.fn_token,
            "#[pinwatch::main] goes on an `async fn`",
        ));
    }
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
            let output = runtime.block_on(body);
            // The runtime first, so that a poll still running at shutdown is completed; then the
            // detector: a last scan, the sinks flushed.
            ::core::mem::drop(runtime);
            ::core::mem::drop(detector);
            output
        }
    })
}

fn lit(e: &Expr) -> Option<&Lit> {
    match e {
        Expr::Lit(ExprLit { lit, .. }) => Some(lit),
        _ => None,
    }
}
