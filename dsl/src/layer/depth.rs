//! A stack's depth as its declaration gives it. The block pattern is a type's; the count may be
//! a literal or a `const` (checked at compile time, by the macro and by `const` evaluation) or
//! an expression over the config (`layers = cfg.layers`), checked here, when the stack is built,
//! against the pattern, with an error naming the field.

use crate::error::{Error, Result};
use crate::plan::Stack;

use super::LayerStack;

/// The count a `#[layer_stack]` writes, evaluated.
#[derive(Clone, Copy, Debug)]
pub enum Count {
    /// `layers = n`: the prefix plus a whole number of blocks.
    Layers(i128),
    /// `repeat = n`: how often the block repeats.
    Repeat(i128),
}

/// Why a count does not fit its stack's pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Misfit {
    /// Below the smallest stack: `repeat` under 1, or `layers` no more than the prefix.
    Short,
    /// More layers than a stack has, `Stack::MAX_LAYERS`.
    Deep,
    /// `layers` is not the prefix plus a whole number of blocks.
    Ragged,
}

impl Count {
    /// How often the block repeats when the count fits a stack of `prefix` then `block`
    /// sub-layers, at most `Stack::MAX_LAYERS` in all; else why not. The one rule: the
    /// macro's `const` validator of a constant count applies it at compile time, [`stack`] at
    /// run time.
    pub const fn fit(self, prefix: usize, block: usize) -> core::result::Result<usize, Misfit> {
        let block = if block == 0 { 1 } else { block };
        let (p, b, max) = (prefix as i128, block as i128, Stack::MAX_LAYERS as i128);
        // Each `as usize` below is of a value in `1..=MAX_LAYERS`.
        match self {
            Count::Layers(n) if n <= p => Err(Misfit::Short),
            Count::Layers(n) if n > max => Err(Misfit::Deep),
            Count::Layers(n) if (n - p) % b != 0 => Err(Misfit::Ragged),
            Count::Layers(n) => Ok(((n - p) / b) as usize),
            Count::Repeat(r) if r < 1 => Err(Misfit::Short),
            // `p + r × b ≤ max` without the product, which may overflow.
            Count::Repeat(r) if r > (max - p) / b => Err(Misfit::Deep),
            Count::Repeat(r) => Ok(r as usize),
        }
    }
}

/// What the count was written as, for the error that names it.
#[derive(Clone, Copy, Debug)]
pub enum Source {
    /// A literal or a `const` expression (checked at compile time).
    Const,
    /// `cfg.<field>`: shown as `Config.field`.
    Field(&'static str),
    /// Any other expression over the config, as written.
    Expr(&'static str),
}

/// An integer a count expression may have, whatever type the config holds it in.
#[diagnostic::on_unimplemented(
    message = "a stack's count is an integer, not `{Self}`",
    label = "not an integer",
    note = "`layers = cfg.layers` reads an integer field of the config"
)]
pub trait CountValue {
    /// The value as `i128` (a `u128` beyond `i128` saturates; it is out of range either way).
    fn count(self) -> i128;
}

macro_rules! count_value {
    ($($t:ty),*) => {$(
        impl CountValue for $t {
            fn count(self) -> i128 {
                i128::try_from(self).unwrap_or(i128::MAX)
            }
        }
    )*};
}

count_value!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize
);

/// A count expression's value.
pub fn value<N: CountValue>(n: N) -> i128 {
    n.count()
}

/// The stack of `prefix` then `block` repeated as `count` says, for stack `S`; a count that
/// does not fit the pattern is [`Error::Depth`].
pub fn stack<S: LayerStack>(
    prefix: &[&str],
    block: &[&str],
    count: Count,
    source: Source,
) -> Result<Stack> {
    if let Ok(repeat) = count.fit(prefix.len(), block.len()) {
        return Stack::with_prefix(prefix, block, repeat);
    }
    let (key, n) = match count {
        Count::Layers(n) => ("layers", n),
        Count::Repeat(r) => ("repeat", r),
    };
    Err(Error::Depth {
        stack: short_name(core::any::type_name::<S>()),
        field: match source {
            Source::Const => key.to_owned(),
            Source::Field(f) => format!("{}.{f}", short_name(core::any::type_name::<S::Config>())),
            Source::Expr(e) => e.to_owned(),
        },
        key,
        value: n,
        prefix: prefix.len(),
        block: block.len(),
    })
}

