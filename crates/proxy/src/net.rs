//! Address families and CIDRs: the little IP arithmetic the rules need. No IO.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// The IP family one proxier (and one nftables table) serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    /// The nftables family and address-match keyword (`ip` / `ip6`).
    pub fn nft(self) -> &'static str {
        match self {
            IpFamily::V4 => "ip",
            IpFamily::V6 => "ip6",
        }
    }

    /// The nftables address type of sets and map keys.
    pub fn addr_type(self) -> &'static str {
        match self {
            IpFamily::V4 => "ipv4_addr",
            IpFamily::V6 => "ipv6_addr",
        }
    }

    /// The loopback range in nftables syntax.
    pub fn loopback(self) -> &'static str {
        match self {
            IpFamily::V4 => "127.0.0.0/8",
            IpFamily::V6 => "::1",
        }
    }

    pub fn of(addr: &IpAddr) -> IpFamily {
        match addr {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }

    /// The Kubernetes spelling (`IPv4` / `IPv6`), as in EndpointSlice `addressType`.
    pub fn k8s(self) -> &'static str {
        match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        }
    }
}

/// An address range `addr/prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    pub fn family(&self) -> IpFamily {
        IpFamily::of(&self.addr)
    }

    /// Whether `ip` lies in this range.
    pub fn contains(&self, ip: &IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(*ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(*ip) & mask
            }
            _ => false,
        }
    }

    /// `0.0.0.0/0` or `::/0`.
    pub fn is_match_all(&self) -> bool {
        self.prefix == 0
    }

    /// The range with the host bits cleared, as Go's `net.ParseCIDR` returns it
    /// (`10.1.2.3/8` -> `10.0.0.0/8`).
    pub fn network(&self) -> Cidr {
        let addr = match self.addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        };
        Cidr {
            addr,
            prefix: self.prefix,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = s
            .trim()
            .split_once('/')
            .ok_or_else(|| format!("invalid CIDR {s:?}: no prefix length"))?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|e| format!("invalid CIDR {s:?}: {e}"))?;
        let prefix: u8 = prefix
            .parse()
            .map_err(|e| format!("invalid CIDR {s:?}: {e}"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(format!("invalid CIDR {s:?}: prefix length above {max}"));
        }
        Ok(Cidr { addr, prefix })
    }
}

/// Parses a comma-separated CIDR list (`--cluster-cidr`, `--nodeport-addresses`).
pub fn parse_cidrs(s: &str) -> Result<Vec<Cidr>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::parse)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_contains_and_parse() {
        let c: Cidr = "10.244.0.0/16".parse().unwrap();
        assert!(c.contains(&"10.244.3.4".parse().unwrap()));
        assert!(!c.contains(&"10.245.0.1".parse().unwrap()));
        assert!(!c.contains(&"fd00::1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.is_match_all() && all.contains(&"1.2.3.4".parse().unwrap()));
        let v6: Cidr = "fd00:10::/64".parse().unwrap();
        assert!(v6.contains(&"fd00:10::5".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("10.0.0.0".parse::<Cidr>().is_err());
        assert_eq!(parse_cidrs("10.0.0.0/8, fd00::/8").unwrap().len(), 2);
        let host_bits: Cidr = " 203.0.113.77/25".parse().unwrap();
        assert_eq!(host_bits.network().to_string(), "203.0.113.0/25");
        let v6: Cidr = "fd00:10::5/64".parse().unwrap();
        assert_eq!(v6.network().to_string(), "fd00:10::/64");
        let all: Cidr = "1.2.3.4/0".parse().unwrap();
        assert_eq!(all.network().to_string(), "0.0.0.0/0");
    }
}
