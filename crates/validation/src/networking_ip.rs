//! networking.k8s.io/v1 IPAddress and ServiceCIDR, after upstream 1.33
//! `pkg/apis/networking/validation` (`ValidateIPAddressName`, `ValidateIPAddress`,
//! `ValidateIPAddressUpdate`, `ValidateServiceCIDR`, `ValidateServiceCIDRUpdate`,
//! `ValidateServiceCIDRStatusUpdate`) and apimachinery's strict `IsValidIP` /
//! `IsValidCIDR` (`pkg/util/validation/ip.go`), which those use.
//!
//! The IP rules are Go's: an address must first parse as `netutils.ParseIPSloppy` (Go
//! 1.16's `net.ParseIP`, leading zeros allowed) reads it, then as `netip.ParseAddr`
//! reads it (no leading zeros, at most four hex digits a field), must not be an
//! IPv4-mapped IPv6 address, and must be written as Go prints it (RFC 5952 for IPv6).
//! CIDRs likewise (`ParseCIDRSloppy`, then `netip.ParsePrefix`, no bits set beyond the
//! prefix length, canonical form).
//!
//! The status subresource of a ServiceCIDR needs nothing here: the registry writes only
//! the status there and keeps the old spec, which `validate_update` then finds
//! unchanged; upstream's `ValidateServiceCIDRStatusUpdate` checks object metadata only.
//!
//! Bad values that upstream prints with Go's `%#v` (a whole parentRef, the cidrs list)
//! are rendered as their JSON, as elsewhere in this crate.

use ferrokube_apimachinery::errors::{FieldError, FieldPath};
use ferrokube_apimachinery::validation::{
    FIELD_IMMUTABLE_ERROR_MSG, is_dns1123_subdomain, validate_path_segment_name,
};
use k8s_openapi::api::networking::v1 as networking;
use serde_json::{Value, json};

use crate::Validate;
use crate::util::*;

const INVALID_IP: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";
const INVALID_CIDR: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";
const ONE_PER_FAMILY: &str =
    "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64";

// --- Go's IP parsing -------------------------------------------------------------

/// `big` of Go's net package: decimal and hex fields stop being read beyond it.
const BIG: u32 = 0xFF_FFFF;

/// An address as `netutils.ParseIPSloppy` reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ip {
    /// The 16-byte form (IPv4 as IPv4-mapped IPv6, as Go's `net.IP` holds it).
    bytes: [u8; 16],
    /// Written in IPv6 syntax (`netip.Addr.Is6`).
    v6: bool,
    /// `netip.ParseAddr` reads it too: no IPv4 field with a leading zero, no IPv6
    /// field of more than four hex digits.
    strict: bool,
}

impl Ip {
    /// `net.IP.To4() != nil`: IPv4, written either way.
    fn is4(&self) -> bool {
        self.bytes[..10].iter().all(|b| *b == 0) && self.bytes[10] == 0xff && self.bytes[11] == 0xff
    }

    /// `netip.Addr.Is4In6`: an IPv4-mapped address written in IPv6 syntax.
    fn is4in6(&self) -> bool {
        self.v6 && self.is4()
    }

    /// `net.IP.String()`: dotted IPv4, else RFC 5952 (the longest run of at least two
    /// zero fields, the first of equals, as `::`; lower-case hex without leading zeros).
    fn go_string(&self) -> String {
        let b = &self.bytes;
        if self.is4() {
            return format!("{}.{}.{}.{}", b[12], b[13], b[14], b[15]);
        }
        let fields: Vec<u16> = (0..8)
            .map(|i| u16::from_be_bytes([b[2 * i], b[2 * i + 1]]))
            .collect();
        let (mut zero_start, mut zero_len) = (usize::MAX, 0);
        let mut i = 0;
        while i < 8 {
            let start = i;
            while i < 8 && fields[i] == 0 {
                i += 1;
            }
            if i - start >= 2 && i - start > zero_len {
                (zero_start, zero_len) = (start, i - start);
            }
            i += 1;
        }
        let hex = |fs: &[u16]| {
            fs.iter()
                .map(|f| format!("{f:x}"))
                .collect::<Vec<_>>()
                .join(":")
        };
        if zero_len == 0 {
            return hex(&fields);
        }
        format!(
            "{}::{}",
            hex(&fields[..zero_start]),
            hex(&fields[zero_start + zero_len..])
        )
    }

