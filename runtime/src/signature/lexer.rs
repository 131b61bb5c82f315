//! MLIR's tokens, as far as reading `main`'s signature needs them.
//!
//! Searching the raw text for `func.func @main(` is fooled by comments, strings, spacing and
//! the generic op form; a lexer is not. Comments are dropped and a string is one token, so
//! nothing inside either can look like an operation. Numbers are only decimal: MLIR itself
//! reads `0x8xf32` in a tensor type as a dimension list, not as a hexadecimal literal.
//! `func.func @main // (%a: tensor<f32>)` is three tokens: `func.func`, `@main` and the end.

use super::Reason;

/// What a token is; punctuation carries its own spelling in [`Token::text`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// `func.func`, `tensor`, `x8xf32`, `loc`, `public`.
    BareId,
    /// `%arg0`.
    Percent,
    /// `@main` or `@"main"`.
    Symbol,
    /// `#sdy.sharding`, `#loc3`: a dialect attribute or an alias.
    Hash,
    /// `!stablehlo.token`: a dialect type or an alias.
    Bang,
    /// `^bb0`.
    Caret,
    /// `"…"`, quotes included in the text.
    Str,
    /// `42`.
    Int,
    /// `1.5e-3`.
    Float,
    /// `( ) [ ] { } < > , : = ? * + - -> {-# #-}` and any other single character.
    Punct,
    /// The end of the text.
    Eof,
}

/// One token: its kind, its spelling in the source and where it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Token<'a> {
    pub kind: Kind,
    pub text: &'a str,
    pub start: usize,
}

impl<'a> Token<'a> {
    /// Whether this is the punctuation `p`.
    pub fn is(&self, p: &str) -> bool {
        self.kind == Kind::Punct && self.text == p
    }

    /// Whether this is the bare identifier `id`.
    pub fn is_id(&self, id: &str) -> bool {
        self.kind == Kind::BareId && self.text == id
    }

    /// The contents of a string token with MLIR's escapes (`\"`, `\\`, `\n`, `\t`, `\XX`)
    /// resolved; `None` for other tokens or escapes MLIR would reject.
    pub fn string_value(&self) -> Option<String> {
        let inner = self.text.strip_prefix('"')?.strip_suffix('"')?;
        let mut bytes = Vec::with_capacity(inner.len());
        let mut rest = inner.as_bytes();
        while let Some((&b, tail)) = rest.split_first() {
            rest = tail;
            if b != b'\\' {
                bytes.push(b);
                continue;
            }
            let (&e, tail) = rest.split_first()?;
            rest = tail;
            match e {
                b'"' | b'\\' => bytes.push(e),
                b'n' => bytes.push(b'\n'),
                b't' => bytes.push(b'\t'),
                _ => {
                    let (&lo, tail) = rest.split_first()?;
                    rest = tail;
                    let hex = |c: u8| char::from(c).to_digit(16);
                    bytes.push(u8::try_from(hex(e)? * 16 + hex(lo)?).ok()?);
                }
            }
        }
        String::from_utf8(bytes).ok()
    }

    /// The name of a `@symbol` token, unquoted.
    pub fn symbol_name(&self) -> Option<String> {
        let name = self.text.strip_prefix('@')?;
        if name.starts_with('"') {
            Token {
                text: name,
                ..*self
            }
            .string_value()
        } else {
            Some(name.to_owned())
        }
    }
}

