//! The daemon's error type. Every operation returns [`Error`]; `grpc::status` is the one
//! place that turns it into a `tonic::Status`.

use crate::store::StoreError;

/// What went wrong, in terms a caller can act on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input: names the field and the rule it broke. Nothing was written.
    #[error("{field}: {message}")]
    InvalidArgument { field: &'static str, message: String },
    #[error("{0}")]
    NotFound(String),
    /// The request conflicts with what is stored (e.g. an idempotency key reused with
    /// other content).
    #[error("{0}")]
    Conflict(String),
    /// The request is valid but the thread or home is not in a state that allows it.
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    Unimplemented(String),
    /// Temporarily refused (e.g. a bridge whose inbound access is off); retrying later may work.
    #[error("{0}")]
    Unavailable(String),
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// A broken API limit (see `kiki_proto::limits`) is bad input naming its field.
impl From<kiki_proto::limits::Violation> for Error {
    fn from(v: kiki_proto::limits::Violation) -> Self {
        Error::InvalidArgument { field: v.field, message: v.message }
    }
}

impl Error {
    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Error::InvalidArgument { field, message: message.into() }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