    /// The address with the bits beyond the first `bits` cleared (`bits` counts from
    /// the start of the IPv4 part for IPv4).
    fn masked(&self, bits: u32) -> Ip {
        let (offset, mut bits) = if self.v6 { (0, bits) } else { (12, bits) };
        let mut out = *self;
        for byte in out.bytes[offset..].iter_mut() {
            let keep = bits.min(8);
            *byte &= (0xffu16 << (8 - keep)) as u8;
            bits -= keep;
        }
        out
    }
}

/// Go's `dtoi`: the leading decimal digits' value and count; `None` without digits
/// or at `BIG`.
fn dtoi(s: &[u8]) -> Option<(u32, usize)> {
    let mut n = 0u32;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        n = n * 10 + u32::from(s[i] - b'0');
        if n >= BIG {
            return None;
        }
        i += 1;
    }
    (i > 0).then_some((n, i))
}

/// Go's `xtoi`: the leading hex digits' value and count.
fn xtoi(s: &[u8]) -> Option<(u32, usize)> {
    let mut n = 0u32;
    let mut i = 0;
    while i < s.len() {
        let Some(d) = (s[i] as char).to_digit(16) else {
            break;
        };
        n = n * 16 + d;
        if n >= BIG {
            return None;
        }
        i += 1;
    }
    (i > 0).then_some((n, i))
}

/// Go 1.16's `parseIPv4` (leading zeros allowed): the four bytes and whether
/// `netip` would accept the text too.
fn parse_ipv4(mut s: &[u8]) -> Option<([u8; 4], bool)> {
    let mut out = [0u8; 4];
    let mut strict = true;
    for (i, byte) in out.iter_mut().enumerate() {
        if s.is_empty() {
            return None;
        }
        if i > 0 {
            if s[0] != b'.' {
                return None;
            }
            s = &s[1..];
        }
        let (n, c) = dtoi(s)?;
        if n > 0xff {
            return None;
        }
        if c > 1 && s[0] == b'0' {
            strict = false;
        }
        s = &s[c..];
        *byte = n as u8;
    }
    s.is_empty().then_some((out, strict))
}

/// Go 1.16's `parseIPv6` (no zone).
fn parse_ipv6(mut s: &[u8]) -> Option<([u8; 16], bool)> {
    let mut ip = [0u8; 16];
    let mut strict = true;
    let mut ellipsis: Option<usize> = None;
    if s.len() >= 2 && s[0] == b':' && s[1] == b':' {
        ellipsis = Some(0);
        s = &s[2..];
        if s.is_empty() {
            return Some((ip, strict));
        }
    }
    let mut i = 0;
    while i < 16 {
        let (n, c) = xtoi(s)?;
        if n > 0xffff {
            return None;
        }
        if c < s.len() && s[c] == b'.' {
            if ellipsis.is_none() && i != 12 {
                return None;
            }
            if i + 4 > 16 {
                return None;
            }
            let (v4, v4_strict) = parse_ipv4(s)?;
            strict &= v4_strict;
            ip[i..i + 4].copy_from_slice(&v4);
            s = &[];
            i += 4;
            break;
        }
        if c > 4 {
            strict = false;
        }
        ip[i] = (n >> 8) as u8;
        ip[i + 1] = n as u8;
        i += 2;
        s = &s[c..];
        if s.is_empty() {
            break;
        }
        if s[0] != b':' || s.len() == 1 {
            return None;
        }
        s = &s[1..];
        if s[0] == b':' {
            if ellipsis.is_some() {
                return None;
            }
            ellipsis = Some(i);
            s = &s[1..];
            if s.is_empty() {
                break;
            }
        }
    }
    if !s.is_empty() {
        return None;
    }
    if i < 16 {
        let e = ellipsis?;
        let n = 16 - i;
        ip.copy_within(e..i, e + n);
        ip[e..e + n].fill(0);
    } else if ellipsis.is_some() {
        return None;
    }
    Some((ip, strict))
}

fn v4_in_16(v4: [u8; 4]) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[10] = 0xff;
    b[11] = 0xff;
    b[12..].copy_from_slice(&v4);
    b
}

