//! The one error collector of a macro invocation: every check pushes into it, and the
//! invocation ends by turning what it holds into `compile_error!`s, all of them at once.

use std::fmt::Display;

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;

/// Accumulated errors. Dropping it without calling [`Errors::finish`] is a bug in the macro
/// (errors would be lost), so it panics then, like serde's `Ctxt`.
#[derive(Debug, Default)]
pub(crate) struct Errors {
    errors: Option<Vec<syn::Error>>,
}

impl Errors {
    pub(crate) fn new() -> Self {
        Errors {
            errors: Some(Vec::new()),
        }
    }

    /// Records `message` at the span of `tokens` (all of it where the compiler can join spans).
    pub(crate) fn error_spanned_by(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// Records `message` at `span`.
    pub(crate) fn error_at(&mut self, span: Span, message: impl Display) {
        self.push(syn::Error::new(span, message));
    }

    /// Records a parse error as it is.
    pub(crate) fn push(&mut self, error: syn::Error) {
        self.errors
            .as_mut()
            .expect("the collector is used after `finish`")
            .push(error);
    }

    /// How many errors have been recorded.
    pub(crate) fn len(&self) -> usize {
        self.errors.as_ref().map_or(0, Vec::len)
    }

    /// Whether nothing has been recorded yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.errors.as_ref().is_none_or(Vec::is_empty)
    }

    /// All errors combined into one, or `Ok` if there were none.
    pub(crate) fn finish(mut self) -> Result<(), syn::Error> {
        let mut errors = self.errors.take().unwrap_or_default().into_iter();
        match errors.next() {
            None => Ok(()),
            Some(mut first) => {
                for e in errors {
                    first.combine(e);
                }
                Err(first)
            }
        }
    }

    /// The errors as `compile_error!` invocations (empty if there were none).
    pub(crate) fn into_compile_errors(self) -> TokenStream {
        match self.finish() {
            Ok(()) => TokenStream::new(),
            Err(e) => e.into_compile_error(),
        }
    }
}

impl Drop for Errors {
    fn drop(&mut self) {
        if self.errors.is_some() && !std::thread::panicking() {
            panic!("an error collector was dropped without `finish`");
        }
    }
}
