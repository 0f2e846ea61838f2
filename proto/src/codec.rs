//! The codec of the generated `kiki.v1` clients and servers: tonic-prost's, except that a
//! message that does not decode is `INVALID_ARGUMENT`.
//!
//! tonic-prost answers a prost decode error with `INTERNAL`, which tells a caller that sent
//! a malformed request the daemon failed, and is counted as a server fault. The bytes came
//! from the other side, so the fault is theirs: a server refuses the request, a client
//! reports the response it cannot read, both naming the message and what is wrong with it.

use std::marker::PhantomData;

use prost::{Message, Name};
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

/// Encodes `T` as tonic-prost does and decodes `U`, refusing bytes that are not a `U`.
#[derive(Debug, Clone)]
pub struct KikiCodec<T, U> {
    _messages: PhantomData<(T, U)>,
}

impl<T, U> Default for KikiCodec<T, U> {
    fn default() -> Self {
        Self { _messages: PhantomData }
    }
}

impl<T, U> Codec for KikiCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Name + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = KikiDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        KikiDecoder { _message: PhantomData }
    }
}

/// Decodes one `U`; bytes that are not one are `INVALID_ARGUMENT`.
#[derive(Debug, Clone)]
pub struct KikiDecoder<U> {
    _message: PhantomData<U>,
}

impl<U: Message + Name + Default> Decoder for KikiDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf).map(Some).map_err(|e| not_a_valid::<U>(&e))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

/// `INVALID_ARGUMENT`: the bytes are not a `U`, and why.
pub fn not_a_valid<U: Name>(error: &prost::DecodeError) -> Status {
    let error = error.to_string();
    // prost's words repeat what the message already says.
    let why = error.strip_prefix("failed to decode Protobuf message: ").unwrap_or(&error);
    Status::invalid_argument(format!("not a valid {} message: {why}", U::full_name()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ThreadCreateRequest, ThreadCreateResponse};

    #[test]
    fn a_message_that_does_not_decode_is_an_invalid_argument_naming_it() {
        let error = ThreadCreateRequest::decode(&[0xff_u8; 11][..]).expect_err("not a message");
        let status = not_a_valid::<ThreadCreateRequest>(&error);
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), "not a valid kiki.v1.ThreadCreateRequest message: invalid varint");
        let status = not_a_valid::<ThreadCreateResponse>(&error);
        assert!(status.message().starts_with("not a valid kiki.v1.ThreadCreateResponse message"));
    }
}
