//! Which models the commands know in this process: [`BUILT_IN`], or the list a user's
//! command line installs.

use stackscan::Result;

use super::{BUILT_IN, ModelName};

/// The models the commands know in this process: those [`install`]ed (a user's command line,
/// `stackscan_cli::cli::main_with`), else [`BUILT_IN`].
pub fn models() -> &'static [ModelName] {
    INSTALLED.get().copied().unwrap_or(BUILT_IN)
}

static INSTALLED: std::sync::OnceLock<&'static [ModelName]> = std::sync::OnceLock::new();

/// Makes `list` the models every command knows, for the rest of the process: `--model NAME`
/// looks names up there, and a command given none takes the first. Refused when `list` is
/// empty, names a model twice, or another list was installed before.
pub fn install(list: &'static [ModelName]) -> Result<()> {
    let refuse = |message: String| stackscan::Error::InvalidOp {
        op: "registry",
        message,
    };
    if list.is_empty() {
        return Err(refuse("no models to install".into()));
    }
    for (i, m) in list.iter().enumerate() {
        if list[..i].iter().any(|n| n.as_str() == m.as_str()) {
            return Err(refuse(format!("two models are named `{m}`")));
        }
    }
    let installed = INSTALLED.get_or_init(|| list);
    let same = installed.len() == list.len() && installed.iter().zip(list).all(|(a, b)| a == b);
    if same {
        Ok(())
    } else {
        Err(refuse(format!(
            "the models {} are installed already",
            names(installed)
        )))
    }
}

/// The first of [`models`]: what a command given no model uses.
pub fn default_model() -> ModelName {
    models().first().copied().unwrap_or(BUILT_IN[0])
}

/// `` `a`, `b` `` for a list of models.
pub(super) fn names(list: &[ModelName]) -> String {
    list.iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