/// A position in the text; cloning it is how the parser looks ahead.
#[derive(Clone, Debug)]
pub(super) struct Lexer<'a> {
    src: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    pub fn new(src: &'a str) -> Self {
        Lexer { src, pos: 0 }
    }

    /// The next token, after whitespace and `//` comments.
    pub fn next_token(&mut self) -> Result<Token<'a>, Reason> {
        self.skip_trivia();
        let start = self.pos;
        let bytes = self.src.as_bytes();
        let Some(&c) = bytes.get(start) else {
            return Ok(self.token(Kind::Eof, start));
        };
        let kind = match c {
            b'"' => {
                self.pos = self.string_end(start + 1)?;
                Kind::Str
            }
            b'%' | b'#' | b'!' | b'^' | b'@' if self.prefixed_end(start + 1).is_some() => {
                self.pos = self.prefixed_end(start + 1).unwrap_or(start + 1);
                match c {
                    b'%' => Kind::Percent,
                    b'#' => Kind::Hash,
                    b'!' => Kind::Bang,
                    b'^' => Kind::Caret,
                    _ => Kind::Symbol,
                }
            }
            b'@' if bytes.get(start + 1) == Some(&b'"') => {
                self.pos = self.string_end(start + 2)?;
                Kind::Symbol
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                self.pos = self.scan(start + 1, |b| {
                    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'.')
                });
                Kind::BareId
            }
            c if c.is_ascii_digit() => self.number(start),
            _ => {
                let rest = &self.src[start..];
                let len = ["->", "{-#", "#-}"]
                    .iter()
                    .find(|p| rest.starts_with(*p))
                    .map_or_else(
                        || rest.chars().next().map_or(1, char::len_utf8),
                        |p| p.len(),
                    );
                self.pos = start + len;
                Kind::Punct
            }
        };
        Ok(self.token(kind, start))
    }

    /// The next token without consuming it.
    pub fn peek(&self) -> Result<Token<'a>, Reason> {
        self.clone().next_token()
    }

    fn token(&self, kind: Kind, start: usize) -> Token<'a> {
        Token {
            kind,
            text: self.src.get(start..self.pos).unwrap_or(""),
            start,
        }
    }

    fn skip_trivia(&mut self) {
        loop {
            let rest = &self.src.as_bytes()[self.pos..];
            if rest.first().is_some_and(u8::is_ascii_whitespace) {
                self.pos += 1;
            } else if rest.starts_with(b"//") {
                self.pos = self.scan(self.pos, |b| b != b'\n');
            } else {
                return;
            }
        }
    }

    /// The first position from `from` whose byte fails `keep`.
    fn scan(&self, from: usize, keep: impl Fn(u8) -> bool) -> usize {
        self.src.as_bytes()[from..]
            .iter()
            .position(|&b| !keep(b))
            .map_or(self.src.len(), |n| from + n)
    }

    /// The end of a string whose contents start at `from` (just past the closing quote).
    fn string_end(&self, from: usize) -> Result<usize, Reason> {
        let bytes = self.src.as_bytes();
        let mut i = from;
        while let Some(&b) = bytes.get(i) {
            match b {
                b'"' => return Ok(i + 1),
                b'\\' => i += 2,
                b'\n' => break,
                _ => i += 1,
            }
        }
        Err(Reason::new(format!(
            "unterminated string at byte {}",
            from.saturating_sub(1)
        )))
    }

    /// The end of the name after a sigil (`%`, `#`, `!`, `^`, `@`): letters, digits and
    /// `_ $ . -`, or digits alone; `None` when no name follows.
    fn prefixed_end(&self, from: usize) -> Option<usize> {
        let first = *self.src.as_bytes().get(from)?;
        let end = if first.is_ascii_digit() {
            self.scan(from, |b| b.is_ascii_digit())
        } else if first.is_ascii_alphabetic() || matches!(first, b'_' | b'$' | b'.' | b'-') {
            self.scan(from, |b| {
                b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'.' | b'-')
            })
        } else {
            return None;
        };
        // `#-}` closes a file-metadata block; it is not a `#` name.
        (!self.src[from..end].starts_with('-')).then_some(end)
    }

    /// `42`, `1.5`, `2.0e-3`; a following `x` starts a new bare identifier, as in `4x8xf32`.
    fn number(&mut self, start: usize) -> Kind {
        self.pos = self.scan(start, |b| b.is_ascii_digit());
        let bytes = self.src.as_bytes();
        if bytes.get(self.pos) != Some(&b'.') {
            return Kind::Int;
        }
        self.pos = self.scan(self.pos + 1, |b| b.is_ascii_digit());
        if matches!(bytes.get(self.pos), Some(b'e' | b'E')) {
            let mut exp = self.pos + 1;
            if matches!(bytes.get(exp), Some(b'+' | b'-')) {
                exp += 1;
            }
            if bytes.get(exp).is_some_and(u8::is_ascii_digit) {
                self.pos = self.scan(exp, |b| b.is_ascii_digit());
            }
        }
        Kind::Float
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<(Kind, &str)> {
        let mut lexer = Lexer::new(src);
        let mut out = Vec::new();
        loop {
            let t = lexer.next_token().unwrap();
            if t.kind == Kind::Eof {
                return out;
            }
            out.push((t.kind, t.text));
        }
    }

    #[test]
    fn comments_and_strings_hide_their_contents() {
        let toks = kinds("a // func.func @main(\n \"func.func @main(\" b");
        assert_eq!(
            toks,
            vec![
                (Kind::BareId, "a"),
                (Kind::Str, "\"func.func @main(\""),
                (Kind::BareId, "b")
            ]
        );
    }

    #[test]
    fn tensor_types_split_like_mlir() {
        let toks = kinds("tensor<0x8xf32>");
        assert_eq!(
            toks,
            vec![
                (Kind::BareId, "tensor"),
                (Kind::Punct, "<"),
                (Kind::Int, "0"),
                (Kind::BareId, "x8xf32"),
                (Kind::Punct, ">")
            ]
        );
    }

    #[test]
    fn sigils_arrows_and_metadata_blocks() {
        let toks = kinds("%arg0 #sdy.sharding @\"m a\" ^bb0 !t -> {-# x #-} 1.5e-3");
        let k: Vec<Kind> = toks.iter().map(|t| t.0).collect();
        assert_eq!(
            k,
            vec![
                Kind::Percent,
                Kind::Hash,
                Kind::Symbol,
                Kind::Caret,
                Kind::Bang,
                Kind::Punct,
                Kind::Punct,
                Kind::BareId,
                Kind::Punct,
                Kind::Float
            ]
        );
    }

    #[test]
    fn escapes_and_quoted_symbols() {
        let mut lexer = Lexer::new(r#""a\"b\0A" @"ma\69n""#);
        let s = lexer.next_token().unwrap();
        assert_eq!(s.string_value().as_deref(), Some("a\"b\n"));
        let sym = lexer.next_token().unwrap();
        assert_eq!(sym.symbol_name().as_deref(), Some("main"));
    }

    #[test]
    fn unterminated_strings_are_errors() {
        assert!(Lexer::new("\"abc").next_token().is_err());
    }
}
