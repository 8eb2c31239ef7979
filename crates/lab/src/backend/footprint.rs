//! A backend's static memory and network capacities and a request's footprint on them: what
//! `mem` and `net` in `GET /load` report when they are given (issue 30: seed 003's hosts differ
//! in exactly these, 4 GB and 942 Mbit/s against 8 GB and about 20 Gbit/s).
//!
//! * **Memory**: `mem_base` bytes are held at all times (the system, the containers at rest)
//!   and `mem_per_request` bytes by each request in flight at the backend (waiting for a slot,
//!   on one, or on the bandwidth: a worker process's or thread's memory). `mem` is
//!   `(mem_base + mem_per_request × held) / mem`, `held` the average number in flight over the
//!   report's window: seed 003's eq. 2, `1 − free / total`.
//! * **Network**: every answered request (a 200) moves `net_per_request` bytes over the link,
//!   request and answer together. `net` gets `8 × net_per_request × answers per second / net`
//!   over the window: seed 003's eq. 3, `(sent + received) / bandwidth`.
//!
//! Without `mem`, `mem` stays the queue's fill; without `net`, `net` stays the shared
//! bandwidth's use alone: scenarios that give neither report what they always did. The lab
//! backend's meter and the simulator's servers both call [`Footprint::mem_use`] and
//! [`Footprint::net_use`], so they cannot differ in the formulas.

/// The capacities and the per-request footprint (all zero or `None`: no footprint).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Footprint {
    /// Memory, bytes (`None`: `mem` is the queue's fill).
    pub mem: Option<f64>,
    /// Memory held with no request in flight, bytes.
    pub mem_base: f64,
    /// Memory held by each request in flight, bytes.
    pub mem_per_request: f64,
    /// The link's capacity, bits per second (`None`: no link is modelled).
    pub net: Option<f64>,
    /// Bytes an answered request moves over the link (sent and received).
    pub net_per_request: f64,
}

impl Footprint {
    /// Whether anything is modelled (the meters then keep the integrals it needs).
    pub fn is_set(&self) -> bool {
        self.mem.is_some() || self.net.is_some()
    }

    /// The memory's utilization with `held` requests in flight on average, in [0, 1];
    /// `None` without a memory capacity.
    pub fn mem_use(&self, held: f64) -> Option<f64> {
        let total = self.mem?;
        let used = self.mem_base + self.mem_per_request * held.max(0.0);
        Some(fraction(used / total))
    }

    /// The link's utilization at `answers_per_second`, in [0, 1]; 0 without a link.
    pub fn net_use(&self, answers_per_second: f64) -> f64 {
        match self.net {
            Some(bits) => fraction(8.0 * self.net_per_request * answers_per_second / bits),
            None => 0.0,
        }
    }
}

