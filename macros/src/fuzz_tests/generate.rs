//! The token generators of the fuzz tests: a deterministic PRNG, a vocabulary of the tokens a
//! user can plausibly write in the macros' attributes (and some they should not), random
//! token streams over it, and token-tree mutations of valid streams.
//!
//! Everything is built with `proc_macro2`'s fallback implementation (these are unit tests, not
//! a macro invocation), so text is lexed by `str::parse` and a few tokens the lexer never
//! makes from text (a negative literal, a lone `'`, invisible groups) are built by hand: the
//! compiler can hand them to a macro through `macro_rules!` or another proc macro.

use proc_macro2::{Delimiter, Group, Literal, Punct, Spacing, TokenStream, TokenTree};

/// SplitMix64: deterministic across platforms and runs, no dependency, plenty for picking
/// tokens.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`); the modulo bias is irrelevant here.
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub(super) fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub(super) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// Option names and values of both macros, then punctuation, groups, literals at and past
/// the edges of their types, paths and types, lifetimes and keywords. One entry may lex to
/// several token trees (`::`, `'a`, `crate::Mlp`); it is inserted whole.
const WORDS: &[&str] = &[
    "block",
    "prefix",
    "repeat",
    "layers",
    "prefetch_fsdp_weights",
    "defer_grad_reduce_scatter",
    "unroll",
    "config",
    "carry",
    "name",
    "shape",
    "shard",
    "replicated",
    "init",
    "dtype",
    "normal",
    "ones",
    "zeros",
    "f32",
    "bf16",
    "f64",
    "i32",
    "frozen",
    "sublayer",
    "param",
    "cfg",
    "cfg.d",
    "=",
    ",",
    ";",
    ":",
    "::",
    "<",
    ">",
    "<<",
    ">>",
    "->",
    "=>",
    "+",
    "-",
    "*",
    "/",
    ".",
    "..",
    "#",
    "!",
    "&",
    "?",
    "|",
    "[]",
    "()",
    "{}",
    "[A, B]",
    "[cfg.d, cfg.f]",
    "(0.02)",
    "normal(0.02)",
    "[Mlp, Mlp<Tensor>]",
    "#[param(shape = [1], shard = 0)]",
    "0",
    "1",
    "2",
    "3",
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "1e400",
    "0.02",
    "0x10",
    "1_000",
    "0u8",
    "3usize",
    "1f32",
    "\"A\"",
    "\"\"",
    "\"a b\"",
    "'c'",
    "b\"b\"",
    "r\"raw\"",
    "true",
    "false",
    "Tensor",
    "T",
    "U",
    "Mlp",
    "Attn",
    "crate::Mlp",
    "::std::vec::Vec<T>",
    "Sizes<f32, 4>",
    "Self",
    "self",
    "super",
    "dyn A",
    "impl A",
    "_",
    "!",
    "fn() -> A",
    "&'a T",
    "(A, B)",
    "[T; 4]",
    "<T as A>::B",
    "m!()",
    "dyn A + 'a",
    "impl Fn() -> A",
    "A::<T>",
    "fn(A) -> B",
    "*const A",
    "[A]",
    "(A,)",
    "A<'a>",
    "A<{ 1 }>",
    "A<B = C>",
    "Fn(A) -> B",
    "for<'a> fn(&'a A)",
    "Self::A",
    "::A",
    "A<T,>",
    "{ 1 }",
    "if a { 1 } else { 2 }",
    "|| 1",
    "a.b()",
    "[1; 2]",
    "!0",
    "1 as usize",
    "x?",
    "async {}",
    "loop {}",
    "'a: loop {}",
    "const { 1 }",
    "unsafe { 1 }",
    "1..=2",
    "a += 1",
    "&mut x",
    "S { a: 1 }",
    "match x {}",
    "x[0]",
    "m!(1)",
    "#[cfg(x)]",
    "'a",
    "'static",
    "struct",
    "enum",
    "union",
    "fn",
    "where",
    "pub",
    "const",
    "mut",
    "as",
    "for",
    "let",
    "if",
    "match",
    "r#type",
    "move",
    "return",
    "try",
    "gen",
    "r#gen",
];