/// `netutils.ParseIPSloppy`.
fn parse_ip_sloppy(s: &str) -> Option<Ip> {
    let b = s.as_bytes();
    match b.iter().find(|c| **c == b'.' || **c == b':')? {
        b'.' => parse_ipv4(b).map(|(v4, strict)| Ip {
            bytes: v4_in_16(v4),
            v6: false,
            strict,
        }),
        _ => parse_ipv6(b).map(|(bytes, strict)| Ip {
            bytes,
            v6: true,
            strict,
        }),
    }
}

/// `netutils.ParseCIDRSloppy`: the address and the prefix length, and whether
/// `netip.ParsePrefix` reads it too (no leading zeros in the length either).
fn parse_cidr_sloppy(s: &str) -> Option<(Ip, u32)> {
    let (addr, mask) = s.split_once('/')?;
    let ip = match parse_ipv4(addr.as_bytes()) {
        Some((v4, strict)) => Ip {
            bytes: v4_in_16(v4),
            v6: false,
            strict,
        },
        None => {
            let (bytes, strict) = parse_ipv6(addr.as_bytes())?;
            Ip {
                bytes,
                v6: true,
                strict,
            }
        }
    };
    let (bits, c) = dtoi(mask.as_bytes())?;
    let max = if ip.v6 { 128 } else { 32 };
    if c != mask.len() || bits > max {
        return None;
    }
    let strict = ip.strict && !(mask.len() > 1 && mask.starts_with('0'));
    Some((Ip { strict, ..ip }, bits))
}

/// `validation.IsValidIP` (strict, 1.33): the messages for `value`.
pub(crate) fn is_valid_ip(value: &str) -> Vec<String> {
    let Some(ip) = parse_ip_sloppy(value) else {
        return vec![INVALID_IP.to_owned()];
    };
    if !ip.strict {
        return vec!["must not have leading 0s".to_owned()];
    }
    if ip.is4in6() {
        return vec!["must not be an IPv4-mapped IPv6 address".to_owned()];
    }
    let canonical = ip.go_string();
    if value != canonical {
        return vec![format!("must be in canonical form (\"{canonical}\")")];
    }
    Vec::new()
}

/// `validation.IsValidCIDR` (strict, 1.33): the messages for `value`.
pub(crate) fn is_valid_cidr(value: &str) -> Vec<String> {
    let Some((ip, bits)) = parse_cidr_sloppy(value) else {
        return vec![INVALID_CIDR.to_owned()];
    };
    if !ip.strict {
        return vec!["must not have leading 0s in IP or prefix length".to_owned()];
    }
    if ip.is4in6() {
        return vec!["must not have an IPv4-mapped IPv6 address".to_owned()];
    }
    let network = ip.masked(bits);
    if network != ip {
        return vec!["must not have bits set beyond the prefix length".to_owned()];
    }
    let canonical = format!("{}/{bits}", network.go_string());
    if value != canonical {
        return vec![format!("must be in canonical form (\"{canonical}\")")];
    }
    Vec::new()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    V4,
    V6,
    Unknown,
}

/// `netutils.IPFamilyOfCIDRString`.
fn family_of_cidr(value: &str) -> Family {
    match parse_cidr_sloppy(value) {
        Some((ip, _)) if ip.is4() => Family::V4,
        Some(_) => Family::V6,
        None => Family::Unknown,
    }
}

// --- IPAddress -------------------------------------------------------------------

/// `ValidateIPAddressName`: the name is an IP address in canonical form (`IsValidIP`).
/// IPAddress names are never generated, so a generateName prefix is held to the
/// same rule.
pub fn validate_ip_address_name(name: &str, _prefix: bool) -> Vec<String> {
    is_valid_ip(name)
}

/// Whether a parentRef is the empty one k8s-openapi's non-optional field holds when
/// the object had none: upstream's pointer tells an absent reference apart, the
/// decoded type cannot, so an all-empty reference counts as absent.
fn parent_ref_absent(r: &networking::ParentReference) -> bool {
    s(&r.group).is_empty()
        && r.resource.is_empty()
        && s(&r.namespace).is_empty()
        && r.name.is_empty()
}

fn parent_ref(ip: &networking::IPAddress) -> Option<&networking::ParentReference> {
    ip.spec
        .as_ref()
        .map(|spec| &spec.parent_ref)
        .filter(|r| !parent_ref_absent(r))
}