/// `x` in [0, 1]; 0 when it is not a number.
fn fraction(x: f64) -> f64 {
    if x.is_finite() {
        x.clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// Bytes from a size such as `"4GB"`, `"512MiB"`, `"64KB"` or `"1500B"`: decimal units (KB,
/// MB, GB, TB: powers of 1000, as disk and network vendors count) or binary ones (KiB, MiB,
/// GiB, TiB: powers of 1024); a number of at most 1 PB.
pub fn parse_bytes(s: &str) -> Result<f64, String> {
    const UNITS: [(&str, f64); 9] = [
        ("KiB", 1024.0),
        ("MiB", 1048576.0),
        ("GiB", 1073741824.0),
        ("TiB", 1099511627776.0),
        ("KB", 1e3),
        ("kB", 1e3),
        ("MB", 1e6),
        ("GB", 1e9),
        ("TB", 1e12),
    ];
    let what = || {
        format!(
            "{s:?}: write a size such as \"4GB\", \"512MiB\" or \"64KB\" (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
        )
    };
    let (number, unit) = UNITS
        .iter()
        .find_map(|&(u, n)| s.trim().strip_suffix(u).map(|x| (x, n)))
        .or_else(|| s.trim().strip_suffix('B').map(|x| (x, 1.0)))
        .ok_or_else(what)?;
    let bytes = number.trim().parse::<f64>().map_err(|_| what())? * unit;
    if !(0.0..=1e15).contains(&bytes) {
        return Err(what());
    }
    Ok(bytes)
}

/// Bits per second from a rate such as `"942Mbit"`, `"18.5Gbit"` or `"100kbit"` (powers of
/// 1000, as iperf reports); above 0, at most 1 Pbit.
pub fn parse_bits(s: &str) -> Result<f64, String> {
    const UNITS: [(&str, f64); 6] = [
        ("kbit", 1e3),
        ("Kbit", 1e3),
        ("Mbit", 1e6),
        ("Gbit", 1e9),
        ("Tbit", 1e12),
        ("bit", 1.0),
    ];
    let what = || {
        format!(
            "{s:?}: write a link's rate such as \"942Mbit\" or \"18.5Gbit\" (bit, kbit, Mbit, Gbit, Tbit per second)"
        )
    };
    let t = s.trim();
    let t = t.strip_suffix("/s").unwrap_or(t);
    let (number, unit) = UNITS
        .iter()
        .find_map(|&(u, n)| t.strip_suffix(u).map(|x| (x, n)))
        .ok_or_else(what)?;
    let bits = number.trim().parse::<f64>().map_err(|_| what())? * unit;
    if !(bits > 0.0 && bits <= 1e15) {
        return Err(what());
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_rates_read_in_their_units() {
        assert_eq!(parse_bytes("4GB"), Ok(4e9));
        assert_eq!(parse_bytes("512MiB"), Ok(512.0 * 1048576.0));
        assert_eq!(parse_bytes("64 KB"), Ok(64e3));
        assert_eq!(parse_bytes("1500B"), Ok(1500.0));
        assert_eq!(parse_bytes("0B"), Ok(0.0));
        assert_eq!(parse_bits("942Mbit"), Ok(942e6));
        assert_eq!(parse_bits("18.5Gbit/s"), Ok(18.5e9));
        assert_eq!(parse_bits("100kbit"), Ok(1e5));
        for bad in ["4", "4Gb", "GB", "-1GB", "NaNGB", "4 gigabytes", "2PB"] {
            let e = parse_bytes(bad).unwrap_err();
            assert!(e.contains("write a size such as"), "{bad}: {e}");
        }
        for bad in ["942", "942Mbps", "0Mbit", "-1Gbit", "1GB", "infGbit"] {
            let e = parse_bits(bad).unwrap_err();
            assert!(e.contains("write a link's rate"), "{bad}: {e}");
        }
    }

    /// Seed 003's hosts at the same load: the 4 GB host's memory and the 942 Mbit/s link are
    /// the busier.
    #[test]
    fn a_smaller_memory_and_a_slower_link_report_more_at_the_same_load() {
        let host = |mem: f64, net: f64| Footprint {
            mem: Some(mem),
            mem_base: 1e9,
            mem_per_request: 32e6,
            net: Some(net),
            net_per_request: 64e3,
        };
        let (small, big) = (host(4e9, 942e6), host(8e9, 20e9));
        // 10 requests held: 1 GB + 320 MB.
        assert!((small.mem_use(10.0).unwrap() - 1.32e9 / 4e9).abs() < 1e-12);
        assert!((big.mem_use(10.0).unwrap() - 1.32e9 / 8e9).abs() < 1e-12);
        // 300 answers a second of 64 KB: 153.6 Mbit/s.
        assert!((small.net_use(300.0) - 153.6e6 / 942e6).abs() < 1e-12);
        assert!((big.net_use(300.0) - 153.6e6 / 20e9).abs() < 1e-12);
        // Bounded, and nothing without capacities.
        assert_eq!(small.mem_use(1e9), Some(1.0));
        assert_eq!(small.net_use(f64::INFINITY), 0.0);
        assert_eq!(Footprint::default().mem_use(10.0), None);
        assert_eq!(Footprint::default().net_use(300.0), 0.0);
        assert!(!Footprint::default().is_set());
    }
}
