//! The one error type of the runtime.
//!
//! Every failure a user can cause (a bad program, a wrong argument, a missing plugin, a corrupt
//! download) is a variant here that carries what went wrong and where; nothing in the public
//! API panics on user input.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

use stackscan::{DType, TensorType};

/// Result alias of the runtime.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A runtime error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A PJRT call returned an error.
    #[error("`{call}` failed ({code}): {message}")]
    Pjrt {
        /// The C API function, e.g. `PJRT_Client_Compile`.
        call: &'static str,
        /// The status code the plugin reported.
        code: ErrorCode,
        /// The plugin's message.
        message: String,
    },
    /// The plugin's function table does not reach, or leaves empty, the slot of this function.
    #[error(
        "`{call}` is not available in this plugin (PJRT API {major}.{minor}, function table of {table_size} bytes)"
    )]
    Unavailable {
        /// The missing function.
        call: &'static str,
        /// The plugin's API major version.
        major: i32,
        /// The plugin's API minor version.
        minor: i32,
        /// `PJRT_Api.struct_size` as the plugin reports it.
        table_size: usize,
    },
    /// No file at the plugin path.
    #[error("no PJRT plugin at `{}`", path.display())]
    PluginNotFound {
        /// The path that was tried.
        path: PathBuf,
    },
    /// The file exists but is not a loadable PJRT plugin.
    #[error("`{}` is not a PJRT plugin: {reason}", path.display())]
    NotAPlugin {
        /// The file.
        path: PathBuf,
        /// Why it was rejected (load error, missing `GetPjrtApi`, null table).
        reason: String,
    },
    /// The plugin speaks an API major version this binding does not.
    #[error(
        "PJRT plugin `{}` implements API {major}.{minor}; stackscan speaks major version {expected_major}",
        path.display()
    )]
    IncompatibleApi {
        /// The plugin.
        path: PathBuf,
        /// Its major version.
        major: i32,
        /// Its minor version.
        minor: i32,
        /// The major version this binding was written against.
        expected_major: i32,
    },
    /// More devices were asked for than the client has.
    #[error("{requested} devices requested but the client has {available}")]
    DeviceCount {
        /// Devices asked for.
        requested: usize,
        /// Devices the client exposes.
        available: usize,
    },
    /// A client option has a value the plugin cannot take.
    #[error("client option `{name}`: {reason}")]
    InvalidOption {
        /// The option.
        name: String,
        /// What is wrong with its value.
        reason: String,
    },
    /// A mesh was described inconsistently.
    #[error("invalid mesh: {0}")]
    Mesh(String),
    /// `execute` got a number of argument lists different from the executable's devices.
    #[error("the executable runs on {expected} devices but {actual} argument lists were given")]
    DeviceLists {
        /// Devices of the executable.
        expected: usize,
        /// Argument lists given.
        actual: usize,
    },
    /// An argument list has the wrong length.
    #[error("device {device}: the program takes {expected} arguments but {actual} were given")]
    ArgumentCount {
        /// Index of the argument list.
        device: usize,
        /// Parameters of the program.
        expected: usize,
        /// Buffers given.
        actual: usize,
    },
    /// An argument's shape or element type does not match the program's parameter.
    #[error("device {device}, argument {index}: the program expects {expected} but got {actual}")]
    ArgumentType {
        /// Index of the argument list.
        device: usize,
        /// Index of the argument.
        index: usize,
        /// What the program declares (per device).
        expected: TensorType,
        /// What the buffer holds.
        actual: TensorType,
    },
    /// A buffer handed to `execute` belongs to a different client.
    #[error("device {device}, argument {index}: the buffer belongs to another client")]
    ForeignBuffer {
        /// Index of the argument list.
        device: usize,
        /// Index of the argument.
        index: usize,
    },
    /// A buffer was used after a program it was passed to took it over (input/output
    /// aliasing: the program wrote one of its results into the buffer's memory).
    #[error("{}", donated_message(ty, *argument))]
    Donated {
        /// The buffer's type.
        ty: TensorType,
        /// `(device, argument)` when the buffer was handed to `execute` again; `None` when it
        /// was read back.
        argument: Option<(usize, usize)>,
    },
    /// Host data does not fill the requested shape.
    #[error("host data has {actual} elements but shape {dims:?} needs {expected}")]
    HostDataLength {
        /// The requested dimensions.
        dims: Vec<i64>,
        /// Elements the shape needs.
        expected: usize,
        /// Elements given.
        actual: usize,
    },
    /// A dimension is negative or the element count overflows.
    #[error("invalid dimensions {0:?}")]
    InvalidDims(Vec<i64>),
    /// A training input's element type is not the one the model declares for it.
    #[error(
        "device {device}, input `{input}`: the model takes {expected} values but {actual} were given"
    )]
    InputType {
        /// The input, as the model names it.
        input: String,
        /// The device whose share it is.
        device: usize,
        /// The declared element type.
        expected: DType,
        /// The element type given.
        actual: DType,
    },
    /// A training input does not fill its per-device shape.
    #[error(
        "device {device}, input `{input}`: {actual} values given for the per-device shape {dims:?} of {expected}"
    )]
    InputLength {
        /// The input, as the model names it.
        input: String,
        /// The device whose share it is.
        device: usize,
        /// The per-device shape.
        dims: Vec<i64>,
        /// Elements the shape holds.
        expected: usize,
        /// Elements given.
        actual: usize,
    },
    /// A training input holds a value outside the range the model declares for it (a token id
    /// or label outside the vocabulary).
    #[error(
        "device {device}, input `{input}` at {position:?}: {value} is outside the valid values {expected:?}"
    )]
    InputOutOfRange {
        /// The input, as the model names it.
        input: String,
        /// The device whose share it is.
        device: usize,
        /// The element's index in the per-device array (`[row, column]` for tokens).
        position: Vec<i64>,
        /// The value found there.
        value: i64,
        /// The declared range.
        expected: Range<i64>,
    },
    /// A step's loss or gradients were not all finite; the update was not applied.
    #[error(
        "step {step}: the loss ({loss}) or a gradient is not finite; the update was skipped, weights and optimizer state are unchanged"
    )]
    NonFinite {
        /// The 1-based optimizer step that was attempted (it will be attempted again).
        step: usize,
        /// The global loss of the step, possibly NaN or infinite.
        loss: f32,
    },
    /// The trainer was given a model whose weights it cannot keep.
    #[error("parameter `{param}` is {dtype}; the trainer keeps f32 weights")]
    WeightType {
        /// The parameter.
        param: String,
        /// Its element type.
        dtype: DType,
    },
    /// A buffer was read back as a type it does not hold.
    #[error("the buffer holds {actual} elements, not {expected}")]
    ElementType {
        /// The type asked for.
        expected: DType,
        /// The type the buffer holds.
        actual: DType,
    },
    /// The plugin reported a buffer type stackscan has no mapping for.
    #[error("PJRT buffer type {0} is not supported by stackscan")]
    UnsupportedBufferType(i32),
    /// The optimized program a plugin returned could not be read.
    #[error("cannot read the optimized program the plugin returned (format `{format}`): {reason}")]
    OptimizedProgram {
        /// The format the plugin named.
        format: String,
        /// What could not be read.
        reason: String,
    },
    /// The program text could not be understood.
    #[error("invalid program: {0}")]
    Program(String),
    /// The per-device type of a parameter of a foreign program's `main` could not be read with
    /// certainty, so its arguments could not be checked.
    #[error(
        "cannot read the per-device parameter types of `main` from the program text: {reason}; \
         compile stackscan programs with `Client::compile_program`, which takes them from the \
         `Program`"
    )]
    Signature {
        /// What could not be read, and where.
        reason: String,
    },
    /// A program is written for a different number of devices than its mesh has.
    #[error("the program runs on {program} devices but the mesh has {mesh}")]
    MeshSize {
        /// Devices the program's mesh axis spans (1 for a single-device program).
        program: usize,
        /// Devices of the mesh it was compiled for.
        mesh: usize,
    },
    /// Building or emitting a program failed.
    #[error(transparent)]
    Graph(#[from] stackscan::Error),
    /// A file-system operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A checkpoint file ends before the header or a tensor's data does.
    #[error("checkpoint `{}` is truncated: {} needs {needed} bytes, the file has {actual}", path.display(), tensor.as_deref().map_or("the header".to_owned(), |t| format!("tensor `{t}`")))]
    CheckpointTruncated {
        /// The file.
        path: PathBuf,
        /// The tensor whose data is cut off, or `None` when the header is.
        tensor: Option<String>,
        /// Bytes the file would need.
        needed: usize,
        /// Bytes it has.
        actual: usize,
    },
    /// A checkpoint's header is not valid safetensors, or its metadata lacks a field.
    #[error("checkpoint `{}` is corrupt: {reason}", path.display())]
    CheckpointCorrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A checkpoint tensor's data does not have the SHA-256 the file records for it: the file
    /// was damaged after it was written.
    #[error(
        "checkpoint `{}` is corrupt: tensor `{tensor}` has sha256 {}, the file records {}",
        path.display(),
        short_digest(actual),
        short_digest(expected)
    )]
    CheckpointChecksum {
        /// The file.
        path: PathBuf,
        /// The tensor whose data does not match.
        tensor: String,
        /// The digest the file records (lower-case hex).
        expected: String,
        /// The digest of the data as read.
        actual: String,
    },
    /// A checkpoint lacks a tensor the model has.
    #[error("checkpoint `{}` has no tensor `{tensor}`", path.display())]
    CheckpointMissing {
        /// The file.
        path: PathBuf,
        /// The tensor the model needs.
        tensor: String,
    },
    /// A checkpoint tensor's shape differs from the model's.
    #[error("checkpoint tensor `{tensor}` has shape {actual:?}, the model's is {expected:?}")]
    CheckpointShape {
        /// The tensor.
        tensor: String,
        /// The model's shape.
        expected: Vec<i64>,
        /// The file's shape.
        actual: Vec<i64>,
    },
    /// A checkpoint tensor's dtype is none the f32 masters load from.
    #[error("checkpoint tensor `{tensor}` is {actual}; the f32 weights load from {expected}")]
    CheckpointDType {
        /// The tensor.
        tensor: String,
        /// The dtypes it may have (safetensors spelling).
        expected: String,
        /// The file's dtype.
        actual: String,
    },
    /// A Hugging Face model directory cannot be imported (or a checkpoint exported to one):
    /// a tensor missing, unknown, of the wrong shape or dtype, or a file that cannot be read.
    #[error("Hugging Face weights `{}`: {}{reason}", dir.display(), tensor.as_deref().map_or(String::new(), |t| format!("tensor `{t}` ")))]
    HfWeights {
        /// The model directory.
        dir: PathBuf,
        /// The tensor at fault (its name in the files), if one is.
        tensor: Option<String>,
        /// What is wrong.
        reason: String,
    },
    /// The environment was to be set (the plugin's log level) after other threads had
    /// started, when it can no longer be done soundly.
    #[error(
        "cannot set `{variable}`: other threads have started; set it before the process starts, or first thing in `main`"
    )]
    EnvironmentAfterThreads {
        /// The variable.
        variable: String,
    },
    /// A token file for training cannot be used as one.
    #[error("token file `{}`: {reason}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// What is wrong (its size, too few tokens for one sequence).
        reason: String,
    },
    /// A generation request the model cannot serve (an empty prompt, a token outside the
    /// vocabulary, weights of the wrong size); says which.
    #[error("generate: {0}")]
    Generation(String),
    /// A token file holds an id outside the model's vocabulary.
    #[error("token file `{}`: token {position} is {value}, outside the vocabulary of {vocab}", path.display())]
    TokenOutOfRange {
        /// The file.
        path: PathBuf,
        /// The token's index in the file (in tokens, not bytes).
        position: u64,
        /// Its value.
        value: u32,
        /// The model's vocabulary size.
        vocab: usize,
    },
    /// A downloaded wheel does not have the pinned hash.
    #[error("sha256 of `{}` is {actual}, expected {expected}; delete the file to fetch it again", path.display())]
    HashMismatch {
        /// The wheel.
        path: PathBuf,
        /// The pinned hash.
        expected: String,
        /// The hash of the file.
        actual: String,
    },
    /// A wheel could not be unpacked.
    #[error("cannot unpack `{}`: {message}", path.display())]
    Wheel {
        /// The wheel.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// A plugin package could not be fetched.
    #[error(
        "cannot fetch the `{package}` plugin package: {reason}\nto install it by hand, run:\n  {command}"
    )]
    Fetch {
        /// The package, with its pinned version.
        package: String,
        /// Why the fetch failed.
        reason: String,
        /// The one command that does it by hand.
        command: String,
    },
    /// A plugin name that is neither a known plugin nor a path.
    #[error(
        "unknown plugin `{0}`; expected one of `cpu`, `cpu-0.115`, `tpu`, `cuda`, or a path to a .so"
    )]
    UnknownPlugin(String),
    /// The plugin drives an accelerator this machine does not have; it was not initialised.
    #[error(
        "`{}` is the {kind} plugin, but this machine has no {kind} device ({looked_for}); \
         use the `cpu` plugin here, or set {override_env}=1 if the devices are there under other names",
        path.display()
    )]
    NoAccelerator {
        /// The plugin file.
        path: PathBuf,
        /// The accelerator it drives (`TPU`).
        kind: &'static str,
        /// What was looked for.
        looked_for: String,
        /// The environment variable that skips the check.
        override_env: &'static str,
    },
    /// The plugin does not know the topology name.
    #[error(
        "unknown topology `{name}`: {reason}; known forms are {}",
        crate::topology::KNOWN_FORMS.join(", ")
    )]
    UnknownTopology {
        /// The name given.
        name: String,
        /// What the plugin said.
        reason: String,
    },
    /// A plugin that asks the cloud metadata server for its topology was about to be loaded
    /// for a compile-only use without the environment that stops it asking.
    #[error(
        "`{}` would ask the cloud metadata server for a TPU topology (minutes of retries off          this machine); call `stackscan_runtime::topology::prepare_environment()` first thing          in `main`, or export {variable}=1",
        path.display()
    )]
    DevicelessEnvironment {
        /// The plugin file.
        path: PathBuf,
        /// The variable that is missing.
        variable: &'static str,
    },
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// `PJRT_Error_Code`: the status codes of XLA (absl's canonical codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The operation was cancelled.
    Cancelled,
    /// Unknown error.
    Unknown,
    /// The caller passed something invalid (bad program, bad shape).
    InvalidArgument,
    /// A deadline expired.
    DeadlineExceeded,
    /// Something was not found.
    NotFound,
    /// Something already exists.
    AlreadyExists,
    /// Permission denied.
    PermissionDenied,
    /// Out of memory or another resource.
    ResourceExhausted,
    /// The system is not in a state that allows the operation.
    FailedPrecondition,
    /// Aborted.
    Aborted,
    /// Out of range.
    OutOfRange,
    /// Not implemented by this plugin.
    Unimplemented,
    /// Internal error of the plugin.
    Internal,
    /// Unavailable.
    Unavailable,
    /// Data loss.
    DataLoss,
    /// Unauthenticated.
    Unauthenticated,
    /// A code this binding does not know.
    Other(i32),
}

