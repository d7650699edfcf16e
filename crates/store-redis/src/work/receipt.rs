//! [`Receipt`]: where a claimed work item is, as a claim carries it
//! ([`presa_store::Claim::receipt`]): the partition and the stream entry id,
//! `<partition>/<entry id>` as text. Written by [`Receipt`]'s `Display` and
//! read back by its `FromStr` only.

use std::{fmt, str::FromStr};

/// A claimed entry of a partition's work stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Receipt {
    /// The partition (the `pNN` of the task id).
    pub(super) partition: u16,
    /// The stream entry id (`<ms>-<seq>`).
    pub(super) entry: String,
}

impl fmt::Display for Receipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.partition, self.entry)
    }
}

/// A text that is no [`Receipt`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NotAReceipt;

impl FromStr for Receipt {
    type Err = NotAReceipt;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (partition, entry) = s.split_once('/').ok_or(NotAReceipt)?;
        let partition = partition.parse().map_err(|_| NotAReceipt)?;
        if entry.is_empty() {
            return Err(NotAReceipt);
        }
        Ok(Receipt { partition, entry: entry.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_reads_back_what_it_writes() {
        let r = Receipt { partition: 7, entry: "1700000000000-3".into() };
        assert_eq!(r.to_string(), "7/1700000000000-3");
        assert_eq!(r.to_string().parse(), Ok(r));
        for bad in ["", "7", "7/", "x/1-0", "-1/1-0", "70000/1-0"] {
            assert_eq!(bad.parse::<Receipt>(), Err(NotAReceipt), "{bad:?}");
        }
    }
}