/// The vocabulary lexed, plus the hand-built tokens.
pub(super) struct Vocab {
    pieces: Vec<Vec<TokenTree>>,
}

impl Vocab {
    pub(super) fn new() -> Self {
        let mut pieces: Vec<Vec<TokenTree>> = WORDS
            .iter()
            .map(|w| {
                let ts: TokenStream = w
                    .parse()
                    .unwrap_or_else(|e| panic!("vocabulary `{w}` does not lex: {e}"));
                ts.into_iter().collect()
            })
            .collect();
        let invisible = |s: &str| {
            let ts: TokenStream = s.parse().unwrap_or_else(|e| panic!("`{s}`: {e}"));
            vec![TokenTree::Group(Group::new(Delimiter::None, ts))]
        };
        pieces.extend([
            vec![TokenTree::Literal(Literal::i64_unsuffixed(-1))],
            vec![TokenTree::Literal(Literal::i64_suffixed(i64::MIN))],
            vec![TokenTree::Literal(Literal::f64_unsuffixed(-0.5))],
            vec![TokenTree::Punct(Punct::new('\'', Spacing::Joint))],
            vec![TokenTree::Punct(Punct::new('\'', Spacing::Alone))],
            invisible(""),
            invisible("Mlp"),
            invisible("1 + 2"),
            invisible("cfg.d"),
            invisible("[A, B]"),
        ]);
        Vocab { pieces }
    }
}

const DELIMITERS: [Delimiter; 4] = [
    Delimiter::Parenthesis,
    Delimiter::Bracket,
    Delimiter::Brace,
    Delimiter::None,
];

/// A PRNG and the vocabulary it draws from.
pub(super) struct Gen {
    pub(super) rng: Rng,
    vocab: Vocab,
}

impl Gen {
    pub(super) fn new() -> Self {
        Gen {
            rng: Rng::new(0),
            vocab: Vocab::new(),
        }
    }

    /// Restarts the PRNG: one seed per case makes each case reproducible alone.
    pub(super) fn reseed(&mut self, seed: u64) {
        self.rng = Rng::new(seed);
    }

    /// One vocabulary entry.
    fn piece(&mut self) -> Vec<TokenTree> {
        let i = self.rng.below(self.vocab.pieces.len());
        self.vocab.pieces[i].clone()
    }

    /// Up to six entries or groups of them, nested at most `depth` deep.
    pub(super) fn random_stream(&mut self, depth: usize) -> Vec<TokenTree> {
        let mut out = Vec::new();
        for _ in 0..self.rng.below(7) {
            if depth > 0 && self.rng.one_in(4) {
                let delimiter = self.rng.pick(&DELIMITERS);
                let inner: TokenStream = self.random_stream(depth - 1).into_iter().collect();
                out.push(TokenTree::Group(Group::new(delimiter, inner)));
            } else {
                out.extend(self.piece());
            }
        }
        out
    }

    /// `key`, `key = value` items over `keys`, shaped like real arguments so the checks past
    /// the splitting are reached: values are vocabulary entries, short random streams or
    /// bracketed lists of them.
    pub(super) fn random_args(&mut self, keys: &[&str]) -> TokenStream {
        let mut out: Vec<TokenTree> = Vec::new();
        for i in 0..self.rng.below(6) {
            if i > 0 {
                out.extend(punct(","));
            }
            if self.rng.one_in(10) {
                out.extend(self.piece());
            } else {
                let key = self.rng.pick(keys);
                out.push(TokenTree::Ident(proc_macro2::Ident::new(
                    key,
                    proc_macro2::Span::call_site(),
                )));
            }
            if self.rng.one_in(4) {
                continue;
            }
            out.extend(punct("="));
            match self.rng.below(3) {
                0 => out.extend(self.piece()),
                1 => out.extend(self.random_stream(1)),
                _ => {
                    let mut list = Vec::new();
                    for j in 0..self.rng.below(5) {
                        if j > 0 {
                            list.extend(punct(","));
                        }
                        list.extend(self.piece());
                    }
                    let list: TokenStream = list.into_iter().collect();
                    out.push(TokenTree::Group(Group::new(Delimiter::Bracket, list)));
                }
            }
        }
        if self.rng.one_in(4) {
            out.extend(punct(","));
        }
        out.into_iter().collect()
    }