/// `validateIPAddressParentReference`.
fn validate_parent_ref(r: Option<&networking::ParentReference>, errs: &mut Errs) {
    let path = p("spec").child("parentRef");
    let Some(r) = r else {
        errs.push(FieldError::required(&path, ""));
        return;
    };
    // The core group of Services is "", so an empty group is allowed.
    let group = s(&r.group);
    if !group.is_empty() {
        msgs_invalid(
            is_dns1123_subdomain(group),
            group,
            &path.child("group"),
            errs,
        );
    }
    for (field, value) in [("resource", r.resource.as_str()), ("name", r.name.as_str())] {
        if value.is_empty() {
            errs.push(FieldError::required(&path.child(field), ""));
        } else {
            path_segment(value, &path.child(field), errs);
        }
    }
    let namespace = s(&r.namespace);
    if !namespace.is_empty() {
        path_segment(namespace, &path.child("namespace"), errs);
    }
}

/// `path.IsValidPathSegmentName` as field errors.
fn path_segment(value: &str, path: &FieldPath, errs: &mut Errs) {
    msgs_invalid(validate_path_segment_name(value, false), value, path, errs);
}

/// A parentRef as Go's internal struct compares: unset and empty strings alike.
fn parent_ref_key(r: Option<&networking::ParentReference>) -> Option<[&str; 4]> {
    r.map(|r| [s(&r.group), &r.resource, s(&r.namespace), &r.name])
}

impl Validate for networking::IPAddress {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_parent_ref(parent_ref(self), &mut errs);
        errs
    }

    /// The strategy's `ValidateUpdate`: `ValidateIPAddress` on the new object (the
    /// name rule included, which the registry's update metadata checks leave out),
    /// then `ValidateIPAddressUpdate`: the parentRef is immutable.
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let name = s(&self.metadata.name);
        if !name.is_empty() {
            msgs_invalid(
                validate_ip_address_name(name, false),
                name,
                &p("metadata").child("name"),
                &mut errs,
            );
        }
        let (new_ref, old_ref) = (parent_ref(self), parent_ref(old));
        validate_parent_ref(new_ref, &mut errs);
        if parent_ref_key(new_ref) != parent_ref_key(old_ref) {
            errs.push(FieldError::invalid(
                &p("spec").child("parentRef"),
                new_ref.map_or(Value::Null, json),
                FIELD_IMMUTABLE_ERROR_MSG,
            ));
        }
        errs
    }
}

// --- ServiceCIDR -----------------------------------------------------------------

fn cidrs(c: &networking::ServiceCIDR) -> &[String] {
    c.spec
        .as_ref()
        .and_then(|spec| spec.cidrs.as_deref())
        .unwrap_or(&[])
}

/// `validateServiceCIDRSpec`: one or two valid CIDRs, two of different families.
fn validate_service_cidr_spec(cidrs: &[String], errs: &mut Errs) {
    let path = p("spec").child("cidrs");
    if cidrs.is_empty() {
        errs.push(FieldError::required(&path, "at least one CIDR required"));
        return;
    }
    if cidrs.len() > 2 {
        errs.push(FieldError::invalid(
            &path,
            json!({"cidrs": cidrs}),
            "may only hold up to 2 values",
        ));
        return;
    }
    for (i, cidr) in cidrs.iter().enumerate() {
        msgs_invalid(is_valid_cidr(cidr), cidr, &path.index(i), errs);
    }
    if let [a, b] = cidrs {
        let family = family_of_cidr(a);
        if family == family_of_cidr(b) && family != Family::Unknown {
            errs.push(FieldError::invalid(&path, json!(cidrs), ONE_PER_FAMILY));
        }
    }
}

