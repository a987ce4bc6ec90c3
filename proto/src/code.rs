//! Error codes. The same numbers are used in `error` messages, as QUIC
//! stream reset codes, and as connection close codes.

/// A ztp/1 error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Code {
    /// No error (a normal close).
    Ok,
    /// The peer broke the protocol: bad framing, bad CBOR, a missing or
    /// mistyped field, an unknown message type, or a stream it may not open.
    ProtocolViolation,
    /// A message exceeded the receiver's size limit.
    MessageTooLarge,
    /// The request carried no valid token.
    Unauthorized,
    /// No file at that path.
    NotFound,
    /// The file exists but failed validation.
    Unavailable,
    /// A selection pattern matched no object.
    NoMatch,
    /// `if_match` named an ETag the file no longer has.
    PreconditionFailed,
    /// Too many requests in flight on this connection.
    TooManyRequests,
    /// The stream was cancelled by the client.
    Cancelled,
    /// The server could not read the component (for example, the file was
    /// truncated under it).
    ReadFailed,
    /// The server failed; details are in its log.
    Internal,
    /// The server is shutting down.
    ShuttingDown,
    /// The connection limit is reached.
    ServerBusy,
    /// The peer stopped reading: a component stream made no progress for
    /// longer than the sender's stall timeout.
    Stalled,
    /// The component failed its digest on the server; none of its bytes
    /// are sent.
    Corrupt,
}

impl Code {
    pub const ALL: [Code; 16] = [
        Code::Ok,
        Code::ProtocolViolation,
        Code::MessageTooLarge,
        Code::Unauthorized,
        Code::NotFound,
        Code::Unavailable,
        Code::NoMatch,
        Code::PreconditionFailed,
        Code::TooManyRequests,
        Code::Cancelled,
        Code::ReadFailed,
        Code::Internal,
        Code::ShuttingDown,
        Code::ServerBusy,
        Code::Stalled,
        Code::Corrupt,
    ];

    /// The number on the wire.
    pub fn value(self) -> u32 {
        match self {
            Code::Ok => 0x00,
            Code::ProtocolViolation => 0x01,
            Code::MessageTooLarge => 0x02,
            Code::Unauthorized => 0x03,
            Code::NotFound => 0x04,
            Code::Unavailable => 0x05,
            Code::NoMatch => 0x06,
            Code::PreconditionFailed => 0x07,
            Code::TooManyRequests => 0x08,
            Code::Cancelled => 0x09,
            Code::ReadFailed => 0x0a,
            Code::Internal => 0x0b,
            Code::ShuttingDown => 0x0c,
            Code::ServerBusy => 0x0d,
            Code::Stalled => 0x0e,
            Code::Corrupt => 0x0f,
        }
    }

    /// The code for a number; unknown numbers are `None`.
    pub fn from_value(v: u64) -> Option<Code> {
        Code::ALL.into_iter().find(|c| u64::from(c.value()) == v)
    }

    /// The name used in `PROTOCOL.md` and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Code::Ok => "ok",
            Code::ProtocolViolation => "protocol_violation",
            Code::MessageTooLarge => "message_too_large",
            Code::Unauthorized => "unauthorized",
            Code::NotFound => "not_found",
            Code::Unavailable => "unavailable",
            Code::NoMatch => "no_match",
            Code::PreconditionFailed => "precondition_failed",
            Code::TooManyRequests => "too_many_requests",
            Code::Cancelled => "cancelled",
            Code::ReadFailed => "read_failed",
            Code::Internal => "internal",
            Code::ShuttingDown => "shutting_down",
            Code::ServerBusy => "server_busy",
            Code::Stalled => "stalled",
            Code::Corrupt => "corrupt",
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (0x{:02x})", self.name(), self.value())
    }
}