impl ErrorCode {
    pub(crate) fn from_raw(code: i32) -> Self {
        use ErrorCode::*;
        match code {
            1 => Cancelled,
            2 => Unknown,
            3 => InvalidArgument,
            4 => DeadlineExceeded,
            5 => NotFound,
            6 => AlreadyExists,
            7 => PermissionDenied,
            8 => ResourceExhausted,
            9 => FailedPrecondition,
            10 => Aborted,
            11 => OutOfRange,
            12 => Unimplemented,
            13 => Internal,
            14 => Unavailable,
            15 => DataLoss,
            16 => Unauthenticated,
            other => Other(other),
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorCode::Other(c) => write!(f, "code {c}"),
            named => write!(f, "{named:?}"),
        }
    }
}

fn donated_message(ty: &TensorType, argument: Option<(usize, usize)>) -> String {
    let at = argument.map_or(String::new(), |(device, index)| {
        format!("device {device}, argument {index}: ")
    });
    format!(
        "{at}the {ty} buffer was donated to a program that has run and now holds one of its \
         results; use that result instead"
    )
}

/// The first characters of a digest, enough to tell two apart in a one-line message.
fn short_digest(digest: &str) -> String {
    let head: String = digest.chars().take(12).collect();
    if head.len() < digest.len() {
        format!("{head}…")
    } else {
        head
    }
}
