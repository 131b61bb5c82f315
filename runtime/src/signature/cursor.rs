//! Walking MLIR's nested brackets and attribute dictionaries token by token.
//!
//! The signature reader only understands a few attribute values; every other value, region or
//! operand list is skipped by bracket balance, so an op it does not know never stops it or
//! fools it. A closer that does not match its opener is an error, not a guess.

use super::Reason;
use super::lexer::{Kind, Lexer, Token};

/// An alias that refers to an alias that refers to … this deep is a cycle or abuse.
const MAX_ALIAS_DEPTH: usize = 16;

/// A position in the text plus how many aliases were followed to reach it.
#[derive(Clone, Debug)]
pub(super) struct Cursor<'a> {
    lexer: Lexer<'a>,
    depth: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(src: &'a str) -> Self {
        Cursor {
            lexer: Lexer::new(src),
            depth: 0,
        }
    }

    pub fn next(&mut self) -> Result<Token<'a>, Reason> {
        self.lexer.next_token()
    }

    pub fn peek(&self) -> Result<Token<'a>, Reason> {
        self.lexer.peek()
    }

    /// Consumes the punctuation `p` if it comes next.
    pub fn eat(&mut self, p: &str) -> Result<bool, Reason> {
        let found = self.peek()?.is(p);
        if found {
            self.next()?;
        }
        Ok(found)
    }

    /// Consumes the punctuation `p`, or says what came instead.
    pub fn expect(&mut self, p: &str, context: &str) -> Result<(), Reason> {
        let t = self.next()?;
        if t.is(p) {
            Ok(())
        } else {
            Err(unexpected(&t, &format!("`{p}` {context}")))
        }
    }

    /// The same text at the definition of an alias, one level deeper.
    pub fn follow(&self, definition: &Cursor<'a>, alias: &str) -> Result<Cursor<'a>, Reason> {
        if self.depth >= MAX_ALIAS_DEPTH {
            return Err(Reason::new(format!(
                "alias `{alias}` is nested more than {MAX_ALIAS_DEPTH} deep"
            )));
        }
        Ok(Cursor {
            lexer: definition.lexer.clone(),
            depth: self.depth + 1,
        })
    }

    /// Skips to just past the closer of `opener`, which was just consumed.
    pub fn skip_balanced(&mut self, opener: &Token<'a>) -> Result<(), Reason> {
        let mut open = vec![*opener];
        while let Some(innermost) = open.last().copied() {
            let t = self.next()?;
            if t.kind == Kind::Eof {
                return Err(Reason::new(format!(
                    "`{}` at byte {} is never closed",
                    innermost.text, innermost.start
                )));
            }
            if closer_of(&t).is_some() {
                open.push(t);
            } else if is_closer(&t) {
                if Some(t.text) != closer_of(&innermost) {
                    return Err(unexpected(
                        &t,
                        &format!(
                            "the closer of `{}` at byte {}",
                            innermost.text, innermost.start
                        ),
                    ));
                }
                open.pop();
            }
        }
        Ok(())
    }

    /// Skips one attribute value or type, stopping before the `,` or closer that ends it.
    pub fn skip_value(&mut self) -> Result<(), Reason> {
        let mut empty = true;
        loop {
            let t = self.peek()?;
            if t.kind == Kind::Eof || is_closer(&t) || t.is(",") {
                return if empty {
                    Err(unexpected(&t, "a value"))
                } else {
                    Ok(())
                };
            }
            self.next()?;
            if closer_of(&t).is_some() {
                self.skip_balanced(&t)?;
            }
            empty = false;
        }
    }

    /// The entries of an attribute dictionary whose `{` was just consumed, each with a cursor
    /// at its value (`None` for a unit attribute); consumes the closing `}`.
    pub fn dict_entries(&mut self) -> Result<Vec<(String, Option<Cursor<'a>>)>, Reason> {
        let mut entries = Vec::new();
        if self.eat("}")? {
            return Ok(entries);
        }
        loop {
            let t = self.next()?;
            let key = match t.kind {
                Kind::BareId => t.text.to_owned(),
                Kind::Str => t.string_value().ok_or_else(|| bad_string(&t))?,
                _ => return Err(unexpected(&t, "an attribute name")),
            };
            if self.eat("=")? {
                entries.push((key, Some(self.clone())));
                self.skip_value()?;
            } else {
                entries.push((key, None));
            }
            let t = self.next()?;
            if t.is("}") {
                return Ok(entries);
            }
            if !t.is(",") {
                return Err(unexpected(&t, "`,` or `}` in an attribute dictionary"));
            }
        }
    }

    /// The attributes of a generic op whose quoted name was just consumed: its properties
    /// `<{…}>` and its dictionary `{…}` after the regions, operands and regions skipped.
    pub fn generic_op_entries(&mut self) -> Result<Vec<(String, Option<Cursor<'a>>)>, Reason> {
        let open = self.next()?;
        if !open.is("(") {
            return Err(unexpected(&open, "`(` after a generic op name"));
        }
        self.skip_balanced(&open)?;
        let mut entries = Vec::new();
        if self.eat("<")? {
            self.expect("{", "opening the properties of a generic op")?;
            entries.extend(self.dict_entries()?);
            self.expect(">", "closing the properties of a generic op")?;
        }
        let regions = self.peek()?;
        if regions.is("(") {
            self.next()?;
            self.skip_balanced(&regions)?;
        }
        if self.eat("{")? {
            entries.extend(self.dict_entries()?);
        }
        Ok(entries)
    }
}