/// `a::b::Name<c::D>` → `Name`.
fn short_name(path: &'static str) -> &'static str {
    let base = path.split('<').next().unwrap_or(path);
    base.rsplit("::").next().unwrap_or(base)
}

/// The message of [`Error::Depth`].
pub(crate) fn message(
    stack: &str,
    field: &str,
    key: &str,
    value: i128,
    prefix: usize,
    block: usize,
) -> String {
    let (p, b) = (prefix as i128, block as i128);
    let max = Stack::MAX_LAYERS as i128;
    let sub_layers = |n: i128| if n == 1 { "sub-layer" } else { "sub-layers" };
    if key == "repeat" {
        return if value < 1 {
            format!("`{field}` is {value}, but the block of stack `{stack}` repeats at least once")
        } else {
            format!(
                "`{field}` is {value}: {p} + {value} × {b} layers of stack `{stack}` exceed a stack's {max} layers"
            )
        };
    }
    let pattern = if p == 0 {
        format!("a positive multiple of the block's {b} {}", sub_layers(b))
    } else {
        format!(
            "the prefix's {p} {} + a positive multiple of the block's {b}",
            sub_layers(p)
        )
    };
    let hint = if value < p + b {
        format!("the smallest is {}", p + b)
    } else if value > max {
        format!("a stack has at most {max} layers")
    } else {
        let below = p + (value - p) / b * b;
        format!("expected {below} or {}", below + b)
    };
    format!("`{field}` is {value}, which is not {pattern} (stack `{stack}`); {hint}")
}

#[cfg(test)]
mod tests {
    use super::{Count, Misfit, message, short_name};
    use crate::plan::Stack;

    #[test]
    fn counts_fit_the_pattern_without_overflow() {
        let max = Stack::MAX_LAYERS as i128;
        assert_eq!(Count::Repeat(3).fit(1, 2), Ok(3));
        assert_eq!(Count::Repeat(0).fit(0, 2), Err(Misfit::Short));
        assert_eq!(
            Count::Repeat(usize::MAX as i128).fit(0, 2),
            Err(Misfit::Deep)
        );
        assert_eq!(Count::Repeat(max / 2).fit(0, 2), Ok(Stack::MAX_LAYERS / 2));
        assert_eq!(Count::Repeat(max / 2).fit(1, 2), Err(Misfit::Deep));
        assert_eq!(Count::Layers(7).fit(1, 2), Ok(3));
        assert_eq!(Count::Layers(1).fit(1, 2), Err(Misfit::Short));
        assert_eq!(Count::Layers(6).fit(1, 2), Err(Misfit::Ragged));
        assert_eq!(Count::Layers(max + 1).fit(0, 1), Err(Misfit::Deep));
    }

    #[test]
    fn types_are_named_by_their_last_segment() {
        assert_eq!(
            short_name("stackscan_models::llama::LlamaConfig"),
            "LlamaConfig"
        );
        assert_eq!(short_name("a::Cfg<b::Inner, c::D>"), "Cfg");
        assert_eq!(short_name("Cfg"), "Cfg");
    }

    #[test]
    fn messages_name_the_field_and_the_pattern() {
        assert_eq!(
            message("Qwen35", "Qwen35Config.layers", "layers", 6, 0, 4),
            "`Qwen35Config.layers` is 6, which is not a positive multiple of the block's 4 sub-layers (stack `Qwen35`); expected 4 or 8"
        );
        assert_eq!(
            message("DeepSeek3", "DeepSeek3Config.layers", "layers", 3, 3, 1),
            "`DeepSeek3Config.layers` is 3, which is not the prefix's 3 sub-layers + a positive multiple of the block's 1 (stack `DeepSeek3`); the smallest is 4"
        );
        assert_eq!(
            message("Toy", "cfg.blocks - 1", "repeat", 0, 0, 4),
            "`cfg.blocks - 1` is 0, but the block of stack `Toy` repeats at least once"
        );
        assert_eq!(
            message("Toy", "Cfg.n", "layers", 1 << 21, 0, 1),
            "`Cfg.n` is 2097152, which is not a positive multiple of the block's 1 sub-layer (stack `Toy`); a stack has at most 1048576 layers"
        );
    }
}