impl Validate for networking::ServiceCIDR {
    /// `ValidateServiceCIDR` (object metadata is the registry's).
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_service_cidr_spec(cidrs(self), &mut errs);
        errs
    }

    /// `ValidateServiceCIDRUpdate`: the CIDRs are immutable, except that a single-stack
    /// ServiceCIDR may gain a second CIDR of the other family (upstream 1.33,
    /// kubernetes#131261), its first one unchanged.
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let path = p("spec").child("cidrs");
        let (new_cidrs, old_cidrs) = (cidrs(self), cidrs(old));
        match (old_cidrs.len(), new_cidrs.len()) {
            (o, n) if o == n => {
                for (i, (n, o)) in new_cidrs.iter().zip(old_cidrs).enumerate() {
                    if n != o {
                        errs.push(FieldError::invalid(
                            &path.index(i),
                            n.as_str(),
                            FIELD_IMMUTABLE_ERROR_MSG,
                        ));
                    }
                }
            }
            (1, 2) => {
                if new_cidrs[0] != old_cidrs[0] {
                    errs.push(FieldError::invalid(
                        &path.index(0),
                        new_cidrs[0].as_str(),
                        FIELD_IMMUTABLE_ERROR_MSG,
                    ));
                }
                validate_service_cidr_spec(new_cidrs, &mut errs);
            }
            _ => {
                let value = self
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.cidrs.as_ref())
                    .map_or(Value::Null, json);
                errs.push(FieldError::invalid(&path, value, FIELD_IMMUTABLE_ERROR_MSG));
            }
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_parsing_matches_net_and_netip() {
        let ip = |s: &str| parse_ip_sloppy(s).map(|ip| (ip.go_string(), ip.strict));
        assert_eq!(ip("10.96.0.10"), Some(("10.96.0.10".into(), true)));
        assert_eq!(ip("010.96.0.1"), Some(("10.96.0.1".into(), false)));
        assert_eq!(ip("2001:DB8::0"), Some(("2001:db8::".into(), true)));
        assert_eq!(ip("00002001:db8::"), Some(("2001:db8::".into(), false)));
        assert_eq!(ip("1:0:0:1:0:0:0:1"), Some(("1:0:0:1::1".into(), true)));
        assert_eq!(ip("1:0:0:1:0:0:1:1"), Some(("1::1:0:0:1:1".into(), true)));
        assert_eq!(
            ip("1:0:2:3:4:5:6:7"),
            Some(("1:0:2:3:4:5:6:7".into(), true))
        );
        assert_eq!(ip("::"), Some(("::".into(), true)));
        assert_eq!(ip("::1.2.3.4"), Some(("::102:304".into(), true)));
        assert_eq!(ip("::ffff:1.2.3.4"), Some(("1.2.3.4".into(), true)));
        assert_eq!(
            ip("1:2:3:4:5:6:7::"),
            Some(("1:2:3:4:5:6:7:0".into(), true))
        );
        for bad in [
            "",
            "1.2.3",
            "1.2.3.256",
            "1.2.3.4.",
            "::1::",
            "1:2:3:4:5:6:7:8:9",
            "1:2:3:4:5:6:7:8::",
            "fe80::1%eth0",
            "1:2:3:4:5:6:1.2.3.4:5",
            "1.2.3.4/32",
            "10000::",
            ":1::",
            "a",
        ] {
            assert_eq!(parse_ip_sloppy(bad), None, "{bad}");
        }
        let cidr =
            |s: &str| parse_cidr_sloppy(s).map(|(ip, bits)| (ip.go_string(), bits, ip.strict));
        assert_eq!(cidr("10.0.0.0/8"), Some(("10.0.0.0".into(), 8, true)));
        assert_eq!(cidr("10.0.0.0/08"), Some(("10.0.0.0".into(), 8, false)));
        assert_eq!(cidr("fd00::/128"), Some(("fd00::".into(), 128, true)));
        for bad in [
            "10.0.0.0/33",
            "fd00::/129",
            "10.0.0.0",
            "10.0.0.0/",
            "10.0.0.0/8/8",
            "10.0.0.0/-1",
        ] {
            assert_eq!(parse_cidr_sloppy(bad), None, "{bad}");
        }
    }

    #[test]
    fn masks() {
        let net = |s: &str| {
            let (ip, bits) = parse_cidr_sloppy(s).unwrap();
            ip.masked(bits).go_string()
        };
        assert_eq!(net("10.1.2.3/8"), "10.0.0.0");
        assert_eq!(net("10.1.2.3/0"), "0.0.0.0");
        assert_eq!(net("10.1.2.255/31"), "10.1.2.254");
        assert_eq!(net("10.1.2.3/32"), "10.1.2.3");
        assert_eq!(net("fd00:1:2::ffff/113"), "fd00:1:2::8000");
        assert_eq!(net("fd00::1/128"), "fd00::1");
    }
}
