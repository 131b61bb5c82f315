//! The config as the expressions users write in attributes see it: `cfg` in `shape = [cfg.d]`,
//! `init = normal(…)`, `#[module(config = …)]`, `values = …` and `layers = cfg.layers`.
//!
//! The generated functions bind the config to [`binding`], a name of the macro's own, and each
//! free `cfg` of an expression is renamed to it ([`rebind`]). Binding the user's name `cfg`
//! itself cannot be made robust: a `const cfg` or `static cfg` in scope turns every pattern
//! naming `cfg` (a parameter, a `let`, a closure's argument) into a constant pattern or an error,
//! because items are not hygienic. Renamed, the expressions read the config whatever the scope
//! holds.

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::Ident;

/// The name users write for the config.
pub(crate) const USER_NAME: &str = "cfg";

/// The config's binding in generated code, at the call site's hygiene as the user's tokens
/// are (a mixed-site name would not join their spans: an error on `cfg.d` would underline
/// `cfg` alone, and its suggestions would be wrong).
pub(crate) fn binding() -> Ident {
    binding_at(Span::call_site())
}

/// The binding at `span`, so an error about a renamed `cfg` is reported where it is written.
pub(crate) fn binding_at(span: Span) -> Ident {
    Ident::new("__stackscan_cfg", span)
}

/// `expr` with every free `cfg` renamed to [`binding`]: a `cfg` that is a value, not a field
/// (`x.cfg`), a path segment (`m::cfg`, `cfg::X`), a lifetime (`'cfg`), the `cfg!` macro, an
/// attribute (`#[cfg(test)]`; a config is not called) or a struct literal's field name
/// (`S { cfg: … }`). Closures and blocks binding their own `cfg` are renamed with their uses,
/// so they mean the same.
pub(crate) fn rebind(expr: &impl ToTokens) -> TokenStream {
    walk(expr.to_token_stream(), &mut |_| {})
}

/// Whether `expr` reads the config: it has a free `cfg` (`cfg.layers`, `cfg.blocks * 2`,
/// `depth(cfg)`, not `x.cfg` or `m::cfg`).
pub(crate) fn reads_config(expr: &impl ToTokens) -> bool {
    let mut found = false;
    walk(expr.to_token_stream(), &mut |_| found = true);
    found
}

/// The one walk over an expression's tokens: renames each free `cfg`, reporting it to `seen`.
fn walk(tokens: TokenStream, seen: &mut impl FnMut(&Ident)) -> TokenStream {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let punct = |i: Option<usize>, c: char| {
        i.and_then(|i| trees.get(i))
            .is_some_and(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == c))
    };
    // `x.cfg` but not `0..cfg`; `m::cfg` but not `S { f: cfg }`.
    let twice = |i: usize, c: char| punct(Some(i), c) && punct(i.checked_sub(1), c);
    let qualified = |i: usize| {
        let Some(b) = i.checked_sub(1) else {
            return false;
        };
        (punct(Some(b), '.') && !punct(b.checked_sub(1), '.'))
            || twice(b, ':')
            || punct(Some(b), '\'')
    };
    let mut out = Vec::with_capacity(trees.len());
    for (i, tree) in trees.iter().enumerate() {
        out.push(match tree {
            TokenTree::Ident(ident)
                if ident == USER_NAME
                    && !qualified(i)
                    && !punct(Some(i + 1), '!')
                    && !punct(Some(i + 1), ':')
                    && !matches!(trees.get(i + 1), Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis) =>
            {
                seen(ident);
                TokenTree::Ident(binding_at(ident.span()))
            }
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), walk(g.stream(), seen));
                group.set_span(g.span());
                TokenTree::Group(group)
            }
            other => other.clone(),
        });
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::{reads_config, rebind};

    #[test]
    fn free_cfg_is_renamed_and_the_rest_kept() {
        let expr = quote!(cfg.d * depth(cfg) + x.cfg + m::cfg + cfg::X + S { cfg: 1, a: cfg }.n);
        assert_eq!(
            rebind(&expr).to_string(),
            quote!(
                __stackscan_cfg.d * depth(__stackscan_cfg)
                    + x.cfg
                    + m::cfg
                    + cfg::X
                    + S {
                        cfg: 1,
                        a: __stackscan_cfg
                    }
                    .n
            )
            .to_string()
        );
        assert!(reads_config(&quote!(0..cfg.d)));
        assert!(reads_config(&quote!(f(cfg))));
        assert!(!reads_config(&quote!(
            x.cfg + m::cfg + cfg!(test) as i64 + {
                #[cfg(test)]
                1
            }
        )));
    }
}
