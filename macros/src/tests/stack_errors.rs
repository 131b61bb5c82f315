//! Expansions of `#[layer_stack]` with counts, options and mistakes: const checks, every
//! mistake reported once, stubs that keep the item usable, and no panic on malformed input.

use super::*;

#[test]
fn layer_stack_with_a_prefix_and_const_counts_checks_them_in_const_context() {
    let out = toy_stack(quote! {
        prefix = [Dense, Dense, Dense],
        block = [Moe],
        layers = LAYERS,
        prefetch_fsdp_weights = true,
        unroll = UNROLL,
    });
    assert!(compile_errors(&out).is_empty());
    assert_contains(
        &out,
        &[
            // The user's `LAYERS` is not shadowed by anything the expansion defines.
            "const __STACKSCAN_COUNT: ::stackscan::__private::primitive::usize = LAYERS;",
            // The DSL's rule, also applied at run time.
            "::stackscan::__private::Count::Layers(__STACKSCAN_COUNT as _).fit(3usize, 1usize)",
            "`layers` is too large; a stack has at most 1048576 layers",
            "::stackscan::__private::Count::Layers(::stackscan::__private::count_value(__STACKSCAN_COUNT))",
            "`layers` must be the prefix length 3 plus a positive multiple of the block length 1",
            "unroll: (UNROLL)",
            "defer_grad_reduce_scatter: false",
        ],
    );
    // Two distinct kinds, `Dense` and `Moe`; the prefix is passed to the planner first.
    let flat = compact(&out.to_string());
    assert_eq!(flat.matches("__private::kind(").count(), 2);
    assert!(flat.contains("([::stackscan::__private::name(__stackscan_entry0),"));
}

#[test]
fn a_precision_names_a_policy() {
    let out = toy_stack(quote!(block = [Mlp], repeat = 2, precision = "bf16"));
    assert!(compile_errors(&out).is_empty());
    assert_contains(
        &out,
        &["precision: ::stackscan::__private::Precision::BF16"],
    );
    let out = toy_stack(quote!(block = [Mlp], repeat = 2, precision = "fp16"));
    assert_eq!(
        compile_errors(&out),
        ["unknown precision \"fp16\"; expected one of `f32`, `bf16` or `bf16-reduce-bf16`"]
    );
    let out = toy_stack(quote!(block = [Mlp], repeat = 2, precision = bf16));
    let errors = compile_errors(&out);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("\"f32\" | \"bf16\""), "{errors:?}");
}

#[test]
fn layer_stack_mistakes_are_all_reported_and_the_item_is_kept() {
    let out = toy_stack(quote! {
        block = [],
        repeat = 0,
        unroll = 3,
        prefech_fsdp_weights,
        defer_grad_reduce_scatter,
        unroll = 2,
    });
    let errors = compile_errors(&out);
    assert_eq!(
        errors,
        [
            "unknown layer_stack option `prefech_fsdp_weights`; expected one of `block`, `prefix`, `repeat`, `layers`, `prefetch_fsdp_weights`, `defer_grad_reduce_scatter`, `unroll`, `precision`, `config` or `crate`",
            "duplicate layer_stack option `unroll`",
            "the block is empty; expected at least one sub-layer: `block = [SubLayer, ...]`",
            "`repeat` must be at least 1",
            "`defer_grad_reduce_scatter` needs `prefetch_fsdp_weights`; add it or remove this option",
            "`unroll` must be 1 or 2, got 3",
        ]
    );
    let f = file(out);
    assert!(matches!(&f.items[0], syn::Item::Struct(s) if s.ident == "Toy"));
}

#[test]
fn an_unreadable_option_is_not_reported_missing_as_well() {
    for args in [
        quote!(block = [A], repeat = 99999999999999999999999),
        quote!(block = [A], layers = "4"),
        quote!(block = A, repeat = 2),
    ] {
        let errors = compile_errors(&toy_stack(args));
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert!(!errors[0].starts_with("missing"), "{errors:#?}");
    }
}

#[test]
fn layer_stack_with_an_invalid_option_still_implements_the_trait() {
    let out = toy_stack(quote!(block = [A, B], repeat = 2, unroll = 4));
    assert_eq!(compile_errors(&out).len(), 1);
    let items = const_block_items(&file(out.clone()));
    impl_of(&items, "LayerStack");
    assert!(
        pretty(out).contains("unroll: 2usize"),
        "the default stands in"
    );
}

#[test]
fn layers_not_a_multiple_of_the_block_names_the_nearest_valid_counts() {
    let errors = compile_errors(&toy_stack(quote!(block = [A, A, A, B], layers = 10)));
    assert_eq!(
        errors,
        ["`layers = 10` is not a multiple of the block length 4; expected 8 or 12"]
    );
    let errors = compile_errors(&toy_stack(quote!(
        prefix = [D, D, D],
        block = [M, M],
        layers = 2
    )));
    assert_eq!(
        errors,
        [
            "`layers = 2` is not the prefix length 3 plus a positive multiple of the block length 2; expected 5"
        ]
    );
}

/// Malformed input of every kind gives `compile_error!`s, never a panic of the macro.
#[test]
fn malformed_arguments_never_panic() {
    let attrs = [
        quote!(),
        quote!(,,,),
        quote!(= 3),
        quote!(block),
        quote!(block =),
        quote!(block = A),
        quote!(block = [A,, B]),
        quote!(block = [1 + 2]),
        quote!(block = [A] repeat = 2),
        quote!(repeat = "two", block = [A]),
        quote!(repeat = 99999999999999999999999, block = [A]),
        quote!(unroll, block = [A], repeat = 1),
        quote!(prefetch_fsdp_weights = 1, block = [A], repeat = 1),
        quote!(block = [A], repeat = 1, layers = 1),
        quote!(42, block = [A], repeat = 1),
    ];
    for attr in attrs {
        let out = toy_stack(attr.clone());
        assert!(!compile_errors(&out).is_empty(), "no error for `{attr}`");
        file(out);
    }
    for item in [
        quote!(
            enum E {}
        ),
        quote!(
            fn f() {}
        ),
        quote!(
            struct S<T>(T);
        ),
    ] {
        let out = layer_stack(quote!(block = [A], repeat = 1), item.clone()).unwrap();
        assert!(!compile_errors(&out).is_empty(), "no error for `{item}`");
    }
    let fields = [
        quote!(#[param] a: T,),
        quote!(#[param = 1] a: T,),
        quote!(#[param(shape)] a: T,),
        quote!(#[param(shape = 3, shard = 0)] a: T,),
        quote!(#[param(shape = [1], shard = x)] a: T,),
        quote!(#[param(shape = [1], shard = 0, init = normal)] a: T,),
        quote!(#[param(shape = [1], shard = 0, init = normal(1, 2))] a: T,),
        quote!(#[param(shape = [1], shard = 0, init = uniform(1))] a: T,),
        quote!(#[param(shape = [1], shard = 0, dtype = i32)] a: T,),
        quote!(#[param(shape = [1], shard = 0, shard = 0)] a: T,),
        quote!(#[param(shape = [1], shard = 0)] #[param(shape = [1], shard = 0)] a: T,),
        quote!(#[param(shape = [], shard = 0)] a: T,),
        quote!(#[param(shape = [1], shard = 0)] a: Vec<T>,),
        quote!(#[param(shape = [1], shard = 0)] _: T,),
    ];
    for field in fields {
        let out = derive(quote! {
            #[sublayer(config = C, carry = H)]
            struct S<T> { #field }
        })
        .unwrap();
        assert!(!compile_errors(&out).is_empty(), "no error for `{field}`");
        file(out);
    }
}
