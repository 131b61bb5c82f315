//! Which derive reads a struct: the four share one parse → check → expand and differ in
//! their struct attribute and the field kinds they accept.

/// Which derive is reading the struct: a sub-layer (a kind of a stack), a module (a part of
/// one), a whole model or its inputs; the first three hold parameters and sub-modules, only a
/// sub-layer has a carry and a kind name, only a model a stack field.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Derive {
    SubLayer,
    Module,
    /// A whole model: outer parameters and modules, and one `#[stack]` field.
    Model,
    /// A model's inputs: `#[input(...)]` fields only.
    Inputs,
}

impl Derive {
    /// The derive's name in messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Derive::SubLayer => "SubLayer",
            Derive::Module => "Module",
            Derive::Model => "Model",
            Derive::Inputs => "Inputs",
        }
    }

    /// The struct-level attribute it reads.
    pub(crate) fn attr(self) -> &'static str {
        match self {
            Derive::SubLayer => "sublayer",
            Derive::Module => "module",
            Derive::Model => "model",
            Derive::Inputs => "inputs",
        }
    }

    /// What the struct is called in messages.
    pub(crate) fn what(self) -> &'static str {
        match self {
            Derive::SubLayer => "sub-layer",
            Derive::Module => "module",
            Derive::Model => "model",
            Derive::Inputs => "inputs struct",
        }
    }
}
