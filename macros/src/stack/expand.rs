//! A validated stack → its `LayerStack` impl and the `const` checks the macro cannot do
//! syntactically. Infallible.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;

use super::check::{Entry, Model, Repeat, Value};
use crate::{config, primitive, private};

pub(crate) fn expand(model: &Model) -> TokenStream {
    let p = private();
    let ident = &model.ident;
    let (prefix_len, block_len) = (model.prefix.len(), model.block.len());
    let all: Vec<&Entry> = model.prefix.iter().chain(&model.block).collect();
    // A validated model has a non-empty block.
    let Some(first_entry) = all.first() else {
        return TokenStream::new();
    };
    // Kinds are types, not spellings: entries spelled alike are one kind here; entries spelled
    // differently (`Mlp`, `crate::Mlp`, an alias, a `use … as` rename) are merged at run time
    // by `TypeId` when they are one type, and checked at compile time to be one type when
    // they share a kind name.
    let mut distinct: Vec<&Entry> = Vec::new();
    for e in &all {
        if !distinct
            .iter()
            .any(|d| d.value.to_string() == e.value.to_string())
        {
            distinct.push(e);
        }
    }
    // Each body binds every distinct entry once, to a local spanned on it: all uses of an
    // entry in a body then share one inferred type, so a mistake in it is reported once per
    // body rather than once per use.
    let local = |e: &Entry| {
        let i = distinct
            .iter()
            .position(|d| d.value.to_string() == e.value.to_string())
            .unwrap_or_default();
        // The entry's own span (not a hygienic one located there): the compiler reports a
        // failed bound on a local at the local's span only when that span is the user's.
        syn::Ident::new(&format!("__stackscan_entry{i}"), e.written.span())
    };
    let bindings: Vec<TokenStream> = distinct
        .iter()
        .map(|e| {
            let (name, value) = (local(e), &e.value);
            quote!(let #name = #value;)
        })
        .collect();
    // A call spanned on `e`, so a failed bound on an argument underlines the entry only.
    let call = |e: &Entry, f: TokenStream, args: TokenStream| {
        let span = e.written.span();
        let path = crate::respan(quote!(#p::#f), span);
        quote_spanned!(span=> #path(#args))
    };
    let name_of = |e: &Entry| {
        let name = local(e);
        call(e, quote!(name), quote!(#name))
    };
    let prefix_names: Vec<_> = model.prefix.iter().map(name_of).collect();
    let block_names: Vec<_> = model.block.iter().map(name_of).collect();
    let cfg = config::binding();
    let first = local(first_entry);
    // The stack's config is fixed first, so another config on the first entry is a failed
    // bound on it rather than a type mismatch at the attribute.
    let with_config = call(
        first_entry,
        quote!(with_config::<<#ident as #p::LayerStack>::Config, _>),
        quote!(#first, #cfg),
    );
    // Each bound of `kind` fails on the entry it is about: not a sub-layer, no forward, another
    // config, another carry.
    let kinds = distinct.iter().map(|e| {
        let name = local(e);
        call(e, quote!(kind), quote!(#first, #name, #cfg))
    });
    let mut clashes = Vec::new();
    for (j, b) in distinct.iter().enumerate() {
        for a in &distinct[..j] {
            let message = format!(
                "sub-layers `{}` and `{}` have the same kind name; give one of them another `name` in `#[sublayer(...)]`",
                a.written.to_token_stream(),
                b.written.to_token_stream(),
            );
            let clash = call(b, quote!(clash), {
                let (la, lb) = (local(a), local(b));
                quote!(#la, #lb)
            });
            let panic = crate::respan(quote!(#p::panic), b.written.span());
            clashes.push(quote_spanned! {b.written.span()=>
                if #clash {
                    #panic!("{}", #message)
                }
            });
        }
    }
    let names = syn::Ident::new("__STACKSCAN_NAMES", Span::mixed_site());
    let str_ty = primitive("str");

    let (count, source, count_check, reads_config) = count(model, prefix_len, block_len);
    let prefetch = model.prefetch;
    let defer = model.defer;
    let unroll = value(&model.unroll);
    let precision = &model.precision;
    let options_span = match &model.unroll {
        Value::Expr(e) => e.span(),
        Value::Literal(_) | Value::Config(_) => ident.span(),
    };
    let panic = crate::respan(quote!(#p::panic), options_span);
    let options_check = quote_spanned! {options_span=>
        const _: () = match <#ident as #p::LayerStack>::OPTIONS.validate() {
            #p::Ok(()) => {}
            #p::Err(__stackscan_message) => #panic!("{}", __stackscan_message),
        };
    };
    // The one type position naming an entry, where `Mlp` needs its `<Tensor>` written out.
    // Without `config = Type`, the config is the first entry's, reached through a bound on the
    // impl rather than as the associated type's value: a bound may name a private sub-layer of
    // a public stack (E0446 forbids only the value), so private sub-layers need no workaround.
    let (generics, config, bound) = match &model.config {
        Some(config) => (
            TokenStream::new(),
            quote_spanned!(config.span()=> type Config = #config;),
            TokenStream::new(),
        ),
        None => {
            let ty = &first_entry.ty;
            let c = syn::Ident::new("__StackscanConfig", Span::mixed_site());
            (
                quote!(<#c>),
                quote!(type Config = #c;),
                quote_spanned!(first_entry.written.span()=> where #ty: #p::SubLayer<Config = #c>, #c: #p::Clone + 'static),
            )
        }
    };
    // The user's count expression reads the config through its renamed `cfg`.
    let stack_cfg = if reads_config {
        config::binding()
    } else {
        syn::Ident::new("_", Span::call_site())
    };
    // The bodies are functions beside the impl, over `<Stack as LayerStack>::Config`: inside an
    // impl whose config is a bound's parameter the config is opaque (no `cfg.layers`), while
    // here it is the concrete type, and at the impl's calls it is the parameter again.
    let (stack_fn, kinds_fn) = (
        syn::Ident::new("__stackscan_stack", Span::mixed_site()),
        syn::Ident::new("__stackscan_kinds", Span::mixed_site()),
    );
    quote! {
        const _: () = {
            use #p::Entry as _;

            fn #stack_fn(#stack_cfg: &<#ident as #p::LayerStack>::Config) -> #p::Result<#p::Stack> {
                // The kind names, and the compile-time check that entries sharing one are one
                // sub-layer.
                const #names: ([&'static #str_ty; #prefix_len], [&'static #str_ty; #block_len]) = {
                    #(#bindings)*
                    #(#clashes)*
                    ([#(#prefix_names),*], [#(#block_names),*])
                };
                #p::stack_of::<#ident>(&#names.0, &#names.1, #count, #source)
            }

            fn #kinds_fn(#cfg: &<#ident as #p::LayerStack>::Config) -> #p::Vec<#p::LayerKind> {
                #(#bindings)*
                let (#first, #cfg) = #with_config;
                #p::distinct([#(#kinds),*])
            }

            #[automatically_derived]
            impl #generics #p::LayerStack for #ident #bound {
                #config
                const OPTIONS: #p::PlanOptions = #p::PlanOptions {
                    prefetch_fsdp_weights: #prefetch,
                    defer_grad_reduce_scatter: #defer,
                    unroll: #unroll,
                    precision: #p::Precision::#precision,
                    ..#p::PlanOptions::baseline()
                };

                fn stack(#cfg: &Self::Config) -> #p::Result<#p::Stack> {
                    #stack_fn(#cfg)
                }

                fn kinds(#cfg: &Self::Config) -> #p::Vec<#p::LayerKind> {
                    #kinds_fn(#cfg)
                }
            }

            #options_check
            #count_check
        };
    }
}

/// The impl of a stack whose declaration has errors that leave no model (no block): every
/// item exists so uses of the model type-check, and nothing runs (the build fails).
pub(crate) fn expand_stub(ident: &syn::Ident) -> TokenStream {
    let name = syn::ext::IdentExt::unraw(ident).to_string();
    let stub = stub_impl(&quote!(#ident), &quote!(()), &name);
    quote! {
        const _: () = {
            #stub
        };
    }
}

/// A `LayerStack` impl for `self_ty` over `config` that builds nothing: `stack()` is the error
/// of an invalid declaration named `name` (never called: the build has failed). Also the
/// placeholder stack of a model declared without a stack field.
pub(crate) fn stub_impl(self_ty: &TokenStream, config: &TokenStream, name: &str) -> TokenStream {
    let p = private();
    quote! {
        #[automatically_derived]
        impl #p::LayerStack for #self_ty {
            type Config = #config;
            const OPTIONS: #p::PlanOptions = #p::PlanOptions::baseline();

            fn stack(_: &Self::Config) -> #p::Result<#p::Stack> {
                #p::Err(#p::invalid_stack(#name))
            }

            fn kinds(_: &Self::Config) -> #p::Vec<#p::LayerKind> {
                #p::Vec::new()
            }
        }
    }
}

fn value(v: &Value) -> TokenStream {
    match v {
        Value::Literal(n) => {
            let n = *n as usize;
            quote!(#n)
        }
        Value::Expr(e) | Value::Config(e) => quote_spanned!(e.span()=> (#e)),
    }
}

/// The stack's count as `stack()` evaluates it (`__private::Count`), what it was written as
/// (`__private::Source`), the `const` checks of a constant count (a literal was checked by the
/// macro; a count over the config is checked at run time, naming the field), and whether the
/// count reads `cfg`.
fn count(
    model: &Model,
    prefix_len: usize,
    block_len: usize,
) -> (TokenStream, TokenStream, TokenStream, bool) {
    let p = private();
    // Our const's name, not the user's: an item of the `const _` block named `LAYERS` would
    // shadow a user's `const LAYERS` named in `layers = LAYERS` (items are not hygienic).
    let constant = syn::Ident::new("__STACKSCAN_COUNT", Span::mixed_site());
    let (key, v) = match &model.repeat {
        Repeat::Repeat(v) => (quote!(Repeat), v),
        Repeat::Layers(v) => (quote!(Layers), v),
    };
    let wrap = |n: TokenStream| quote!(#p::Count::#key(#p::count_value(#n)));
    match v {
        Value::Literal(_) => (
            wrap(value(v)),
            quote!(#p::Source::Const),
            TokenStream::new(),
            false,
        ),
        Value::Expr(e) => {
            // The rule is the DSL's (`Count::fit`, also applied at run time); the messages say
            // it with this stack's lengths.
            let max_layers = super::check::MAX_LAYERS;
            let (rule, deep) = match &model.repeat {
                Repeat::Repeat(_) => {
                    let most = (max_layers - prefix_len as u64) / block_len.max(1) as u64;
                    let after = if prefix_len == 0 {
                        String::new()
                    } else {
                        format!(" after the prefix of {prefix_len}")
                    };
                    (
                        "`repeat` must be at least 1".to_owned(),
                        format!(
                            "`repeat` is too large; a stack has at most {max_layers} layers, so a block of {block_len} repeats at most {most} times{after}"
                        ),
                    )
                }
                Repeat::Layers(_) => (
                    if prefix_len == 0 {
                        format!(
                            "`layers` must be a positive multiple of the block length {block_len}"
                        )
                    } else {
                        format!(
                            "`layers` must be the prefix length {prefix_len} plus a positive multiple of the block length {block_len}"
                        )
                    },
                    format!("`layers` is too large; a stack has at most {max_layers} layers"),
                ),
            };
            let usize_ty = primitive("usize");
            let panic = crate::respan(quote!(#p::panic), e.span());
            let check = quote_spanned! {e.span()=>
                const #constant: #usize_ty = #e;
                const _: () = match #p::Count::#key(#constant as _).fit(#prefix_len, #block_len) {
                    #p::Ok(_) => {}
                    #p::Err(#p::Misfit::Deep) => #panic!(#deep),
                    #p::Err(_) => #panic!(#rule),
                };
            };
            (
                wrap(quote!(#constant)),
                quote!(#p::Source::Const),
                check,
                false,
            )
        }
        Value::Config(e) => {
            let source = match e {
                syn::Expr::Field(syn::ExprField {
                    base,
                    member: syn::Member::Named(field),
                    ..
                }) if matches!(&**base, syn::Expr::Path(b) if b.path.is_ident(config::USER_NAME)) =>
                {
                    let field = syn::ext::IdentExt::unraw(field).to_string();
                    quote!(#p::Source::Field(#field))
                }
                other => {
                    let text = other.to_token_stream().to_string();
                    quote!(#p::Source::Expr(#text))
                }
            };
            let count = {
                let (count_value, key) = (crate::respan(quote!(#p::count_value), e.span()), &key);
                let read = config::rebind(e);
                quote_spanned!(e.span()=> #p::Count::#key(#count_value(#read)))
            };
            (count, source, TokenStream::new(), true)
        }
    }
}