    /// `stream` after one to four mutations.
    pub(super) fn mutate(&mut self, stream: TokenStream) -> TokenStream {
        let mut tokens: Vec<TokenTree> = stream.into_iter().collect();
        // Mostly one mutation, so the rest stays valid and the checks past the first error
        // (and the expansion) see it.
        let mutations = match self.rng.below(4) {
            0 | 1 => 1,
            2 => 2,
            _ => 3 + self.rng.below(2),
        };
        for _ in 0..mutations {
            tokens = self.mutate_once(tokens, 0);
        }
        tokens.into_iter().collect()
    }

    /// One mutation somewhere in `tokens`: in a group (two times in three when there is one,
    /// so attribute arguments deep in a struct are reached) or at this level.
    fn mutate_once(&mut self, mut tokens: Vec<TokenTree>, depth: usize) -> Vec<TokenTree> {
        let groups: Vec<usize> = (0..tokens.len())
            .filter(|&i| matches!(tokens[i], TokenTree::Group(_)))
            .collect();
        if !groups.is_empty() && depth < 8 && !self.rng.one_in(3) {
            let i = self.rng.pick(&groups);
            if let TokenTree::Group(g) = &tokens[i] {
                let inner = self.mutate_once(g.stream().into_iter().collect(), depth + 1);
                tokens[i] = regroup(g, g.delimiter(), inner.into_iter().collect());
            }
            return tokens;
        }
        let n = tokens.len();
        match self.rng.below(10) {
            // Delete a token.
            0 | 1 if n > 0 => {
                tokens.remove(self.rng.below(n));
            }
            // Duplicate a token.
            2 if n > 0 => {
                let i = self.rng.below(n);
                tokens.insert(i, tokens[i].clone());
            }
            // Swap two tokens.
            3 if n > 1 => {
                let (i, j) = (self.rng.below(n), self.rng.below(n));
                tokens.swap(i, j);
            }
            // Replace a token with a vocabulary entry.
            4 | 5 if n > 0 => {
                let i = self.rng.below(n);
                let piece = self.piece();
                tokens.splice(i..=i, piece);
            }
            // Replace a token with a random stream.
            6 if n > 0 => {
                let i = self.rng.below(n);
                let random = self.random_stream(2);
                tokens.splice(i..=i, random);
            }
            // Change a group's delimiter.
            7 if !groups.is_empty() => {
                let i = self.rng.pick(&groups);
                if let TokenTree::Group(g) = &tokens[i] {
                    let delimiter = self.rng.pick(&DELIMITERS);
                    tokens[i] = regroup(g, delimiter, g.stream());
                }
            }
            // Cut the tail off.
            8 if n > 0 => tokens.truncate(self.rng.below(n)),
            // Insert a vocabulary entry (also what an empty stream gets).
            _ => {
                let i = self.rng.below(n + 1);
                let piece = self.piece();
                tokens.splice(i..i, piece);
            }
        }
        tokens
    }
}

/// `g`'s span on new contents.
fn regroup(g: &Group, delimiter: Delimiter, stream: TokenStream) -> TokenTree {
    let mut new = Group::new(delimiter, stream);
    new.set_span(g.span());
    TokenTree::Group(new)
}

fn punct(s: &str) -> TokenStream {
    s.parse()
        .unwrap_or_else(|e| panic!("`{s}` does not lex: {e}"))
}
