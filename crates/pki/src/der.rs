//! Minimal DER surgery for one thing rcgen 0.14 cannot express: a subject with
//! several attributes of the same type (one O per group, as Kubernetes client
//! certificates need). rcgen's `DistinguishedName` keeps one value per type, so the
//! certificate is issued by rcgen and then its subject is replaced and the TBS
//! re-signed with the same CA key and algorithm.

use rcgen::SigningKey as _;

use crate::{PkiError, Result};

const TAG_SEQUENCE: u8 = 0x30;
const TAG_SET: u8 = 0x31;
const TAG_OID: u8 = 0x06;
const TAG_UTF8STRING: u8 = 0x0c;
const TAG_BIT_STRING: u8 = 0x03;
const TAG_VERSION: u8 = 0xa0;

const OID_COMMON_NAME: [u8; 3] = [0x55, 0x04, 0x03];
const OID_ORGANIZATION: [u8; 3] = [0x55, 0x04, 0x0a];

fn bad(what: &str) -> PkiError {
    PkiError::Certificate(format!("DER: {what}"))
}

/// One TLV: (tag, whole encoding, content, rest of input).
type Tlv<'a> = (u8, &'a [u8], &'a [u8], &'a [u8]);

fn split_tlv(b: &[u8]) -> Result<Tlv<'_>> {
    let tag = *b.first().ok_or_else(|| bad("truncated tag"))?;
    let first = *b.get(1).ok_or_else(|| bad("truncated length"))?;
    let (header, len) = if first < 0x80 {
        (2, usize::from(first))
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return Err(bad("unsupported length"));
        }
        let bytes = b.get(2..2 + n).ok_or_else(|| bad("truncated length"))?;
        let len = bytes
            .iter()
            .fold(0usize, |acc, &x| (acc << 8) | usize::from(x));
        (2 + n, len)
    };
    let end = header
        .checked_add(len)
        .filter(|&e| e <= b.len())
        .ok_or_else(|| bad("length past end"))?;
    Ok((tag, &b[..end], &b[header..end], &b[end..]))
}

fn encode_len(len: usize, out: &mut Vec<u8>) {
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&x| x == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
}

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len() + 6);
    out.push(tag);
    encode_len(content.len(), &mut out);
    out.extend_from_slice(content);
    out
}

fn attribute(oid: &[u8], value: &str) -> Vec<u8> {
    let mut seq = tlv(TAG_OID, oid);
    seq.extend(tlv(TAG_UTF8STRING, value.as_bytes()));
    tlv(TAG_SET, &tlv(TAG_SEQUENCE, &seq))
}

/// `SEQUENCE { SET { O=org } ... SET { CN=cn } }`, UTF8String values.
pub(crate) fn encode_subject(common_name: &str, organizations: &[String]) -> Vec<u8> {
    let mut rdns = Vec::new();
    for o in organizations {
        rdns.extend(attribute(&OID_ORGANIZATION, o));
    }
    rdns.extend(attribute(&OID_COMMON_NAME, common_name));
    tlv(TAG_SEQUENCE, &rdns)
}

/// Replaces the subject of `cert_der` by `subject_der` and re-signs it with `key`
/// (which must be the issuer's key, using the algorithm the certificate names).
pub(crate) fn replace_subject_and_resign(
    cert_der: &[u8],
    subject_der: &[u8],
    key: &rcgen::KeyPair,
) -> Result<Vec<u8>> {
    let (tag, _, cert_content, rest) = split_tlv(cert_der)?;
    if tag != TAG_SEQUENCE || !rest.is_empty() {
        return Err(bad("certificate is not one SEQUENCE"));
    }
    let (tag, _, tbs_content, after_tbs) = split_tlv(cert_content)?;
    if tag != TAG_SEQUENCE {
        return Err(bad("TBSCertificate is not a SEQUENCE"));
    }
    let (_, sig_alg, _, _) = split_tlv(after_tbs)?;

    // TBSCertificate: [0] version, serial, signature, issuer, validity, subject, ...
    let mut new_tbs_content = Vec::with_capacity(tbs_content.len() + subject_der.len());
    let mut remaining = tbs_content;
    let mut index = 0;
    while !remaining.is_empty() {
        let (tag, whole, _, rest) = split_tlv(remaining)?;
        if index == 0 && tag != TAG_VERSION {
            return Err(bad("expected an explicit version"));
        }
        if index == 5 {
            new_tbs_content.extend_from_slice(subject_der);
        } else {
            new_tbs_content.extend_from_slice(whole);
        }
        remaining = rest;
        index += 1;
    }
    if index < 7 {
        return Err(bad("TBSCertificate too short"));
    }
    let tbs = tlv(TAG_SEQUENCE, &new_tbs_content);
    let signature = key.sign(&tbs)?;
    let mut bits = Vec::with_capacity(signature.len() + 1);
    bits.push(0); // no unused bits
    bits.extend_from_slice(&signature);

    let mut content = tbs;
    content.extend_from_slice(sig_alg);
    content.extend(tlv(TAG_BIT_STRING, &bits));
    Ok(tlv(TAG_SEQUENCE, &content))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_round_trip() {
        for len in [0usize, 1, 127, 128, 255, 256, 65_535, 65_536] {
            let content = vec![0u8; len];
            let enc = tlv(0x04, &content);
            let (tag, whole, got, rest) = split_tlv(&enc).unwrap();
            assert_eq!(
                (tag, whole.len(), got.len(), rest.len()),
                (0x04, enc.len(), len, 0)
            );
        }
        assert!(split_tlv(&[]).is_err());
        assert!(split_tlv(&[0x30]).is_err());
        assert!(split_tlv(&[0x30, 0x05, 0x00]).is_err());
        assert!(split_tlv(&[0x30, 0x80]).is_err());
        assert!(split_tlv(&[0x30, 0x85, 1, 1, 1, 1, 1]).is_err());
    }

    #[test]
    fn surgery_rejects_garbage() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let subject = encode_subject("x", &[]);
        assert!(replace_subject_and_resign(&[], &subject, &key).is_err());
        assert!(replace_subject_and_resign(&tlv(0x30, &[]), &subject, &key).is_err());
        let fake_tbs = tlv(0x30, &tlv(0x02, &[1]));
        let mut cert = fake_tbs.clone();
        cert.extend(tlv(0x30, &[]));
        assert!(replace_subject_and_resign(&tlv(0x30, &cert), &subject, &key).is_err());
    }
}
