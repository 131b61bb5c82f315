//! The weights AdamW's decay leaves alone beyond the rule ([`stackscan::fsdp::decays`]:
//! matrices but embeddings decay), chosen by their checkpoint names (`embed`, `final_norm`,
//! `layers.attn.wq`, as `stackscan params` lists them) with `*` standing for any run of
//! characters: `train --no-decay PATTERN`, and `no_decay = [...]` in a model's config file.

use stackscan::fsdp::StackModel;

/// Sets every weight of `model` whose name one of `patterns` matches to decay not at all. A
/// pattern that matches no weight is refused, naming it as `named(pattern)` says (the flag or
/// the config's key it came from) and the weights there are: a typo would otherwise decay
/// what the user meant to spare.
pub fn spare(
    model: &mut StackModel,
    patterns: &[String],
    named: impl Fn(&str) -> String,
) -> Result<(), String> {
    let names = model.weight_names();
    for pattern in patterns {
        if !names.iter().any(|n| matches(pattern, n)) {
            return Err(format!(
                "{} names no weight; the model's are {}",
                named(pattern),
                names.join(", ")
            ));
        }
    }
    for (spec, name) in model.weight_specs_mut().into_iter().zip(&names) {
        if patterns.iter().any(|p| matches(p, name)) {
            spec.decay = Some(false);
        }
    }
    Ok(())
}

/// Whether `name` is `pattern`, each `*` of which stands for any run of characters.
fn matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let pieces: Vec<&str> = parts.collect();
    let Some((last, middle)) = pieces.split_last() else {
        return rest.is_empty();
    };
    for piece in middle {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn a_star_stands_for_any_run_of_characters() {
        assert!(matches("embed", "embed"));
        assert!(!matches("embed", "embed2"));
        assert!(matches("layers.attn.*", "layers.attn.wq"));
        assert!(!matches("layers.attn.*", "layers.mlp.w_up"));
        assert!(matches("*norm*", "layers.attn_norm"));
        assert!(matches("*norm", "final_norm"));
        assert!(matches("*", "anything"));
        assert!(matches("l*.*.w*", "layers.mlp.w_up"));
        assert!(!matches("*.wq", "layers.attn.wk"));
        assert!(!matches("ab*ba", "aba"));
    }
}