/// The value cursor of `key` in `entries`; naming a key twice is ambiguous, so an error.
pub(super) fn entry<'a>(
    entries: &[(String, Option<Cursor<'a>>)],
    key: &str,
) -> Result<Option<Cursor<'a>>, Reason> {
    let mut found = entries.iter().filter(|(k, _)| k == key);
    match (found.next(), found.next()) {
        (None, _) => Ok(None),
        (Some(_), Some(_)) => Err(Reason::new(format!("attribute `{key}` is given twice"))),
        (Some((_, None)), None) => Err(Reason::new(format!("attribute `{key}` has no value"))),
        (Some((_, Some(c))), None) => Ok(Some(c.clone())),
    }
}

fn closer_of(t: &Token<'_>) -> Option<&'static str> {
    if t.kind != Kind::Punct {
        return None;
    }
    match t.text {
        "(" => Some(")"),
        "[" => Some("]"),
        "{" => Some("}"),
        "<" => Some(">"),
        "{-#" => Some("#-}"),
        _ => None,
    }
}

fn is_closer(t: &Token<'_>) -> bool {
    t.kind == Kind::Punct && matches!(t.text, ")" | "]" | "}" | ">" | "#-}")
}

/// "expected {what}, found `{token}` at byte {n}".
pub(super) fn unexpected(t: &Token<'_>, what: &str) -> Reason {
    if t.kind == Kind::Eof {
        Reason::new(format!("expected {what}, found the end of the text"))
    } else {
        Reason::new(format!(
            "expected {what}, found `{}` at byte {}",
            t.text, t.start
        ))
    }
}

pub(super) fn bad_string(t: &Token<'_>) -> Reason {
    Reason::new(format!(
        "unreadable string `{}` at byte {}",
        t.text, t.start
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_skipped_by_bracket_balance() {
        let mut c = Cursor::new(r#"{a = dense<[1, 2]> : tensor<2xi32>, b, "c d" = {x = (1)}}"#);
        c.expect("{", "").unwrap();
        let entries = c.dict_entries().unwrap();
        let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a", "b", "c d"]);
        assert!(entry(&entries, "b").is_err());
        let mut a = entry(&entries, "a").unwrap().unwrap();
        assert!(a.next().unwrap().is_id("dense"));
    }

    #[test]
    fn mismatched_or_missing_closers_are_errors() {
        for text in ["{a = (1]}", "{a = <1", "{a = }"] {
            let mut c = Cursor::new(text);
            c.expect("{", "").unwrap();
            assert!(c.dict_entries().is_err(), "{text}");
        }
    }
}
