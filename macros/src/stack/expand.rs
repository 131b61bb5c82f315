//! A validated stack → its `LayerStack` impl and the `const` checks the macro cannot do
//! syntactically. Infallible.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;

use super::check::{Entry, Model, Repeat, Value};
use crate::private;

pub(crate) fn expand(model: &Model) -> TokenStream {
    let p = private();
    let ident = &model.ident;
    let (prefix_len, block_len) = (model.prefix.len(), model.block.len());
    let all: Vec<&Entry> = model.prefix.iter().chain(&model.block).collect();
    // A validated model has a non-empty block.
    let Some(first_entry) = all.first() else {
        return TokenStream::new();
    };
    let first = &first_entry.ty;
    let name_of = |e: &Entry| {
        let ty = &e.ty;
        quote_spanned!(e.written.span()=> <#ty as #p::SubLayer>::NAME)
    };
    let prefix_names = model.prefix.iter().map(name_of);
    let block_names = model.block.iter().map(name_of);

    // Entries naming the same struct (`Mlp`, `crate::Mlp`, `Mlp<Tensor>`) are one kind. The
    // name alone cannot prove two paths are one type, so each later spelling must be the same
    // type as the first (a bound spanned on it); differently named structs are distinct kinds.
    let mut distinct: Vec<&Entry> = Vec::new();
    let mut same_types = Vec::new();
    for e in &all {
        match distinct
            .iter()
            .find(|d| struct_name(&d.ty) == struct_name(&e.ty))
        {
            None => distinct.push(e),
            Some(d) if d.ty.to_token_stream().to_string() != e.ty.to_token_stream().to_string() => {
                let (a, b) = (&d.ty, &e.ty);
                same_types.push(quote_spanned! {e.written.span()=>
                    const _: fn() = #p::same_type::<#b, #a>;
                });
            }
            Some(_) => {}
        }
    }
    let cfg = syn::Ident::new("__stackscan_cfg", Span::mixed_site());
    // Each bound of `kind` fails on the entry it is about: not a sub-layer, no forward, another
    // config, another carry.
    let kinds = distinct.iter().map(|e| {
        let ty = &e.ty;
        quote_spanned!(e.written.span()=> #p::kind::<#first, #ty>(#cfg))
    });
    let mut distinct_names = Vec::new();
    for (j, b) in distinct.iter().enumerate() {
        for a in &distinct[..j] {
            let message = format!(
                "sub-layers `{}` and `{}` have the same kind name; give one of them another `name` in `#[sublayer(...)]`",
                a.written.to_token_stream(),
                b.written.to_token_stream(),
            );
            let (na, nb) = (&a.ty, &b.ty);
            distinct_names.push(quote_spanned! {b.written.span()=>
                const _: () = if #p::str_eq(
                    <#na as #p::SubLayer>::NAME,
                    <#nb as #p::SubLayer>::NAME,
                ) {
                    ::core::panic!("{}", #message)
                };
            });
        }
    }

    // Associated consts, not items of the `const _` block: an item would shadow a user's
    // `const LAYERS` named in `layers = LAYERS` (items are not hygienic).
    let layers_const = quote!(<#ident as #p::LayerStack>::LAYERS);
    let repeat_const = quote!(<#ident as #p::LayerStack>::REPEAT);
    let (layers, repeat, count_check) = match &model.repeat {
        Repeat::Repeat(v) => {
            let check = match v {
                Value::Literal(_) => TokenStream::new(),
                Value::Expr(e) => quote_spanned! {e.span()=>
                    const _: () = ::core::assert!(#repeat_const >= 1, "`repeat` must be at least 1");
                },
            };
            (
                quote!(#prefix_len + #repeat_const * #block_len),
                value(v),
                check,
            )
        }
        Repeat::Layers(v) => {
            let check = match v {
                Value::Literal(_) => TokenStream::new(),
                Value::Expr(e) => {
                    let message = if prefix_len == 0 {
                        format!(
                            "`layers` must be a positive multiple of the block length {block_len}"
                        )
                    } else {
                        format!(
                            "`layers` must be the prefix length {prefix_len} plus a positive multiple of the block length {block_len}"
                        )
                    };
                    quote_spanned! {e.span()=>
                        const _: () = ::core::assert!(
                            #layers_const > #prefix_len
                                && (#layers_const - #prefix_len) % #block_len == 0,
                            #message
                        );
                    }
                }
            };
            (
                value(v),
                quote!(#layers_const.saturating_sub(#prefix_len) / #block_len),
                check,
            )
        }
    };
    let prefetch = model.prefetch;
    let defer = model.defer;
    let unroll = value(&model.unroll);
    let options_span = match &model.unroll {
        Value::Expr(e) => e.span(),
        Value::Literal(_) => ident.span(),
    };
    let options_check = quote_spanned! {options_span=>
        const _: () = match <#ident as #p::LayerStack>::OPTIONS.validate() {
            #p::Ok(()) => {}
            #p::Err(__stackscan_message) => ::core::panic!("{}", __stackscan_message),
        };
    };
    let config = quote_spanned!(first_entry.written.span()=> type Config = <#first as #p::SubLayer>::Config;);
    quote! {
        const _: () = {
            #[automatically_derived]
            impl #p::LayerStack for #ident {
                #config
                const OPTIONS: #p::PlanOptions = #p::PlanOptions {
                    prefetch_fsdp_weights: #prefetch,
                    defer_grad_reduce_scatter: #defer,
                    unroll: #unroll,
                    scheduling_tags: true,
                };
                const LAYERS: usize = #layers;
                const REPEAT: usize = #repeat;

                fn stack() -> #p::Result<#p::Stack> {
                    #p::Stack::with_prefix(
                        &[#(#prefix_names),*],
                        &[#(#block_names),*],
                        <Self as #p::LayerStack>::REPEAT,
                    )
                }

                fn kinds(#cfg: &Self::Config) -> #p::Vec<#p::LayerKind> {
                    #p::list([#(#kinds),*])
                }
            }

            #options_check
            #count_check
            #(#distinct_names)*
            #(#same_types)*
        };
    }
}

/// The impl of a stack whose declaration has errors that leave no model (no block): every
/// item exists so uses of the model type-check, and nothing runs (the build fails).
pub(crate) fn expand_stub(ident: &syn::Ident) -> TokenStream {
    let p = private();
    let name = syn::ext::IdentExt::unraw(ident).to_string();
    quote! {
        const _: () = {
            #[automatically_derived]
            impl #p::LayerStack for #ident {
                type Config = ();
                const OPTIONS: #p::PlanOptions = #p::PlanOptions {
                    prefetch_fsdp_weights: false,
                    defer_grad_reduce_scatter: false,
                    unroll: 2,
                    scheduling_tags: true,
                };
                const LAYERS: usize = 0;
                const REPEAT: usize = 0;

                fn stack() -> #p::Result<#p::Stack> {
                    #p::Err(#p::invalid_stack(#name))
                }

                fn kinds(_: &Self::Config) -> #p::Vec<#p::LayerKind> {
                    #p::Vec::new()
                }
            }
        };
    }
}

/// The struct a block entry names: the last segment of its path, without generic arguments.
fn struct_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) if p.qself.is_none() => {
            p.path.segments.last().map_or_else(String::new, |s| {
                syn::ext::IdentExt::unraw(&s.ident).to_string()
            })
        }
        // A `$t:ty` fragment arrives wrapped in an invisible group.
        syn::Type::Group(g) => struct_name(&g.elem),
        other => other.to_token_stream().to_string(),
    }
}

fn value(v: &Value) -> TokenStream {
    match v {
        Value::Literal(n) => {
            let n = *n as usize;
            quote!(#n)
        }
        Value::Expr(e) => quote_spanned!(e.span()=> (#e)),
    }
}
