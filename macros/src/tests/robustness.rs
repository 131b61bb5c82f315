//! Expander regressions of the declaration mistakes and options of issue 10, item 7.

use super::*;

/// `crate = "path"` replaces every `::stackscan` of both expansions, so a renamed dependency
/// (`ss = { package = "stackscan", … }`) needs no `stackscan` in scope.
#[test]
fn crate_option_replaces_the_dsl_path_everywhere() {
    let sublayer = derive(quote! {
        #[sublayer(crate = "ss", config = Cfg, carry = Hidden)]
        struct Mlp<T> {
            #[param(shape = [cfg.d], shard = 0)]
            w: T,
        }
    })
    .unwrap();
    let stack = layer_stack(
        quote!(crate = "ss", block = [Mlp, Attn], repeat = 2),
        quote!(
            struct Model;
        ),
    )
    .unwrap();
    for tokens in [sublayer, stack] {
        let flat = compact(&tokens.to_string());
        assert!(!flat.contains("::stackscan"), "{}", pretty(tokens.clone()));
        assert!(flat.contains("ss::__private"), "{}", pretty(tokens.clone()));
    }
    // The default is restored after an expansion with the option.
    let plain = layer_stack(
        quote!(block = [Mlp], repeat = 1),
        quote!(
            struct Model;
        ),
    )
    .unwrap();
    assert!(compact(&plain.to_string()).contains("::stackscan::__private"));
}

/// Regressions of issue 10, item 7, at the expander: each input was mishandled before.
#[test]
fn robustness_regressions() {
    // A turbofish count keeps its inner comma; the `<` of a comparison still does not nest.
    let out = toy_stack(quote!(
        block = [Mlp],
        repeat = Depth::<u8, Vec<u16>>::N,
        unroll = 1
    ));
    assert!(compile_errors(&out).is_empty(), "{}", pretty(out.clone()));
    assert_contains(&out, &["Depth::<u8, Vec<u16>>::N", "unroll: 1"]);
    let out = toy_stack(quote!(
        block = [Mlp],
        repeat = if A < B { 1 } else { 2 },
        unroll = 1
    ));
    assert!(compile_errors(&out).is_empty(), "{}", pretty(out.clone()));
    // The layer limit is on prefix + repeat × block.
    let out = toy_stack(quote!(prefix = [Mlp], block = [Mlp, Attn], repeat = 600000));
    assert_eq!(
        compile_errors(&out),
        [
            "`repeat = 600000` makes the prefix of 1 plus 600000 × 2 = 1200001 layers; a stack has at most 1048576 layers"
        ]
    );
    // Array-repeat lists and string entries get a hint, and the stub keeps uses quiet.
    let out = toy_stack(quote!(block = [Mlp; 4], repeat = 1));
    assert_eq!(compile_errors(&out).len(), 1);
    assert_contains(&out, &["type Config = ();", "invalid_stack(\"Toy\")"]);
    // Raw identifiers lose their `r#` in kind and parameter names.
    let out = derive(quote! {
        #[sublayer(config = Cfg, carry = Hidden)]
        struct r#match<T> {
            #[param(shape = [cfg.d], shard = 0)]
            r#type: T,
        }
    })
    .unwrap();
    assert!(compile_errors(&out).is_empty(), "{}", pretty(out.clone()));
    let flat = compact(&out.to_string());
    assert!(!flat.contains("\"r#"), "{}", pretty(out.clone()));
    assert!(flat.contains("\"type\""), "{}", pretty(out));
}

/// Entries are named as values whose value type is inferred: a bare name, a path, explicit
/// arguments (as turbofish), an alias and a `$t:ty` fragment (an invisible group) all become
/// expression paths, and only `type Config` writes a `<Tensor>`.
#[test]
fn entries_are_values_and_only_the_config_names_a_type() {
    let fragment = proc_macro2::Group::new(proc_macro2::Delimiter::None, quote!(Dense));
    let out = toy_stack(quote!(block = [Mlp, a::Mlp, Attn<T>, Wide, #fragment], repeat = 1));
    assert!(compile_errors(&out).is_empty(), "{}", pretty(out.clone()));
    assert_contains(
        &out,
        &[
            "let __stackscan_entry0 = Mlp::__STACKSCAN_ENTRY;",
            "let __stackscan_entry1 = a::Mlp::__STACKSCAN_ENTRY;",
            "let __stackscan_entry2 = Attn::<T>::__STACKSCAN_ENTRY;",
            "let __stackscan_entry3 = Wide::__STACKSCAN_ENTRY;",
            "let __stackscan_entry4 = Dense::__STACKSCAN_ENTRY;",
            "where Mlp<::stackscan::__private::Tensor>: ::stackscan::__private::SubLayer<Config = __StackscanConfig>,",
        ],
    );
    // Five spellings: ten pairs checked for a shared kind name, five kinds merged by type.
    let flat = compact(&out.to_string());
    assert_eq!(flat.matches("__private::clash(").count(), 10);
    assert_eq!(flat.matches("__private::kind(").count(), 5);
    assert_eq!(flat.matches("<::stackscan::__private::Tensor>").count(), 1);
}

/// `config = Type` is the stack's config, so no entry is named as a type at all (no bound on
/// the impl), and the first entry is checked against it.
#[test]
fn the_config_option_names_no_entry_as_a_type() {
    let out = toy_stack(quote!(config = ToyConfig, block = [Mlp, Attn], repeat = 2));
    assert!(compile_errors(&out).is_empty(), "{}", pretty(out.clone()));
    assert_contains(
        &out,
        &[
            "type Config = ToyConfig;",
            "with_config::<<Toy as ::stackscan::__private::LayerStack>::Config, _>(__stackscan_entry0, __stackscan_cfg)",
        ],
    );
    assert!(!compact(&out.to_string()).contains("Tensor>"));
    let out = toy_stack(quote!(config = 3, block = [Mlp], repeat = 2));
    assert_eq!(compile_errors(&out).len(), 1);
}

/// A derive without its type parameter reports that, and still emits its impls (on the struct
/// as it is, holding `Tensor`s), so the stacks naming it add no errors.
#[test]
fn a_derive_without_its_type_parameter_gets_a_stub() {
    let out = derive(quote! {
        #[sublayer(config = Cfg, carry = Hidden)]
        struct Conv {
            #[param(shape = [4], shard = 0)]
            w: f32,
        }
    })
    .unwrap();
    assert_eq!(compile_errors(&out).len(), 1, "{}", pretty(out.clone()));
    assert_contains(
        &out,
        &[
            "impl ::stackscan::__private::SubLayer for Conv where Conv: 'static + ::stackscan::__private::Params<::stackscan::__private::Tensor>",
            "impl ::stackscan::__private::Params<::stackscan::__private::Tensor> for Conv",
        ],
    );
}
