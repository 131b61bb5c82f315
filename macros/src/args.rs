//! Attribute arguments as `key`, `key = value` items separated by commas.
//!
//! Each item is split off at the top-level commas before anything is parsed, so one malformed
//! item is reported and the others are still read: every mistake in an attribute shows at once.

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use syn::parse::Parser;

use crate::errors::Errors;

/// One `key` or `key = value` item.
pub(crate) struct Arg {
    pub(crate) key: syn::Ident,
    /// The tokens after `=`, if there is one.
    pub(crate) value: Option<TokenStream>,
    /// The span of the `=`, where a missing value is reported.
    eq_span: Option<Span>,
}

impl Arg {
    /// The value parsed as `T`, or an error naming the key (at the value, or at the key when
    /// there is none).
    pub(crate) fn parse<T: syn::parse::Parse>(&self, what: &str, errors: &mut Errors) -> Option<T> {
        self.parse_with(what, errors, T::parse)
    }

    /// The value parsed by `parser`.
    pub(crate) fn parse_with<T>(
        &self,
        what: &str,
        errors: &mut Errors,
        parser: impl Parser<Output = T>,
    ) -> Option<T> {
        let key = &self.key;
        match &self.value {
            None => {
                errors.error_spanned_by(key, format!("`{key}` needs a value: `{key} = {what}`"));
                None
            }
            Some(tokens) if tokens.is_empty() => {
                let at = self.eq_span.unwrap_or_else(|| key.span());
                errors.error_at(at, format!("expected {what} after `{key} =`"));
                None
            }
            Some(tokens) => match parser.parse2(tokens.clone()) {
                Ok(v) => Some(v),
                Err(e) => {
                    errors.error_spanned_by(
                        tokens,
                        format!(
                            "expected `{key} = {what}` ({})",
                            lowercase_first(&e.to_string())
                        ),
                    );
                    None
                }
            },
        }
    }

    /// A flag: `key` alone or `key = true|false`.
    pub(crate) fn flag(&self, errors: &mut Errors) -> Option<bool> {
        match &self.value {
            None => Some(true),
            Some(_) => self.parse::<syn::LitBool>("true", errors).map(|b| b.value),
        }
    }
}

fn lowercase_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Splits `tokens` into items; malformed items are reported and skipped.
/// Options whose value is a type, so `<` and `>` around commas are generic brackets.
const TYPE_VALUED: [&str; 3] = ["config", "carry", "inputs"];

pub(crate) fn split(tokens: TokenStream, errors: &mut Errors) -> Vec<Arg> {
    let mut items: Vec<Vec<TokenTree>> = vec![Vec::new()];
    // Commas inside `<…>` belong to a type (`config = Sizes<f32, 4>`); `->` and `=>` are not
    // brackets. Only the type-valued options count angle brackets: in a count such as
    // `repeat = 1 << 3` or `if a < b { … }` a `<` is an operator.
    let mut angle_depth = 0usize;
    let mut prev_joint: Option<char> = None;
    // Whether the last token completed a `::`: a `<` after it opens generic arguments in any
    // option (`repeat = Sizes::<A, B>::N`), so their commas do not end the item.
    let mut after_path_sep = false;
    let mut typed = false;
    for tt in tokens {
        let mut joint = None;
        let path_sep = after_path_sep;
        after_path_sep = false;
        if items.last().is_some_and(Vec::is_empty) {
            typed = matches!(&tt, TokenTree::Ident(i) if TYPE_VALUED.iter().any(|k| i == k));
        }
        if let TokenTree::Punct(p) = &tt {
            // Inside generic arguments every `<` is one (`Sizes::<Vec<u8>, 2>::N`).
            let generic = typed || path_sep || angle_depth > 0;
            match p.as_char() {
                ',' if angle_depth == 0 => {
                    items.push(Vec::new());
                    prev_joint = None;
                    continue;
                }
                '<' if generic => angle_depth += 1,
                '>' if generic && !matches!(prev_joint, Some('-' | '=')) => {
                    angle_depth = angle_depth.saturating_sub(1);
                }
                ':' if prev_joint == Some(':') => after_path_sep = true,
                _ => {}
            }
            if p.spacing() == proc_macro2::Spacing::Joint {
                joint = Some(p.as_char());
            }
        }
        prev_joint = joint;
        if let Some(last) = items.last_mut() {
            last.push(tt);
        }
    }
    let mut args = Vec::new();
    for item in items.into_iter().filter(|i| !i.is_empty()) {
        let mut it = item.into_iter();
        let key = match it.next() {
            Some(TokenTree::Ident(key)) => key,
            Some(other) => {
                errors
                    .error_spanned_by(&other, "expected an option name (`name` or `name = value`)");
                continue;
            }
            None => continue,
        };
        let (value, eq_span) = match it.next() {
            None => (None, None),
            Some(TokenTree::Punct(p)) if p.as_char() == '=' => {
                (Some(it.collect::<TokenStream>()), Some(p.span()))
            }
            Some(other) => {
                errors.error_spanned_by(&other, format!("expected `=` or `,` after `{key}`"));
                continue;
            }
        };
        args.push(Arg {
            key,
            value,
            eq_span,
        });
    }
    args
}

/// The contents of a `[...]` value and the span of its brackets, or an error at the value.
pub(crate) fn bracketed(arg: &Arg, what: &str, errors: &mut Errors) -> Option<(Span, TokenStream)> {
    let key = &arg.key;
    let Some(value) = &arg.value else {
        errors.error_spanned_by(key, format!("`{key}` needs a value: `{key} = [{what}]`"));
        return None;
    };
    let mut tokens = value.clone().into_iter();
    match (tokens.next(), tokens.next()) {
        (Some(TokenTree::Group(g)), None) if g.delimiter() == Delimiter::Bracket => {
            Some((g.span(), g.stream()))
        }
        (None, _) => {
            let at = arg.eq_span.unwrap_or_else(|| key.span());
            errors.error_at(at, format!("expected `{key} = [{what}]`"));
            None
        }
        _ => {
            errors.error_spanned_by(value, format!("expected `{key} = [{what}]`"));
            None
        }
    }
}

/// `expected one of `a`, `b` or `c`` for the message of an unknown name.
pub(crate) fn one_of(valid: &[&str]) -> String {
    let quoted: Vec<String> = valid.iter().map(|v| format!("`{v}`")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("one of {} or {last}", rest.join(", ")),
    }
}

/// The first `;` at the top level of `tokens`: `[x; n]` is array-repeat syntax, which a list
/// option does not take.
pub(crate) fn top_level_semicolon(tokens: &TokenStream) -> Option<Span> {
    tokens.clone().into_iter().find_map(|tt| match tt {
        TokenTree::Punct(p) if p.as_char() == ';' => Some(p.span()),
        _ => None,
    })
}
