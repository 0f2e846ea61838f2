//! Just enough DER to find a certificate's SubjectPublicKeyInfo: the home id is its hash,
//! and peers' certificates are otherwise opaque to us.

/// One TLV: (tag, header length, content length).
fn header(bytes: &[u8]) -> Option<(u8, usize, usize)> {
    let tag = *bytes.first()?;
    let first = *bytes.get(1)?;
    if first < 0x80 {
        return Some((tag, 2, usize::from(first)));
    }
    let count = usize::from(first & 0x7f);
    if count == 0 || count > 4 {
        return None;
    }
    let mut len = 0usize;
    for i in 0..count {
        len = (len << 8) | usize::from(*bytes.get(2 + i)?);
    }
    Some((tag, 2 + count, len))
}

/// One element at the start of a byte string.
struct Tlv<'a> {
    tag: u8,
    /// The element with its header.
    whole: &'a [u8],
    content: &'a [u8],
    /// What follows the element.
    rest: &'a [u8],
}

fn split(bytes: &[u8]) -> Option<Tlv<'_>> {
    let (tag, head, len) = header(bytes)?;
    let end = head.checked_add(len)?;
    let whole = bytes.get(..end)?;
    Some(Tlv { tag, whole, content: &whole[head..], rest: &bytes[end..] })
}

const SEQUENCE: u8 = 0x30;
/// `[0] EXPLICIT` — the optional version field of a TBSCertificate.
const VERSION: u8 = 0xa0;

/// The DER of `Certificate.tbsCertificate.subjectPublicKeyInfo` (RFC 5280 §4.1).
pub fn subject_public_key_info(certificate: &[u8]) -> Option<&[u8]> {
    let cert = split(certificate).filter(|t| t.tag == SEQUENCE)?;
    let tbs = split(cert.content).filter(|t| t.tag == SEQUENCE)?;
    let mut rest = tbs.content;
    if rest.first() == Some(&VERSION) {
        rest = split(rest)?.rest;
    }
    // serialNumber, signature, issuer, validity, subject, then subjectPublicKeyInfo.
    for _ in 0..5 {
        rest = split(rest)?.rest;
    }
    split(rest).filter(|t| t.tag == SEQUENCE).map(|t| t.whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_key_rcgen_put_in_the_certificate() {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["kiki".into()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let spki = subject_public_key_info(cert.der()).expect("spki");
        assert_eq!(spki, rcgen::PublicKeyData::subject_public_key_info(&key).as_slice());
    }

    #[test]
    fn refuses_garbage() {
        assert!(subject_public_key_info(b"").is_none());
        assert!(subject_public_key_info(&[0x30, 0x82, 0xff]).is_none());
        assert!(subject_public_key_info(&[0x02, 0x01, 0x00]).is_none());
    }
}
